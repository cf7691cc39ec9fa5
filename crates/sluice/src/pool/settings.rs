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
    /// query_timeout, idle_transaction_timeout, transaction_timeout, client_idle_timeout.
    pub relay: RelayTimeouts,
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
    /// route_reads of the [databases] entry (off unless the entry has failover hosts and the
    /// pool mode is transaction: see `client/route.rs`).
    pub route_reads: sluice_config::RouteReads,
    /// The login user's auth_file secret when the pool was configured. The server login may use a
    /// better credential learned at client login (a verified cleartext password); reload keeps that
    /// credential unless the auth_file entry itself changed.
    pub listed_secret: Option<sluice_protocol::StoredSecret>,
    /// The session-state knobs the relay needs per transaction, copied from the global config
    /// so that a transaction reads one settings snapshot (reload replaces them with the rest).
    pub session: SessionKnobs,
}

/// Timeouts that apply while linked.
#[derive(Debug, Clone, Copy, Default)]
pub struct RelayTimeouts {
    pub query_timeout: Option<Duration>,
    pub idle_transaction_timeout: Option<Duration>,
    pub transaction_timeout: Option<Duration>,
    /// Only while idle between transactions in session mode (in other modes the client is unlinked then).
    pub client_idle_timeout: Option<Duration>,
}

/// `max_prepared_statements` and `[sluice] pin_session_state` / `max_pinned_clients`.
#[derive(Debug, Clone, Copy)]
pub struct SessionKnobs {
    /// 0 = prepared statements are passed through unchanged.
    pub max_prepared: usize,
    pub pin_session_state: bool,
    /// 0 = unlimited.
    pub max_pinned_clients: usize,
    /// disable_pqexec: simple Query messages end the client ("PQexec disallowed").
    pub refuse_simple_query: bool,
}

/// A caller's snapshot of its pool's settings, refreshed only when a reload replaced them
/// (`Pool::refresh_settings`): one atomic load per request instead of an `ArcSwap` load and a
/// reference-count round trip on a line every client of the pool shares, at each use.
pub struct SettingsSnapshot {
    pub(super) version: u64,
    pub(super) current: Arc<PoolSettings>,
}

impl std::ops::Deref for SettingsSnapshot {
    type Target = Arc<PoolSettings>;
    fn deref(&self) -> &Arc<PoolSettings> {
        &self.current
    }
}

impl PoolSettings {
    pub fn reset_query(&self) -> Option<&str> {
        self.reset_query.as_deref().filter(|q| !q.trim().is_empty())
    }
}
