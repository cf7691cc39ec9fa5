//! Work that crosses from one worker to another: what the multi-core design keeps rare, counted
//! so that it can be watched (`SHOW CROSS_WORKER`, `sluice_cross_worker_events_total`) and
//! guarded in the bench (events per transaction).
//!
//! A transaction that stays on one worker touches one thread's IO driver and caches. Each event
//! here costs more: a server handed to a client of another worker, a waker fired on another
//! worker's thread (an eventfd write and a wake-up there), a socket moved to another worker's IO
//! driver (epoll deregister + register), a client moved between transactions.

use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds, in the order they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossEvent {
    /// A server went to a client of a worker other than the one its socket was registered with
    /// (a released server to another worker's waiter, an idle server taken by another worker).
    ServerHandoff,
    /// A waiting client was woken from another worker's thread.
    RemoteWake,
    /// A server socket was re-registered with another worker's IO driver.
    SocketMove,
}

impl CrossEvent {
    pub const ALL: [CrossEvent; 3] = [
        CrossEvent::ServerHandoff,
        CrossEvent::RemoteWake,
        CrossEvent::SocketMove,
    ];

    /// The `kind` label / SHOW row name.
    pub fn name(self) -> &'static str {
        match self {
            CrossEvent::ServerHandoff => "server_handoff",
            CrossEvent::RemoteWake => "remote_wake",
            CrossEvent::SocketMove => "socket_move",
        }
    }
}

/// One pool's cross-worker events (client moves are the workers' own: `Workers::moves`). Written
/// only when an event happens, which the design keeps rare.
#[derive(Debug, Default)]
pub struct CrossWorkerCounts {
    counts: [AtomicU64; 3],
}

impl CrossWorkerCounts {
    pub fn note(&self, e: CrossEvent) {
        self.counts[e as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, e: CrossEvent) -> u64 {
        self.counts[e as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind() {
        let c = CrossWorkerCounts::default();
        c.note(CrossEvent::RemoteWake);
        c.note(CrossEvent::RemoteWake);
        c.note(CrossEvent::SocketMove);
        assert_eq!(c.get(CrossEvent::ServerHandoff), 0);
        assert_eq!(c.get(CrossEvent::RemoteWake), 2);
        assert_eq!(c.get(CrossEvent::SocketMove), 1);
        let names: Vec<_> = CrossEvent::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["server_handoff", "remote_wake", "socket_move"]);
    }
}
