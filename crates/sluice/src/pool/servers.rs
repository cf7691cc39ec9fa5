//! The live server connections of one pool as SHOW SERVERS sees them. A record lives exactly as
//! long as its connection: the `ServerTracker` rides in the connection's slots and removes it on drop.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::server::ServerConn;

/// Where a server is, in PgBouncer's words (SHOW SERVERS `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ServerState {
    Idle = 0,
    Active = 1,
    /// Running server_check_query before it is handed out.
    Tested = 2,
}

/// What SHOW SERVERS reports about one connection.
#[derive(Debug)]
pub struct ServerRecord {
    pub id: u64,
    pub addr: String,
    pub peer_port: Option<u16>,
    pub local: Option<SocketAddr>,
    pub connect_time: SystemTime,
    /// The backend's pid from BackendKeyData.
    pub remote_pid: u32,
    pub generation: u64,
    /// SHOW SERVERS `tls`: empty for plaintext.
    pub tls: String,
    state: AtomicU8,
    /// Unix time in µs of the last hand-out or release.
    last_request_us: AtomicU64,
}

fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl ServerRecord {
    pub fn state(&self) -> ServerState {
        match self.state.load(Ordering::Relaxed) {
            1 => ServerState::Active,
            2 => ServerState::Tested,
            _ => ServerState::Idle,
        }
    }

    pub fn set_state(&self, s: ServerState) {
        self.state.store(s as u8, Ordering::Relaxed);
        self.last_request_us
            .store(unix_us(SystemTime::now()), Ordering::Relaxed);
    }

    pub fn request_time(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH
            + std::time::Duration::from_micros(self.last_request_us.load(Ordering::Relaxed))
    }
}

/// All live servers of one pool, by id.
#[derive(Debug, Default)]
pub struct ServerBook {
    map: Mutex<BTreeMap<u64, Arc<ServerRecord>>>,
}

impl ServerBook {
    /// Record a freshly logged-in server; the returned tracker removes it when dropped.
    pub fn track(self: &Arc<Self>, conn: &ServerConn) -> ServerTracker {
        let (peer_port, local) = match conn.stream.tcp() {
            Some(s) => (s.peer_addr().ok().map(|a| a.port()), s.local_addr().ok()),
            None => (None, None),
        };
        let now = SystemTime::now();
        let rec = Arc::new(ServerRecord {
            id: conn.id,
            addr: match &*conn.addr {
                crate::server::ServerAddr::Tcp { host, .. } => host.clone(),
                crate::server::ServerAddr::Unix { path } => path
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            },
            peer_port: peer_port.or(match &*conn.addr {
                crate::server::ServerAddr::Tcp { port, .. } => Some(*port),
                crate::server::ServerAddr::Unix { .. } => None,
            }),
            local,
            connect_time: now,
            remote_pid: conn.backend_key.pid,
            generation: conn.generation,
            tls: conn
                .tls
                .as_ref()
                .map(|t| t.description.clone())
                .unwrap_or_default(),
            state: AtomicU8::new(ServerState::Active as u8),
            last_request_us: AtomicU64::new(unix_us(now)),
        });
        self.map.lock().insert(conn.id, rec.clone());
        ServerTracker {
            book: self.clone(),
            record: rec,
        }
    }

    pub fn get(&self, id: u64) -> Option<Arc<ServerRecord>> {
        self.map.lock().get(&id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ServerRecord>> {
        self.map.lock().values().cloned().collect()
    }

    pub fn set_state(&self, id: u64, s: ServerState) {
        if let Some(r) = self.map.lock().get(&id) {
            r.set_state(s);
        }
    }

    pub fn max_id(&self) -> u64 {
        self.map.lock().keys().next_back().copied().unwrap_or(0)
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
        self.book.map.lock().remove(&self.record.id);
    }
}
