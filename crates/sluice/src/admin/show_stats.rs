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

pub const STATS_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("total_server_assignment_count", N),
    ("total_xact_count", N),
    ("total_query_count", N),
    ("total_received", N),
    ("total_sent", N),
    ("total_xact_time", N),
    ("total_query_time", N),
    ("total_wait_time", N),
    ("total_client_parse_count", N),
    ("total_server_parse_count", N),
    ("total_bind_count", N),
    ("total_client_login_count", N),
    ("avg_server_assignment_count", N),
    ("avg_xact_count", N),
    ("avg_query_count", N),
    ("avg_recv", N),
    ("avg_sent", N),
    ("avg_xact_time", N),
    ("avg_query_time", N),
    ("avg_wait_time", N),
    ("avg_client_parse_count", N),
    ("avg_server_parse_count", N),
    ("avg_bind_count", N),
    ("avg_client_login_count", N),
];

pub fn stats(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(STATS_COLUMNS);
    for (db, s) in totals_by_db(app) {
        let mut row = vec![text(db.clone())];
        row.extend(total_values(&s));
        row.extend(avg_values(&app.stats_book.database(&db)));
        rs.push(row);
    }
    rs
}

pub const STATS_TOTALS_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("server_assignment_count", N),
    ("xact_count", N),
    ("query_count", N),
    ("bytes_received", N),
    ("bytes_sent", N),
    ("xact_time", N),
    ("query_time", N),
    ("wait_time", N),
    ("client_parse_count", N),
    ("server_parse_count", N),
    ("bind_count", N),
    ("client_login_count", N),
];

pub fn stats_totals(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(STATS_TOTALS_COLUMNS);
    for (db, s) in totals_by_db(app) {
        let mut row = vec![text(db)];
        row.extend(total_values(&s));
        rs.push(row);
    }
    rs
}

pub const STATS_AVERAGES_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("server_assignment_count", N),
    ("xact_count", N),
    ("query_count", N),
    ("bytes_received", N),
    ("bytes_sent", N),
    ("xact_time", N),
    ("query_time", N),
    ("wait_time", N),
    ("avg_client_parse_count", N),
    ("avg_server_parse_count", N),
    ("avg_bind_count", N),
    ("avg_client_login_count", N),
];

pub fn stats_averages(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(STATS_AVERAGES_COLUMNS);
    for db in totals_by_db(app).keys() {
        let mut row = vec![text(db.clone())];
        row.extend(avg_values(&app.stats_book.database(db)));
        rs.push(row);
    }
    rs
}

pub const TOTALS_COLUMNS: &[(&str, Col)] = &[("name", Col::Text), ("value", N)];

const TOTALS_NAMES: [&str; 12] = [
    "server_assignment_count",
    "xact_count",
    "query_count",
    "client_bytes",
    "server_bytes",
    "xact_time",
    "query_time",
    "wait_time",
    "ps_client_parse_count",
    "ps_server_parse_count",
    "ps_bind_count",
    "client_login_count",
];

pub fn totals(app: &Arc<App>) -> ResultSet {
    let mut all = StatsSnapshot::default();
    for s in totals_by_db(app).values() {
        all.accumulate(s);
    }
    let mut rs = ResultSet::new(TOTALS_COLUMNS);
    for (name, v) in TOTALS_NAMES.iter().zip(total_values(&all)) {
        rs.push(vec![text(format!("total_{name}")), v]);
    }
    for (name, v) in TOTALS_NAMES.iter().zip(avg_values(&app.stats_book.total())) {
        rs.push(vec![text(format!("avg_{name}")), v]);
    }
    rs
}
