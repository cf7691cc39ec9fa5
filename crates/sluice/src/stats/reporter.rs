//! The "stats: ..." log line every stats_period, in PgBouncer's wording.

use super::period::Averages;

/// Format PgBouncer's periodic stats line from the averages of one period.
pub fn stats_line(a: &Averages) -> String {
    format!(
        "stats: {} xacts/s, {} queries/s, {} client parses/s, {} server parses/s, {} binds/s, {} client logins/s, in {} B/s, out {} B/s, xact {} us, query {} us, wait {} us",
        a.xact_count,
        a.query_count,
        a.client_parse_count,
        a.server_parse_count,
        a.bind_count,
        a.client_login_count,
        a.recv,
        a.sent,
        a.xact_time,
        a.query_time,
        a.wait_time,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::StatsSnapshot;

    #[test]
    fn line_has_pgbouncer_shape() {
        let d = StatsSnapshot {
            xact_count: 600,
            query_count: 1200,
            xact_time_us: 6000,
            query_time_us: 2400,
            ..Default::default()
        };
        let l = stats_line(&Averages::from_delta(&d, 60.0));
        assert!(l.starts_with("stats: 10 xacts/s, 20 queries/s,"), "{l}");
        assert!(l.contains("xact 10 us, query 2 us, wait 0 us"), "{l}");
    }
}
