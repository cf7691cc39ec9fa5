//! From config to pools (config → pool targets): which [databases] entry a client's database name
//! means, and the one constructor of a (database, user) pool's effective settings, with user >
//! database > global precedence; plus the listener's TCP tuning. The pool mechanism (`pool/`)
//! only consumes `PoolSettings`.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Config, DatabaseEntry, ServerCheckQuery};
use sluice_protocol::StoredSecret;

use crate::net::socket::tcp_tuning;
use crate::pool::rules::{PoolLimits, ServerTimeouts};
use crate::pool::{PoolSettings, RelayTimeouts, SessionKnobs};
use crate::server::connect::ConnectOptions;
use crate::server::log::ServerLog;
use crate::server::target::FailoverSettings;
use crate::server::{ServerAddr, ServerTarget};
use crate::tls::ServerTls;

/// `name` is not in [databases] but the `*` entry makes it (an auto-database, freed after
/// autodb_idle_timeout unused).
pub fn is_auto_database(cfg: &Config, name: &str) -> bool {
    cfg.fallback.is_some() && cfg.database(name).is_none()
}

/// Neither in [databases] nor made by a `*` entry: its client is labelled `(nodb)/user` in the
/// log, as by PgBouncer.
pub fn is_unknown_database(cfg: &Config, name: &str) -> bool {
    cfg.fallback.is_none() && cfg.database(name).is_none()
}

/// The db entry for `name`: an explicit one (borrowed: every login looks one up), or one made from
/// the `*` fallback (auto-database).
pub fn find_database<'c>(cfg: &'c Config, name: &str) -> Option<FoundDb<'c>> {
    match cfg.database(name) {
        Some(db) => Some(FoundDb::Listed(db)),
        None => cfg
            .fallback
            .as_ref()
            .map(|f| FoundDb::Auto(Box::new(f.instantiate_auto(name)))),
    }
}

/// A [databases] entry as `find_database` found it: 16 bytes wherever it is kept (a login in
/// flight keeps one across its awaits; a `Cow` would hold a whole entry, ~400 bytes, inline).
#[derive(Debug)]
pub enum FoundDb<'c> {
    /// Listed in [databases].
    Listed(&'c DatabaseEntry),
    /// Made from the `*` entry.
    Auto(Box<DatabaseEntry>),
}

impl FoundDb<'_> {
    pub fn into_owned(self) -> DatabaseEntry {
        match self {
            FoundDb::Listed(db) => db.clone(),
            FoundDb::Auto(db) => *db,
        }
    }
}

impl std::ops::Deref for FoundDb<'_> {
    type Target = DatabaseEntry;

    fn deref(&self) -> &DatabaseEntry {
        match self {
            FoundDb::Listed(db) => db,
            FoundDb::Auto(db) => db,
        }
    }
}

/// max_db_client_connections of a database: its [databases] value, or the global one where that
/// is unset or 0 (PgBouncer reads 0 there as "not set", not as "no limit"; SHOW DATABASES too).
pub fn db_client_limit(cfg: &Config, db: &DatabaseEntry) -> u32 {
    db.max_db_client_connections
        .filter(|&n| n > 0)
        .unwrap_or(cfg.settings.max_db_client_connections)
}

/// max_user_client_connections of a login user, as `db_client_limit` (SHOW USERS too).
pub fn user_client_limit(cfg: &Config, user: &str) -> u32 {
    cfg.user(user)
        .and_then(|u| u.max_user_client_connections)
        .filter(|&n| n > 0)
        .unwrap_or(cfg.settings.max_user_client_connections)
}

/// Whole seconds from [users]/[databases] overrides; 0 means "no limit" like the global keys.
fn secs(v: u32) -> Option<Duration> {
    (v > 0).then(|| Duration::from_secs(v.into()))
}

/// The server login for a pool: address and database from the entry, the forced user (with its
/// password) or the client's user with its auth_file secret.
fn server_target(
    cfg: &Config,
    db: &DatabaseEntry,
    login_user: &str,
    user_secret: Option<StoredSecret>,
) -> ServerTarget {
    let addrs =
        ServerAddr::parse_host_list(db.host.as_deref(), &db.ports, &cfg.settings.unix_socket_dir);
    let secret = match (&db.user, &db.password) {
        (Some(_), Some(pw)) => Some(StoredSecret::parse(pw)),
        _ => user_secret,
    };
    let mut startup = Vec::new();
    for (k, v) in [
        ("client_encoding", &db.client_encoding),
        ("datestyle", &db.datestyle),
        ("timezone", &db.timezone),
        ("application_name", &db.application_name),
    ] {
        if let Some(v) = v {
            startup.push((k.to_string(), v.clone()));
        }
    }
    ServerTarget::new(
        addrs,
        db.dbname.clone().unwrap_or_else(|| db.name.clone()),
        login_user.to_string(),
        secret,
        startup,
        db.connect_query.clone(),
    )
    .with_balance(db.load_balance_hosts.unwrap_or_default())
    .with_failover(
        db.target_session_attrs,
        FailoverSettings {
            failover_timeout: cfg
                .sluice
                .failover_timeout
                .as_duration()
                .unwrap_or_default(),
            check_interval: cfg
                .sluice
                .host_check_interval
                .as_duration()
                .unwrap_or(Duration::from_secs(1)),
            max_lag: cfg.sluice.max_replica_lag,
        },
    )
}

/// Effective settings of the pool (db, login_user): the one place pool settings are built (new
/// pools, reloads, auth_query's pool, a changed auth_query secret). `user_secret`: the login
/// user's secret when the entry forces none; `generation`: the servers' generation, chosen by the
/// caller from the server login it gets to see (a changed login replaces the servers).
pub fn pool_settings(
    cfg: &Config,
    db: &DatabaseEntry,
    login_user: &str,
    user_secret: Option<StoredSecret>,
    tls: Arc<ServerTls>,
    generation: impl FnOnce(&ServerTarget) -> u64,
) -> PoolSettings {
    let target = server_target(cfg, db, login_user, user_secret);
    let generation = generation(&target);
    let g = &cfg.settings;
    let u = cfg.user(login_user);
    let pool_size = u
        .and_then(|u| u.pool_size)
        .or(db.pool_size)
        .unwrap_or(g.default_pool_size);
    let reserve = u
        .and_then(|u| u.reserve_pool_size)
        .or(db.reserve_pool_size)
        .unwrap_or(g.reserve_pool_size);
    let mode = u
        .and_then(|u| u.pool_mode)
        .or(db.pool_mode)
        .unwrap_or(g.pool_mode);
    let lifetime = match db.server_lifetime {
        Some(s) => Some(Duration::from_secs(s.into())),
        None => Some(g.server_lifetime.as_duration().unwrap_or(Duration::ZERO)),
    };
    // A [users] timeout overrides the global one; 0 there means "not set", as in PgBouncer
    // (the global value applies), not "no limit".
    let user_override = |f: fn(&sluice_config::UserEntry) -> Option<u32>,
                         global: Option<Duration>| {
        match u.and_then(f).filter(|&v| v > 0) {
            Some(v) => secs(v),
            None => global,
        }
    };
    let query_wait_timeout = match u
        .and_then(|u| u.query_wait_timeout)
        .or(db.query_wait_timeout)
    {
        Some(v) => secs(v),
        None => g.query_wait_timeout.as_duration(),
    };
    let route_reads = match (mode, &target.failover) {
        (sluice_config::PoolMode::Transaction, Some(_)) => db.route_reads.unwrap_or_default(),
        _ => sluice_config::RouteReads::Off,
    };
    PoolSettings {
        mode,
        limits: PoolLimits {
            pool_size,
            min_pool_size: db.min_pool_size.unwrap_or(g.min_pool_size),
            reserve_pool_size: reserve,
            reserve_pool_timeout: g
                .reserve_pool_timeout
                .as_duration()
                .unwrap_or(Duration::ZERO),
        },
        timeouts: ServerTimeouts {
            lifetime,
            idle_timeout: g.server_idle_timeout.as_duration(),
        },
        check_delay: g.server_check_delay.as_duration().unwrap_or(Duration::ZERO),
        check_query: match &g.server_check_query {
            ServerCheckQuery::Disabled => None,
            ServerCheckQuery::EmptyQuery => Some(String::new()),
            ServerCheckQuery::Query(q) => Some(q.clone()),
        },
        reset_query: Some(g.server_reset_query.clone()).filter(|q| !q.trim().is_empty()),
        reset_always: g.server_reset_query_always,
        query_wait_timeout,
        relay: RelayTimeouts {
            query_timeout: user_override(|u| u.query_timeout, g.query_timeout.as_duration()),
            idle_transaction_timeout: user_override(
                |u| u.idle_transaction_timeout,
                g.idle_transaction_timeout.as_duration(),
            ),
            client_idle_timeout: user_override(
                |u| u.client_idle_timeout,
                g.client_idle_timeout.as_duration(),
            ),
            transaction_timeout: user_override(
                |u| u.transaction_timeout,
                g.transaction_timeout.as_duration(),
            ),
        },
        login_retry: g.server_login_retry.as_duration().unwrap_or(Duration::ZERO),
        round_robin: g.server_round_robin,
        // 0 in [databases] / [users] means "not set" (PgBouncer): the global value applies.
        max_db_connections: db
            .max_db_connections
            .filter(|&n| n != 0)
            .unwrap_or(g.max_db_connections) as usize,
        max_user_connections: u
            .and_then(|u| u.max_user_connections)
            .filter(|&n| n != 0)
            .unwrap_or(g.max_user_connections) as usize,
        connect: ConnectOptions {
            connect_timeout: g
                .server_connect_timeout
                .as_duration()
                .unwrap_or(Duration::from_secs(24 * 3600)),
            tcp: tcp_tuning(cfg),
            max_packet_size: g.max_packet_size.0 as usize,
            tls,
            dns_ttl: crate::net::dns::DnsTtl {
                found: g.dns_max_ttl.as_duration().unwrap_or_default(),
                failed: g.dns_nxdomain_ttl.as_duration().unwrap_or_default(),
            },
            log: ServerLog {
                pool: format!("{}/{login_user}", db.name).into(),
                connections: g.log_connections,
                disconnections: g.log_disconnections,
            },
            login: crate::server::login_machine::LoginRules {
                max_iterations: cfg.sluice.server_scram_max_iterations,
                require_auth: cfg.sluice.server_require_auth.clone(),
            },
        },
        target: Arc::new(target),
        generation,
        forced_user: db.user.is_some(),
        // Routing needs the checker's host roles and keeps a server per transaction only in
        // transaction mode (session mode keeps one server; statement mode is not routed).
        route_reads,
        listed_secret: None,
        session: SessionKnobs {
            max_prepared: g.max_prepared_statements as usize,
            pin_session_state: cfg.sluice.pin_session_state,
            max_pinned_clients: cfg.sluice.max_pinned_clients as usize,
            refuse_simple_query: g.disable_pqexec,
        },
    }
}
