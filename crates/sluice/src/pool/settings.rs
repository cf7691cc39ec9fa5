//! The effective settings of one pool (user > database > global precedence already applied),
//! swapped as a whole on reload.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::PoolMode;

use super::rules::{PoolLimits, ServerTimeouts};
use crate::server::connect::ConnectOptions;
use crate::server::ServerTarget;

#[derive(Debug)]
pub struct PoolSettings {
    pub mode: PoolMode,
    pub limits: PoolLimits,
    pub timeouts: ServerTimeouts,
    /// server_check_delay.
    pub check_delay: Duration,
    /// None = checks disabled; Some("") = send an empty query.
    pub check_query: Option<String>,
    /// None or empty = no reset.
    pub reset_query: Option<String>,
    pub reset_always: bool,
    pub query_wait_timeout: Option<Duration>,
    pub query_timeout: Option<Duration>,
    pub idle_transaction_timeout: Option<Duration>,
    pub client_idle_timeout: Option<Duration>,
    pub transaction_timeout: Option<Duration>,
    pub login_retry: Duration,
    /// server_round_robin: hand out idle servers FIFO instead of LIFO.
    pub round_robin: bool,
    /// 0 = unlimited.
    pub max_db_connections: usize,
    pub max_user_connections: usize,
    pub connect: ConnectOptions,
    pub target: Arc<ServerTarget>,
    /// Bumped when the target changes; servers of older generations are closed when released.
    pub generation: u64,
    /// The db entry forces the server user (min_pool_size then applies without clients).
    pub forced_user: bool,
    /// The login user's auth_file secret when the pool was configured. The server login may use a
    /// better credential learned at client login (a verified cleartext password); reload keeps that
    /// credential unless the auth_file entry itself changed.
    pub listed_secret: Option<sluice_protocol::StoredSecret>,
}

impl PoolSettings {
    pub fn reset_query(&self) -> Option<&str> {
        self.reset_query.as_deref().filter(|q| !q.trim().is_empty())
    }
}
