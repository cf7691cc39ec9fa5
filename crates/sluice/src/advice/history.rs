//! The advisor's memory: per pool, the windows of the last stats periods. A leaf that `App`
//! holds; the stats timer closes a window (`observe`), `advice::findings` reads them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use super::rules::Window;
use crate::pool::{Pool, PoolKey};
use crate::stats::StatsSnapshot;

/// Windows kept per pool.
const KEEP: usize = 6;

#[derive(Default)]
struct PoolHistory {
    last: StatsSnapshot,
    windows: VecDeque<Window>,
}

/// Per-pool windows of the last stats periods.
#[derive(Default)]
pub struct Advisor {
    pools: Mutex<BTreeMap<PoolKey, PoolHistory>>,
}

impl Advisor {
    /// Close a stats period of `secs` seconds: one window per pool of `live`; pools that are
    /// gone are forgotten.
    pub fn observe(&self, live: &[Arc<Pool>], secs: f64) {
        let mut pools = self.pools.lock();
        pools.retain(|k, _| live.iter().any(|p| &p.key == k));
        for p in live {
            let now = p.stats.snapshot();
            let h = pools.entry(p.key.clone()).or_default();
            let d = now.delta(&h.last);
            h.last = now;
            let c = p.counts();
            h.windows.push_back(Window {
                secs,
                xacts: d.xact_count,
                xact_time_us: d.xact_time_us,
                wait_time_us: d.wait_time_us,
                open: c.total,
                clients: c.clients,
                queries: d.query_count,
                evictions: d.prepared_evictions,
                sequence_discards: d.sequence_discards,
            });
            while h.windows.len() > KEEP {
                h.windows.pop_front();
            }
        }
    }

    /// The windows kept for a pool, oldest first; None for a pool no period has seen yet.
    pub fn windows(&self, key: &PoolKey) -> Option<Vec<Window>> {
        let pools = self.pools.lock();
        pools.get(key).map(|h| h.windows.iter().copied().collect())
    }
}
