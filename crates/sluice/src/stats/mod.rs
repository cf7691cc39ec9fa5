//! Per-pool counters (PgBouncer's SHOW STATS figures) and the periodic stats log line.

pub mod reporter;

use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic totals for one pool. Relaxed atomics: each is an independent counter.
#[derive(Debug, Default)]
pub struct PoolStats {
    pub server_assignments: AtomicU64,
    pub xact_count: AtomicU64,
    pub query_count: AtomicU64,
    pub bytes_received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub xact_time_us: AtomicU64,
    pub query_time_us: AtomicU64,
    pub wait_time_us: AtomicU64,
    pub client_logins: AtomicU64,
}

/// A copy of the totals at one instant.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub server_assignments: u64,
    pub xact_count: u64,
    pub query_count: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub xact_time_us: u64,
    pub query_time_us: u64,
    pub wait_time_us: u64,
    pub client_logins: u64,
}

impl PoolStats {
    pub fn add(counter: &AtomicU64, v: u64) {
        counter.fetch_add(v, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            server_assignments: g(&self.server_assignments),
            xact_count: g(&self.xact_count),
            query_count: g(&self.query_count),
            bytes_received: g(&self.bytes_received),
            bytes_sent: g(&self.bytes_sent),
            xact_time_us: g(&self.xact_time_us),
            query_time_us: g(&self.query_time_us),
            wait_time_us: g(&self.wait_time_us),
            client_logins: g(&self.client_logins),
        }
    }
}

impl StatsSnapshot {
    pub fn accumulate(&mut self, o: &StatsSnapshot) {
        self.server_assignments += o.server_assignments;
        self.xact_count += o.xact_count;
        self.query_count += o.query_count;
        self.bytes_received += o.bytes_received;
        self.bytes_sent += o.bytes_sent;
        self.xact_time_us += o.xact_time_us;
        self.query_time_us += o.query_time_us;
        self.wait_time_us += o.wait_time_us;
        self.client_logins += o.client_logins;
    }

    /// Per-second rates and per-event averages between two snapshots `secs` apart.
    pub fn delta(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            server_assignments: self
                .server_assignments
                .saturating_sub(earlier.server_assignments),
            xact_count: self.xact_count.saturating_sub(earlier.xact_count),
            query_count: self.query_count.saturating_sub(earlier.query_count),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            xact_time_us: self.xact_time_us.saturating_sub(earlier.xact_time_us),
            query_time_us: self.query_time_us.saturating_sub(earlier.query_time_us),
            wait_time_us: self.wait_time_us.saturating_sub(earlier.wait_time_us),
            client_logins: self.client_logins.saturating_sub(earlier.client_logins),
        }
    }
}
