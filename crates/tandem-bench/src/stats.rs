//! Order statistics of latency samples.

use std::time::Duration;

/// The value at quantile `q` (0.0 to 1.0) of `samples`, by the nearest-rank method.
/// `None` when there are no samples.
pub fn quantile(samples: &[Duration], q: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Median and 99th percentile of latency samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// The median.
    pub median: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// How many samples.
    pub samples: usize,
}

impl Latency {
    /// The summary of `samples` (all zero when empty).
    pub fn of(samples: &[Duration]) -> Self {
        Latency {
            median: quantile(samples, 0.5).unwrap_or_default(),
            p99: quantile(samples, 0.99).unwrap_or_default(),
            samples: samples.len(),
        }
    }
}

/// Milliseconds as a float, for reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&s, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&s, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&s, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(quantile(&s, 0.0), Some(Duration::from_millis(1)));
        assert_eq!(quantile(&[], 0.5), None);
        let l = Latency::of(&[Duration::from_millis(3)]);
        assert_eq!(
            (l.median, l.p99, l.samples),
            (Duration::from_millis(3), Duration::from_millis(3), 1)
        );
    }
}
