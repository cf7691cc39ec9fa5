//! Live clients, for SHOW CLIENTS and KILL_CLIENT: each client publishes its state here, and the
//! registry can ask one to disconnect.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use super::kill::KillSwitch;
use parking_lot::Mutex;

use crate::keyed_hash::OwnKeys;
use crate::net::PeerAddr;
use crate::stamp::Stamp;

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
#[derive(Debug)]
pub struct ClientEntry {
    pub id: u64,
    pub peer: PeerAddr,
    /// (database, user) once logged in.
    pub identity: OnceLock<(String, String)>,
    state: AtomicU8,
    /// Id of the linked server, 0 when unlinked.
    pub server_id: AtomicU64,
    /// Cancelled to make the client disconnect ("admin forced disconnect").
    pub kill: KillSwitch,
    /// Our end of a TCP connection.
    pub local_addr: OnceLock<SocketAddr>,
    pub application_name: OnceLock<String>,
    /// SHOW CLIENTS `tls` ("TLSv1.3/TLS_AES_256_GCM_SHA384/ECDH=X25519"); unset for plaintext.
    pub tls: OnceLock<String>,
    /// Connect time (its base) and the latest request (when the client last left idle).
    request: Stamp,
}

impl ClientEntry {
    pub fn state(&self) -> ClientState {
        ClientState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, s: ClientState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// A request arrived at `at` (the session's one clock reading for it): the client waits for
    /// a server.
    pub fn request_arrived(&self, at: Instant) {
        self.set_state(ClientState::Waiting);
        self.request.set(at);
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
    clients: Mutex<HashMap<u64, Arc<ClientEntry>, OwnKeys>>,
}

impl ClientRegistry {
    pub fn register(self: &Arc<Self>, id: u64, peer: PeerAddr) -> Registration {
        let entry = Arc::new(ClientEntry {
            id,
            peer,
            identity: OnceLock::new(),
            state: AtomicU8::new(ClientState::Login as u8),
            server_id: AtomicU64::new(0),
            kill: KillSwitch::new(),
            local_addr: OnceLock::new(),
            application_name: OnceLock::new(),
            tls: OnceLock::new(),
            request: Stamp::now(),
        });
        self.clients.lock().insert(id, entry.clone());
        Registration {
            entry,
            registry: self.clone(),
        }
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientEntry>> {
        self.clients.lock().get(&id).cloned()
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
