//! A connection to a PostgreSQL server: its socket, read buffer, parameters and identity.

pub mod connect;
pub mod facts;
pub mod log;
pub mod login;
pub mod login_machine;
pub mod params;
pub mod query;
pub mod target;
pub mod welcome;

use tokio::time::Instant;

use bytes::BytesMut;
use sluice_protocol::{CancelKey, TransactionStatus};

use crate::net::Stream;
use crate::pool::counter::ServerSlots;
use crate::prepared::ServerStatements;
use params::ParamMap;
pub use target::{ServerAddr, ServerTarget};

/// One logged-in server connection. It is owned by exactly one place at a time: the pool's idle list,
/// a connect task, or the client task it is linked to.
#[derive(Debug)]
pub struct ServerConn {
    pub id: crate::ids::ServerId,
    pub stream: Stream,
    /// Bytes read from the server and not yet handled.
    pub rbuf: BytesMut,
    /// The server's parameters as last reported by ParameterStatus.
    pub params: ParamMap,
    pub backend_key: CancelKey,
    /// Shared so that linking a client's cancel key to this server does not copy it.
    pub addr: std::sync::Arc<ServerAddr>,
    pub created: Instant,
    /// When it was last released (or logged in).
    pub last_used: Instant,
    /// A client's work ran on it (set when it comes back through `Pool::release`); the pooler's own look at a new server does not count. Until then its
    /// login vouches for it: server_check_query waits until it idled `pool::rules::FRESH_TRUST`
    /// (`pool::rules::check_due`); server_lifetime = 0 ("use once") closes it once served.
    pub served: bool,
    pub status: TransactionStatus,
    /// Config generation of its pool at login; a newer generation means "close when released".
    pub generation: u64,
    /// Pool/database/user slots, released when the connection is dropped.
    pub slots: Option<ServerSlots>,
    /// Protocol-level statements prepared on this connection (transaction/statement mode).
    /// Boxed: most connections (session mode) never use it, and it keeps `ServerConn` small to move.
    pub prepared: Box<ServerStatements>,
    /// A client changed session parameters here (transaction mode); `gucs_owner` is that client,
    /// and `gucs_version` the version of its parameters this server carries
    /// (`SessionTracker::version`).
    pub gucs_dirty: bool,
    pub gucs_owner: Option<crate::ids::ClientId>,
    pub gucs_version: u64,
    /// The id of the client whose Query or Execute ran here last (0: none): the one whose
    /// `nextval()` calls the session's sequence values (`currval()`, `lastval()`) may come from.
    pub seq_owner: u64,
    /// Set when the connection is TLS.
    pub tls: Option<crate::tls::connector::ServerTlsInfo>,
    /// The worker whose IO driver the socket is registered with (see `workers`).
    pub home: u16,
    /// The host's health at connect (databases with failover only): the server closes when next
    /// released once its host left rotation or changed role.
    pub host: Option<crate::hosts::ticket::HostTicket>,
}

impl ServerConn {
    /// `id`: the connection's number, from its pool's connector.
    pub fn new(id: crate::ids::ServerId, stream: Stream, addr: ServerAddr) -> Self {
        let now = Instant::now();
        ServerConn {
            id,
            stream,
            rbuf: BytesMut::with_capacity(8192),
            params: ParamMap::new(),
            backend_key: CancelKey { pid: 0, secret: 0 },
            addr: std::sync::Arc::new(addr),
            created: now,
            last_used: now,
            served: false,
            status: TransactionStatus::Idle,
            generation: 0,
            slots: None,
            prepared: Box::default(),
            gucs_dirty: false,
            gucs_owner: None,
            gucs_version: 0,
            seq_owner: 0,
            tls: None,
            home: crate::workers::current(),
            host: None,
        }
    }

    /// What SHOW SERVERS records of it at login (`ServerBook::track`).
    pub fn seen(&self) -> crate::pool::servers::ServerSeen {
        let (peer_port, local) = match self.stream.tcp() {
            Some(s) => (s.peer_addr().ok().map(|a| a.port()), s.local_addr().ok()),
            None => (None, None),
        };
        crate::pool::servers::ServerSeen {
            id: self.id,
            addr: match &*self.addr {
                ServerAddr::Tcp { host, .. } => host.clone(),
                ServerAddr::Unix { path } => path
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            },
            peer_port: peer_port.or(match &*self.addr {
                ServerAddr::Tcp { port, .. } => Some(*port),
                ServerAddr::Unix { .. } => None,
            }),
            local,
            remote_pid: self.backend_key.pid,
            generation: self.generation,
            tls: self
                .tls
                .as_ref()
                .map(|t| t.description.clone())
                .unwrap_or_default(),
        }
    }

    /// Update its SHOW SERVERS state since `at` (atomic stores on its record; no lock).
    pub fn set_book_state(&self, state: crate::pool::servers::ServerState, at: Instant) {
        if let Some(t) = self.slots.as_ref().and_then(|s| s.tracker.as_ref()) {
            let record = t.record();
            record.set_prepared(self.prepared.len());
            if state == crate::pool::servers::ServerState::Idle {
                // (A hand-out shows it once its SETs went: `show_application_name`.)
                record
                    .application_name
                    .publish(self.params.application_name());
            }
            record.set_state(state, at.into_std());
        }
    }

    /// SHOW SERVERS `application_name` after the hand-out made it the client's.
    pub fn show_application_name(&self) {
        if let Some(t) = self.slots.as_ref().and_then(|s| s.tracker.as_ref()) {
            t.record()
                .application_name
                .publish(self.params.application_name());
        }
    }

    /// Its host left rotation or changed role since it connected (never for a single-host
    /// database without target_session_attrs: no ticket, no atomic load).
    pub fn host_retired(&self) -> bool {
        self.host.as_ref().is_some_and(|t| t.retired())
    }

    /// A server can go back to the pool only when idle with nothing unread.
    pub fn is_clean(&self) -> bool {
        self.status == TransactionStatus::Idle && self.rbuf.is_empty()
    }
}
