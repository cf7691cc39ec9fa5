//! The "stats: ..." log line every stats_period, in PgBouncer's wording.

use super::StatsSnapshot;

/// Format PgBouncer's periodic stats line from a delta over `secs` seconds.
pub fn stats_line(d: &StatsSnapshot, secs: f64) -> String {
    let secs = if secs <= 0.0 { 1.0 } else { secs };
    let per = |v: u64| (v as f64 / secs).round() as u64;
    let avg = |total: u64, n: u64| total.checked_div(n).unwrap_or(0);
    format!(
        "stats: {} xacts/s, {} queries/s, 0 client parses/s, 0 server parses/s, 0 binds/s, {} client logins/s, in {} B/s, out {} B/s, xact {} us, query {} us, wait {} us",
        per(d.xact_count),
        per(d.query_count),
        per(d.client_logins),
        per(d.bytes_received),
        per(d.bytes_sent),
        avg(d.xact_time_us, d.xact_count),
        avg(d.query_time_us, d.query_count),
        avg(d.wait_time_us, d.server_assignments),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_has_pgbouncer_shape() {
        let d = StatsSnapshot {
            xact_count: 600,
            query_count: 1200,
            xact_time_us: 6000,
            query_time_us: 2400,
            ..Default::default()
        };
        let l = stats_line(&d, 60.0);
        assert!(l.starts_with("stats: 10 xacts/s, 20 queries/s,"), "{l}");
        assert!(l.contains("xact 10 us, query 2 us, wait 0 us"), "{l}");
    }
}
