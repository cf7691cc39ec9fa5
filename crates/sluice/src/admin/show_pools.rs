//! SHOW POOLS, DATABASES, USERS, PEERS, PEER_POOLS, LISTS and STATE. The row builders are shared
//! with the Prometheus endpoint so both always report the same figures.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Config, DatabaseEntry, SettingValue};

use super::result::{null, num, text, yes_no, Col, ResultSet};
use super::{ADMIN_DB, ADMIN_USER};
use crate::app::App;
use crate::client::registry::ClientState;
use crate::targets;

/// One SHOW POOLS row.
#[derive(Debug, Clone)]
pub struct PoolRow {
    pub database: String,
    pub user: String,
    pub cl_active: usize,
    pub cl_waiting: usize,
    pub sv_active: usize,
    pub sv_idle: usize,
    pub sv_used: usize,
    pub sv_tested: usize,
    pub sv_being_canceled: usize,
    pub sv_login: usize,
    /// Age of the oldest waiting client.
    pub maxwait: Duration,
    pub pool_mode: String,
    pub load_balance_hosts: Option<String>,
    pub paused: bool,
}

fn lb_hosts(db: Option<&DatabaseEntry>) -> Option<String> {
    let db = db?;
    db.host
        .as_deref()
        .filter(|h| h.contains(','))
        .map(|_| db.load_balance_hosts.unwrap_or_default().render())
}

pub fn pool_rows(app: &App) -> Vec<PoolRow> {
    let cfg = app.config();
    let mut rows = vec![PoolRow {
        database: ADMIN_DB.into(),
        user: ADMIN_USER.into(),
        cl_active: app.admin_clients.load(Ordering::Relaxed),
        cl_waiting: 0,
        sv_active: 0,
        sv_idle: 0,
        sv_used: 0,
        sv_tested: 0,
        sv_being_canceled: 0,
        sv_login: 0,
        maxwait: Duration::ZERO,
        pool_mode: "statement".into(),
        load_balance_hosts: None,
        paused: false,
    }];
    for p in app.pools.all() {
        let c = p.counts();
        let db = targets::find_database(&cfg, &p.key.database);
        rows.push(PoolRow {
            database: p.key.database.clone(),
            user: p.key.user.clone(),
            cl_active: c.clients.saturating_sub(c.waiting),
            cl_waiting: c.waiting,
            sv_active: c.active.saturating_sub(c.tested + c.being_canceled),
            sv_being_canceled: c.being_canceled,
            sv_idle: c.idle,
            sv_used: c.used,
            sv_tested: c.tested,
            sv_login: c.connecting,
            maxwait: c.max_wait,
            pool_mode: p.settings().mode.render(),
            load_balance_hosts: lb_hosts(db.as_deref()),
            paused: p.is_paused(),
        });
    }
    // By database, then user, the console's among them, as PgBouncer lists its pools.
    rows.sort_by(|a, b| (&a.database, &a.user).cmp(&(&b.database, &b.user)));
    rows
}

const I: Col = Col::Int4;

pub const POOLS_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("user", Col::Text),
    ("cl_active", I),
    ("cl_waiting", I),
    ("cl_active_cancel_req", I),
    ("cl_waiting_cancel_req", I),
    ("sv_active", I),
    ("sv_active_cancel", I),
    ("sv_being_canceled", I),
    ("sv_idle", I),
    ("sv_used", I),
    ("sv_tested", I),
    ("sv_login", I),
    ("maxwait", I),
    ("maxwait_us", I),
    ("pool_mode", Col::Text),
    ("load_balance_hosts", Col::Text),
];

pub fn pools(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(POOLS_COLUMNS);
    for r in pool_rows(app) {
        // Cancel requests are forwarded on their own short-lived connections outside the pools,
        // so the cl_*_cancel_req and sv_active_cancel states are always empty in Sluice;
        // sv_being_canceled counts released servers held until a cancel has landed.
        rs.push(vec![
            text(r.database),
            text(r.user),
            num(r.cl_active),
            num(r.cl_waiting),
            num(0),
            num(0),
            num(r.sv_active),
            num(0),
            num(r.sv_being_canceled),
            num(r.sv_idle),
            num(r.sv_used),
            num(r.sv_tested),
            num(r.sv_login),
            num(r.maxwait.as_secs()),
            num(r.maxwait.subsec_micros()),
            text(r.pool_mode),
            r.load_balance_hosts,
        ]);
    }
    rs
}

/// One SHOW DATABASES row (effective values: database > global).
#[derive(Debug, Clone)]
pub struct DatabaseRow {
    pub name: String,
    pub host: Option<String>,
    pub port: u16,
    pub database: String,
    pub force_user: Option<String>,
    pub pool_size: u32,
    pub min_pool_size: u32,
    pub reserve_pool_size: u32,
    pub server_lifetime: u32,
    pub pool_mode: Option<String>,
    pub load_balance_hosts: Option<String>,
    pub max_connections: u32,
    pub current_connections: usize,
    pub max_client_connections: u32,
    pub current_client_connections: usize,
    pub paused: bool,
    pub disabled: bool,
}

/// Configured databases, plus those instantiated from the `*` entry that have pools.
fn database_entries(app: &App, cfg: &Config) -> Vec<DatabaseEntry> {
    let mut names: BTreeSet<String> = cfg.databases.iter().map(|d| d.name.clone()).collect();
    names.extend(app.pools.all().iter().map(|p| p.key.database.clone()));
    names
        .iter()
        // An auto-database without clients and servers is left out until used again (PgBouncer
        // moves it to its idle list); its pools stay in SHOW POOLS until autodb_idle_timeout.
        .filter(|n| !app.pools.is_idle_auto(n))
        .filter_map(|n| targets::find_database(cfg, n).map(targets::FoundDb::into_owned))
        .collect()
}

pub fn database_rows(app: &App) -> Vec<DatabaseRow> {
    let cfg = app.config();
    let s = &cfg.settings;
    let mut rows = vec![DatabaseRow {
        name: ADMIN_DB.into(),
        host: None,
        port: s.listen_port,
        database: ADMIN_DB.into(),
        force_user: Some(ADMIN_USER.into()),
        // The console has no server connections at all; PgBouncer 1.25.2's row shows these.
        pool_size: 2,
        min_pool_size: 0,
        reserve_pool_size: 0,
        server_lifetime: s.server_lifetime.0.round() as u32,
        pool_mode: Some("statement".into()),
        load_balance_hosts: None,
        max_connections: 0,
        current_connections: 0,
        // Console clients count as this database's, under the global limit.
        max_client_connections: s.max_db_client_connections,
        current_client_connections: app.client_counts.database(ADMIN_DB),
        paused: false,
        disabled: false,
    }];
    for db in database_entries(app, &cfg) {
        rows.push(DatabaseRow {
            host: db.host.clone(),
            port: db.port.unwrap_or(5432),
            database: db.dbname.clone().unwrap_or_else(|| db.name.clone()),
            force_user: db.user.clone(),
            pool_size: db.pool_size.unwrap_or(s.default_pool_size),
            min_pool_size: db.min_pool_size.unwrap_or(s.min_pool_size),
            reserve_pool_size: db.reserve_pool_size.unwrap_or(s.reserve_pool_size),
            server_lifetime: db
                .server_lifetime
                .unwrap_or(s.server_lifetime.0.round() as u32),
            pool_mode: db.pool_mode.map(|m| m.render()),
            load_balance_hosts: lb_hosts(Some(&db)),
            max_connections: db
                .max_db_connections
                .filter(|&n| n != 0)
                .unwrap_or(s.max_db_connections),
            current_connections: app.pools.db_server_count(&db.name),
            max_client_connections: targets::db_client_limit(&cfg, &db),
            current_client_connections: app.client_counts.database(&db.name),
            paused: app.control.db_paused(&db.name),
            disabled: app.control.db_disabled(&db.name),
            name: db.name,
        });
    }
    // By name, the console's among them, as PgBouncer lists its databases.
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

pub const DATABASES_COLUMNS: &[(&str, Col)] = &[
    ("name", Col::Text),
    ("host", Col::Text),
    ("port", I),
    ("database", Col::Text),
    ("force_user", Col::Text),
    ("pool_size", I),
    ("min_pool_size", I),
    ("reserve_pool_size", I),
    ("server_lifetime", I),
    ("pool_mode", Col::Text),
    ("load_balance_hosts", Col::Text),
    ("max_connections", I),
    ("current_connections", I),
    ("max_client_connections", I),
    ("current_client_connections", I),
    ("paused", I),
    ("disabled", I),
];

pub fn databases(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(DATABASES_COLUMNS);
    for r in database_rows(app) {
        rs.push(vec![
            text(r.name),
            r.host,
            num(r.port),
            text(r.database),
            r.force_user,
            num(r.pool_size),
            num(r.min_pool_size),
            num(r.reserve_pool_size),
            num(r.server_lifetime),
            r.pool_mode,
            r.load_balance_hosts,
            num(r.max_connections),
            num(r.current_connections),
            num(r.max_client_connections),
            num(r.current_client_connections),
            num(u8::from(r.paused)),
            num(u8::from(r.disabled)),
        ]);
    }
    rs
}

/// Users Sluice has objects for: [users] entries, pool users, console users.
fn user_names(app: &App, cfg: &Config) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = cfg.users.iter().map(|u| u.name.clone()).collect();
    names.extend(app.credentials.names());
    names.extend(app.pools.all().iter().map(|p| p.key.user.clone()));
    names.extend(cfg.settings.admin_users.iter().cloned());
    names.extend(cfg.settings.stats_users.iter().cloned());
    names.insert(ADMIN_USER.to_string());
    names
}

pub const USERS_COLUMNS: &[(&str, Col)] = &[
    ("name", Col::Text),
    ("pool_size", Col::Text),
    ("reserve_pool_size", Col::Text),
    ("pool_mode", Col::Text),
    ("max_user_connections", I),
    ("current_connections", I),
    ("max_user_client_connections", I),
    ("current_client_connections", I),
];

pub fn users(app: &Arc<App>) -> ResultSet {
    let cfg = app.config();
    let s = &cfg.settings;
    let pools = app.pools.all();
    let mut rs = ResultSet::new(USERS_COLUMNS);
    for name in user_names(app, &cfg) {
        let u = cfg.user(&name);
        // Servers by the user pools log in as; clients by the user they logged in as.
        let servers: usize = pools
            .iter()
            .filter(|p| p.key.user == name)
            .map(|p| p.counts().total)
            .sum();
        // Console clients included: they are counted under the user they logged in as.
        let clients = app.client_counts.user(&name);
        let opt = |v: Option<u32>| text(v.map(|n| format!("{n:9}")).unwrap_or_default());
        rs.push(vec![
            text(name.clone()),
            opt(u.and_then(|u| u.pool_size)),
            opt(u.and_then(|u| u.reserve_pool_size)),
            u.and_then(|u| u.pool_mode).map(|m| m.render()),
            num(u
                .and_then(|u| u.max_user_connections)
                .filter(|&n| n != 0)
                .unwrap_or(s.max_user_connections)),
            num(servers),
            num(targets::user_client_limit(&cfg, &name)),
            num(clients),
        ]);
    }
    rs
}

pub const PEERS_COLUMNS: &[(&str, Col)] = &[
    ("peer_id", I),
    ("host", Col::Text),
    ("port", I),
    ("pool_size", I),
];

pub fn peers(app: &Arc<App>) -> ResultSet {
    let cfg = app.config();
    let mut rs = ResultSet::new(PEERS_COLUMNS);
    for p in &cfg.peers {
        rs.push(vec![
            num(p.id),
            text(p.host.clone()),
            num(p.port),
            num(p.pool_size.unwrap_or(cfg.settings.default_pool_size)),
        ]);
    }
    rs
}

pub const PEER_POOLS_COLUMNS: &[(&str, Col)] = &[
    ("peer_id", I),
    ("cl_active_cancel_req", I),
    ("cl_waiting_cancel_req", I),
    ("sv_active_cancel", I),
    ("sv_login", I),
];

/// One row per peer a cancel was forwarded to (`peers::PeerPools`).
pub fn peer_pools(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(PEER_POOLS_COLUMNS);
    for (id, p) in app.peer_pools.all() {
        let active = p.active.load(std::sync::atomic::Ordering::Relaxed);
        let waiting = p.waiting.load(std::sync::atomic::Ordering::Relaxed);
        rs.push(vec![
            num(id),
            num(active),
            num(waiting),
            num(active),
            num(0),
        ]);
    }
    rs
}

/// SHOW LISTS items. Sluice has no free lists (objects are allocated per connection and freed
/// when it ends), so the free_* items are 0; dns_names and dns_queries are the connector's DNS
/// cache (`net/dns.rs`); dns_zones is 0 (no zones are watched: dns_zone_check_period is not
/// implemented), dns_pending 0 as PgBouncer 1.25 shows it.
pub fn list_items(app: &App) -> Vec<(&'static str, usize)> {
    let cfg = app.config();
    let pools = app.pools.all();
    let clients = app.registry.all();
    let login = clients
        .iter()
        .filter(|c| c.state() == ClientState::Login)
        .count();
    let servers: usize = pools.iter().map(|p| p.counts().total).sum();
    vec![
        ("databases", database_entries(app, &cfg).len() + 1),
        ("users", user_names(app, &cfg).len()),
        ("peers", cfg.peers.len()),
        ("pools", pools.len() + 1),
        ("peer_pools", app.peer_pools.all().len()),
        ("free_clients", 0),
        ("used_clients", clients.len()),
        ("login_clients", login),
        ("free_servers", 0),
        ("used_servers", servers),
        ("dns_names", app.pools.dns().map_or(0, |d| d.names())),
        ("dns_zones", 0),
        ("dns_queries", app.pools.dns().map_or(0, |d| d.queries())),
        ("dns_pending", 0),
    ]
}

pub const LISTS_COLUMNS: &[(&str, Col)] = &[("list", Col::Text), ("items", I)];

pub fn lists(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(LISTS_COLUMNS);
    for (name, n) in list_items(app) {
        rs.push(vec![text(name), num(n)]);
    }
    rs
}

pub const STATE_COLUMNS: &[(&str, Col)] = &[("key", Col::Text), ("value", Col::Text)];

pub fn state(app: &Arc<App>) -> ResultSet {
    let (paused, suspended) = app.control.flags();
    let mut rs = ResultSet::new(STATE_COLUMNS);
    rs.push(vec![text("active"), yes_no(!paused && !suspended)]);
    rs.push(vec![text("paused"), yes_no(paused)]);
    rs.push(vec![text("suspended"), yes_no(suspended)]);
    let _ = null();
    rs
}
