//! Live clients, for SHOW CLIENTS and KILL_CLIENT: each client publishes its state here, and the
//! registry can ask one to disconnect.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use super::kill::KillSwitch;
use parking_lot::Mutex;

use crate::ids::ClientId;
use crate::keyed_hash::OwnKeys;
use crate::net::PeerAddr;
use crate::stats::shown::ShownText;
use crate::stats::stamp::Stamp;

/// PgBouncer's client states (SHOW CLIENTS `state`, SHOW POOLS cl_* columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ClientState {
    /// Startup and authentication.
    Login = 0,
    /// Logged in, not linked to a server (PgBouncer 1.25 shows these as `idle`).
    Idle = 1,
    /// Queued for a server.
    Waiting = 2,
    /// Linked to a server.
    Active = 3,
}

impl ClientState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => ClientState::Idle,
            2 => ClientState::Waiting,
            3 => ClientState::Active,
            _ => ClientState::Login,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClientState::Login => "login",
            ClientState::Idle => "idle",
            ClientState::Waiting => "waiting",
            ClientState::Active => "active",
        }
    }
}

/// What the rest of the pooler can see of one client.
///
/// Laid out by hand: the fields every transaction touches (state, server id, request stamp, the
/// kill flag) come first and share the first cache line, which `align(64)` makes a line of its
/// own. At 1,000 clients each transaction meets a client whose entry left the caches since its
/// last one, and the compiler's order spread those fields over three lines.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct ClientEntry {
    state: AtomicU8,
    /// Linked, with a query of its own in flight (SHOW CLIENTS `wait` counts from its start,
    /// the request stamp, as PgBouncer's does); in the padding before `prepared`.
    query_running: AtomicBool,
    /// SHOW CLIENTS `prepared_statements`: the client's protocol-level prepared statements, as
    /// of its last transaction (in the padding before `server_id`: the line is written then anyway).
    prepared: AtomicU32,
    /// Id of the linked server, 0 when unlinked.
    pub server_id: AtomicU64,
    /// Connect time (its base) and the latest request (when the client last left idle).
    request: Stamp,
    /// Cancelled to make the client disconnect ("admin forced disconnect"). Its flag comes
    /// first (`KillSwitch` is `repr(C)`) and ends the hot line.
    pub kill: KillSwitch,
    pub id: ClientId,
    pub peer: PeerAddr,
    /// (database, user) once logged in.
    pub identity: OnceLock<(String, String)>,
    /// Our end of a TCP connection.
    pub local_addr: OnceLock<SocketAddr>,
    /// The client's application_name as of its last release (a `SET application_name` shows).
    pub application_name: ShownText,
    /// SHOW CLIENTS `tls` ("TLSv1.3/TLS_AES_256_GCM_SHA384", "TLSv1.2/.../ECDH=X25519"); unset for plaintext.
    pub tls: OnceLock<String>,
    /// SHOW CLIENTS `replication`: `logical` or `physical` for a replication client; unset: `none`.
    pub replication: OnceLock<&'static str>,
    /// query_wait_notify: the request (its stamp + 1) a NOTICE was decided for, so each wait
    /// gets one; and whether the client's task still has to send it.
    wait_notice_for: AtomicU64,
    wait_notice_due: AtomicBool,
    /// server_fast_close: the linked server is due to close; an idle session ends (the relay
    /// reads and clears it, the janitor sets it again while it holds: `fast_close.rs`).
    pub close_when_idle: AtomicBool,
}

impl ClientEntry {
    pub fn state(&self) -> ClientState {
        ClientState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, s: ClientState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    pub fn prepared(&self) -> u32 {
        self.prepared.load(Ordering::Relaxed)
    }

    /// The client now has `n` prepared statements (stored only when it changed).
    pub fn set_prepared(&self, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if self.prepared.load(Ordering::Relaxed) != n {
            self.prepared.store(n, Ordering::Relaxed);
        }
    }

    /// A request arrived at `at` (the session's one clock reading for it): the client waits for
    /// a server.
    pub fn request_arrived(&self, at: Instant) {
        self.set_state(ClientState::Waiting);
        self.request.set(at);
    }

    /// A query went to the linked server at `at` with none of the client's in flight: SHOW
    /// CLIENTS counts `wait` from its start until it is answered, and `request_time` is its
    /// start unless `first` (the request's arrival stays: it is the transaction's first query).
    pub fn query_sent(&self, at: Instant, first: bool) {
        if !first {
            self.request.set(at);
        }
        self.query_running.store(true, Ordering::Relaxed);
    }

    /// The client's queries in flight were answered (or the relay ended).
    pub fn query_answered(&self) {
        self.query_running.store(false, Ordering::Relaxed);
    }

    /// SHOW CLIENTS `wait` at `now`: since the request for a waiting client, since its query's
    /// start for a linked client running one, else zero.
    pub fn wait(&self, now: SystemTime) -> std::time::Duration {
        let counts = match self.state() {
            ClientState::Waiting => true,
            ClientState::Active => self.query_running.load(Ordering::Relaxed),
            _ => false,
        };
        if counts {
            now.duration_since(self.request_time()).unwrap_or_default()
        } else {
            std::time::Duration::ZERO
        }
    }

    /// query_wait_notify (the janitor): true when this client has waited for a server since a
    /// request older than `limit` and was not told yet; its task is then to send the NOTICE
    /// (`take_wait_notice`).
    pub fn wait_notice_needed(&self, now: Instant, limit: std::time::Duration) -> bool {
        if self.state() != ClientState::Waiting {
            return false;
        }
        let after = self.request.after_us();
        let since = self.request.base() + std::time::Duration::from_micros(after);
        if now.saturating_duration_since(since) < limit
            || self.wait_notice_for.swap(after + 1, Ordering::Relaxed) == after + 1
        {
            return false;
        }
        self.wait_notice_due.store(true, Ordering::Release);
        true
    }

    /// Whether a query_wait_notify NOTICE is to be sent now (once).
    pub fn take_wait_notice(&self) -> bool {
        self.wait_notice_due.load(Ordering::Relaxed)
            && self.wait_notice_due.swap(false, Ordering::Acquire)
    }

    /// When the client connected (its registration).
    pub fn connected_at(&self) -> Instant {
        self.request.base()
    }

    pub fn connect_time(&self) -> SystemTime {
        self.request.base_wall()
    }

    /// Time of the latest request (connect time before the first one).
    pub fn request_time(&self) -> SystemTime {
        self.request.wall()
    }
}

#[derive(Debug, Default)]
pub struct ClientRegistry {
    clients: Mutex<HashMap<ClientId, Arc<ClientEntry>, OwnKeys>>,
    /// The clients still in their login phase (`InLogin`), which the janitor holds to
    /// client_login_timeout (`expire_logins`): a small set, where a timer per login cost
    /// ~1,000 instructions of every login (registered in tokio's wheel, and removed again).
    logging_in: Mutex<HashMap<ClientId, Arc<ClientEntry>, OwnKeys>>,
}

impl ClientRegistry {
    pub fn register(self: &Arc<Self>, id: ClientId, peer: PeerAddr) -> Registration {
        let entry = Arc::new(ClientEntry {
            id,
            peer,
            identity: OnceLock::new(),
            state: AtomicU8::new(ClientState::Login as u8),
            query_running: AtomicBool::new(false),
            server_id: AtomicU64::new(0),
            prepared: AtomicU32::new(0),
            kill: KillSwitch::new(),
            local_addr: OnceLock::new(),
            application_name: ShownText::default(),
            tls: OnceLock::new(),
            replication: OnceLock::new(),
            request: Stamp::now(),
            wait_notice_for: AtomicU64::new(0),
            wait_notice_due: AtomicBool::new(false),
            close_when_idle: AtomicBool::new(false),
        });
        self.clients.lock().insert(id, entry.clone());
        Registration {
            entry,
            registry: self.clone(),
        }
    }

    pub fn get(&self, id: ClientId) -> Option<Arc<ClientEntry>> {
        self.clients.lock().get(&id).cloned()
    }

    /// The client's login phase starts: until the guard drops, `expire_logins` may end it.
    pub fn login_started(self: &Arc<Self>, entry: &Arc<ClientEntry>) -> InLogin {
        self.logging_in.lock().insert(entry.id, entry.clone());
        InLogin {
            id: entry.id,
            registry: self.clone(),
        }
    }

    /// client_login_timeout: tell every client whose login started more than `timeout` before
    /// `now` to disconnect (the janitor, every tick; PgBouncer checks it in its janitor too).
    pub fn expire_logins(&self, now: Instant, timeout: std::time::Duration) {
        for entry in self.logging_in.lock().values() {
            if !entry.kill.is_cancelled()
                && now.saturating_duration_since(entry.connected_at()) >= timeout
            {
                entry
                    .kill
                    .cancel_because(super::kill::KillReason::LoginTimeout);
            }
        }
    }

    /// Snapshot of all clients, ordered by id.
    pub fn all(&self) -> Vec<Arc<ClientEntry>> {
        let mut v: Vec<_> = self.clients.lock().values().cloned().collect();
        v.sort_by_key(|e| e.id);
        v
    }
}

/// A client's presence in the registry; removed on drop.
#[derive(Debug)]
pub struct Registration {
    pub entry: Arc<ClientEntry>,
    registry: Arc<ClientRegistry>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.clients.lock().remove(&self.entry.id);
    }
}

/// A client in its login phase (see `ClientRegistry::login_started`); the phase ends on drop.
#[derive(Debug)]
pub struct InLogin {
    id: ClientId,
    registry: Arc<ClientRegistry>,
}

impl Drop for InLogin {
    fn drop(&mut self) {
        self.registry.logging_in.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn only_logins_past_the_timeout_are_told_to_leave() {
        use super::super::kill::KillReason;
        use std::time::Duration;
        let registry = Arc::new(ClientRegistry::default());
        let old = registry.register(ClientId(1), PeerAddr::Unix { pid: None });
        let logged_in = registry.register(ClientId(2), PeerAddr::Unix { pid: None });
        let _old_login = registry.login_started(&old.entry);
        drop(registry.login_started(&logged_in.entry));
        let t = Duration::from_secs(60);
        let connected = old.entry.connected_at();
        registry.expire_logins(connected + t - Duration::from_millis(1), t);
        assert!(!old.entry.kill.is_cancelled(), "not yet");
        registry.expire_logins(connected + t, t);
        assert!(old.entry.kill.is_cancelled());
        assert_eq!(old.entry.kill.reason(), KillReason::LoginTimeout);
        assert!(
            !logged_in.entry.kill.is_cancelled(),
            "a client past its login phase is not swept"
        );
    }

    /// State, the running flag, server id, the request stamp's base and value, and the kill flag end within the
    /// first 64 bytes of a 64-byte-aligned entry: one cache line per transaction.
    #[test]
    fn the_per_transaction_fields_share_the_first_cache_line() {
        assert_eq!(align_of::<ClientEntry>(), 64);
        let stamp_hot = size_of::<Instant>() + size_of::<AtomicU64>(); // base, after_us
        for (name, end) in [
            ("state", offset_of!(ClientEntry, state) + 1),
            ("query_running", offset_of!(ClientEntry, query_running) + 1),
            ("server_id", offset_of!(ClientEntry, server_id) + 8),
            ("request", offset_of!(ClientEntry, request) + stamp_hot),
            // `KillSwitch` is repr(C) with its one-byte flag first.
            ("kill flag", offset_of!(ClientEntry, kill) + 1),
        ] {
            assert!(end <= 64, "{name} ends at byte {end}");
        }
    }
}
