//! The session's side of a lost server (transaction and statement mode, `forward/lost.rs`):
//! the client is told, the broken server is closed (never back to the pool), and until the
//! client's failed transaction, batch or COPY is over its messages are answered here, with no
//! server (`forward/after_loss.rs`). Session state the pooler cannot put back on another server
//! (what pins the client) ends the client with FATAL instead, naming that state.

use bytes::{Buf, BytesMut};
use sluice_protocol::peek_header;
use tokio::io::AsyncWriteExt;

use super::Session;
use crate::app::App;
use crate::client::kill::KillSwitch;
use crate::conn::{ClientConn, EndReason, CLIENT_READ_CHUNK};
use crate::error::{sqlstate, ClientNotice};
use crate::forward::after_loss::Step;
use crate::forward::lost::ServerLost;
use crate::forward::Prepared;
use crate::pool::PoolSettings;
use crate::stats::PoolStats;
use sluice_config::PoolMode;

/// Tell the client about the loss and leave it in the state the loss left it in. Err: the
/// session ends (the client left, or its session state cannot be carried on).
pub(super) async fn server_lost(
    client: &mut ClientConn,
    s: &mut Session,
    server_id: impl std::fmt::Display,
    lost: Box<ServerLost>,
) -> Result<(), EndReason> {
    let ServerLost {
        reply,
        notice,
        state,
        client_skip,
    } = *lost;
    tracing::warn!(
        "C-{}: {} S-{server_id}: {} ({}); the client goes on",
        client.id,
        client.label(),
        notice.message,
        notice.sqlstate
    );
    if client.stream.write_all(&reply).await.is_err() {
        return Err(EndReason::ClientEof);
    }
    if let Some(feature) = s.tracker.pinned() {
        // What pins the client lived on that server only: it must not go on without it.
        return Err(EndReason::Error(ClientNotice::new(
            sqlstate::CONNECTION_FAILURE,
            format!(
                "{}; the session's {} cannot be restored on another server",
                notice.message,
                feature.describe()
            ),
        )));
    }
    discard(client, client_skip, &s.entry.kill, &s.pool.stats).await?;
    s.after_loss = (!state.is_done()).then(|| Box::new(state));
    Ok(())
}

/// What `answer` did with the request at the front of the client's buffer.
pub(super) enum Answered {
    /// Answered here: wait for the next request.
    Done,
    /// The loss is behind: this request goes to a server as usual.
    HandOff,
}

/// Answer the request whose header is at the front of the client's buffer, while the loss
/// holds (`Session::after_loss`).
pub(super) async fn answer(
    app: &App,
    client: &mut ClientConn,
    s: &mut Session,
    settings: &PoolSettings,
) -> Result<Answered, EndReason> {
    let max_packet = settings.connect.max_packet_size;
    let Ok(Some(header)) = peek_header(&client.rbuf, max_packet) else {
        // (`wait_for_request` checked the header.)
        return Ok(Answered::HandOff);
    };
    let total = header.total_len();
    let Some(state) = s.after_loss.as_deref_mut() else {
        return Ok(Answered::HandOff);
    };
    let max_prepared = settings.session.max_prepared;
    let mut named = (settings.mode != PoolMode::Session && max_prepared > 0).then_some(Prepared {
        registry: &app.statements,
        client: &mut s.statements,
        max_per_server: max_prepared,
    });
    let mut out = BytesMut::new();
    match state.on_message(header.tag, None, named.as_mut(), &mut out) {
        Step::HandOff
            if !state.is_done() && header.tag != sluice_protocol::frontend_tag::TERMINATE =>
        {
            // (Only a message type the protocol does not define, which `wait_for_request`
            // refuses first: never to a server while the failed block holds.)
            return Err(EndReason::Error(ClientNotice::new(
                sqlstate::PROTOCOL_VIOLATION,
                sluice_protocol::frontend_tag::undefined_message(header.tag),
            )));
        }
        Step::HandOff => {
            s.after_loss = None;
            return Ok(Answered::HandOff);
        }
        Step::Consumed => discard(client, total, &s.entry.kill, &s.pool.stats).await?,
        Step::NeedBody => {
            while client.rbuf.len() < total {
                read_more(client, &s.entry.kill, &s.pool.stats).await?;
            }
            let body = &client.rbuf[5..total];
            let step = state.on_message(header.tag, Some(body), named.as_mut(), &mut out);
            debug_assert_eq!(step, Step::Consumed);
            client.rbuf.advance(total);
        }
    }
    if state.is_done() {
        s.after_loss = None;
    }
    if !out.is_empty() && client.stream.write_all(&out).await.is_err() {
        return Err(EndReason::ClientEof);
    }
    Ok(Answered::Done)
}

/// Drop `n` bytes of the client's stream (buffered first, then as they arrive): a message
/// answered without its body (COPY data), or the rest of one cut off by the loss.
async fn discard(
    client: &mut ClientConn,
    mut n: usize,
    kill: &KillSwitch,
    stats: &crate::stats::PoolStats,
) -> Result<(), EndReason> {
    loop {
        let now = n.min(client.rbuf.len());
        client.rbuf.advance(now);
        n -= now;
        if n == 0 {
            return Ok(());
        }
        read_more(client, kill, stats).await?;
    }
}

async fn read_more(
    client: &mut ClientConn,
    kill: &KillSwitch,
    stats: &crate::stats::PoolStats,
) -> Result<(), EndReason> {
    tokio::select! {
        biased;
        _ = kill.cancelled_armed() => Err(EndReason::Error(kill.notice())),
        r = client.stream.read_when_ready(&mut client.rbuf, CLIENT_READ_CHUNK) => match r {
            Ok(0) | Err(_) => Err(EndReason::ClientEof),
            Ok(n) => {
                PoolStats::add(&stats.bytes_received, n as u64);
                Ok(())
            }
        },
    }
}
