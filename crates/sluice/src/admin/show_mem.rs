//! SHOW MEM: the sizes and counts of the pooler's own structures.

use std::mem::size_of;
use std::sync::Arc;

use super::result::{num, text, Col, ResultSet};
use crate::app::App;
use crate::client::registry::ClientEntry;
use crate::conn::ClientConn;
use crate::pool::servers::ServerRecord;
use crate::pool::Pool;
use crate::server::ServerConn;

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
