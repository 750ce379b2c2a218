//! Sums over windows and the error bars that come from their spread.
//!
//! A window metric is a ratio of sums over the windows attributed to a function
//! (`R = Σa / Σb`: faults over task-clock ms, cycles over instructions), never a mean of
//! per-window ratios. Its interval comes from the windows' spread by the delta method for
//! ratio estimators: treating the function's `n` windows as independent draws,
//! `Var(R) ≈ Σ(a_i - R b_i)² / (Σb)²`, which needs per window only the sums `Σa`, `Σb`
//! and the products `Σa²`, `Σab`, `Σb²`: [`WindowSums`] keeps, for every counter pair,
//! the sum of products, so any metric's interval can be computed after the fact.
//!
//! A per-ms rate of events counted one by one (page faults, context switches) is given
//! at least the variance of a Poisson count, so a metric resting on a handful of events
//! (or none) has an interval that says so rather than one collapsed by a spread that a
//! few windows cannot show.
//!
//! The baseline (what every counter counts in a window that is not the target's, measured
//! before the target started) is subtracted from each window before it is summed (the
//! aggregation pass does it, [`WindowSums::add_f64`]). Its own uncertainty (the
//! calibration's spread over its windows) adds a systematic term to the variance.
//!
//! Time shares get a Wilson score interval on the function's sample count.
//!
//! This module must never look at addresses or names: it is arithmetic on sums.

use smallvec::SmallVec;

/// The z value of a two-sided 95% interval.
pub(crate) const Z95: f64 = 1.959_963_984_540_054;

/// Metrics resting on fewer windows than this are marked in the report.
pub(crate) const FEW_WINDOWS: u64 = 30;

/// Index of the product of counters `i <= j` in a packed upper triangle of width `w`.
#[inline]
pub(crate) fn tri(w: usize, i: usize, j: usize) -> usize {
    let (i, j) = if i <= j { (i, j) } else { (j, i) };
    i * w - i * (i + 1) / 2 + j
}

/// Counters a [`WindowSums`] holds without a heap allocation: the default group's three.
/// A report of a deep-stack recording keeps one set of sums per (start, end) pair of
/// stacks, tens of thousands of them; two heap vectors each were a sixth of its page
/// faults and most of its allocations.
const INLINE_COUNTERS: usize = 3;

/// Per-counter sums, inline up to [`INLINE_COUNTERS`].
pub(crate) type CounterSums = SmallVec<[f64; INLINE_COUNTERS]>;
/// Per-pair products, inline up to [`INLINE_COUNTERS`] counters.
pub(crate) type PairSums = SmallVec<[f64; INLINE_COUNTERS * (INLINE_COUNTERS + 1) / 2]>;

/// Sums of counter deltas and of their pairwise products over a set of windows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowSums {
    /// Windows summed.
    pub n: u64,
    /// Per counter, `Σx`.
    pub sums: CounterSums,
    /// Per counter pair `i <= j`, `Σ x_i x_j`, packed (see `tri`).
    pub prods: PairSums,
}

impl WindowSums {
    /// Empty sums for `w` counters.
    pub fn new(w: usize) -> WindowSums {
        WindowSums {
            n: 0,
            sums: SmallVec::from_elem(0.0, w),
            prods: SmallVec::from_elem(0.0, w * (w + 1) / 2),
        }
    }

    /// Counters per window.
    pub fn width(&self) -> usize {
        self.sums.len()
    }

    /// Adds one window's deltas.
    #[inline]
    pub fn add(&mut self, d: &[u64]) {
        let w = self.width();
        let d = &d[..w.min(d.len())];
        self.n += 1;
        for (i, &xi) in d.iter().enumerate() {
            let x = xi as f64;
            self.sums[i] += x;
            for (j, &xj) in d.iter().enumerate().skip(i) {
                self.prods[tri(w, i, j)] += x * xj as f64;
            }
        }
    }

    /// Adds one window's net deltas (baseline subtracted, so possibly negative).
    #[inline]
    pub fn add_f64(&mut self, d: &[f64]) {
        let w = self.width();
        let d = &d[..w.min(d.len())];
        self.n += 1;
        for (i, &x) in d.iter().enumerate() {
            self.sums[i] += x;
            for (j, &xj) in d.iter().enumerate().skip(i) {
                self.prods[tri(w, i, j)] += x * xj;
            }
        }
    }

    /// Adds another set of sums.
    pub fn merge(&mut self, o: &WindowSums) {
        self.n += o.n;
        for (a, b) in self.sums.iter_mut().zip(&o.sums) {
            *a += b;
        }
        for (a, b) in self.prods.iter_mut().zip(&o.prods) {
            *a += b;
        }
    }

    /// `Σ x_i x_j`.
    pub fn prod(&self, i: usize, j: usize) -> f64 {
        self.prods.get(tri(self.width(), i, j)).copied().unwrap_or(0.0)
    }

    /// `Σa / Σb` for counters `a` and `b`, with its variance from the windows' spread
    /// (delta method); `None` when `Σb <= 0`.
    pub fn ratio(&self, a: usize, b: usize) -> Option<(f64, f64)> {
        let (sa, sb) = (*self.sums.get(a)?, *self.sums.get(b)?);
        if sb <= 0.0 {
            return None;
        }
        let r = sa / sb;
        let resid = self.prod(a, a) - 2.0 * r * self.prod(a, b) + r * r * self.prod(b, b);
        // The n / (n - 1) correction for a sample variance; one window gives no spread.
        let var = if self.n > 1 {
            resid.max(0.0) / (sb * sb) * self.n as f64 / (self.n - 1) as f64
        } else {
            f64::INFINITY
        };
        Some((r, var))
    }

    /// This set's share of `all`'s counter `c`, with its variance (the windows of `all`
    /// as draws, this set's as the ones that count); `None` when `all` counted nothing.
    pub fn share(&self, all: &WindowSums, c: usize) -> Option<(f64, f64)> {
        let (s, t) = (*self.sums.get(c)?, *all.sums.get(c)?);
        if t <= 0.0 {
            return None;
        }
        let p = (s / t).clamp(0.0, 1.0);
        let (sq_in, sq_all) = (self.prod(c, c), all.prod(c, c));
        let sq_out = (sq_all - sq_in).max(0.0);
        let resid = (1.0 - p) * (1.0 - p) * sq_in + p * p * sq_out;
        let var = if all.n > 1 {
            resid / (t * t) * all.n as f64 / (all.n - 1) as f64
        } else {
            f64::INFINITY
        };
        Some((p, var))
    }
}

/// A value with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The value.
    pub value: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end.
    pub high: f64,
}

impl Estimate {
    /// `value ± z·sd`, with `sd = sqrt(var)`; anything below `floor` (a rate of events,
    /// which the baseline's subtraction can push below zero) is cut to it.
    pub fn from_var(value: f64, var: f64, floor: f64) -> Estimate {
        let half = Z95 * var.max(0.0).sqrt();
        Estimate {
            value: value.max(floor),
            low: (value - half).max(floor),
            high: (value + half).max(floor),
        }
    }

    /// The same, scaled.
    pub fn scaled(self, k: f64) -> Estimate {
        Estimate { value: self.value * k, low: self.low * k, high: self.high * k }
    }

    /// Whether `x` lies inside the interval.
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// The Wilson score interval (95%) of a proportion `k` of `n`, in [0, 1].
pub(crate) fn wilson(k: u64, n: u64) -> Estimate {
    if n == 0 {
        return Estimate { value: 0.0, low: 0.0, high: 1.0 };
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let den = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / den;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / den;
    Estimate { value: p, low: (centre - half).max(0.0), high: (centre + half).min(1.0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_f64_sums_every_counter_and_pair_product() {
        let windows = [[1.5, -2.0, 3.0, 0.25], [4.0, 0.5, -1.0, 2.0]];
        let mut s = WindowSums::new(4);
        for d in &windows {
            s.add_f64(d);
        }
        assert_eq!(s.n, 2);
        for i in 0..4 {
            assert_eq!(s.sums[i], windows[0][i] + windows[1][i]);
            for j in 0..4 {
                let want = windows[0][i] * windows[0][j] + windows[1][i] * windows[1][j];
                assert_eq!(s.prod(i, j), want, "pair {i} {j}");
            }
        }
        // Fewer deltas than counters: the missing ones count as nothing.
        let mut s = WindowSums::new(3);
        s.add_f64(&[2.0, 3.0]);
        assert_eq!(
            (s.sums.as_slice(), s.prod(0, 1), s.prod(1, 1), s.prod(2, 2)),
            ([2.0, 3.0, 0.0].as_slice(), 6.0, 9.0, 0.0)
        );
    }

    #[test]
    fn the_packed_triangle_covers_every_pair_once() {
        let w = 4;
        let mut seen = vec![false; w * (w + 1) / 2];
        for i in 0..w {
            for j in i..w {
                assert!(!seen[tri(w, i, j)]);
                seen[tri(w, i, j)] = true;
                assert_eq!(tri(w, i, j), tri(w, j, i));
            }
        }
        assert!(seen.iter().all(|&s| s));
    }

    /// A ratio whose windows all have the same rate has no spread; noisy windows give an
    /// interval that covers the true rate about 95% of the time.
    #[test]
    fn ratio_intervals_cover_the_true_rate() {
        let mut exact = WindowSums::new(2);
        for t in [10u64, 20, 30] {
            exact.add(&[t * 1000, t * 5]);
        }
        let (r, var) = exact.ratio(1, 0).unwrap();
        assert!((r - 0.005).abs() < 1e-12 && var.abs() < 1e-15);

        // Poisson-like counts at a true rate of 0.5 per unit over windows of 20 units.
        let mut seed = 99u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut covered = 0;
        let runs = 400;
        for _ in 0..runs {
            let mut s = WindowSums::new(2);
            for _ in 0..60 {
                // A binomial(40, 0.25) count: mean 10 = 0.5 * 20.
                let k = (0..40).filter(|_| next() < 0.25).count() as u64;
                s.add(&[20, k]);
            }
            let (r, var) = s.ratio(1, 0).unwrap();
            if Estimate::from_var(r, var, 0.0).contains(0.5) {
                covered += 1;
            }
        }
        let cov = covered as f64 / runs as f64;
        assert!((0.92..=0.98).contains(&cov), "coverage {cov}");
    }

    #[test]
    fn wilson_intervals() {
        let e = wilson(50, 100);
        assert!((e.value - 0.5).abs() < 1e-12);
        assert!((e.low - 0.4038).abs() < 1e-3 && (e.high - 0.5962).abs() < 1e-3, "{e:?}");
        let z = wilson(0, 20);
        assert_eq!(z.low, 0.0);
        assert!(z.high > 0.1 && z.high < 0.2, "{z:?}");
        assert_eq!(wilson(0, 0).high, 1.0);
    }

    #[test]
    fn shares_and_their_spread() {
        let mut f = WindowSums::new(1);
        let mut all = WindowSums::new(1);
        for k in [3u64, 5, 4] {
            f.add(&[k]);
            all.add(&[k]);
        }
        for k in [1u64, 0, 2] {
            all.add(&[k]);
        }
        let (p, var) = f.share(&all, 0).unwrap();
        assert!((p - 12.0 / 15.0).abs() < 1e-12);
        assert!(var > 0.0 && var < 0.05);
    }
}
