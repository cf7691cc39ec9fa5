//! The Prometheus text exposition (format 0.0.4) of everything SHOW POOLS, STATS, DATABASES and
//! LISTS report, process figures, and per-pool latency histograms.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use crate::admin::show_config::version_string;
use crate::admin::show_pools::{database_rows, list_items, pool_rows};
use crate::admin::show_stats::totals_by_db;
use crate::app::App;
use crate::stats::period::Averages;
use crate::stats::{HistogramSnapshot, StatsSnapshot};

use super::out::Out;

fn process(out: &mut Out, app: &App) {
    out.family(
        "sluice_info",
        "gauge",
        "Sluice version and the PgBouncer console it reproduces.",
    );
    out.sample(
        "sluice_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("console", &version_string()),
        ],
        1.0,
    );
    let start = app
        .started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    out.family(
        "sluice_process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch.",
    );
    out.sample("sluice_process_start_time_seconds", &[], start);
    if let Some(cpu) = super::process::cpu_seconds() {
        out.family(
            "sluice_process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent.",
        );
        out.sample("sluice_process_cpu_seconds_total", &[], cpu);
    }
    if let Some(rss) = super::process::resident_bytes() {
        out.family(
            "sluice_process_resident_memory_bytes",
            "gauge",
            "Resident memory size.",
        );
        out.sample("sluice_process_resident_memory_bytes", &[], rss as f64);
    }
    if let Some(fds) = super::process::open_fds() {
        out.family("sluice_process_open_fds", "gauge", "Open file descriptors.");
        out.sample("sluice_process_open_fds", &[], fds as f64);
    }
    out.family(
        "sluice_clients_connected",
        "gauge",
        "Client connections, all phases, admin console included.",
    );
    out.sample(
        "sluice_clients_connected",
        &[],
        app.client_count.load(Ordering::Relaxed) as f64,
    );
    auth(out, app);
    workers(out, app);
    let (paused, suspended) = app.control.flags();
    out.family(
        "sluice_paused",
        "gauge",
        "1 while the whole pooler is paused (PAUSE, SIGUSR1).",
    );
    out.sample("sluice_paused", &[], f64::from(u8::from(paused)));
    out.family(
        "sluice_suspended",
        "gauge",
        "1 while the pooler is suspended (SUSPEND).",
    );
    out.sample("sluice_suspended", &[], f64::from(u8::from(suspended)));
}

/// Worker packing (`workers::balance`): how many workers take clients, and each one's share.
fn workers(out: &mut Out, app: &App) {
    let w = &app.workers;
    out.family(
        "sluice_workers_active",
        "gauge",
        "Worker threads taking clients (the others hand theirs over; see worker_spread_percent).",
    );
    out.sample("sluice_workers_active", &[], w.active() as f64);
    let slots: Vec<(String, &crate::workers::WorkerSlot)> = w
        .slots()
        .iter()
        .enumerate()
        .map(|(i, s)| (i.to_string(), s))
        .collect();
    out.gauge_rows(
        "sluice_worker_clients",
        "gauge",
        "Pool clients whose session runs on the worker.",
        &slots,
        |(i, s)| {
            (
                vec![("worker", i.clone())],
                s.clients.load(Ordering::Relaxed) as f64,
            )
        },
    );
    out.gauge_rows(
        "sluice_worker_busy_ratio",
        "gauge",
        "CPU time of the worker's thread over the last second, as a share of one CPU.",
        &slots,
        |(i, s)| {
            (
                vec![("worker", i.clone())],
                f64::from(s.busy_permille.load(Ordering::Relaxed)) / 1000.0,
            )
        },
    );
    out.family(
        "sluice_worker_client_moves_total",
        "counter",
        "Clients moved to another worker between transactions.",
    );
    out.sample(
        "sluice_worker_client_moves_total",
        &[],
        w.moves.load(Ordering::Relaxed) as f64,
    );
    out.family(
        "sluice_cross_worker_events_total",
        "counter",
        "Work that crossed between workers: a server handed to another worker's client, a waiter \
         woken from another worker's thread, a server socket moved to another worker, a client moved.",
    );
    for (kind, n) in crate::admin::show_workers::cross_totals(app) {
        out.sample(
            "sluice_cross_worker_events_total",
            &[("kind", kind)],
            n as f64,
        );
    }
}

fn auth(out: &mut Out, app: &App) {
    out.family(
        "sluice_client_login_failures_total",
        "counter",
        "Client logins refused (wrong password, unknown user, hba reject, auth_query failure).",
    );
    out.sample(
        "sluice_client_login_failures_total",
        &[],
        app.login_failures.load(Ordering::Relaxed) as f64,
    );
    let (hits, misses) = app.scram_cache.counts();
    out.family(
        "sluice_scram_cache_hits_total",
        "counter",
        "SCRAM secrets derived from plaintext passwords that were found in the cache.",
    );
    out.sample("sluice_scram_cache_hits_total", &[], hits as f64);
    out.family(
        "sluice_scram_cache_misses_total",
        "counter",
        "SCRAM secrets derived from plaintext passwords with PBKDF2 (cache misses).",
    );
    out.sample("sluice_scram_cache_misses_total", &[], misses as f64);
}

fn pools(out: &mut Out, app: &App) {
    let rows = pool_rows(app);
    let dbu = |r: &crate::admin::show_pools::PoolRow| {
        vec![("database", r.database.clone()), ("user", r.user.clone())]
    };
    out.family(
        "sluice_pool_clients",
        "gauge",
        "Client connections of a pool by state (SHOW POOLS cl_*).",
    );
    for r in &rows {
        for (state, v) in [
            ("active", r.cl_active),
            ("waiting", r.cl_waiting),
            ("active_cancel_req", 0),
            ("waiting_cancel_req", 0),
        ] {
            out.sample(
                "sluice_pool_clients",
                &[
                    ("database", &r.database),
                    ("user", &r.user),
                    ("state", state),
                ],
                v as f64,
            );
        }
    }
    out.family(
        "sluice_pool_pinned_clients",
        "gauge",
        "Clients that session state (advisory locks, LISTEN, temp tables...) keeps on their server.",
    );
    for r in &rows {
        let pinned = app
            .pools
            .get(&crate::pool::PoolKey {
                database: r.database.clone(),
                user: r.user.clone(),
            })
            .map_or(0, |p| p.pinned_clients());
        out.sample(
            "sluice_pool_pinned_clients",
            &[("database", &r.database), ("user", &r.user)],
            pinned as f64,
        );
    }
    out.family(
        "sluice_pool_servers",
        "gauge",
        "Server connections of a pool by state (SHOW POOLS sv_*).",
    );
    for r in &rows {
        for (state, v) in [
            ("active", r.sv_active),
            ("active_cancel", 0),
            ("being_canceled", r.sv_being_canceled),
            ("idle", r.sv_idle),
            ("used", r.sv_used),
            ("tested", r.sv_tested),
            ("login", r.sv_login),
        ] {
            out.sample(
                "sluice_pool_servers",
                &[
                    ("database", &r.database),
                    ("user", &r.user),
                    ("state", state),
                ],
                v as f64,
            );
        }
    }
    out.gauge_rows(
        "sluice_pool_maxwait_seconds",
        "gauge",
        "Age of the oldest waiting client (SHOW POOLS maxwait + maxwait_us).",
        &rows,
        |r| (dbu(r), r.maxwait.as_secs_f64()),
    );
    out.gauge_rows(
        "sluice_pool_info",
        "gauge",
        "Pool mode and load_balance_hosts of a pool.",
        &rows,
        |r| {
            let mut l = dbu(r);
            l.push(("pool_mode", r.pool_mode.clone()));
            l.push((
                "load_balance_hosts",
                r.load_balance_hosts.clone().unwrap_or_default(),
            ));
            (l, 1.0)
        },
    );
}

type StatField = (
    &'static str,
    &'static str,
    &'static str,
    fn(&StatsSnapshot) -> f64,
);

const TOTALS: &[StatField] = &[
    (
        "sluice_server_assignments_total",
        "counter",
        "Times a server was assigned to a client.",
        |s| s.server_assignments as f64,
    ),
    (
        "sluice_transactions_total",
        "counter",
        "Transactions pooled.",
        |s| s.xact_count as f64,
    ),
    ("sluice_queries_total", "counter", "Queries pooled.", |s| {
        s.query_count as f64
    }),
    (
        "sluice_received_bytes_total",
        "counter",
        "Bytes received from clients.",
        |s| s.bytes_received as f64,
    ),
    (
        "sluice_sent_bytes_total",
        "counter",
        "Bytes sent to clients.",
        |s| s.bytes_sent as f64,
    ),
    (
        "sluice_transaction_time_seconds_total",
        "counter",
        "Time spent in transactions.",
        |s| s.xact_time_us as f64 / 1e6,
    ),
    (
        "sluice_query_time_seconds_total",
        "counter",
        "Time spent in queries.",
        |s| s.query_time_us as f64 / 1e6,
    ),
    (
        "sluice_client_wait_time_seconds_total",
        "counter",
        "Time clients waited for a server.",
        |s| s.wait_time_us as f64 / 1e6,
    ),
    (
        "sluice_client_parses_total",
        "counter",
        "Parse messages received from clients.",
        |s| s.client_parse_count as f64,
    ),
    (
        "sluice_server_parses_total",
        "counter",
        "Parse messages sent to servers.",
        |s| s.server_parse_count as f64,
    ),
    (
        "sluice_prepared_evictions_total",
        "counter",
        "Statements the per-server prepared-statement caches closed to stay within max_prepared_statements.",
        |s| s.prepared_evictions as f64,
    ),
    (
        "sluice_binds_total",
        "counter",
        "Bind messages received from clients.",
        |s| s.bind_count as f64,
    ),
    (
        "sluice_session_syncs_round_trip_total",
        "counter",
        "Server hand-outs that ran queries giving the server the client's session parameters before forwarding its request.",
        |s| s.syncs_round_trip as f64,
    ),
    (
        "sluice_session_syncs_ahead_total",
        "counter",
        "Server hand-outs that sent the client's session parameters in the same write as its request.",
        |s| s.syncs_ahead as f64,
    ),
    (
        "sluice_session_sequence_discards_total",
        "counter",
        "Requests reading currval() or lastval() on a server whose sequence values were another client's, sent after a DISCARD SEQUENCES.",
        |s| s.sequence_discards as f64,
    ),
    (
        "sluice_client_logins_total",
        "counter",
        "Client logins.",
        |s| s.client_logins as f64,
    ),
];

type AvgField = (&'static str, &'static str, fn(&Averages) -> f64);

const AVERAGES: &[AvgField] = &[
    (
        "sluice_avg_server_assignments_per_second",
        "Server assignments per second over the last stats_period.",
        |a| a.server_assignment_count as f64,
    ),
    (
        "sluice_avg_transactions_per_second",
        "Transactions per second over the last stats_period.",
        |a| a.xact_count as f64,
    ),
    (
        "sluice_avg_queries_per_second",
        "Queries per second over the last stats_period.",
        |a| a.query_count as f64,
    ),
    (
        "sluice_avg_received_bytes_per_second",
        "Bytes per second from clients over the last stats_period.",
        |a| a.recv as f64,
    ),
    (
        "sluice_avg_sent_bytes_per_second",
        "Bytes per second to clients over the last stats_period.",
        |a| a.sent as f64,
    ),
    (
        "sluice_avg_transaction_time_seconds",
        "Mean transaction time over the last stats_period.",
        |a| a.xact_time as f64 / 1e6,
    ),
    (
        "sluice_avg_query_time_seconds",
        "Mean query time over the last stats_period.",
        |a| a.query_time as f64 / 1e6,
    ),
    (
        "sluice_avg_client_wait_time_seconds",
        "Mean wait per server assignment over the last stats_period.",
        |a| a.wait_time as f64 / 1e6,
    ),
    (
        "sluice_avg_client_parses_per_second",
        "Client Parse messages per second over the last stats_period.",
        |a| a.client_parse_count as f64,
    ),
    (
        "sluice_avg_server_parses_per_second",
        "Server Parse messages per second over the last stats_period.",
        |a| a.server_parse_count as f64,
    ),
    (
        "sluice_avg_binds_per_second",
        "Bind messages per second over the last stats_period.",
        |a| a.bind_count as f64,
    ),
    (
        "sluice_avg_client_logins_per_second",
        "Client logins per second over the last stats_period.",
        |a| a.client_login_count as f64,
    ),
];

fn stats(out: &mut Out, app: &App) {
    let totals: Vec<(String, StatsSnapshot)> = totals_by_db(app).into_iter().collect();
    for (name, kind, help, f) in TOTALS {
        out.gauge_rows(name, kind, help, &totals, |(db, s)| {
            (vec![("database", db.clone())], f(s))
        });
    }
    let avgs: Vec<(String, Averages)> = totals
        .iter()
        .map(|(db, s)| (db.clone(), app.stats_book.database(db, s)))
        .collect();
    for (name, help, f) in AVERAGES {
        out.gauge_rows(name, "gauge", help, &avgs, |(db, a)| {
            (vec![("database", db.clone())], f(a))
        });
    }
}

fn databases(out: &mut Out, app: &App) {
    use crate::admin::show_pools::DatabaseRow;
    let rows = database_rows(app);
    type DbField = (&'static str, &'static str, fn(&DatabaseRow) -> f64);
    let fields: &[DbField] = &[
        (
            "sluice_database_pool_size",
            "Effective pool_size of the database.",
            |r| r.pool_size.into(),
        ),
        (
            "sluice_database_min_pool_size",
            "Effective min_pool_size.",
            |r| r.min_pool_size.into(),
        ),
        (
            "sluice_database_reserve_pool_size",
            "Effective reserve_pool_size.",
            |r| r.reserve_pool_size.into(),
        ),
        (
            "sluice_database_server_lifetime_seconds",
            "Effective server_lifetime.",
            |r| r.server_lifetime.into(),
        ),
        (
            "sluice_database_max_connections",
            "max_db_connections (0 = unlimited).",
            |r| r.max_connections.into(),
        ),
        (
            "sluice_database_current_connections",
            "Server connections open to the database.",
            |r| r.current_connections as f64,
        ),
        (
            "sluice_database_max_client_connections",
            "max_db_client_connections (0 = unlimited).",
            |r| r.max_client_connections.into(),
        ),
        (
            "sluice_database_current_client_connections",
            "Client connections to the database.",
            |r| r.current_client_connections as f64,
        ),
        (
            "sluice_database_paused",
            "1 if the database is paused.",
            |r| f64::from(u8::from(r.paused)),
        ),
        (
            "sluice_database_disabled",
            "1 if the database is disabled.",
            |r| f64::from(u8::from(r.disabled)),
        ),
    ];
    for (name, help, f) in fields {
        out.gauge_rows(name, "gauge", help, &rows, |r| {
            (vec![("database", r.name.clone())], f(r))
        });
    }
    out.gauge_rows(
        "sluice_database_info",
        "gauge",
        "Where a database points (SHOW DATABASES).",
        &rows,
        |r| {
            (
                vec![
                    ("database", r.name.clone()),
                    ("host", r.host.clone().unwrap_or_default()),
                    ("port", r.port.to_string()),
                    ("dbname", r.database.clone()),
                    ("force_user", r.force_user.clone().unwrap_or_default()),
                    ("pool_mode", r.pool_mode.clone().unwrap_or_default()),
                ],
                1.0,
            )
        },
    );
}

fn lists(out: &mut Out, app: &App) {
    let items = list_items(app);
    out.gauge_rows(
        "sluice_list_items",
        "gauge",
        "SHOW LISTS items.",
        &items,
        |(l, n)| (vec![("list", l.to_string())], *n as f64),
    );
}

fn histograms(out: &mut Out, app: &App) {
    let pools = app.pools.all();
    type Pick = fn(&crate::stats::PoolStats) -> HistogramSnapshot;
    let families: &[(&str, &str, Pick)] = &[
        (
            "sluice_query_duration_seconds",
            "Query time: request to its ReadyForQuery.",
            |s| s.query_time_us.hist.snapshot(),
        ),
        (
            "sluice_transaction_duration_seconds",
            "Transaction time: first request to the ReadyForQuery that ends it.",
            |s| s.xact_time_us.hist.snapshot(),
        ),
        (
            "sluice_client_wait_duration_seconds",
            "Client wait for a server, per server assignment.",
            |s| s.wait_time_us.hist.snapshot(),
        ),
        (
            "sluice_client_login_duration_seconds",
            "Client login: accept to the welcome ReadyForQuery.",
            |s| s.login_time.snapshot(),
        ),
        (
            "sluice_server_connect_duration_seconds",
            "Server connect and login.",
            |s| s.connect_time.snapshot(),
        ),
    ];
    for (name, help, pick) in families {
        out.family(name, "histogram", help);
        for p in &pools {
            let l = [
                ("database", p.key.database.as_str()),
                ("user", p.key.user.as_str()),
            ];
            out.histogram(name, &l, &p.stats.histogram(pick));
        }
    }
}

/// The whole /metrics body: Sluice's own families, then pgbouncer_exporter's (`exporter.rs`).
pub fn render(app: &std::sync::Arc<App>) -> String {
    let mut out = Out {
        text: String::with_capacity(16 * 1024),
    };
    process(&mut out, app);
    pools(&mut out, app);
    stats(&mut out, app);
    databases(&mut out, app);
    lists(&mut out, app);
    histograms(&mut out, app);
    super::hosts::render(&mut out, app);
    super::exporter::render(&mut out, app);
    out.text
}
