//! Binary upgrades that drop nobody: `sluice --takeover pgbouncer.ini` (or PgBouncer's `-R`)
//! starts a new process that takes the running one's listening sockets and, one by one at their
//! next transaction boundary, its clients (socket, cancel key, parameters, tracked SETs,
//! prepared-statement names), over the Unix socket `<unix_socket_dir>/.s.PGSQL.<port>.takeover`
//! (mode 0600, same user only) with SCM_RIGHTS descriptor passing. Servers are not handed over:
//! the new process dials its own, and a client's parameters and statements are re-applied on
//! them as on any fresh server.
//!
//! ```text
//!  new (takes)                           old (gives)
//!  Hello{version, pid}            ──▶    refuses when busy, shutting down, suspended, or still
//!                                        taking over itself
//!                                 ◀──    Offer{listeners} + their descriptors (keeps accepting)
//!  builds its App, signals...
//!  Take                           ──▶    stops accepting (accept loops end, copies kept);
//!                                 ◀──    Taken; phase HandingOver
//!  accepts
//!                                 ◀──    Client{state} + socket, each at its next boundary
//!  Ack{id, taken}                 ──▶    the old session ends without a word to its client
//!  Cancel{key} (unknown key)      ──▶    forwarded to the client's server; CancelDone
//!                                        exits once no pool client is left: EOF ends the link
//! ```
//!
//! Failure at any step leaves the old process serving: until `Take`, it never stopped; after
//! it, an end of the link (the new process died or was stopped) makes it accept again from its
//! copies of the listening sockets, and every client whose Ack had not arrived carries on there
//! (the new process acknowledges a client before it reads a byte of it, so a client is served
//! by exactly one process at any moment).
//!
//! `codec.rs` is the protocol without IO, `link.rs` the socket, `listeners.rs` the listening
//! sockets as descriptors, `state.rs` a session captured and adopted, `give.rs` and `take.rs`
//! the two sides.

pub mod codec;
pub mod give;
pub mod link;
pub mod listeners;
pub mod state;
pub mod take;

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use codec::ListenerDesc;

/// How long either side waits for an answer during the set-up (the new process's `Take` may
/// come later: it loads its config and TLS files in between).
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long the old process waits for `Take` after its offer.
pub const TAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Where a process listens for a takeover: beside its Unix socket. None without unix_socket_dir.
pub fn control_path(settings: &sluice_config::Settings) -> Option<PathBuf> {
    (!settings.unix_socket_dir.is_empty()).then(|| {
        PathBuf::from(&settings.unix_socket_dir)
            .join(format!(".s.PGSQL.{}.takeover", settings.listen_port))
    })
}

/// Why the new process could not take over (the old one keeps serving in every case).
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    #[error(
        "takeover needs unix_socket_dir (the running process listens for it at \
         <unix_socket_dir>/.s.PGSQL.<port>.takeover)"
    )]
    NoSocketDir,
    #[error("cannot reach the running process at {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("the running process refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Link(#[from] link::LinkError),
    #[error("unexpected answer from the running process ({0})")]
    Unexpected(&'static str),
    #[error("the offered listening sockets cannot be used: {0}")]
    Listeners(String),
}

/// One process's takeover state, in its `App`.
pub struct Takeover {
    /// Copies of this process's listening sockets: what an offer sends, and what it accepts on
    /// again when a takeover fails.
    kept: Mutex<Vec<(ListenerDesc, OwnedFd)>>,
    /// Bumped when the listeners go to a successor, come back, or the pooler stops: accept loops
    /// of an older generation end (`while_current`).
    generation: watch::Sender<u64>,
    /// A successor is being served (one at a time).
    busy: AtomicBool,
    /// The listeners are the successor's: its pidfile and socket files are left alone at exit.
    handed_over: AtomicBool,
    /// Giving side: the queue of clients for the link's writer.
    outbox: Mutex<Option<mpsc::UnboundedSender<give::Outgoing>>>,
    /// Taking side: the link to the process this one took over from, while it lives.
    predecessor: Mutex<Option<take::Predecessor>>,
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
    fn copies(&self) -> std::io::Result<(Vec<ListenerDesc>, Vec<OwnedFd>)> {
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
    pub fn outbox(&self) -> Option<mpsc::UnboundedSender<give::Outgoing>> {
        self.outbox.lock().clone()
    }

    /// The process this one is still taking over from (its pid), if any.
    pub fn predecessor_pid(&self) -> Option<u32> {
        self.predecessor.lock().as_ref().map(|p| p.pid)
    }
}
