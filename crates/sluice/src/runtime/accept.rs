//! Listening sockets (TCP per listen_addr, the Unix socket `.s.PGSQL.<port>`) and accept loops that
//! spawn one task per client and stop when the lifecycle says so.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use sluice_config::Config;
use socket2::{Domain, Socket, Type};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::app::App;
use crate::lifecycle::Phase;
use crate::net::socket::{set_defer_accept, tune_tcp};
use crate::net::{PeerAddr, Stream};
use crate::targets::tcp_tuning;
use crate::wake_gate::WakeGated;

/// Why listening failed; the message names the address and the cause.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot listen on {addr}: {source}")]
    Tcp { addr: String, source: io::Error },
    #[error("cannot resolve listen_addr {0}")]
    Resolve(String),
    #[error("unix socket is in use, cannot continue: {0}")]
    UnixInUse(String),
    #[error("cannot listen on unix socket {path}: {source}")]
    Unix { path: String, source: io::Error },
    #[error("unix_socket_group {group}: {reason}")]
    Group { group: String, reason: String },
}

/// One TCP listening socket.
pub struct TcpListening {
    pub worker: usize,
    pub listener: std::net::TcpListener,
    /// This socket's accept loop steers its SO_REUSEPORT group to the active workers
    /// (`workers::steer`): worker 0's socket of each address, unless `so_reuseport` lets other
    /// processes join the group.
    pub steers: bool,
}

pub struct Listeners {
    /// TCP listening sockets, each with the worker that accepts on it (see `bind`).
    pub tcp: Vec<TcpListening>,
    pub unix: Option<(UnixListener, PathBuf)>,
    /// The HTTP endpoint for /metrics and /health (`[sluice] metrics_listen_addr`).
    pub metrics: Option<TcpListener>,
    /// The takeover socket beside the Unix socket (`takeover/`), mode 0600.
    pub control: Option<(UnixListener, PathBuf)>,
}

impl Listeners {
    /// The socket files this process removes at exit (unless a successor took them).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.unix
            .iter()
            .chain(&self.control)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

/// Bind everything the config asks for. Must run inside a tokio runtime.
///
/// With several workers, every TCP address gets one SO_REUSEPORT socket per worker: the kernel
/// spreads new connections over them and each worker accepts its own, so a login never hops
/// between threads. So that a second pooler cannot join those sockets by accident, the address
/// is first bound once without SO_REUSEPORT (which fails while anyone listens there) unless
/// `so_reuseport` says sharing the port is wanted.
pub fn bind(cfg: &Config, workers: usize) -> Result<Listeners, BindError> {
    let s = &cfg.settings;
    // The HTTP endpoint first: once the client port accepts, /health answers too.
    let metrics = match cfg.sluice.metrics_listen_addr.as_deref().map(str::trim) {
        Some(a) if !a.is_empty() => {
            let addr = a
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| it.next())
                .ok_or_else(|| BindError::Resolve(a.to_string()))?;
            Some(
                bind_tcp(addr, s.listen_backlog, false).map_err(|e| BindError::Tcp {
                    addr: addr.to_string(),
                    source: e,
                })?,
            )
        }
        _ => None,
    };
    let unix = if s.unix_socket_dir.is_empty() {
        None
    } else {
        Some(bind_unix(
            &s.unix_socket_dir,
            s.listen_port,
            s.unix_socket_mode.0,
            s.unix_socket_group.as_deref().filter(|g| !g.is_empty()),
        )?)
    };
    let remove = |unix: &Option<(UnixListener, PathBuf)>| {
        if let Some((_, path)) = unix {
            let _ = std::fs::remove_file(path);
        }
    };
    let control = match crate::takeover::control_path(s).map(|p| bind_control(&p)) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            remove(&unix);
            return Err(e);
        }
        None => None,
    };
    // The Unix socket before the TCP ones: once the TCP port accepts, every listener is there (a
    // readiness probe on the port may go on to use the socket).
    let tcp = match bind_tcp_all(s, workers) {
        Ok(t) => t,
        Err(e) => {
            remove(&unix);
            remove(&control);
            return Err(e);
        }
    };
    Ok(Listeners {
        tcp,
        unix,
        metrics,
        control,
    })
}

/// The takeover socket: owner only (the peer's uid is checked too, `takeover::give`).
fn bind_control(path: &std::path::Path) -> Result<(UnixListener, PathBuf), BindError> {
    let shown = path.display().to_string();
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(BindError::UnixInUse(shown));
        }
        let _ = std::fs::remove_file(path);
    }
    let l = UnixListener::bind(path).map_err(|e| BindError::Unix {
        path: shown.clone(),
        source: e,
    })?;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(path);
        return Err(BindError::Unix {
            path: shown,
            source: e,
        });
    }
    Ok((l, path.to_path_buf()))
}

/// Every TCP listening socket of listen_addr (see `bind`).
fn bind_tcp_all(
    s: &sluice_config::Settings,
    workers: usize,
) -> Result<Vec<TcpListening>, BindError> {
    let mut tcp = Vec::new();
    if let Some(addrs) = s.listen_addr.as_deref().filter(|a| !a.trim().is_empty()) {
        for a in addrs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let resolved: Vec<SocketAddr> = if a == "*" {
                vec![
                    SocketAddr::from(([0, 0, 0, 0], s.listen_port)),
                    SocketAddr::from(([0u16; 8], s.listen_port)),
                ]
            } else {
                (a, s.listen_port)
                    .to_socket_addrs()
                    .map_err(|_| BindError::Resolve(a.to_string()))?
                    .collect()
            };
            for (i, addr) in resolved.iter().enumerate() {
                match bind_per_worker(*addr, s.listen_backlog, s.so_reuseport, workers) {
                    Ok(ls) => tcp.extend(ls),
                    // '*' also tries IPv6; a host without IPv6 is fine with IPv4 alone.
                    Err(_) if a == "*" && i == 1 => {}
                    Err(e) => {
                        return Err(BindError::Tcp {
                            addr: addr.to_string(),
                            source: e,
                        })
                    }
                }
            }
        }
    }
    Ok(tcp)
}

/// The sockets of one TCP address: one per worker (see `bind`), with the worker index.
fn bind_per_worker(
    addr: SocketAddr,
    backlog: u32,
    so_reuseport: bool,
    workers: usize,
) -> io::Result<Vec<TcpListening>> {
    if workers <= 1 {
        return Ok(vec![TcpListening {
            worker: 0,
            listener: bind_std(addr, backlog, so_reuseport)?,
            steers: false,
        }]);
    }
    if !so_reuseport {
        let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        probe.set_reuse_address(true)?;
        if addr.is_ipv6() {
            probe.set_only_v6(true)?;
        }
        probe.bind(&addr.into())?;
    }
    let mut out = Vec::with_capacity(workers);
    // listen_port = 0: the first socket picks the port, the others join it.
    let mut addr = addr;
    // Bound in worker order: a socket's index in the kernel's group is its worker (`steer.rs`).
    for w in 0..workers {
        let l = bind_std(addr, backlog, true)?;
        addr = l.local_addr()?;
        out.push(TcpListening {
            worker: w,
            listener: l,
            steers: w == 0 && !so_reuseport,
        });
    }
    Ok(out)
}

fn bind_tcp(addr: SocketAddr, backlog: u32, reuseport: bool) -> io::Result<TcpListener> {
    TcpListener::from_std(bind_std(addr, backlog, reuseport)?)
}

fn bind_std(addr: SocketAddr, backlog: u32, reuseport: bool) -> io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    if reuseport {
        sock.set_reuse_port(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(sock.into())
}

fn bind_unix(
    dir: &str,
    port: u16,
    mode: u32,
    group: Option<&str>,
) -> Result<(UnixListener, PathBuf), BindError> {
    let path = PathBuf::from(dir).join(format!(".s.PGSQL.{port}"));
    let shown = path.display().to_string();
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(BindError::UnixInUse(shown));
        }
        let _ = std::fs::remove_file(&path);
    }
    let l = UnixListener::bind(&path).map_err(|e| BindError::Unix {
        path: shown.clone(),
        source: e,
    })?;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
    if let Some(group) = group {
        if let Err(reason) = chown_group(&path, group) {
            let _ = std::fs::remove_file(&path);
            return Err(BindError::Group {
                group: group.to_string(),
                reason,
            });
        }
    }
    Ok((l, path))
}

/// Give the socket file to `group` (a name or a numeric gid), for unix_socket_group.
fn chown_group(path: &std::path::Path, group: &str) -> Result<(), String> {
    let gid = match group.parse::<u32>() {
        Ok(n) => nix::unistd::Gid::from_raw(n),
        Err(_) => match nix::unistd::Group::from_name(group) {
            Ok(Some(g)) => g.gid,
            Ok(None) => return Err("no such group".to_string()),
            Err(e) => return Err(format!("cannot look the group up: {e}")),
        },
    };
    nix::unistd::chown(path, None, Some(gid)).map_err(|e| format!("cannot chown the socket: {e}"))
}

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

fn apply_defer_accept(listener: &TcpListener, on: bool) {
    if let Err(e) = set_defer_accept(listener, on) {
        tracing::warn!("cannot set TCP_DEFER_ACCEPT on a listening socket: {e}");
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
