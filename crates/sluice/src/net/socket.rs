//! Socket options from the config (keepalive, user timeout, buffer sizes) applied with socket2, and
//! TCP_DEFER_ACCEPT on the listeners.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// The TCP tuning knobs of `[pgbouncer]` (tcp_keepalive, tcp_keepidle, ...), 0 meaning "OS default".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpTuning {
    pub keepalive: bool,
    pub keepidle: u32,
    pub keepintvl: u32,
    pub keepcnt: u32,
    pub user_timeout_ms: u32,
    pub socket_buffer: u32,
}

/// TCP tuning from [pgbouncer].
pub fn tcp_tuning(cfg: &sluice_config::Config) -> TcpTuning {
    let s = &cfg.settings;
    TcpTuning {
        keepalive: s.tcp_keepalive,
        keepidle: s.tcp_keepidle,
        keepintvl: s.tcp_keepintvl,
        keepcnt: s.tcp_keepcnt,
        user_timeout_ms: s.tcp_user_timeout,
        socket_buffer: s.tcp_socket_buffer,
    }
}

/// Apply the tuning and TCP_NODELAY (the pooler forwards whole protocol messages; Nagle only adds latency).
pub fn tune_tcp(stream: &TcpStream, t: &TcpTuning) {
    let _ = stream.set_nodelay(true);
    let sock = SockRef::from(stream);
    if t.keepalive {
        let mut ka = TcpKeepalive::new();
        if t.keepidle > 0 {
            ka = ka.with_time(Duration::from_secs(t.keepidle.into()));
        }
        if t.keepintvl > 0 {
            ka = ka.with_interval(Duration::from_secs(t.keepintvl.into()));
        }
        if t.keepcnt > 0 {
            ka = ka.with_retries(t.keepcnt);
        }
        let _ = sock.set_tcp_keepalive(&ka);
    }
    if t.user_timeout_ms > 0 {
        let _ = sock.set_tcp_user_timeout(Some(Duration::from_millis(t.user_timeout_ms.into())));
    }
    if t.socket_buffer > 0 {
        let _ = sock.set_send_buffer_size(t.socket_buffer as usize);
        let _ = sock.set_recv_buffer_size(t.socket_buffer as usize);
    }
}

/// Connect to the first of `addrs` that answers, tuned. tcp_socket_buffer is set before the
/// connect: the window scale is agreed in the handshake, and a buffer shrunk after it (to a few
/// KiB under a scale made for the default one) stalls every transfer on delayed ACKs (a
/// pg_basebackup through the pooler took minutes instead of a second).
pub async fn connect_tuned(addrs: &[std::net::SocketAddr], t: &TcpTuning) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to");
    for addr in addrs {
        let socket = match addr {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        if t.socket_buffer > 0 {
            let _ = socket.set_send_buffer_size(t.socket_buffer);
            let _ = socket.set_recv_buffer_size(t.socket_buffer);
        }
        match socket.connect(*addr).await {
            Ok(stream) => {
                tune_tcp(&stream, t);
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Seconds of TCP_DEFER_ACCEPT when `tcp_defer_accept` is on (PgBouncer's fixed value).
pub const DEFER_ACCEPT_SECS: libc::c_int = 45;

/// Set TCP_DEFER_ACCEPT on a listening socket (`DEFER_ACCEPT_SECS`, or 0 = off): the kernel
/// completes the handshake but hands the connection over only once data has arrived, or when the
/// time is up. Linux only; elsewhere a no-op.
pub fn set_defer_accept(listener: &impl AsFd, on: bool) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let secs: libc::c_int = if on { DEFER_ACCEPT_SECS } else { 0 };
        set_raw_option(
            listener.as_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            &secs,
        )
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (listener, on);
        Ok(())
    }
}

/// `setsockopt(fd, level, name, value)` for an option socket2 does not cover; `value` is passed
/// by address with its size (the kernel copies it).
pub(crate) fn set_raw_option<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live `T` of the size passed and the kernel only reads it during the
    // call; `fd` is borrowed from an open socket.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
