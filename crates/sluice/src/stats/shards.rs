//! A pool's counters, one copy per worker: a transaction adds to its own worker's copy only, so no
//! cache line of the statistics is written by two threads; readers (SHOW STATS, /metrics, the
//! stats period) sum the copies. At 16 workers on one pool, ten shared counters per transaction
//! bounced between every core's cache.

use std::ops::Deref;

use super::{HistogramSnapshot, PoolStats, StatsSnapshot};

/// One worker's copy, alone on its cache lines (128 bytes: the adjacent-line prefetcher pairs them).
#[repr(align(128))]
#[derive(Debug, Default)]
struct Shard(PoolStats);

/// Per-worker `PoolStats`, read as one. Derefs to the calling worker's copy, so writers need not
/// know about the shards.
#[derive(Debug)]
pub struct StatsShards {
    shards: Box<[Shard]>,
}

impl Default for StatsShards {
    fn default() -> Self {
        StatsShards::new(1)
    }
}

impl StatsShards {
    /// `n` copies (the worker count; workers beyond it share copies round-robin).
    pub fn new(n: usize) -> Self {
        StatsShards {
            shards: (0..n.max(1)).map(|_| Shard::default()).collect(),
        }
    }

    /// The calling worker's copy.
    pub fn local(&self) -> &PoolStats {
        let i = usize::from(crate::workers::current()) % self.shards.len();
        &self.shards[i].0
    }

    /// The totals: every copy summed.
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut total = StatsSnapshot::default();
        for s in self.shards.iter() {
            total.accumulate(&s.0.snapshot());
        }
        total
    }

    /// One histogram of every copy, merged (`pick` chooses which).
    pub fn histogram(&self, pick: impl Fn(&PoolStats) -> HistogramSnapshot) -> HistogramSnapshot {
        let mut merged = pick(&self.shards[0].0);
        for s in self.shards.iter().skip(1) {
            merged.accumulate(&pick(&s.0));
        }
        merged
    }
}

impl Deref for StatsShards {
    type Target = PoolStats;
    fn deref(&self) -> &PoolStats {
        self.local()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Counter;

    #[test]
    fn copies_sum_on_read() {
        let s = StatsShards::new(3);
        for shard in s.shards.iter() {
            PoolStats::add(&shard.0.xact_count, 2);
            PoolStats::add(&shard.0.query_time_us, 100);
        }
        PoolStats::add(&s.xact_count, 1); // the calling thread's copy
        assert_eq!(s.snapshot().xact_count, 7);
        assert_eq!(s.snapshot().query_time_us, 300);
        let h = s.histogram(|p| p.query_time_us.hist.snapshot());
        assert_eq!((h.count(), h.sum_us), (3, 300));
        assert_eq!(s.local().xact_count.get(), 3);
        assert_eq!(std::mem::align_of::<Shard>(), 128);
    }
}
