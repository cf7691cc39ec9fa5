//! SHOW STATS, STATS_TOTALS, STATS_AVERAGES and TOTALS: per-database totals since start (times in
//! µs, bytes) and the averages of the last stats_period (per second; times per event).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::result::{num, text, Col, ResultSet, Value};
use super::ADMIN_DB;
use crate::app::App;
use crate::stats::period::Averages;
use crate::stats::StatsSnapshot;

/// Current totals per database: its pools summed, plus the admin console's own row.
pub fn totals_by_db(app: &App) -> BTreeMap<String, StatsSnapshot> {
    let mut out: BTreeMap<String, StatsSnapshot> = BTreeMap::new();
    out.insert(ADMIN_DB.to_string(), app.admin_stats.snapshot());
    for p in app.pools.all() {
        out.entry(p.key.database.clone())
            .or_default()
            .accumulate(&p.stats.snapshot());
    }
    out
}

fn total_values(s: &StatsSnapshot) -> [Value; 12] {
    [
        num(s.server_assignments),
        num(s.xact_count),
        num(s.query_count),
        num(s.bytes_received),
        num(s.bytes_sent),
        num(s.xact_time_us),
        num(s.query_time_us),
        num(s.wait_time_us),
        num(s.client_parse_count),
        num(s.server_parse_count),
        num(s.bind_count),
        num(s.client_logins),
    ]
}

fn avg_values(a: &Averages) -> [Value; 12] {
    [
        num(a.server_assignment_count),
        num(a.xact_count),
        num(a.query_count),
        num(a.recv),
        num(a.sent),
        num(a.xact_time),
        num(a.query_time),
        num(a.wait_time),
        num(a.client_parse_count),
        num(a.server_parse_count),
        num(a.bind_count),
        num(a.client_login_count),
    ]
}

const N: Col = Col::Numeric;

/// The twelve figures of SHOW STATS, STATS_TOTALS, STATS_AVERAGES and TOTALS in their order,
/// each as every view names it: PgBouncer's names are not regular (`total_received` and `avg_recv`
/// in STATS, `bytes_received` in the other two, `client_bytes` in TOTALS; the prepared-statement
/// counts keep an `avg_` prefix in STATS_AVERAGES). One row a figure, so the views cannot drift.
const FIGURES: [Figure; 12] = [
    figure(
        "total_server_assignment_count",
        "avg_server_assignment_count",
        "server_assignment_count",
        "server_assignment_count",
        "server_assignment_count",
    ),
    figure(
        "total_xact_count",
        "avg_xact_count",
        "xact_count",
        "xact_count",
        "xact_count",
    ),
    figure(
        "total_query_count",
        "avg_query_count",
        "query_count",
        "query_count",
        "query_count",
    ),
    figure(
        "total_received",
        "avg_recv",
        "bytes_received",
        "bytes_received",
        "client_bytes",
    ),
    figure(
        "total_sent",
        "avg_sent",
        "bytes_sent",
        "bytes_sent",
        "server_bytes",
    ),
    figure(
        "total_xact_time",
        "avg_xact_time",
        "xact_time",
        "xact_time",
        "xact_time",
    ),
    figure(
        "total_query_time",
        "avg_query_time",
        "query_time",
        "query_time",
        "query_time",
    ),
    figure(
        "total_wait_time",
        "avg_wait_time",
        "wait_time",
        "wait_time",
        "wait_time",
    ),
    figure(
        "total_client_parse_count",
        "avg_client_parse_count",
        "client_parse_count",
        "avg_client_parse_count",
        "ps_client_parse_count",
    ),
    figure(
        "total_server_parse_count",
        "avg_server_parse_count",
        "server_parse_count",
        "avg_server_parse_count",
        "ps_server_parse_count",
    ),
    figure(
        "total_bind_count",
        "avg_bind_count",
        "bind_count",
        "avg_bind_count",
        "ps_bind_count",
    ),
    figure(
        "total_client_login_count",
        "avg_client_login_count",
        "client_login_count",
        "avg_client_login_count",
        "client_login_count",
    ),
];

/// One figure's column names: SHOW STATS (totals, then averages), STATS_TOTALS, STATS_AVERAGES,
/// and TOTALS (after its `total_` / `avg_` prefix).
struct Figure([&'static str; 5]);

const fn figure(
    stats_total: &'static str,
    stats_avg: &'static str,
    totals: &'static str,
    averages: &'static str,
    totals_name: &'static str,
) -> Figure {
    Figure([stats_total, stats_avg, totals, averages, totals_name])
}

/// `database`, then the figures as the views `views` (indexes into `Figure`) name them.
const fn columns<const M: usize>(views: &[usize]) -> [(&'static str, Col); M] {
    let mut out = [("database", Col::Text); M];
    let mut k = 1;
    let mut v = 0;
    while v < views.len() {
        let mut i = 0;
        while i < FIGURES.len() {
            out[k] = (FIGURES[i].0[views[v]], N);
            k += 1;
            i += 1;
        }
        v += 1;
    }
    out
}

pub const STATS_COLUMNS: &[(&str, Col)] = &columns::<25>(&[0, 1]);

pub fn stats(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(STATS_COLUMNS);
    for (db, s) in totals_by_db(app) {
        let mut row = vec![text(db.clone())];
        row.extend(total_values(&s));
        row.extend(avg_values(&app.stats_book.database(&db, &s)));
        rs.push(row);
    }
    rs
}

pub const STATS_TOTALS_COLUMNS: &[(&str, Col)] = &columns::<13>(&[2]);

pub fn stats_totals(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(STATS_TOTALS_COLUMNS);
    for (db, s) in totals_by_db(app) {
        let mut row = vec![text(db)];
        row.extend(total_values(&s));
        rs.push(row);
    }
    rs
}

pub const STATS_AVERAGES_COLUMNS: &[(&str, Col)] = &columns::<13>(&[3]);

pub fn stats_averages(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(STATS_AVERAGES_COLUMNS);
    for (db, s) in totals_by_db(app) {
        let mut row = vec![text(db.clone())];
        row.extend(avg_values(&app.stats_book.database(&db, &s)));
        rs.push(row);
    }
    rs
}

pub const TOTALS_COLUMNS: &[(&str, Col)] = &[("name", Col::Text), ("value", N)];

pub fn totals(app: &Arc<App>) -> ResultSet {
    let mut all = StatsSnapshot::default();
    for s in totals_by_db(app).values() {
        all.accumulate(s);
    }
    let mut rs = ResultSet::new(TOTALS_COLUMNS);
    for (f, v) in FIGURES.iter().zip(total_values(&all)) {
        rs.push(vec![text(format!("total_{}", f.0[4])), v]);
    }
    for (f, v) in FIGURES.iter().zip(avg_values(&app.stats_book.total(&all))) {
        rs.push(vec![text(format!("avg_{}", f.0[4])), v]);
    }
    rs
}
