//! A server checked out of a pool: derefs to the connection; release goes through the pool
//! (`Pool::release`), a drop closes it (`Pool::discard` also looks at growth again).

use std::ops::{Deref, DerefMut};

use crate::server::ServerConn;

/// A server checked out of a pool. Dropping it without `Pool::release` closes the connection; it
/// holds no reference to its pool, so a hand-out writes no shared reference count.
pub struct PooledServer {
    pub(super) conn: Option<Box<ServerConn>>,
}

impl PooledServer {
    pub(super) fn new(conn: Box<ServerConn>) -> Self {
        PooledServer { conn: Some(conn) }
    }
}

impl Deref for PooledServer {
    type Target = ServerConn;
    fn deref(&self) -> &ServerConn {
        self.conn
            .as_deref()
            .expect("PooledServer used after release")
    }
}

impl DerefMut for PooledServer {
    fn deref_mut(&mut self) -> &mut ServerConn {
        self.conn
            .as_deref_mut()
            .expect("PooledServer used after release")
    }
}
