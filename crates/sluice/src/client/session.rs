//! The logged-in client: idle (unlinked) until a request arrives, waiting for a server, then linked
//! and relaying until the pool mode says the server goes back (transaction/statement) or the client
//! leaves (session). Every way out decides whether the server is clean enough to reuse.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::PoolMode;
use sluice_protocol::{frontend_tag, peek_header};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::login::Session;
use super::registry::ClientState;
use super::{ClientConn, EndReason};
use crate::app::App;
use crate::error::{sqlstate, ClientNotice};
use crate::forward::{Prepared, Relay, RelayEnd, RelayTimeouts};
use crate::lifecycle::Phase;
use crate::pool::{Pool, PooledServer};
use crate::server::params::set_statement;
use crate::server::query;

enum Idle {
    Request,
    Killed,
    Terminate,
    Closed,
    Timeout,
    Shutdown,
    Bad(String),
}

pub async fn run(app: &Arc<App>, client: &mut ClientConn, mut s: Session) -> EndReason {
    let mut phase = app.lifecycle.subscribe();
    loop {
        let settings = s.pool.settings();
        let max_packet = settings.connect.max_packet_size;
        let idle_limit = settings.client_idle_timeout;
        s.entry.set_state(ClientState::Idle);
        match wait_for_request(client, max_packet, idle_limit, &mut phase, &s.entry.kill).await {
            Idle::Request => {}
            Idle::Terminate | Idle::Closed => return EndReason::ClientClosed,
            Idle::Timeout => {
                return EndReason::Error(ClientNotice::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    "client_idle_timeout",
                ))
            }
            Idle::Shutdown => return EndReason::Shutdown,
            Idle::Bad(m) => {
                return EndReason::Error(ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, m))
            }
            Idle::Killed => return killed(),
        }
        if app.lifecycle.phase() == Phase::WaitForServers {
            return EndReason::Shutdown;
        }
        s.entry.set_state(ClientState::Waiting);
        let checkout = tokio::select! {
            r = s.pool.checkout() => r,
            _ = s.entry.kill.cancelled() => return killed(),
        };
        let mut server = match checkout {
            Ok(server) => server,
            Err(e) => return EndReason::Error(e.client_notice()),
        };
        s.entry.set_state(ClientState::Active);
        s.entry.server_id.store(server.id, Ordering::Relaxed);
        if let Some(sql) = set_statement(&app.tracked, &s.params, &server.params) {
            if let Err(e) = query::run_simple(&mut server, &sql, max_packet).await {
                tracing::warn!(
                    "C-{}: {} invalid server parameter: {e}",
                    client.id,
                    client.label
                );
                return EndReason::Error(ClientNotice::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("invalid server parameter: {e}"),
                ));
            }
        }
        s.cancel.slot.link(&server.addr, server.backend_key);
        let timeouts = RelayTimeouts {
            query_timeout: settings.query_timeout,
            idle_transaction_timeout: settings.idle_transaction_timeout,
            transaction_timeout: settings.transaction_timeout,
            client_idle_timeout: settings.client_idle_timeout,
        };
        let max_prepared = app.config().settings.max_prepared_statements as usize;
        let prepared = (settings.mode != PoolMode::Session && max_prepared > 0).then(|| Prepared {
            registry: &app.statements,
            client: &mut s.statements,
            max_per_server: max_prepared,
        });
        let relay = Relay::new(
            client,
            &mut server,
            &mut s.params,
            &app.tracked,
            &s.pool.stats,
            prepared,
            settings.mode,
            max_packet,
            timeouts,
        );
        // Dropping the relay mid-way is safe: the server is then not clean and gets closed.
        let end = tokio::select! {
            end = relay.run() => end,
            _ = s.entry.kill.cancelled() => RelayEnd::Fatal { notice: killed_notice(), server_clean: false },
        };
        s.cancel.slot.unlink();
        s.entry.server_id.store(0, Ordering::Relaxed);
        match end {
            RelayEnd::Released => {
                let reset = settings
                    .reset_always
                    .then(|| settings.reset_query())
                    .flatten();
                give_back(&s.pool, server, reset, max_packet).await;
            }
            RelayEnd::ClientGone { clean } => {
                if clean {
                    let reset = if settings.mode == PoolMode::Session || settings.reset_always {
                        settings.reset_query()
                    } else {
                        None
                    };
                    give_back(&s.pool, server, reset, max_packet).await;
                } else {
                    tracing::debug!(
                        "S-{}: closing server: client left mid-transaction",
                        server.id
                    );
                    drop(server);
                }
                return EndReason::ClientClosed;
            }
            RelayEnd::ServerGone(notice) => {
                drop(server);
                return EndReason::Error(notice);
            }
            RelayEnd::Fatal {
                notice,
                server_clean,
            } => {
                if server_clean {
                    let reset = settings.reset_query();
                    give_back(&s.pool, server, reset, max_packet).await;
                } else {
                    drop(server);
                }
                return EndReason::Error(notice);
            }
        }
    }
}

fn killed_notice() -> ClientNotice {
    ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, "admin forced disconnect")
}

fn killed() -> EndReason {
    EndReason::Error(killed_notice())
}

/// Return a clean server, after the reset query when one applies; a failing reset closes it.
async fn give_back(
    pool: &Arc<Pool>,
    mut server: PooledServer,
    reset: Option<&str>,
    max_packet: usize,
) {
    if let Some(q) = reset {
        if let Err(e) = query::run_simple(&mut server, q, max_packet).await {
            tracing::warn!("S-{}: server_reset_query failed, closing: {e}", server.id);
            drop(server);
            return;
        }
    }
    pool.release(server, true);
}

/// Wait, unlinked, until the client buffer holds the header of a request.
async fn wait_for_request(
    client: &mut ClientConn,
    max_packet: usize,
    idle_limit: Option<Duration>,
    phase: &mut watch::Receiver<Phase>,
    kill: &CancellationToken,
) -> Idle {
    let deadline = idle_limit.map(|d| tokio::time::Instant::now() + d);
    loop {
        match peek_header(&client.rbuf, max_packet) {
            Ok(Some(h)) if h.tag == frontend_tag::TERMINATE => return Idle::Terminate,
            Ok(Some(_)) => return Idle::Request,
            Ok(None) => {}
            Err(e) => return Idle::Bad(format!("bad packet header: {e}")),
        }
        if client.rbuf.capacity() - client.rbuf.len() < 512 {
            client.rbuf.reserve(4096);
        }
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = client.stream.read_buf(&mut client.rbuf) => match r {
                Ok(0) | Err(_) => return Idle::Closed,
                Ok(_) => {}
            },
            _ = sleep => return Idle::Timeout,
            _ = kill.cancelled() => return Idle::Killed,
            changed = phase.changed() => {
                if changed.is_err() || *phase.borrow() == Phase::Exit || *phase.borrow() == Phase::WaitForServers {
                    return Idle::Shutdown;
                }
            }
        }
    }
}
