//! Socket options from the config (keepalive, user timeout, buffer sizes) applied with socket2.

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
