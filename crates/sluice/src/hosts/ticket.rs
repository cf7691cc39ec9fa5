//! A server's claim on its host, taken at connect: the host's epoch cell (shared with the host's
//! `HostHealth`, which bumps it when the host leaves rotation or changes role) and the epoch the
//! server connected in. A leaf of its own, so that `server/` holds it without naming the rest of
//! `hosts/` (whose checker logs in through `server/`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One host's epoch; one per `HostHealth`, shared with every ticket of its servers.
#[derive(Debug, Default)]
pub struct HostEpoch(AtomicU64);

impl HostEpoch {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// The host left rotation or changed role: its servers close when next released.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A server's claim on its host's health, taken at connect.
#[derive(Debug, Clone)]
pub struct HostTicket {
    /// The host's epoch cell: also which host it is (`Arc::ptr_eq`).
    pub host: Arc<HostEpoch>,
    pub epoch: u64,
    /// How long its connect held clients while no host of the role was in rotation.
    pub held: Option<Duration>,
}

impl HostTicket {
    pub fn retired(&self) -> bool {
        self.host.get() != self.epoch
    }
}
