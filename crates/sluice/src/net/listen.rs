//! Listening sockets: TCP per listen_addr (one per worker with so_reuseport), the Unix socket
//! `.s.PGSQL.<port>`, the HTTP endpoint and the takeover socket, bound with their socket options
//! (the TCP tuning of a listening socket: backlog, SO_REUSEPORT, TCP_DEFER_ACCEPT). The accept
//! loops over them are `runtime/accept.rs`.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use sluice_config::Config;
use socket2::{Domain, Socket, Type};
use tokio::net::{TcpListener, UnixListener};

use crate::net::socket::set_defer_accept;

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
                let buffer = s.tcp_socket_buffer;
                match bind_per_worker(*addr, s.listen_backlog, buffer, s.so_reuseport, workers) {
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
    buffer: u32,
    so_reuseport: bool,
    workers: usize,
) -> io::Result<Vec<TcpListening>> {
    if workers <= 1 {
        return Ok(vec![TcpListening {
            worker: 0,
            listener: bind_std(addr, backlog, buffer, so_reuseport)?,
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
        let l = bind_std(addr, backlog, buffer, true)?;
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
    TcpListener::from_std(bind_std(addr, backlog, 0, reuseport)?)
}

/// `buffer`: tcp_socket_buffer (0: the OS default), set on the listening socket so that accepted
/// connections have it from their handshake on (see `socket::connect_tuned`).
fn bind_std(
    addr: SocketAddr,
    backlog: u32,
    buffer: u32,
    reuseport: bool,
) -> io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if buffer > 0 {
        sock.set_send_buffer_size(buffer as usize)?;
        sock.set_recv_buffer_size(buffer as usize)?;
    }
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

/// TCP_DEFER_ACCEPT on a listening socket (tcp_defer_accept), or a warning.
pub fn apply_defer_accept(listener: &TcpListener, on: bool) {
    if let Err(e) = set_defer_accept(listener, on) {
        tracing::warn!("cannot set TCP_DEFER_ACCEPT on a listening socket: {e}");
    }
}
