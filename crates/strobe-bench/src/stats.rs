//! Small statistics helpers: benchmarks quote medians, never a lone run.

/// The median of `xs` (the mean of the middle two for an even count).
/// Returns NaN for an empty slice. NaNs sort last.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `f` `repeats` times and returns the median of its results.
pub fn median_of(repeats: usize, mut f: impl FnMut() -> f64) -> f64 {
    let xs: Vec<f64> = (0..repeats.max(1)).map(|_| f()).collect();
    median(&xs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
