//! SHOW HOSTS (Sluice only): one row per host of the databases whose entry sets
//! target_session_attrs, with its role, whether it is in rotation and why not, its lag and its
//! last check. SHOW POOLS and SHOW SERVERS keep PgBouncer's columns.

use std::time::SystemTime;

use super::result::{null, num, text, Col, ResultSet};
use crate::app::App;
use crate::server::ServerAddr;

pub const HOSTS_COLUMNS: &[(&str, Col)] = &[
    ("database", Col::Text),
    ("host", Col::Text),
    ("port", Col::Int4),
    ("role", Col::Text),
    ("state", Col::Text),
    ("reason", Col::Text),
    ("lag_ms", Col::Int8),
    ("lag_bytes", Col::Int8),
    ("timeline", Col::Int8),
    ("wal_lsn", Col::Text),
    ("checks", Col::Int8),
    ("last_check_ms_ago", Col::Int8),
];

pub fn hosts(app: &App) -> ResultSet {
    let mut rs = ResultSet::new(HOSTS_COLUMNS);
    let Some(book) = app.pools.host_book() else {
        return rs;
    };
    for h in book.all() {
        let v = h.view();
        let (host, port) = match &h.addr {
            ServerAddr::Tcp { host, port } => (host.clone(), num(port)),
            ServerAddr::Unix { path } => (path.display().to_string(), null()),
        };
        let state = match (v.checked, v.healthy) {
            (false, _) => "unchecked",
            (true, true) => "in rotation",
            (true, false) => "out of rotation",
        };
        rs.push(vec![
            text(h.databases().join(",")),
            text(host),
            port,
            text(v.role.as_str()),
            text(state),
            v.out_reason.clone().map_or_else(null, text),
            v.lag_time.map_or_else(null, |d| num(d.as_millis())),
            v.lag_bytes.map_or_else(null, num),
            v.timeline.map_or_else(null, num),
            v.wal_lsn.map_or_else(null, |l| {
                text(format!("{:X}/{:X}", l >> 32, l & 0xffff_ffff))
            }),
            num(v.checks),
            v.last_check.map_or_else(null, |t| {
                num(SystemTime::now()
                    .duration_since(t)
                    .unwrap_or_default()
                    .as_millis())
            }),
        ]);
    }
    rs
}
