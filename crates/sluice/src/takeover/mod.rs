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
//! sockets as descriptors, `handle.rs` the state `App` holds (a leaf: App names nothing above
//! it), `state.rs` a session captured and adopted, `give.rs` and `take.rs` the two sides. The
//! session does not call in here: it returns "hand me over" (`client::session::Outcome`) and
//! `dispatch` hands it; the take side is given the function that serves an adopted client.

pub mod codec;
pub mod give;
pub mod handle;
pub mod link;
pub mod listeners;
pub mod state;
pub mod take;

use std::path::PathBuf;

pub use handle::Takeover;

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
