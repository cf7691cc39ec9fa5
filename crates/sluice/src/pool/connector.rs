//! How a pool opens servers: the real PostgreSQL connector, replaceable in pool tests.

use std::future::Future;
use std::pin::Pin;
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

/// Connects to real servers over TCP or Unix sockets.
#[derive(Debug, Default)]
pub struct PgConnector;

impl Connector for PgConnector {
    fn connect(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture {
        Box::pin(async move { connect::open(&target, keys.as_ref(), &opts).await })
    }
}
