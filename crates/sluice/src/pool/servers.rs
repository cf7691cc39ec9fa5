//! The live server connections of one pool as SHOW SERVERS sees them. A record lives exactly as
//! long as its connection: the `ServerTracker` rides in the connection's slots and removes it on drop.

use std::collections::BTreeMap;

use crate::ids::ServerId;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;

use crate::stats::shown::ShownText;
use crate::stats::stamp::Stamp;

/// Where a server is, in PgBouncer's words (SHOW SERVERS `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ServerState {
    Idle = 0,
    Active = 1,
    /// Running server_check_query before it is handed out.
    Tested = 2,
    /// Released by its client while a cancel the client sent is still on its way to it: kept out
    /// of the pool until the cancel has landed (`Pool::hold_while_canceled`).
    BeingCanceled = 3,
}

/// What a logged-in server shows of itself when the book records it (`ServerConn::seen`): the
/// book stays below the connection it describes.
#[derive(Debug)]
pub struct ServerSeen {
    pub id: ServerId,
    pub addr: String,
    pub peer_port: Option<u16>,
    pub local: Option<SocketAddr>,
    pub remote_pid: u32,
    pub generation: u64,
    pub tls: String,
}

/// What SHOW SERVERS reports about one connection: what the server showed at login, and what
/// changes while it lives.
#[derive(Debug)]
pub struct ServerRecord {
    pub seen: ServerSeen,
    /// SHOW SERVERS `replication`: `logical` or `physical` for a replication client's own
    /// server (`Pool::open_dedicated`), unset (`none`) for the pool's.
    pub replication: OnceLock<&'static str>,
    state: AtomicU8,
    /// SHOW SERVERS `prepared_statements`: the statements the server has prepared for the pool,
    /// as of its last hand-out or release.
    prepared: AtomicU32,
    /// Connect time (its base) and the last hand-out or release.
    request: Stamp,
    /// SHOW SERVERS `application_name`: the server's, as of its last hand-out or release (what
    /// its last client set stays, as in PgBouncer).
    pub application_name: ShownText,
}

impl ServerRecord {
    pub fn state(&self) -> ServerState {
        match self.state.load(Ordering::Relaxed) {
            1 => ServerState::Active,
            2 => ServerState::Tested,
            3 => ServerState::BeingCanceled,
            _ => ServerState::Idle,
        }
    }

    pub fn prepared(&self) -> u32 {
        self.prepared.load(Ordering::Relaxed)
    }

    /// The server now has `n` statements prepared (the pooler's `sluice_<n>`).
    pub fn set_prepared(&self, n: usize) {
        self.prepared
            .store(u32::try_from(n).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// A new state since `at` (the caller's clock reading: hand-outs and releases pass theirs).
    pub fn set_state(&self, s: ServerState, at: Instant) {
        self.state.store(s as u8, Ordering::Relaxed);
        self.request.set(at);
    }

    pub fn connect_time(&self) -> SystemTime {
        self.request.base_wall()
    }

    pub fn request_time(&self) -> SystemTime {
        self.request.wall()
    }
}

/// All live servers of one pool, by id.
#[derive(Debug, Default)]
pub struct ServerBook {
    map: Mutex<BTreeMap<ServerId, Arc<ServerRecord>>>,
}

impl ServerBook {
    /// Record a freshly logged-in server; the returned tracker removes it when dropped.
    pub fn track(self: &Arc<Self>, seen: ServerSeen) -> ServerTracker {
        let id = seen.id;
        let rec = Arc::new(ServerRecord {
            seen,
            replication: OnceLock::new(),
            state: AtomicU8::new(ServerState::Active as u8),
            prepared: AtomicU32::new(0),
            request: Stamp::now(),
            application_name: ShownText::default(),
        });
        self.map.lock().insert(id, rec.clone());
        ServerTracker {
            book: self.clone(),
            record: rec,
        }
    }

    pub fn get(&self, id: ServerId) -> Option<Arc<ServerRecord>> {
        self.map.lock().get(&id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ServerRecord>> {
        self.map.lock().values().cloned().collect()
    }

    pub fn max_id(&self) -> u64 {
        self.map.lock().keys().next_back().map_or(0, |id| id.0)
    }
}

/// Removes its server's record when the connection (and so its slots) is dropped. Holding the
/// record itself lets the hot path update the state with one atomic store, without the book's lock.
#[derive(Debug)]
pub struct ServerTracker {
    book: Arc<ServerBook>,
    record: Arc<ServerRecord>,
}

impl ServerTracker {
    pub fn record(&self) -> &ServerRecord {
        &self.record
    }
}

impl Drop for ServerTracker {
    fn drop(&mut self) {
        self.book.map.lock().remove(&self.record.seen.id);
    }
}
