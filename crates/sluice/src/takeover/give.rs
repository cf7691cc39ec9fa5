//! The running process's side of a takeover: it listens on the takeover socket, offers its
//! listening sockets to one successor at a time, stops accepting when told to, hands each client
//! over at its next transaction boundary, forwards the cancels the successor cannot place, and
//! accepts and serves again if the successor goes away before it has exited.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_protocol::CancelKey;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::codec::{Msg, VERSION};
pub use super::handle::Outgoing;
use super::link::{self, LinkError, LinkReader, LinkWriter};
use super::{Takeover, ANSWER_TIMEOUT, TAKE_TIMEOUT};
use crate::app::App;
use crate::client::session::Session;
use crate::conn::ClientConn;
use crate::net::listen::Listeners;
use crate::net::Stream;

/// How a hand-over attempt ended for the session that asked.
pub enum Handoff {
    /// The successor has the client: the session ends here, its socket untouched.
    Taken,
    /// It cannot move (refused by the successor, TLS, its socket cannot be copied, a huge
    /// request already read): it stays here, and is not offered again.
    Refused,
    /// The successor went away: it stays here (the phase is Running again).
    Failed,
}

/// A client whose next request already read is longer than this stays (a message the relay had to
/// read whole, up to max_packet_size).
const MAX_PENDING: usize = 1 << 20;

/// Hand a logged-in client between transactions to the successor, and wait for its answer.
/// Nothing is read from or written to the client meanwhile.
pub async fn hand_over(app: &App, client: &ClientConn, s: &Session) -> Handoff {
    let Some(outbox) = app.takeover.outbox() else {
        return Handoff::Failed;
    };
    let fd = match &client.stream {
        Stream::Tcp(t) => t.as_fd().try_clone_to_owned(),
        Stream::Unix(u) => u.as_fd().try_clone_to_owned(),
        // TLS state lives in this process: such clients stay until they leave.
        _ => return Handoff::Refused,
    };
    let Ok(fd) = fd else {
        return Handoff::Refused;
    };
    if client.rbuf.len() > MAX_PENDING {
        return Handoff::Refused;
    }
    let state = Box::new(super::state::capture(client, s));
    let (ack, answer) = oneshot::channel();
    if outbox.send(Outgoing::Client { state, fd, ack }).is_err() {
        return Handoff::Failed;
    }
    match answer.await {
        Ok(Ok(())) => Handoff::Taken,
        Ok(Err(reason)) => {
            tracing::warn!(
                "C-{}: {} stays in this process: the new process refused it: {reason}",
                client.id,
                client.label()
            );
            Handoff::Refused
        }
        Err(_) => Handoff::Failed,
    }
}

/// What starts the accept loops again when a successor is lost (`runtime::spawn_listeners`),
/// given by the runtime that started this side: the giving side does not import it.
pub type Respawn = fn(&Arc<App>, Listeners);

/// Accept successors on the takeover socket (until the listeners change hands).
pub async fn accept_control(app: Arc<App>, listener: UnixListener, respawn: Respawn) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                tokio::spawn(serve(app.clone(), sock, respawn));
            }
            Err(e) => {
                tracing::warn!("takeover socket: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Holds `Takeover::busy` while one successor is served.
struct Busy<'a>(&'a Takeover);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

/// Why this process cannot be taken over now, if it cannot.
fn not_now(app: &App) -> Option<String> {
    if let Some(pid) = app.takeover.predecessor_pid() {
        return Some(format!(
            "this process is still taking over from process {pid}, which has clients left; \
             try again once it has exited"
        ));
    }
    if !app.lifecycle.is_running() {
        return Some("the running process is shutting down".into());
    }
    // PAUSE and SUSPEND are not carried over: a successor would serve what they hold back.
    if app.control.flags() != (false, false) {
        return Some("the running process is paused or suspended (RESUME it first)".into());
    }
    None
}

/// One successor, from its Hello to the end of the link.
async fn serve(app: Arc<App>, sock: UnixStream, respawn: Respawn) {
    let uid = sock.peer_cred().map(|c| c.uid());
    let (mut reader, writer) = link::split(sock);
    let refuse = |reason: String| {
        let writer = writer.clone();
        async move {
            tracing::warn!("takeover refused: {reason}");
            let _ = writer.send(&Msg::Refused { reason }, &[]).await;
        }
    };
    let me = nix::unistd::geteuid().as_raw();
    match uid {
        Ok(u) if u == me || u == 0 => {}
        Ok(u) => return refuse(format!("uid {u} may not take over a process of uid {me}")).await,
        Err(e) => return refuse(format!("cannot check the caller's uid: {e}")).await,
    }
    let pid = match reader.recv_within(ANSWER_TIMEOUT).await {
        Ok((Msg::Hello { version, pid }, _)) if version == VERSION => pid,
        Ok((Msg::Hello { version, .. }, _)) => {
            return refuse(format!(
                "takeover protocol version {version}; this process speaks {VERSION}"
            ))
            .await
        }
        Ok(_) => return refuse("the first message must be Hello".into()).await,
        Err(e) => {
            tracing::debug!("takeover socket: {e}");
            return;
        }
    };
    if let Some(reason) = not_now(&app) {
        return refuse(reason).await;
    }
    if app.takeover.busy.swap(true, Ordering::AcqRel) {
        return refuse("another takeover is in progress".into()).await;
    }
    let _busy = Busy(&app.takeover);
    let (descs, fds) = match app.takeover.copies() {
        Ok(c) => c,
        Err(e) => return refuse(format!("cannot copy the listening sockets: {e}")).await,
    };
    tracing::info!(
        "takeover: process {pid} asks to take over; offering {} listening sockets",
        descs.len()
    );
    let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let offer = Msg::Offer {
        pid: std::process::id(),
        active_workers: app.workers.active().min(usize::from(u16::MAX)) as u16,
        listeners: descs,
    };
    if let Err(e) = writer.send(&offer, &raw).await {
        tracing::warn!("takeover: process {pid} went away: {e}");
        return;
    }
    drop(fds);
    match reader.recv_within(TAKE_TIMEOUT).await {
        Ok((Msg::Take, _)) => {}
        Ok(_) => return refuse("expected Take".into()).await,
        Err(e) => {
            tracing::warn!("takeover: process {pid} did not take over ({e}); nothing changed");
            return;
        }
    }
    if let Some(reason) = not_now(&app) {
        return refuse(reason).await;
    }
    // The listeners go first (the accept loops end; the successor accepts once it reads Taken),
    // then the clients: Taken must precede every Client message.
    let (tx, rx) = mpsc::unbounded_channel();
    app.takeover.handed_over.store(true, Ordering::Release);
    app.takeover.stop_listeners();
    if let Err(e) = writer.send(&Msg::Taken, &[]).await {
        take_back(&app, pid, &e.to_string(), respawn);
        return;
    }
    *app.takeover.outbox.lock() = Some(tx);
    app.lifecycle.hand_over();
    tracing::info!(
        "takeover: process {pid} accepts now; clients move to it at their next transaction \
         boundary, and this process exits when none is left"
    );
    let pending = Arc::new(Mutex::new(HashMap::new()));
    let writing = tokio::spawn(write_loop(writer.clone(), rx, pending.clone()));
    let why = read_loop(&app, &mut reader, &pending).await;
    // Nothing more reaches the successor (what it reads from now on it cannot answer: it drops
    // those clients unserved), and the clients here stop trying before the queue closes.
    writer.shutdown();
    take_back(&app, pid, &why, respawn);
    *app.takeover.outbox.lock() = None;
    writing.abort();
    let _ = writing.await;
    // Clients whose answer never came stay here.
    pending.lock().clear();
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<(), String>>>>>;

/// Send clients and cancel answers until the queue closes or the socket fails (then it is shut
/// down, so the reader sees the end too).
async fn write_loop(
    writer: LinkWriter,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    pending: Pending,
) {
    while let Some(out) = rx.recv().await {
        let sent = match out {
            Outgoing::Client { state, fd, ack } => {
                // Registered before it is sent: the answer may come before `send` returns.
                pending.lock().insert(state.id, ack);
                writer.send(&Msg::Client(state), &[fd.as_raw_fd()]).await
            }
            Outgoing::CancelDone { seq } => writer.send(&Msg::CancelDone { seq }, &[]).await,
        };
        if let Err(e) = sent {
            tracing::warn!("takeover: cannot write to the new process: {e}");
            writer.shutdown();
            return;
        }
    }
}

/// Read the successor's answers and cancels until the link ends; why it ended.
async fn read_loop(app: &Arc<App>, reader: &mut LinkReader, pending: &Pending) -> String {
    loop {
        match reader.recv().await {
            Ok((Msg::Ack { id, taken, reason }, _)) => {
                if let Some(ack) = pending.lock().remove(&id) {
                    let _ = ack.send(if taken { Ok(()) } else { Err(reason) });
                }
            }
            Ok((Msg::Cancel { seq, key }, _)) => {
                let app = app.clone();
                tokio::spawn(async move {
                    forward_cancel(&app, CancelKey::from_bytes(key)).await;
                    if let Some(out) = app.takeover.outbox() {
                        let _ = out.send(Outgoing::CancelDone { seq });
                    }
                });
            }
            Ok(_) => return "unexpected message from the new process".into(),
            Err(LinkError::Closed) => return "the new process closed the takeover socket".into(),
            Err(e) => return e.to_string(),
        }
    }
}

/// A cancel the successor received for a client of this process.
async fn forward_cancel(app: &App, key: CancelKey) {
    let Some(cancel) = app.cancels.lookup(&key) else {
        tracing::debug!("takeover: forwarded cancel request for a client not linked here");
        return;
    };
    let limit = app.config().settings.cancel_wait_timeout.as_duration();
    if let Err(e) = crate::cancel::forward((*cancel.addr).clone(), cancel.server_key, limit).await {
        tracing::warn!("cancel request to {} failed: {e}", cancel.addr);
    }
}

/// The successor is gone: accept again from the kept copies and serve every client still here.
fn take_back(app: &Arc<App>, pid: u32, why: &str, respawn: Respawn) {
    if !app.takeover.handed_over.swap(false, Ordering::AcqRel) {
        return;
    }
    // Back to Running first, so that the accept loops started below keep going.
    let running = app.lifecycle.take_back() || app.lifecycle.is_running();
    app.takeover.stop_listeners();
    if !running {
        tracing::warn!("takeover: lost process {pid} ({why}) while shutting down");
        return;
    }
    let workers = app.workers.count().max(1);
    let listeners = app
        .takeover
        .copies()
        .map_err(|e| e.to_string())
        .and_then(|(descs, fds)| super::listeners::rebuild(&descs, fds, workers));
    match listeners {
        Ok(l) => {
            respawn(app, l);
            if let Some(p) = app
                .config()
                .settings
                .pidfile
                .as_deref()
                .filter(|p| !p.is_empty())
            {
                if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
                    tracing::warn!("cannot rewrite pidfile {p}: {e}");
                }
            }
            tracing::warn!(
                "takeover: lost process {pid} before it took everything over ({why}); this \
                 process accepts and serves again"
            );
        }
        Err(e) => {
            tracing::error!("takeover: lost process {pid} ({why}), and cannot accept again: {e}")
        }
    }
}
