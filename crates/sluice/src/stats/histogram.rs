//! Fixed-bucket latency histograms (lock-free), so Prometheus can compute p50/p95/p99 per pool.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets in microseconds (the last, +Inf, is implicit). They span 50 µs to
/// 60 s: pooled queries are sub-millisecond, logins and connects are milliseconds, waits can be seconds.
pub const BOUNDS_US: [u64; 20] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 15_000_000, 30_000_000, 60_000_000,
];

/// Observation counts per bucket (not cumulative) plus the sum, all relaxed atomics.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

/// A copy of a histogram: cumulative counts per bound (the last is +Inf = count) and the sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub cumulative: Vec<u64>,
    pub sum_us: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    pub fn accumulate(&mut self, o: &HistogramSnapshot) {
        if self.cumulative.is_empty() {
            self.cumulative = vec![0; o.cumulative.len()];
        }
        for (a, b) in self.cumulative.iter_mut().zip(&o.cumulative) {
            *a += b;
        }
        self.sum_us += o.sum_us;
    }
}

impl Histogram {
    pub fn observe_us(&self, us: u64) {
        let i = BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The sum of all observations.
    pub fn sum_us(&self) -> u64 {
        self.sum_us.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut acc = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                acc += b.load(Ordering::Relaxed);
                acc
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_le_and_cumulative() {
        let h = Histogram::default();
        h.observe_us(50); // le 50
        h.observe_us(51); // le 100
        h.observe_us(100_000_000); // +Inf
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], 1);
        assert_eq!(s.cumulative[1], 2);
        assert_eq!(s.cumulative[BOUNDS_US.len() - 1], 2);
        assert_eq!(s.count(), 3);
        assert_eq!(s.sum_us, 100_000_101);
    }
}
