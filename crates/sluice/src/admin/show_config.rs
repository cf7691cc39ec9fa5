//! SHOW HELP, CONFIG, MEM, VERSION, DNS_HOSTS and DNS_ZONES.

use std::mem::size_of;
use std::sync::Arc;

use sluice_config::{SettingDef, PGBOUNCER_SETTINGS, SLUICE_SETTINGS};

use super::result::{num, text, yes_no, Col, ResultSet};
use super::PGBOUNCER_COMPAT;
use crate::app::App;
use crate::client::registry::ClientEntry;
use crate::conn::ClientConn;
use crate::pool::servers::ServerRecord;
use crate::pool::Pool;
use crate::server::ServerConn;

pub const HELP: &str = "Console usage
\tSHOW HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|VERSION
\tSHOW PEERS|PEER_POOLS
\tSHOW FDS|SOCKETS|ACTIVE_SOCKETS|LISTS|MEM|STATE
\tSHOW DNS_HOSTS|DNS_ZONES
\tSHOW STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS
\tSET key = arg
\tRELOAD
\tPAUSE [<db>]
\tRESUME [<db>]
\tDISABLE <db>
\tENABLE <db>
\tRECONNECT [<db>]
\tKILL [<db>]
\tKILL_CLIENT <client_id>
\tSUSPEND
\tSHUTDOWN
\tSHUTDOWN WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS
\tWAIT_CLOSE [<db>]";

pub const VERSION_COLUMNS: &[(&str, Col)] = &[("version", Col::Text)];

/// The PgBouncer release whose console this is comes first, so tools that read the version to pick
/// a column layout pick the right one; Sluice's own version follows.
pub fn version_string() -> String {
    format!(
        "PgBouncer {PGBOUNCER_COMPAT} (Sluice {})",
        env!("CARGO_PKG_VERSION")
    )
}

pub fn version() -> ResultSet {
    let mut rs = ResultSet::new(VERSION_COLUMNS);
    rs.push(vec![text(version_string())]);
    rs
}

pub const CONFIG_COLUMNS: &[(&str, Col)] = &[
    ("key", Col::Text),
    ("value", Col::Text),
    ("default", Col::Text),
    ("changeable", Col::Text),
];

/// PgBouncer's SHOW CONFIG order: its alphabetical table, except pool_idle_timeout after pool_mode.
fn pgbouncer_order() -> Vec<&'static SettingDef> {
    let mut defs: Vec<&SettingDef> = PGBOUNCER_SETTINGS.iter().collect();
    if let Some(i) = defs.iter().position(|d| d.name == "pool_idle_timeout") {
        let d = defs.remove(i);
        let at = defs
            .iter()
            .position(|d| d.name == "pool_mode")
            .map_or(defs.len(), |p| p + 1);
        defs.insert(at, d);
    }
    defs
}

pub fn config(app: &Arc<App>) -> ResultSet {
    let cfg = app.config();
    let mut rs = ResultSet::new(CONFIG_COLUMNS);
    for d in pgbouncer_order() {
        rs.push(vec![
            text(d.name),
            text(cfg.settings.get(d.name).unwrap_or_default()),
            text(d.default),
            yes_no(d.reloadable),
        ]);
    }
    // Sluice's own [sluice] keys follow PgBouncer's.
    for d in SLUICE_SETTINGS {
        rs.push(vec![
            text(d.name),
            text(cfg.sluice.get(d.name).unwrap_or_default()),
            text(d.default),
            yes_no(d.reloadable),
        ]);
    }
    rs
}

pub const MEM_COLUMNS: &[(&str, Col)] = &[
    ("name", Col::Text),
    ("size", Col::Int4),
    ("used", Col::Int4),
    ("free", Col::Int4),
    ("memtotal", Col::Int4),
];

/// Sluice has no slab allocator: objects are allocated per connection and freed with it. Each row is
/// one of its own structures: `size` is the bytes of one object (`size_of`, buffers excluded), `used`
/// how many live now, `free` always 0 (no free lists), `memtotal` = size × used.
pub fn mem(app: &Arc<App>) -> ResultSet {
    let cfg = app.config();
    let pools = app.pools.all();
    let servers: usize = pools.iter().map(|p| p.servers_book.all().len()).sum();
    let rows = [
        (
            "user_cache",
            size_of::<sluice_config::UserEntry>(),
            cfg.users.len(),
        ),
        (
            "db_cache",
            size_of::<sluice_config::DatabaseEntry>(),
            cfg.databases.len(),
        ),
        ("pool_cache", size_of::<Pool>(), pools.len()),
        (
            "server_cache",
            size_of::<ServerConn>() + size_of::<ServerRecord>(),
            servers,
        ),
        (
            "client_cache",
            size_of::<ClientConn>() + size_of::<ClientEntry>(),
            app.registry.all().len(),
        ),
    ];
    let mut rs = ResultSet::new(MEM_COLUMNS);
    for (name, size, used) in rows {
        rs.push(vec![
            text(name),
            num(size),
            num(used),
            num(0),
            num(size * used),
        ]);
    }
    rs
}

pub const DNS_HOSTS_COLUMNS: &[(&str, Col)] = &[
    ("hostname", Col::Text),
    ("ttl", Col::Int8),
    ("addrs", Col::Text),
];

pub const DNS_ZONES_COLUMNS: &[(&str, Col)] = &[
    ("zonename", Col::Text),
    ("serial", Col::Int8),
    ("count", Col::Int4),
];

/// The server host names the connector keeps resolved (`net/dns.rs`), as PgBouncer lists its
/// cache: name, whole seconds until the next lookup, the addresses (`ip:0`, comma-separated).
pub fn dns_hosts(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(DNS_HOSTS_COLUMNS);
    for h in app.pools.dns().map(|d| d.hosts()).unwrap_or_default() {
        rs.push(vec![text(h.hostname), num(h.ttl), text(h.addrs)]);
    }
    rs
}

/// No DNS zones are watched (dns_zone_check_period is not implemented): always empty.
pub fn dns_zones() -> ResultSet {
    ResultSet::new(DNS_ZONES_COLUMNS)
}

pub const ADVICE_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("user", Col::Text),
    ("rule", Col::Text),
    ("evidence", Col::Text),
    ("change", Col::Text),
];

/// SHOW ADVICE: the pool advisor's findings (`advice`), one row each.
pub fn advice(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(ADVICE_COLUMNS);
    for f in crate::advice::findings(app) {
        rs.push(vec![
            text(f.database),
            text(f.user),
            text(f.rule),
            text(f.evidence),
            text(f.change),
        ]);
    }
    rs
}
