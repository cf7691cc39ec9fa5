//! The prometheus-community pgbouncer_exporter's metric families, served by Sluice itself: the
//! exporter's names, types, labels and units (v0.12.1 by default; v0.10.x with `[sluice]
//! metrics_exporter_names = v0.10`, tables in `exporter_families.rs`) for what it reads from SHOW
//! DATABASES, STATS_TOTALS (v0.10: STATS), POOLS, LISTS, CONFIG, CLIENTS (v0.10: SERVERS, a family
//! Sluice added, not the exporter's) and VERSION, so that dashboards and alert rules written against
//! the exporter work on `/metrics` unchanged (with no exporter process). Every value comes from the
//! result set the console would send for that SHOW, read by column name as the exporter reads it,
//! so the figures are the console's; series of pools that are gone are simply not there.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::exporter_families::{self as f, Column};
use super::out::Out;
use crate::admin::result::ResultSet;
use crate::admin::{show_config, show_conns, show_pools, show_stats};
use crate::app::App;
use sluice_config::ExporterNames;

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
        // A column this SHOW does not have (requests, total_requests) has no family, as with the
        // exporter against PgBouncer 1.25.
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

/// SHOW SERVERS counted by (user, database, state, addr_port, close_needed): a family Sluice served
/// before it followed v0.12.1 (no exporter release has it), kept with the v0.10 names.
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

/// SHOW CLIENTS counted by (database, user, application_name, state): v0.12.0's
/// `pgbouncer_client_connections`.
fn client_connections(out: &mut Out, rs: &ResultSet) {
    let name = "pgbouncer_client_connections";
    out.family(
        name,
        "gauge",
        "Number of client connections grouped by database, user, application name, and state",
    );
    let at = |c: &str| col(rs, c);
    let (Some(d), Some(u), Some(s)) = (at("database"), at("user"), at("state")) else {
        return;
    };
    let a = at("application_name");
    let mut counts: BTreeMap<[String; 4], u64> = BTreeMap::new();
    let cell = |r: &Vec<Option<String>>, i: usize| r[i].clone().unwrap_or_default();
    for r in &rs.rows {
        let app_name = a.map(|i| cell(r, i)).unwrap_or_default();
        *counts
            .entry([cell(r, d), cell(r, u), app_name, cell(r, s)])
            .or_default() += 1;
    }
    for ([db, user, app_name, state], n) in &counts {
        out.sample(
            name,
            &[
                ("database", db),
                ("user", user),
                ("application_name", app_name),
                ("state", state),
            ],
            *n as f64,
        );
    }
}

/// Every exporter family of the configured release line, and the standard process ones.
pub(super) fn render(out: &mut Out, app: &Arc<App>) {
    let names = app.config().sluice.metrics_exporter_names;
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
        &[("version", &show_config::version_string())],
        1.0,
    );
    let databases = show_pools::databases(app);
    match names {
        ExporterNames::Current => {
            by_row(out, &databases, f::DATABASES_LABELS, f::DATABASES);
            let totals = show_stats::stats_totals(app);
            by_row(out, &totals, f::STATS_LABELS, f::STATS_TOTALS);
        }
        ExporterNames::V0_10 => {
            by_row(out, &databases, f::DATABASES_LABELS, f::DATABASES_V0_10);
            let stats = show_stats::stats(app);
            by_row(out, &stats, f::STATS_LABELS, f::STATS_V0_10);
        }
    }
    by_row(out, &show_pools::pools(app), f::POOLS_LABELS, f::POOLS);
    by_key(out, &show_pools::lists(app), f::LISTS);
    by_key(out, &show_config::config(app), f::CONFIG);
    match names {
        ExporterNames::Current => client_connections(out, &show_conns::clients(app)),
        ExporterNames::V0_10 => server_connections(out, &show_conns::servers(app)),
    }
}
