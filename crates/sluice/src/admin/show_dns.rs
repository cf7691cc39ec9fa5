//! SHOW DNS_HOSTS and DNS_ZONES: the connector's kept host lookups (`net/dns.rs`).

use std::sync::Arc;

use super::result::{num, text, Col, ResultSet};
use crate::app::App;

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
