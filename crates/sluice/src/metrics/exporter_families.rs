//! The prometheus-community pgbouncer_exporter's tables: which SHOW column becomes which family
//! (name, type, unit, help), as its `collector.go` declares them. The current tables follow v0.12.1
//! (every release since v0.11.0 reads SHOW STATS_TOTALS into `pgbouncer_stats_totals_*`); the
//! `V0_10` ones keep the names of v0.10.x and earlier (SHOW STATS into `pgbouncer_stats_*`) for
//! dashboards not yet moved (`[sluice] metrics_exporter_names = v0.10`). The e2e test
//! `every_pgbouncer_exporter_family_is_served` checks the current tables against the exporter's
//! own source, fetched through the Go module proxy, and `pgbouncer_exporter_scrapes_sluice` against
//! what the exporter itself serves when it scrapes Sluice.

/// One column of a SHOW, as one family.
pub(super) struct Column {
    pub column: &'static str,
    pub name: &'static str,
    pub counter: bool,
    /// The exporter's unit conversion (µs columns become seconds).
    pub factor: f64,
    pub help: &'static str,
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

pub(super) const DATABASES_LABELS: &[&str] = &[
    "name",
    "host",
    "port",
    "database",
    "force_user",
    "pool_mode",
];

const POOL_SIZE: &str = "Maximum number of server connections";
const RESERVE_POOL: &str = "Maximum number of additional connections for this database";
const MAX_CONNECTIONS: &str = "Maximum number of allowed connections for this database";
const CURRENT_CONNECTIONS: &str = "Current number of connections for this database";
const PAUSED: &str = "1 if this database is currently paused, else 0";
const DISABLED: &str = "1 if this database is currently disabled, else 0";

/// SHOW DATABASES, v0.12.1: `reserve_pool_size` (PgBouncer 1.24 and later; the exporter reads
/// `reserve_pool` too, which Sluice's console, like PgBouncer 1.25's, does not have).
pub(super) const DATABASES: &[Column] = &[
    gauge("pool_size", "pgbouncer_databases_pool_size", POOL_SIZE),
    gauge(
        "reserve_pool_size",
        "pgbouncer_databases_reserve_pool",
        RESERVE_POOL,
    ),
    gauge(
        "max_connections",
        "pgbouncer_databases_max_connections",
        MAX_CONNECTIONS,
    ),
    gauge(
        "current_connections",
        "pgbouncer_databases_current_connections",
        CURRENT_CONNECTIONS,
    ),
    gauge("paused", "pgbouncer_databases_paused", PAUSED),
    gauge("disabled", "pgbouncer_databases_disabled", DISABLED),
];

/// SHOW DATABASES, v0.10.x: `reserve_pool` only, so no reserve-pool family against PgBouncer 1.24+.
pub(super) const DATABASES_V0_10: &[Column] = &[
    gauge("pool_size", "pgbouncer_databases_pool_size", POOL_SIZE),
    gauge(
        "reserve_pool",
        "pgbouncer_databases_reserve_pool",
        RESERVE_POOL,
    ),
    gauge(
        "max_connections",
        "pgbouncer_databases_max_connections",
        MAX_CONNECTIONS,
    ),
    gauge(
        "current_connections",
        "pgbouncer_databases_current_connections",
        CURRENT_CONNECTIONS,
    ),
    gauge("paused", "pgbouncer_databases_paused", PAUSED),
    gauge("disabled", "pgbouncer_databases_disabled", DISABLED),
];

pub(super) const STATS_LABELS: &[&str] = &["database"];

/// SHOW STATS_TOTALS, v0.12.1. `requests` is a column PgBouncer 1.25 (and Sluice) do not have, so
/// `pgbouncer_stats_totals_queries_total` is absent, as from the exporter against PgBouncer 1.25.
#[rustfmt::skip]
pub(super) const STATS_TOTALS: &[Column] = &[
    counter("query_count", "pgbouncer_stats_totals_queries_pooled_total", 1.0, "Total number of SQL queries pooled"),
    counter("query_time", "pgbouncer_stats_totals_queries_duration_seconds_total", US, "Total number of seconds spent by pgbouncer when actively connected to PostgreSQL, executing queries"),
    counter("bytes_received", "pgbouncer_stats_totals_received_bytes_total", 1.0, "Total volume in bytes of network traffic received by pgbouncer, shown as bytes"),
    counter("requests", "pgbouncer_stats_totals_queries_total", 1.0, "Total number of SQL requests pooled by pgbouncer, shown as requests"),
    counter("bytes_sent", "pgbouncer_stats_totals_sent_bytes_total", 1.0, "Total volume in bytes of network traffic sent by pgbouncer, shown as bytes"),
    counter("wait_time", "pgbouncer_stats_totals_client_wait_seconds_total", US, "Time spent by clients waiting for a server in seconds"),
    counter("xact_count", "pgbouncer_stats_totals_sql_transactions_pooled_total", 1.0, "Total number of SQL transactions pooled"),
    counter("xact_time", "pgbouncer_stats_totals_server_in_transaction_seconds_total", US, "Total number of seconds spent by pgbouncer when connected to PostgreSQL in a transaction, either idle in transaction or executing queries"),
    counter("client_parse_count", "pgbouncer_stats_totals_client_parses_total", 1.0, "Total number of prepared statement Parse messages received from clients"),
    counter("server_parse_count", "pgbouncer_stats_totals_server_parses_total", 1.0, "Total number of prepared statement Parse messages sent by pgbouncer to PostgreSQL"),
    counter("bind_count", "pgbouncer_stats_totals_binds_total", 1.0, "Total number of prepared statements readied for execution with a Bind message"),
    counter("server_assignment_count", "pgbouncer_stats_totals_server_assignments_total", 1.0, "Total number of client connections which have been served since process start"),
];

/// SHOW STATS, v0.10.x (`total_requests` is gone since PgBouncer 1.8: no `..._queries_total`).
#[rustfmt::skip]
pub(super) const STATS_V0_10: &[Column] = &[
    counter("total_query_count", "pgbouncer_stats_queries_pooled_total", 1.0, "Total number of SQL queries pooled"),
    counter("total_query_time", "pgbouncer_stats_queries_duration_seconds_total", US, "Total number of seconds spent by pgbouncer when actively connected to PostgreSQL, executing queries"),
    counter("total_received", "pgbouncer_stats_received_bytes_total", 1.0, "Total volume in bytes of network traffic received by pgbouncer, shown as bytes"),
    counter("total_requests", "pgbouncer_stats_queries_total", 1.0, "Total number of SQL requests pooled by pgbouncer, shown as requests"),
    counter("total_sent", "pgbouncer_stats_sent_bytes_total", 1.0, "Total volume in bytes of network traffic sent by pgbouncer, shown as bytes"),
    counter("total_wait_time", "pgbouncer_stats_client_wait_seconds_total", US, "Time spent by clients waiting for a server in seconds"),
    counter("total_xact_count", "pgbouncer_stats_sql_transactions_pooled_total", 1.0, "Total number of SQL transactions pooled"),
    counter("total_xact_time", "pgbouncer_stats_server_in_transaction_seconds_total", US, "Total number of seconds spent by pgbouncer when connected to PostgreSQL in a transaction, either idle in transaction or executing queries"),
];

pub(super) const POOLS_LABELS: &[&str] = &["database", "user"];

/// SHOW POOLS (the same in both release lines).
#[rustfmt::skip]
pub(super) const POOLS: &[Column] = &[
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

/// SHOW LISTS rows (list name → family), both release lines.
#[rustfmt::skip]
pub(super) const LISTS: &[(&str, &str, &str)] = &[
    ("databases", "pgbouncer_databases", "Count of databases"),
    ("users", "pgbouncer_users", "Count of users"),
    ("pools", "pgbouncer_pools", "Count of pools"),
    ("free_clients", "pgbouncer_free_clients", "Count of free clients"),
    ("used_clients", "pgbouncer_used_clients", "Count of used clients"),
    ("login_clients", "pgbouncer_login_clients", "Count of clients in login state"),
    ("free_servers", "pgbouncer_free_servers", "Count of free servers"),
    ("used_servers", "pgbouncer_used_servers", "Count of used servers"),
    ("dns_names", "pgbouncer_cached_dns_names", "Count of DNS names in the cache"),
    ("dns_zones", "pgbouncer_cached_dns_zones", "Count of DNS zones in the cache"),
    ("dns_queries", "pgbouncer_in_flight_dns_queries", "Count of in-flight DNS queries"),
];

/// SHOW CONFIG keys (key → family), both release lines.
#[rustfmt::skip]
pub(super) const CONFIG: &[(&str, &str, &str)] = &[
    ("max_client_conn", "pgbouncer_config_max_client_connections", "Config maximum number of client connections"),
    ("max_user_connections", "pgbouncer_config_max_user_connections", "Config maximum number of server connections per user"),
];
