//! Replication clients (`replication=database` for logical, a true boolean for physical
//! replication; PgBouncer 1.23+): pg_basebackup, pg_receivewal, pg_recvlogical, subscriptions.
//! After authentication each gets a server of its own (`Pool::open_dedicated`), logged in with
//! `replication`, the client's tracked startup parameters and its `options` as they are (a
//! physical replication connection accepts no SET); the client is greeted with that server's
//! parameters, and from then on bytes are relayed both ways untouched (COPY BOTH streams) until
//! either side closes. The server is never pooled: it closes with its client.

use std::sync::Arc;

use bytes::BytesMut;
use sluice_protocol::{encode_backend_key_data, encode_parameter_status, encode_ready_for_query};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::registry::{ClientEntry, ClientState};
use super::session::PoolMember;
pub use super::startup::Replication;
use super::startup::StartupInfo;
use crate::app::App;
use crate::conn::{ClientConn, EndReason};
use crate::pool::servers::ServerState;
use crate::stats::PoolStats;

/// A replication client that has logged in to its pool, before it has a server.
pub struct Start {
    member: PoolMember,
    info: StartupInfo,
}

impl Start {
    pub(super) fn new(member: PoolMember, info: StartupInfo) -> Self {
        Start { member, info }
    }

    /// The startup parameters its server gets after the pool's own.
    fn server_params(&self) -> Vec<(String, String)> {
        let mut out = vec![(
            "replication".to_string(),
            self.info.replication.startup_value().to_string(),
        )];
        // The tracked ones, and `options` as the client sent it.
        for (k, v) in self.info.params.iter() {
            out.push((k.to_string(), v.to_string()));
        }
        out
    }
}

/// Run a replication client to its end: wait for room in the pool, open its server, greet the
/// client, relay.
pub async fn run(
    app: &Arc<App>,
    client: &mut ClientConn,
    entry: &Arc<ClientEntry>,
    start: Box<Start>,
) -> EndReason {
    let kind = start.info.replication;
    let pool = start.member.pool.clone();
    let _ = entry.replication.set(kind.as_str());
    if let Some(a) = start.info.params.get("application_name") {
        entry.application_name.publish_str(a);
    }
    let _ = entry
        .identity
        .set((start.info.database.clone(), start.info.user.clone()));
    entry.request_arrived(tokio::time::Instant::now().into_std());
    let params = start.server_params();
    let opened = tokio::select! {
        biased;
        _ = entry.kill.cancelled() => return EndReason::Error(entry.kill.notice()),
        r = pool.open_dedicated(kind.as_str(), &params) => r,
    };
    let mut server = match opened {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("{}: replication server login failed: {e}", pool.key);
            return EndReason::Error(e.client_notice());
        }
    };
    tracing::info!(
        "S-{}: {} new replication connection to server {}",
        server.id,
        pool.key,
        server.addr
    );
    let now = tokio::time::Instant::now();
    server.set_book_state(ServerState::Active, now);
    PoolStats::add(&pool.stats.server_assignments, 1);
    // The rest of the client's welcome is its own server's: every ParameterStatus it sent, our cancel key
    // (a CancelRequest with it reaches this server), and its ReadyForQuery.
    let cancel = app.cancels.register(app.config().settings.peer_id);
    cancel.slot.link(&server.addr, server.backend_key);
    // AuthenticationOk (and a NegotiateProtocolVersion) wait in the write buffer.
    let mut welcome = std::mem::take(&mut client.wbuf);
    for (k, v) in server.params.iter() {
        encode_parameter_status(k, v, &mut welcome);
    }
    encode_backend_key_data(cancel.key, &mut welcome);
    encode_ready_for_query(server.status, &mut welcome);
    entry
        .server_id
        .store(server.id.0, std::sync::atomic::Ordering::Relaxed);
    entry.set_state(ClientState::Active);
    let ended = tokio::select! {
        biased;
        _ = entry.kill.cancelled() => Ended::Killed,
        e = relay(client, &mut server.stream, &mut server.rbuf, welcome, &pool.stats) => e,
    };
    entry
        .server_id
        .store(0, std::sync::atomic::Ordering::Relaxed);
    let why = match ended {
        Ended::Server => "server closed the connection",
        _ => "replication client was closed",
    };
    tracing::info!("S-{}: {} closing because: {why}", server.id, pool.key);
    drop(server);
    drop(cancel);
    match ended {
        Ended::Killed => EndReason::Error(entry.kill.notice()),
        Ended::Client | Ended::Server => EndReason::ClientClosed,
    }
}

/// Which side ended the relay.
enum Ended {
    Client,
    Server,
    Killed,
}

/// Bytes both ways until one side closes or fails: first the welcome and anything the server
/// sent after its login, then whatever the client pipelined behind its startup packet.
async fn relay(
    client: &mut ClientConn,
    server: &mut crate::net::Stream,
    server_rbuf: &mut BytesMut,
    mut welcome: BytesMut,
    stats: &crate::stats::StatsShards,
) -> Ended {
    welcome.extend_from_slice(server_rbuf);
    server_rbuf.clear();
    if client.stream.write_all(&welcome).await.is_err() || client.stream.flush().await.is_err() {
        return Ended::Client;
    }
    if !client.rbuf.is_empty() {
        PoolStats::add(&stats.bytes_received, client.rbuf.len() as u64);
        if server.write_all(&client.rbuf).await.is_err() {
            return Ended::Server;
        }
        client.rbuf.clear();
    }
    let (mut cr, mut cw) = tokio::io::split(&mut client.stream);
    let (mut sr, mut sw) = tokio::io::split(server);
    let up = pipe(&mut cr, &mut sw, |n| {
        PoolStats::add(&stats.bytes_received, n)
    });
    let down = pipe(&mut sr, &mut cw, |n| PoolStats::add(&stats.bytes_sent, n));
    tokio::select! {
        _ = up => Ended::Client,
        _ = down => {
            // The server's last words (a FATAL) were passed on; the client sees it close.
            let _ = cw.shutdown().await;
            Ended::Server
        }
    }
}

/// Copy until EOF or an error, counting what was copied.
async fn pipe<R, W>(r: &mut R, w: &mut W, count: impl Fn(u64)) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
        count(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::Replication::{self, *};

    #[test]
    fn values_as_postgresql_reads_them() {
        assert_eq!(Replication::parse("database"), Some(Logical));
        for v in ["true", "t", "TRUE", "tr", "yes", "y", "on", "ON", "1"] {
            assert_eq!(Replication::parse(v), Some(Physical), "{v}");
        }
        for v in ["false", "f", "no", "n", "off", "of", "0", "FALSE"] {
            assert_eq!(Replication::parse(v), Some(None), "{v}");
        }
        for v in ["", "o", "DATABASE", "foo", "2", "truee", "database "] {
            assert_eq!(Replication::parse(v), Option::None, "{v:?}");
        }
    }
}
