//! The log lines of a pool's server connections, in PgBouncer's words, which operators and
//! PgBouncer's own test suite grep for: `new connection to server (from <local address>)` under
//! log_connections, `closing because: <reason> (age=<n>s)` under log_disconnections.

use std::sync::Arc;
use std::time::Duration;

use super::{ServerAddr, ServerConn};
use crate::ids::ServerId;

/// Why a server connection closes, as PgBouncer words it.
pub mod reason {
    pub const LIFETIME: &str = "server lifetime over";
    pub const IDLE_TIMEOUT: &str = "server idle timeout";
    pub const EVICTED: &str = "evicted";
    /// Its host left rotation or changed role (failover, lag, a stale primary).
    pub const HOST_OUT: &str = "host out of rotation or changed role";
    /// An idle server whose socket hung up or spoke.
    pub const CRASHED: &str = "server conn crashed?";
    /// An idle server that RELOAD (a changed entry or server TLS) or RECONNECT made stale.
    pub const CONFIG_CHANGED: &str = "database configuration changed";
    /// The same for a server in use, closed when its client lets it go (PgBouncer's word).
    pub const CLOSE_NEEDED: &str = "close_needed";
    /// A client left (or was closed) in the middle of a transaction or a reply: its server is
    /// in an unknown state.
    pub const NOT_READY: &str = "client disconnect while server was not ready";
    /// PAUSE closes the servers of the paused pools.
    pub const PAUSE_MODE: &str = "pause mode";
    /// KILL closes the servers of the killed pools.
    pub const DB_REMOVED: &str = "database removed";
    /// The old process of a takeover closes the idle servers nobody there will use again.
    pub const TAKEOVER: &str = "handed over to the new process";
}

/// How one pool's servers are logged: its name in the lines and the two switches, as of the
/// pool's last settings refresh.
#[derive(Debug, Clone, Default)]
pub struct ServerLog {
    /// `database/user` of the pool.
    pub pool: Arc<str>,
    pub connections: bool,
    pub disconnections: bool,
}

impl ServerLog {
    /// A server connected (before its login, as PgBouncer logs it).
    pub fn connected(&self, conn: &ServerConn) {
        if !self.connections {
            return;
        }
        let from = match conn.stream.tcp().and_then(|s| s.local_addr().ok()) {
            Some(local) => local.to_string(),
            None => "unix".to_string(),
        };
        tracing::info!(
            "S-{}: {}@{} new connection to server (from {from})",
            conn.id,
            self.pool,
            conn.addr
        );
    }

    /// A server that closes (`age`: since its connect started).
    pub fn closing(&self, id: ServerId, addr: &ServerAddr, age: Duration, reason: &str) {
        if !self.disconnections {
            return;
        }
        tracing::info!(
            "S-{id}: {}@{addr} closing because: {reason} (age={}s)",
            self.pool,
            age.as_secs()
        );
    }

    /// The server refused the login: PgBouncer's warning (`server login failed: FATAL <message>`),
    /// logged whatever log_disconnections says.
    pub fn login_refused(&self, id: ServerId, addr: &ServerAddr, severity: &str, message: &str) {
        tracing::warn!(
            "S-{id}: {}@{addr} server login failed: {severity} {message}",
            self.pool
        );
    }

    /// `closing` for a logged-in server.
    pub fn closing_conn(&self, conn: &ServerConn, reason: &str) {
        self.closing(conn.id, &conn.addr, conn.created.elapsed(), reason);
    }
}
