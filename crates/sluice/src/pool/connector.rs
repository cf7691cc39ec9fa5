//! How a pool opens servers: the real PostgreSQL connector, replaceable in pool tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_protocol::ScramKeys;

use crate::error::ServerError;
use crate::server::connect::{self, ConnectOptions};
use crate::server::{ServerConn, ServerTarget};

pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<ServerConn, ServerError>> + Send>>;

pub trait Connector: Send + Sync + 'static {
    fn connect(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture;
}

/// Connects to real servers over TCP or Unix sockets, numbering them (the S-<id> of log lines and
/// SHOW SERVERS) in the order they are opened, process-wide: one connector per `App`.
#[derive(Debug)]
pub struct PgConnector {
    next_id: AtomicU64,
}

impl Default for PgConnector {
    fn default() -> Self {
        PgConnector {
            next_id: AtomicU64::new(1),
        }
    }
}

impl Connector for PgConnector {
    fn connect(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { connect::open(id, &target, keys.as_ref(), &opts).await })
    }
}
