//! A server checked out of a pool: derefs to the connection; release goes through the pool, a drop
//! closes it.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::Pool;
use crate::server::ServerConn;

/// A server checked out of a pool. Dropping it without `Pool::release` closes the connection.
pub struct PooledServer {
    pub(super) conn: Option<Box<ServerConn>>,
    pool: Arc<Pool>,
}

impl PooledServer {
    pub(super) fn new(conn: Box<ServerConn>, pool: Arc<Pool>) -> Self {
        PooledServer {
            conn: Some(conn),
            pool,
        }
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
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

impl Drop for PooledServer {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn);
            self.pool.forget();
        }
    }
}
