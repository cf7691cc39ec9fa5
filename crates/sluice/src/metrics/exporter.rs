//! The prometheus-community pgbouncer_exporter's metric families, served by Sluice itself: the
//! exporter's names, types, labels and units for what it reads from SHOW DATABASES, STATS, POOLS,
//! LISTS, CONFIG, SERVERS and VERSION, so that dashboards and alert rules written against the
//! exporter work on `/metrics` unchanged (with no exporter process). Every value comes from the
//! result set the console would send for that SHOW, read by column name as the exporter reads it,
//! so the figures are the console's; series of pools that are gone are simply not there.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::render::Out;
use crate::admin::result::ResultSet;
use crate::admin::{show_conns, show_misc, show_pools, show_stats};
use crate::app::App;

/// One column of a SHOW, as one family.
struct Column {
    column: &'static str,
    name: &'static str,
    counter: bool,
    /// The exporter's unit conversion (µs columns become seconds).
    factor: f64,
    help: &'static str,
}

const fn gauge(column: &'static str, name: &'static str, help: &'static str) -> Column {
    Column {
        column,
        name,
        counter: false,
        factor: 1.0,
        help,
    }
}

const fn counter(
    column: &'static str,
    name: &'static str,
    factor: f64,
    help: &'static str,
) -> Column {
    Column {
        column,
        name,
        counter: true,
        factor,
        help,
    }
}

const US: f64 = 1e-6;

const DATABASES_LABELS: &[&str] = &[
    "name",
    "host",
    "port",
    "database",
    "force_user",
    "pool_mode",
];
const DATABASES: &[Column] = &[
    gauge(
        "pool_size",
        "pgbouncer_databases_pool_size",
        "Maximum number of server connections",
    ),
    gauge(
        "reserve_pool",
        "pgbouncer_databases_reserve_pool",
        "Maximum number of additional connections for this database",
    ),
    gauge(
        "max_connections",
        "pgbouncer_databases_max_connections",
        "Maximum number of allowed connections for this database",
    ),
    gauge(
        "current_connections",
        "pgbouncer_databases_current_connections",
        "Current number of connections for this database",
    ),
    gauge(
        "paused",
        "pgbouncer_databases_paused",
        "1 if this database is currently paused, else 0",
    ),
    gauge(
        "disabled",
        "pgbouncer_databases_disabled",
        "1 if this database is currently disabled, else 0",
    ),
];

const STATS_LABELS: &[&str] = &["database"];
const STATS: &[Column] = &[
    counter("total_query_count", "pgbouncer_stats_queries_pooled_total", 1.0, "Total number of SQL queries pooled"),
    counter("total_query_time", "pgbouncer_stats_queries_duration_seconds_total", US, "Total number of seconds spent by pgbouncer when actively connected to PostgreSQL, executing queries"),
    counter("total_received", "pgbouncer_stats_received_bytes_total", 1.0, "Total volume in bytes of network traffic received by pgbouncer, shown as bytes"),
    counter("total_requests", "pgbouncer_stats_queries_total", 1.0, "Total number of SQL requests pooled by pgbouncer, shown as requests"),
    counter("total_sent", "pgbouncer_stats_sent_bytes_total", 1.0, "Total volume in bytes of network traffic sent by pgbouncer, shown as bytes"),
    counter("total_wait_time", "pgbouncer_stats_client_wait_seconds_total", US, "Time spent by clients waiting for a server in seconds"),
    counter("total_xact_count", "pgbouncer_stats_sql_transactions_pooled_total", 1.0, "Total number of SQL transactions pooled"),
    counter("total_xact_time", "pgbouncer_stats_server_in_transaction_seconds_total", US, "Total number of seconds spent by pgbouncer when connected to PostgreSQL in a transaction, either idle in transaction or executing queries"),
];

const POOLS_LABELS: &[&str] = &["database", "user"];
const POOLS: &[Column] = &[
    gauge("cl_active", "pgbouncer_pools_client_active_connections", "Client connections linked to server connection and able to process queries, shown as connection"),
    gauge("cl_active_cancel_req", "pgbouncer_pools_client_active_cancel_connections", "Client connections that have forwarded query cancellations to the server and are waiting for the server response"),
    gauge("cl_waiting", "pgbouncer_pools_client_waiting_connections", "Client connections waiting on a server connection, shown as connection"),
    gauge("cl_waiting_cancel_req", "pgbouncer_pools_client_waiting_cancel_connections", "Client connections that have not forwarded query cancellations to the server yet"),
    gauge("sv_active", "pgbouncer_pools_server_active_connections", "Server connections linked to a client connection, shown as connection"),
    gauge("sv_active_cancel", "pgbouncer_pools_server_active_cancel_connections", "Server connections that are currently forwarding a cancel request."),
    gauge("sv_being_canceled", "pgbouncer_pools_server_being_canceled_connections", "Servers that normally could become idle but are waiting to do so until all in-flight cancel requests have completed that were sent to cancel a query on this server."),
    gauge("sv_idle", "pgbouncer_pools_server_idle_connections", "Server connections idle and ready for a client query, shown as connection"),
    gauge("sv_used", "pgbouncer_pools_server_used_connections", "Server connections idle more than server_check_delay, needing server_check_query, shown as connection"),
    gauge("sv_tested", "pgbouncer_pools_server_testing_connections", "Server connections currently running either server_reset_query or server_check_query, shown as connection"),
    gauge("sv_login", "pgbouncer_pools_server_login_connections", "Server connections currently in the process of logging in, shown as connection"),
    gauge("maxwait", "pgbouncer_pools_client_maxwait_seconds", "Age of oldest unserved client connection, shown as second"),
];

/// SHOW LISTS rows (list name → family).
const LISTS: &[(&str, &str, &str)] = &[
    ("databases", "pgbouncer_databases", "Count of databases"),
    ("users", "pgbouncer_users", "Count of users"),
    ("pools", "pgbouncer_pools", "Count of pools"),
    (
        "free_clients",
        "pgbouncer_free_clients",
        "Count of free clients",
    ),
    (
        "used_clients",
        "pgbouncer_used_clients",
        "Count of used clients",
    ),
    (
        "login_clients",
        "pgbouncer_login_clients",
        "Count of clients in login state",
    ),
    (
        "free_servers",
        "pgbouncer_free_servers",
        "Count of free servers",
    ),
    (
        "used_servers",
        "pgbouncer_used_servers",
        "Count of used servers",
    ),
    (
        "dns_names",
        "pgbouncer_cached_dns_names",
        "Count of DNS names in the cache",
    ),
    (
        "dns_zones",
        "pgbouncer_cached_dns_zones",
        "Count of DNS zones in the cache",
    ),
    (
        "dns_queries",
        "pgbouncer_in_flight_dns_queries",
        "Count of in-flight DNS queries",
    ),
];

/// SHOW CONFIG keys (key → family).
const CONFIG: &[(&str, &str, &str)] = &[
    (
        "max_client_conn",
        "pgbouncer_config_max_client_connections",
        "Config maximum number of client connections",
    ),
    (
        "max_user_connections",
        "pgbouncer_config_max_user_connections",
        "Config maximum number of server connections per user",
    ),
];

fn col(rs: &ResultSet, name: &str) -> Option<usize> {
    rs.columns.iter().position(|(n, _)| *n == name)
}

/// A numeric cell; the exporter drops what does not parse (NULL included).
fn value(row: &[Option<String>], i: usize) -> Option<f64> {
    row.get(i)?.as_deref()?.parse().ok()
}

/// The families of `columns`, one sample per row of `rs`, labelled with `labels` (columns of `rs`).
fn by_row(out: &mut Out, rs: &ResultSet, labels: &[&str], columns: &[Column]) {
    let label_at: Vec<(&str, Option<usize>)> = labels.iter().map(|l| (*l, col(rs, l))).collect();
    for c in columns {
        // A column this SHOW does not have (total_requests, before PgBouncer 1.8) has no family.
        let Some(i) = col(rs, c.column) else { continue };
        out.family(c.name, if c.counter { "counter" } else { "gauge" }, c.help);
        for row in &rs.rows {
            let Some(v) = value(row, i) else { continue };
            let l: Vec<(&str, &str)> = label_at
                .iter()
                .map(|(name, at)| {
                    let text = at.and_then(|j| row[j].as_deref()).unwrap_or("");
                    (*name, text)
                })
                .collect();
            out.sample(c.name, &l, v * c.factor);
        }
    }
}

/// Two-column SHOWs (name, value): one unlabelled gauge per known name.
fn by_key(out: &mut Out, rs: &ResultSet, table: &[(&str, &str, &str)]) {
    for (key, name, help) in table {
        let found = rs
            .rows
            .iter()
            .find(|r| r.first().and_then(|v| v.as_deref()) == Some(*key))
            .and_then(|r| value(r, 1));
        if let Some(v) = found {
            out.family(name, "gauge", help);
            out.sample(name, &[], v);
        }
    }
}

/// SHOW SERVERS counted by (user, database, state, addr_port, close_needed), as the exporter does.
fn server_connections(out: &mut Out, rs: &ResultSet) {
    let name = "pgbouncer_server_connections";
    out.family(name, "gauge", "Server connections with state information");
    let at = |c: &str| col(rs, c);
    let (Some(u), Some(d), Some(s), Some(a), Some(p), Some(c)) = (
        at("user"),
        at("database"),
        at("state"),
        at("addr"),
        at("port"),
        at("close_needed"),
    ) else {
        return;
    };
    let mut counts: BTreeMap<[String; 5], u64> = BTreeMap::new();
    let cell = |r: &Vec<Option<String>>, i: usize| r[i].clone().unwrap_or_default();
    for r in &rs.rows {
        let key = [
            cell(r, u),
            cell(r, d),
            cell(r, s),
            format!("{}_{}", cell(r, a), cell(r, p)),
            (cell(r, c) == "1").to_string(),
        ];
        *counts.entry(key).or_default() += 1;
    }
    for ([user, db, state, addr, close], n) in &counts {
        out.sample(
            name,
            &[
                ("user", user),
                ("database", db),
                ("state", state),
                ("addr", addr),
                ("close_needed", close),
            ],
            *n as f64,
        );
    }
}

/// The standard `process_*` families every Prometheus client library exports (what the
/// exporter's own process reported; here the pooler's).
fn standard_process(out: &mut Out, app: &App) {
    use super::process as p;
    let start = app
        .started
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let figures: [(&str, &str, &str, Option<f64>); 6] = [
        (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            p::cpu_seconds(),
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            p::resident_bytes().map(|v| v as f64),
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            p::virtual_bytes().map(|v| v as f64),
        ),
        (
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            p::open_fds().map(|v| v as f64),
        ),
        (
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            p::max_fds().map(|v| v as f64),
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            Some(start),
        ),
    ];
    for (name, kind, help, v) in figures {
        if let Some(v) = v {
            out.family(name, kind, help);
            out.sample(name, &[], v);
        }
    }
}

/// Every exporter family, and the standard process ones.
pub(super) fn render(out: &mut Out, app: &Arc<App>) {
    standard_process(out, app);
    out.family("pgbouncer_up", "gauge", "The pgbouncer scrape succeeded");
    out.sample("pgbouncer_up", &[], 1.0);
    out.family(
        "pgbouncer_version_info",
        "gauge",
        "The pgbouncer version info",
    );
    out.sample(
        "pgbouncer_version_info",
        &[("version", &show_misc::version_string())],
        1.0,
    );
    by_row(
        out,
        &show_pools::databases(app),
        DATABASES_LABELS,
        DATABASES,
    );
    by_row(out, &show_stats::stats(app), STATS_LABELS, STATS);
    by_row(out, &show_pools::pools(app), POOLS_LABELS, POOLS);
    by_key(out, &show_pools::lists(app), LISTS);
    by_key(out, &show_misc::config(app), CONFIG);
    server_connections(out, &show_conns::servers(app));
}
