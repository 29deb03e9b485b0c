//! Order statistics of repeated measurements: every figure in the table is a median with its
//! 10th–90th percentile spread, over all samples of all rounds.

/// Median and spread of one measured quantity, in its own unit.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub n: usize,
}

impl Summary {
    /// Summarises `samples` (any order). Panics on an empty set: a case that measured nothing is
    /// a bug in the bench, not a result.
    pub fn of(samples: &[f64]) -> Self {
        assert!(!samples.is_empty(), "no samples to summarise");
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            median: quantile(&sorted, 0.5),
            p10: quantile(&sorted, 0.1),
            p90: quantile(&sorted, 0.9),
            n: sorted.len(),
        }
    }

    /// The same figures divided by `by` (e.g. µs per call from µs per batch).
    pub fn scaled(self, factor: f64) -> Self {
        Self {
            median: self.median * factor,
            p10: self.p10 * factor,
            p90: self.p90 * factor,
            n: self.n,
        }
    }
}

/// Linear interpolation between the two nearest ranks (the "R-7" definition).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Self-checks, run when cargo runs this target as a test (`cargo test --all-targets`).
pub mod checks {
    use super::*;

    pub fn quantiles_interpolate() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(s.median, 3.0);
        assert!((s.p10 - 1.4).abs() < 1e-9);
        assert!((s.p90 - 4.6).abs() < 1e-9);
    }
}
