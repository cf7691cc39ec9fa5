//! Averages over the last stats_period, per database and overall, as SHOW STATS / STATS_AVERAGES /
//! TOTALS and the stats log line report them: counts and bytes per second, times per event.

use std::collections::BTreeMap;

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
    prev: BTreeMap<String, StatsSnapshot>,
    prev_total: StatsSnapshot,
    per_db: BTreeMap<String, Averages>,
    total: Averages,
}

/// The last period's averages; `close_period` is called by the stats timer.
#[derive(Debug, Default)]
pub struct StatsBook {
    state: Mutex<BookState>,
}

impl StatsBook {
    /// End a period of `secs` seconds given the current totals per database; returns the overall
    /// averages of the period.
    pub fn close_period(&self, now: &BTreeMap<String, StatsSnapshot>, secs: f64) -> Averages {
        let mut total = StatsSnapshot::default();
        for s in now.values() {
            total.accumulate(s);
        }
        let mut st = self.state.lock();
        let per_db = now
            .iter()
            .map(|(db, s)| {
                let prev = st.prev.get(db).copied().unwrap_or_default();
                (db.clone(), Averages::from_delta(&s.delta(&prev), secs))
            })
            .collect();
        st.per_db = per_db;
        st.total = Averages::from_delta(&total.delta(&st.prev_total), secs);
        st.prev = now.clone();
        st.prev_total = total;
        st.total
    }

    pub fn database(&self, db: &str) -> Averages {
        self.state
            .lock()
            .per_db
            .get(db)
            .copied()
            .unwrap_or_default()
    }

    pub fn total(&self) -> Averages {
        self.state.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_are_per_second_and_per_event() {
        let book = StatsBook::default();
        let mut now = BTreeMap::new();
        now.insert(
            "app".to_string(),
            StatsSnapshot {
                xact_count: 100,
                xact_time_us: 5_000,
                server_assignments: 50,
                wait_time_us: 500,
                bytes_received: 1_000,
                ..Default::default()
            },
        );
        let t = book.close_period(&now, 10.0);
        let a = book.database("app");
        assert_eq!(
            (a.xact_count, a.xact_time, a.wait_time, a.recv),
            (10, 50, 10, 100)
        );
        assert_eq!(t, a);
        // Next period: nothing happened.
        book.close_period(&now, 10.0);
        assert_eq!(book.database("app"), Averages::default());
    }
}
