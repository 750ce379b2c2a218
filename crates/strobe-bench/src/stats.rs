//! Small statistics helpers: benchmarks quote medians, never a lone run.
//!
//! Owns the median and its distribution-free interval. It must never drop or clamp a
//! measurement to make a figure look steadier (NaNs sort last and stay counted).

/// The median of `xs` (the mean of the middle two for an even count).
/// Returns NaN for an empty slice. NaNs sort last.
pub(crate) fn median(xs: &[f64]) -> f64 {
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
pub(crate) fn median_of(repeats: usize, mut f: impl FnMut() -> f64) -> f64 {
    let xs: Vec<f64> = (0..repeats.max(1)).map(|_| f()).collect();
    median(&xs)
}

/// A distribution-free confidence interval for the median of `xs`: the order
/// statistics `(x_k, x_{n+1-k})` with the largest `k` whose coverage
/// `1 - 2 P(Binomial(n, 1/2) <= k - 1)` is still at least `confidence`. Returns
/// `(low, high, coverage)`; with too few values for `confidence` it returns
/// the whole range and the (lower) coverage that range has. `None` when empty or
/// when there are more than 1000 values (the binomial weights underflow).
pub(crate) fn median_interval(xs: &[f64], confidence: f64) -> Option<(f64, f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    // P(Binomial(n, 1/2) = i) for i = 0..n, built with the recurrence
    // C(n, i+1) = C(n, i) (n - i) / (i + 1) to stay in floating point.
    if n > 1000 {
        // 0.5^n underflows past here; a thousand pairs are far more than any bench runs.
        return None;
    }
    let mut pmf = Vec::with_capacity(n + 1);
    let mut p = 0.5f64.powi(n as i32);
    for i in 0..=n {
        pmf.push(p);
        p = p * (n - i) as f64 / (i + 1) as f64;
    }
    // k is 1-based: the interval drops k-1 values at each end.
    let coverage = |k: usize| 1.0 - 2.0 * pmf[..k].iter().sum::<f64>();
    let mut k = 1;
    while k < n.div_ceil(2) && coverage(k + 1) >= confidence {
        k += 1;
    }
    Some((v[k - 1], v[n - k], coverage(k)))
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

    #[test]
    fn median_interval_uses_binomial_order_statistics() {
        // n = 10: [x(2), x(9)] covers 1 - 2 * 11/1024 = 97.9%; [x(3), x(8)] only 89.1%.
        let xs: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let (lo, hi, cov) = median_interval(&xs, 0.95).unwrap();
        assert_eq!((lo, hi), (2.0, 9.0));
        assert!((cov - (1.0 - 22.0 / 1024.0)).abs() < 1e-12, "{cov}");
        // n = 5 cannot reach 95%: the whole range, 93.75%.
        let (lo, hi, cov) = median_interval(&[5.0, 1.0, 3.0, 2.0, 4.0], 0.95).unwrap();
        assert_eq!((lo, hi, cov), (1.0, 5.0, 0.9375));
        assert_eq!(median_interval(&[7.0], 0.95), Some((7.0, 7.0, 0.0)));
        assert_eq!(median_interval(&[], 0.95), None);
    }
}
