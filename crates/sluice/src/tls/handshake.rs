//! The client side of the startup phase that touches TLS: spotting a direct TLS ClientHello, and
//! upgrading the client's socket in place.

use super::ClientTls;
use crate::auth::cpu::AuthCpu;
use crate::conn::{ClientConn, EndReason};
use crate::error::{sqlstate, ClientNotice};
use crate::net::Stream;

/// First byte of a TLS record carrying a handshake message (the ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// True when a plain TCP client opens with a TLS ClientHello instead of a startup packet (direct
/// TLS, PostgreSQL 17's `sslnegotiation=direct`). Peeks, so nothing is consumed. Err = closed.
pub async fn peek_direct(client: &ClientConn) -> std::io::Result<bool> {
    let Stream::Tcp(tcp) = &client.stream else {
        return Ok(false);
    };
    if !client.rbuf.is_empty() {
        return Ok(false);
    }
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await? {
        0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
        _ => Ok(first[0] == TLS_HANDSHAKE_RECORD),
    }
}

/// Replace the client's plain TCP stream by TLS and record what the handshake told us. The
/// handshake runs on the authentication threads (`cpu`), not on the client's worker.
pub async fn upgrade(
    tls: &ClientTls,
    client: &mut ClientConn,
    direct: bool,
    cpu: &AuthCpu,
) -> Result<(), EndReason> {
    let Stream::Tcp(tcp) = client.stream.take() else {
        return Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            "TLS is only available over TCP",
        )));
    };
    match tls.accept(tcp, direct, cpu).await {
        Ok((stream, facts)) => {
            client.stream = stream;
            tracing::debug!(
                "C-{}: {} TLS established: {}",
                client.id,
                client.label(),
                facts.description
            );
            client.tls = Some(Box::new(facts));
            Ok(())
        }
        Err(e) => {
            tracing::warn!("C-{}: {} {e}", client.id, client.label());
            Err(EndReason::NoSession)
        }
    }
}
