//! One process's takeover state, in its `App`: a leaf (it names the link's messages and
//! standard types only), so that App holds it without importing the two sides above it
//! (`give.rs`, `take.rs`), which read and write its fields.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_protocol::CancelKey;
use tokio::sync::{mpsc, oneshot, watch};

use super::codec::{ClientState, ListenerDesc};

/// One process's takeover state, in its `App`.
pub struct Takeover {
    /// Copies of this process's listening sockets: what an offer sends, and what it accepts on
    /// again when a takeover fails.
    pub(super) kept: Mutex<Vec<(ListenerDesc, OwnedFd)>>,
    /// Bumped when the listeners go to a successor, come back, or the pooler stops: accept loops
    /// of an older generation end (`while_current`).
    pub(super) generation: watch::Sender<u64>,
    /// A successor is being served (one at a time).
    pub(super) busy: AtomicBool,
    /// The listeners are the successor's: its pidfile and socket files are left alone at exit.
    pub(super) handed_over: AtomicBool,
    /// Giving side: the queue of clients for the link's writer.
    pub(super) outbox: Mutex<Option<mpsc::UnboundedSender<Outgoing>>>,
    /// Taking side: the link to the process this one took over from, while it lives.
    pub(super) predecessor: Mutex<Option<Predecessor>>,
}

impl Default for Takeover {
    fn default() -> Self {
        Takeover {
            kept: Mutex::new(Vec::new()),
            generation: watch::Sender::new(0),
            busy: AtomicBool::new(false),
            handed_over: AtomicBool::new(false),
            outbox: Mutex::new(None),
            predecessor: Mutex::new(None),
        }
    }
}

impl Takeover {
    /// Keep copies of the listening sockets `run` starts with.
    pub fn keep(&self, kept: Vec<(ListenerDesc, OwnedFd)>) {
        *self.kept.lock() = kept;
    }

    /// Drop the kept copies: the pooler is shutting down, and its sockets must close with its
    /// accept loops.
    pub fn forget_listeners(&self) {
        self.kept.lock().clear();
    }

    /// Fresh copies of the kept sockets (descriptions and descriptors).
    pub(super) fn copies(&self) -> std::io::Result<(Vec<ListenerDesc>, Vec<OwnedFd>)> {
        let kept = self.kept.lock();
        let mut descs = Vec::with_capacity(kept.len());
        let mut fds = Vec::with_capacity(kept.len());
        for (d, fd) in kept.iter() {
            descs.push(d.clone());
            fds.push(fd.try_clone()?);
        }
        Ok((descs, fds))
    }

    /// `fut` (an accept loop) until the listeners change hands or the pooler stops.
    pub fn while_current<F>(&self, fut: F) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut rx = self.generation.subscribe();
        let now = *rx.borrow_and_update();
        async move {
            tokio::select! {
                _ = fut => {}
                _ = rx.wait_for(|g| *g != now) => {}
            }
        }
    }

    /// End every accept loop started so far.
    pub fn stop_listeners(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Whether the listeners now belong to a successor.
    pub fn handed_over(&self) -> bool {
        self.handed_over.load(Ordering::Acquire)
    }

    /// The queue to hand a client over through, while a successor takes them.
    pub fn outbox(&self) -> Option<mpsc::UnboundedSender<Outgoing>> {
        self.outbox.lock().clone()
    }

    /// The process this one is still taking over from (its pid), if any.
    pub fn predecessor_pid(&self) -> Option<u32> {
        self.predecessor.lock().as_ref().map(|p| p.pid)
    }
}

impl Takeover {
    /// A cancel request this process has no client for: sent to the process it took over from,
    /// while that one lives, and waited for (within `limit`). False when there is none.
    pub async fn forward_cancel(&self, key: CancelKey, limit: Option<Duration>) -> bool {
        let (done, wait) = oneshot::channel();
        {
            let p = self.predecessor.lock();
            let Some(p) = p.as_ref() else { return false };
            let seq = p.next_seq.fetch_add(1, Ordering::Relaxed);
            p.cancels.lock().insert(seq, done);
            let key = key.to_bytes();
            if p.queue.send(ToPredecessor::Cancel { seq, key }).is_err() {
                return false;
            }
        }
        match limit {
            Some(l) => {
                let _ = tokio::time::timeout(l, wait).await;
            }
            None => {
                let _ = wait.await;
            }
        }
        true
    }
}

/// Giving side: what the link's writer sends to the successor.
/// What the link's writer sends.
pub enum Outgoing {
    /// A client, its socket, and where the successor's answer goes.
    Client {
        state: Box<ClientState>,
        fd: OwnedFd,
        ack: oneshot::Sender<Result<(), String>>,
    },
    CancelDone {
        seq: u64,
    },
}

/// The process this one took over from, while it still has clients (`Takeover::predecessor`).
pub struct Predecessor {
    pub pid: u32,
    pub(super) queue: mpsc::UnboundedSender<ToPredecessor>,
    pub(super) next_seq: AtomicU64,
    pub(super) cancels: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
}

/// What the link's writer sends.
pub(super) enum ToPredecessor {
    Ack {
        id: u64,
        taken: bool,
        reason: String,
        /// Told whether the Ack was written (the client is served only then).
        written: Option<oneshot::Sender<bool>>,
    },
    Cancel {
        seq: u64,
        key: [u8; 8],
    },
}
