//! Averages per database and overall, as SHOW STATS / STATS_AVERAGES / TOTALS (live, over the
//! last period and the running one) and the stats log line (the period just closed) report them:
//! counts and bytes per second, times per event.

use std::collections::BTreeMap;
use std::time::Instant;

use parking_lot::Mutex;

use super::StatsSnapshot;

/// PgBouncer's avg_* figures for one period (integers, like PgBouncer's).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Averages {
    pub server_assignment_count: u64,
    pub xact_count: u64,
    pub query_count: u64,
    pub recv: u64,
    pub sent: u64,
    /// µs per transaction.
    pub xact_time: u64,
    /// µs per query.
    pub query_time: u64,
    /// µs per server assignment.
    pub wait_time: u64,
    pub client_parse_count: u64,
    pub server_parse_count: u64,
    pub bind_count: u64,
    pub client_login_count: u64,
}

impl Averages {
    /// From what happened during `secs` seconds.
    pub fn from_delta(d: &StatsSnapshot, secs: f64) -> Averages {
        let secs = if secs > 0.0 { secs } else { 1.0 };
        let per_sec = |v: u64| (v as f64 / secs).round() as u64;
        let per = |total: u64, n: u64| total.checked_div(n).unwrap_or(0);
        Averages {
            server_assignment_count: per_sec(d.server_assignments),
            xact_count: per_sec(d.xact_count),
            query_count: per_sec(d.query_count),
            recv: per_sec(d.bytes_received),
            sent: per_sec(d.bytes_sent),
            xact_time: per(d.xact_time_us, d.xact_count),
            query_time: per(d.query_time_us, d.query_count),
            wait_time: per(d.wait_time_us, d.server_assignments),
            client_parse_count: per_sec(d.client_parse_count),
            server_parse_count: per_sec(d.server_parse_count),
            bind_count: per_sec(d.bind_count),
            client_login_count: per_sec(d.client_logins),
        }
    }
}

#[derive(Debug, Default)]
struct BookState {
    /// The totals at the last period's end (the stats log line's period starts there).
    prev: BTreeMap<String, StatsSnapshot>,
    prev_total: StatsSnapshot,
    prev_at: Option<Instant>,
    /// The totals at the end of the period before it (zero at start): SHOW STATS' window.
    base: BTreeMap<String, StatsSnapshot>,
    base_total: StatsSnapshot,
    base_at: Option<Instant>,
}

/// The periods' snapshots; `close_period` is called by the stats timer.
///
/// SHOW STATS / STATS_AVERAGES / TOTALS (and the exporter) average live over the time from the end
/// of the period before the last one to now, as PgBouncer 1.25.2 shows them (seen side by side):
/// right after start they already count, they move between period ends, and what happened at the
/// start is still in them until the second period has ended. The stats log line reports the
/// period just closed.
#[derive(Debug, Default)]
pub struct StatsBook {
    state: Mutex<BookState>,
}

impl StatsBook {
    /// End a period of `secs` seconds given the current totals per database; returns the overall
    /// averages of the period (the stats log line).
    pub fn close_period(&self, now: &BTreeMap<String, StatsSnapshot>, secs: f64) -> Averages {
        let mut total = StatsSnapshot::default();
        for s in now.values() {
            total.accumulate(s);
        }
        let mut st = self.state.lock();
        let averages = Averages::from_delta(&total.delta(&st.prev_total), secs);
        st.base = std::mem::replace(&mut st.prev, now.clone());
        st.base_total = std::mem::replace(&mut st.prev_total, total);
        st.base_at = st.prev_at.replace(Instant::now()).or(st.base_at);
        averages
    }

    /// Seconds from the window's start to now (the first period's start before any has ended).
    fn window(st: &BookState) -> f64 {
        // (At least a second: a SHOW right after start would otherwise divide by almost nothing.)
        st.base_at
            .or(st.prev_at)
            .map_or(1.0, |at| at.elapsed().as_secs_f64().max(1.0))
    }

    /// `db`'s averages given its totals now.
    pub fn database(&self, db: &str, now: &StatsSnapshot) -> Averages {
        let st = self.state.lock();
        let base = st.base.get(db).copied().unwrap_or_default();
        Averages::from_delta(&now.delta(&base), Self::window(&st))
    }

    /// The averages of all databases given their totals now.
    pub fn total(&self, now: &StatsSnapshot) -> Averages {
        let st = self.state.lock();
        Averages::from_delta(&now.delta(&st.base_total), Self::window(&st))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_are_per_second_and_per_event() {
        let d = StatsSnapshot {
            xact_count: 100,
            xact_time_us: 5_000,
            server_assignments: 50,
            wait_time_us: 500,
            bytes_received: 1_000,
            ..Default::default()
        };
        let a = Averages::from_delta(&d, 10.0);
        assert_eq!(
            (a.xact_count, a.xact_time, a.wait_time, a.recv),
            (10, 50, 10, 100)
        );
    }

    /// The live window starts at the end of the period before the last one: what happened in
    /// the first period is still averaged after it ends, and gone after the second.
    #[test]
    fn the_window_spans_the_last_period_and_the_running_one() {
        let book = StatsBook::default();
        let start = BTreeMap::from([("app".to_string(), StatsSnapshot::default())]);
        book.close_period(&start, 1.0);
        let busy = StatsSnapshot {
            xact_count: 100,
            xact_time_us: 5_000,
            ..Default::default()
        };
        // Before any period ended: counted from the start.
        assert_eq!(book.database("app", &busy).xact_time, 50);
        assert!(book.database("app", &busy).xact_count > 0);
        let after_first = BTreeMap::from([("app".to_string(), busy)]);
        let logged = book.close_period(&after_first, 10.0);
        assert_eq!((logged.xact_count, logged.xact_time), (10, 50));
        // One period over: still in the window.
        assert_eq!(book.database("app", &busy).xact_time, 50);
        assert_eq!(book.total(&busy).xact_time, 50);
        // Two periods over, nothing since: out of it.
        book.close_period(&after_first, 10.0);
        assert_eq!(book.database("app", &busy), Averages::default());
        assert_eq!(book.total(&busy), Averages::default());
        assert_eq!(
            book.database("other", &StatsSnapshot::default()),
            Averages::default()
        );
    }
}
