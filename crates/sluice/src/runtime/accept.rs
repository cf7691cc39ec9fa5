//! The accept loops over the listening sockets (`net/listen.rs`): one task per client
//! (`dispatch::serve`), stopping when the lifecycle says so, while SUSPEND holds, or for workers
//! that take no clients.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use super::wake_gate::WakeGated;
use crate::app::App;
use crate::lifecycle::Phase;
use crate::net::listen::{apply_defer_accept, TcpListening};
use crate::net::socket::{tcp_tuning, tune_tcp};
use crate::net::{PeerAddr, Stream};

/// An accept loop ends for a shutdown (not a hand-over): the copies of the listening sockets kept
/// for a takeover go first, so that the sockets close with the accept loops (with so_reuseport,
/// new connections then go to the other processes of the port, and a closed port refuses).
fn stop_for_good(app: &App, phase: &watch::Receiver<Phase>) {
    if *phase.borrow() != Phase::HandingOver {
        app.takeover.forget_listeners();
    }
}

/// While SUSPEND holds, accept nothing: new connections wait in the listen backlog, as with
/// PgBouncer's suspended listeners. False when the pooler stops accepting meanwhile (`accepts`:
/// the phases in which this listener accepts).
async fn wait_while_suspended(
    app: &App,
    phase: &mut watch::Receiver<Phase>,
    accepts: fn(Phase) -> bool,
) -> bool {
    let gate = app.control.gate();
    while gate.is_suspended() {
        tokio::select! {
            _ = gate.resumed() => {}
            r = phase.changed() => {
                if r.is_err() || !accepts(*phase.borrow()) {
                    return false;
                }
            }
        }
    }
    true
}

/// Accept TCP clients until the pooler stops accepting (any phase but Running). Runs on the worker
/// that owns `listener` (registered here, so it wakes this worker) and keeps its clients there.
pub async fn accept_tcp(app: Arc<App>, listening: TcpListening, mut phase: watch::Receiver<Phase>) {
    let listener = match TcpListener::from_std(listening.listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot register a listening socket: {e}");
            return;
        }
    };
    // tcp_defer_accept as configured now; a RELOAD or SET that changes it is applied at the
    // next accepted connection (each accept loop owns its socket, so no other task touches it).
    let mut defer = app.config().settings.tcp_defer_accept;
    apply_defer_accept(&listener, defer);
    // Bound to one IP, the listener's address is every accepted connection's local address.
    let local = listener
        .local_addr()
        .ok()
        .filter(|a| !a.ip().is_unspecified());
    let mut active = listening
        .steers
        .then(|| app.workers.watch_active())
        .flatten();
    if let Some(n) = active.as_mut().map(|a| *a.borrow_and_update()) {
        if !steer(&listener, n) {
            active = None;
        }
    }
    loop {
        if !wait_while_suspended(&app, &mut phase, Phase::accepts_tcp).await {
            stop_for_good(&app, &phase);
            return;
        }
        let active_changed = async {
            match &mut active {
                Some(a) => Stop::Active(a.changed().await.is_ok()),
                None => std::future::pending().await,
            }
        };
        let stop = accept_stretch(
            &app,
            &mut phase,
            active_changed,
            || listener.accept(),
            |(sock, addr)| {
                let cfg = app.config();
                tune_tcp(&sock, &tcp_tuning(&cfg));
                if cfg.settings.tcp_defer_accept != defer {
                    defer = cfg.settings.tcp_defer_accept;
                    apply_defer_accept(&listener, defer);
                }
                tokio::spawn(crate::dispatch::serve(
                    app.clone(),
                    Stream::Tcp(sock),
                    PeerAddr::Tcp(addr),
                    local,
                ));
            },
        )
        .await;
        match stop {
            Stop::Active(ok) => {
                let n = active
                    .as_mut()
                    .filter(|_| ok)
                    .map(|a| *a.borrow_and_update());
                if !n.is_some_and(|n| steer(&listener, n)) {
                    active = None;
                }
            }
            Stop::Suspended => {}
            Stop::Phase(ok) => {
                // Handed over: the successor accepts from this very socket (its queue is its).
                if ok && *phase.borrow() == Phase::HandingOver {
                    return;
                }
                if !ok || !phase.borrow().accepts_tcp() {
                    stop_for_good(&app, &phase);
                    // Closing the socket resets the connections already in its accept queue;
                    // with so_reuseport the kernel may have queued some here a moment ago, while
                    // another process of the port waits for them (a rolling restart). Serve those
                    // first: they are clients of this process, which lets them finish.
                    for (sock, addr) in drain_accept_queue(&listener) {
                        tune_tcp(&sock, &tcp_tuning(&app.config()));
                        tokio::spawn(crate::dispatch::serve(
                            app.clone(),
                            Stream::Tcp(sock),
                            PeerAddr::Tcp(addr),
                            local,
                        ));
                    }
                    return;
                }
            }
        }
    }
}

/// The connections waiting in `listener`'s accept queue now, accepted without waiting (the
/// readiness tokio last saw may be stale, so the system call is made until it says EAGAIN).
fn drain_accept_queue(listener: &TcpListener) -> Vec<(tokio::net::TcpStream, SocketAddr)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut out = Vec::new();
    loop {
        // SAFETY: accept4 on our listening socket's fd with no address buffer; the returned fd,
        // if any, is new and owned by the std stream made from it below.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if fd < 0 {
            return out;
        }
        // SAFETY: `fd` was just returned by accept4 and is owned by nothing else.
        let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
        let Ok(addr) = std.peer_addr() else { continue };
        if let Ok(sock) = tokio::net::TcpStream::from_std(std) {
            out.push((sock, addr));
        }
    }
}

/// Accept connections (`accept`, each handed to `on_accept`) until the pooler stops accepting for
/// a while: SUSPEND, a lifecycle phase change, or `extra` (the TCP loop's change of active
/// workers). A failed accept is logged and retried after 50 ms. The futures that end the stretch
/// are made once per stretch, not per accepted connection: each links a waiter into a shared watch
/// channel (a lock and a list), which was ~2,000 instructions of every login. Behind a `WakeGated`
/// they are polled again only when one of them woke the task, not at every accepted connection.
async fn accept_stretch<C, A, F>(
    app: &Arc<App>,
    phase: &mut watch::Receiver<Phase>,
    extra: impl std::future::Future<Output = Stop>,
    mut accept: A,
    mut on_accept: impl FnMut(C),
) -> Stop
where
    A: FnMut() -> F,
    F: std::future::Future<Output = io::Result<C>>,
{
    let suspended = app.control.gate().suspended();
    let phase_changed = phase.changed();
    let mut stop = WakeGated::new(async {
        // `biased`: no random branch order to draw.
        tokio::select! {
            biased;
            s = extra => s,
            _ = suspended => Stop::Suspended,
            r = phase_changed => Stop::Phase(r.is_ok()),
        }
    });
    loop {
        tokio::select! {
            biased;
            s = &mut stop => return s,
            r = accept() => match r {
                Ok(c) => on_accept(c),
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Why a stretch of accepting ended.
enum Stop {
    /// The number of active workers changed (`true`) or its sender is gone.
    Active(bool),
    Suspended,
    /// The lifecycle phase changed (`true`) or its sender is gone.
    Phase(bool),
}

/// Point new connections of `listener`'s SO_REUSEPORT group at the first `n` workers. When the
/// kernel refuses the program, steering stops (logins then land on any worker, and those landing
/// on an inactive one move after their first transaction). False when steering stops.
fn steer(listener: &TcpListener, n: usize) -> bool {
    use std::os::fd::AsFd;
    match crate::workers::steer::steer(listener.as_fd(), n) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("cannot steer new connections to the active workers: {e}");
            false
        }
    }
}

/// Start a Unix-socket client's task on the next worker (the Unix socket is accepted on worker 0
/// alone). A socket moving to another worker is re-registered with that worker's IO driver
/// (`into_std` / `from_std`), so its readiness never crosses threads.
fn spawn_unix_client(app: &Arc<App>, sock: tokio::net::UnixStream, pid: Option<i32>) {
    let app = app.clone();
    let Some(worker) = app.workers.next_other() else {
        tokio::spawn(crate::dispatch::serve(
            app,
            Stream::Unix(sock),
            PeerAddr::Unix { pid },
            None,
        ));
        return;
    };
    match sock.into_std() {
        Ok(std) => {
            worker.clone().spawn(async move {
                match tokio::net::UnixStream::from_std(std) {
                    Ok(sock) => {
                        crate::dispatch::serve(
                            app,
                            Stream::Unix(sock),
                            PeerAddr::Unix { pid },
                            None,
                        )
                        .await
                    }
                    Err(e) => tracing::warn!("cannot hand a client to a worker: {e}"),
                }
            });
        }
        Err(e) => tracing::warn!("cannot hand a client to a worker: {e}"),
    }
}

/// Accept Unix-socket clients until the pooler stops accepting (`accept_stretch`): through the
/// shutdown modes too, for the admin console (`Phase::accepts_unix`).
pub async fn accept_unix(app: Arc<App>, listener: UnixListener, mut phase: watch::Receiver<Phase>) {
    loop {
        if !wait_while_suspended(&app, &mut phase, Phase::accepts_unix).await {
            stop_for_good(&app, &phase);
            return;
        }
        let stop = accept_stretch(
            &app,
            &mut phase,
            std::future::pending(),
            || listener.accept(),
            |(sock, _)| {
                let pid = sock.peer_cred().ok().and_then(|c| c.pid());
                spawn_unix_client(&app, sock, pid);
            },
        )
        .await;
        if let Stop::Phase(ok) = stop {
            if !ok || !phase.borrow().accepts_unix() {
                stop_for_good(&app, &phase);
                return;
            }
        }
    }
}
