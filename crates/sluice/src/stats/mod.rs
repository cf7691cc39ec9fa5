//! Per-pool counters (PgBouncer's SHOW STATS figures) with latency histograms, the per-period
//! averages, and the periodic stats log line.

pub mod histogram;
pub mod period;
pub mod reporter;
pub mod shards;
pub mod shown;
pub mod stamp;

use std::sync::atomic::{AtomicU64, Ordering};

pub use histogram::{Histogram, HistogramSnapshot};
pub use shards::StatsShards;

/// Something a figure can be added to: a plain counter, or a time total that also feeds a histogram.
pub trait Counter {
    fn add(&self, v: u64);
    fn get(&self) -> u64;
}

impl Counter for AtomicU64 {
    fn add(&self, v: u64) {
        self.fetch_add(v, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

/// A total of microseconds whose every addition is also one histogram observation (the total is
/// the histogram's sum: one atomic add fewer per observation, three per transaction).
#[derive(Debug, Default)]
pub struct TimedCounter {
    pub hist: Histogram,
}

impl Counter for TimedCounter {
    fn add(&self, us: u64) {
        self.hist.observe_us(us);
    }
    fn get(&self) -> u64 {
        self.hist.sum_us()
    }
}

/// Monotonic totals for one pool. Relaxed atomics: each is an independent counter.
#[derive(Debug, Default)]
pub struct PoolStats {
    pub server_assignments: AtomicU64,
    pub xact_count: AtomicU64,
    pub query_count: AtomicU64,
    /// Bytes received from clients.
    pub bytes_received: AtomicU64,
    /// Bytes sent to clients (what the servers answered).
    pub bytes_sent: AtomicU64,
    /// Transaction time: first request to the ReadyForQuery that ends the transaction.
    pub xact_time_us: TimedCounter,
    /// Query time: request to its ReadyForQuery.
    pub query_time_us: TimedCounter,
    /// Client wait: request (queued) to server assignment; one observation per assignment.
    pub wait_time_us: TimedCounter,
    pub client_logins: AtomicU64,
    pub client_parse_count: AtomicU64,
    pub server_parse_count: AtomicU64,
    pub bind_count: AtomicU64,
    /// Hand-outs that gave the server the client's session (parameter SETs, another client's
    /// changes undone, this client's replayed) in queries answered before the request went.
    pub syncs_round_trip: AtomicU64,
    /// Hand-outs that sent those statements ahead of the request, in the same write.
    pub syncs_ahead: AtomicU64,
    /// Requests reading `currval()` / `lastval()` on a server whose sequence values were another
    /// client's, sent behind a `DISCARD SEQUENCES` (`RelayCore::discard_sequences_ahead`).
    pub sequence_discards: AtomicU64,
    /// Statements the per-server prepared-statement cache (max_prepared_statements) closed to make
    /// room for another (`prepared::ServerStatements::insert`); each is re-prepared when next used.
    pub prepared_evictions: AtomicU64,
    /// Client login: accept to the welcome ReadyForQuery.
    pub login_time: Histogram,
    /// Server connect: TCP/Unix connect + server login + connect_query.
    pub connect_time: Histogram,
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
    pub client_parse_count: u64,
    pub server_parse_count: u64,
    pub bind_count: u64,
    pub syncs_round_trip: u64,
    pub syncs_ahead: u64,
    pub sequence_discards: u64,
    pub prepared_evictions: u64,
}

impl PoolStats {
    pub fn add<C: Counter + ?Sized>(counter: &C, v: u64) {
        counter.add(v);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            server_assignments: self.server_assignments.get(),
            xact_count: self.xact_count.get(),
            query_count: self.query_count.get(),
            bytes_received: self.bytes_received.get(),
            bytes_sent: self.bytes_sent.get(),
            xact_time_us: self.xact_time_us.get(),
            query_time_us: self.query_time_us.get(),
            wait_time_us: self.wait_time_us.get(),
            client_logins: self.client_logins.get(),
            client_parse_count: self.client_parse_count.get(),
            server_parse_count: self.server_parse_count.get(),
            bind_count: self.bind_count.get(),
            syncs_round_trip: self.syncs_round_trip.get(),
            syncs_ahead: self.syncs_ahead.get(),
            sequence_discards: self.sequence_discards.get(),
            prepared_evictions: self.prepared_evictions.get(),
        }
    }
}

impl StatsSnapshot {
    fn zip(&self, o: &StatsSnapshot, f: impl Fn(u64, u64) -> u64) -> StatsSnapshot {
        StatsSnapshot {
            server_assignments: f(self.server_assignments, o.server_assignments),
            xact_count: f(self.xact_count, o.xact_count),
            query_count: f(self.query_count, o.query_count),
            bytes_received: f(self.bytes_received, o.bytes_received),
            bytes_sent: f(self.bytes_sent, o.bytes_sent),
            xact_time_us: f(self.xact_time_us, o.xact_time_us),
            query_time_us: f(self.query_time_us, o.query_time_us),
            wait_time_us: f(self.wait_time_us, o.wait_time_us),
            client_logins: f(self.client_logins, o.client_logins),
            client_parse_count: f(self.client_parse_count, o.client_parse_count),
            server_parse_count: f(self.server_parse_count, o.server_parse_count),
            bind_count: f(self.bind_count, o.bind_count),
            syncs_round_trip: f(self.syncs_round_trip, o.syncs_round_trip),
            syncs_ahead: f(self.syncs_ahead, o.syncs_ahead),
            sequence_discards: f(self.sequence_discards, o.sequence_discards),
            prepared_evictions: f(self.prepared_evictions, o.prepared_evictions),
        }
    }

    pub fn accumulate(&mut self, o: &StatsSnapshot) {
        *self = self.zip(o, |a, b| a + b);
    }

    /// What happened between `earlier` and `self`.
    pub fn delta(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        self.zip(earlier, u64::saturating_sub)
    }
}
