//! The new process's side of a takeover: reach the running process, receive its listening
//! sockets (`connect`), tell it to stop accepting once this process is ready (`Successor::take`),
//! then adopt the clients it hands over and send it the cancel requests for the clients it still
//! serves, until it exits.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_config::Config;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::codec::{ClientState, Msg, VERSION};
use super::handle::{Predecessor, ToPredecessor as Outgoing};
use super::link::{self, LinkError, LinkReader, LinkWriter};
use super::{control_path, TakeoverError, ANSWER_TIMEOUT};
use crate::app::App;
use crate::client::guard::ClientGuard;
use crate::client::registry::Registration;
use crate::client::session::Session;
use crate::conn::ClientConn;
use crate::net::listen::Listeners;

/// Connected to the running process, holding its offer, not yet taken over.
pub struct Successor {
    reader: LinkReader,
    writer: LinkWriter,
    /// The running process's pid.
    pub old_pid: u32,
    /// How many of its workers take clients: this process starts with as many (its clients
    /// arrive all at once, before the balancer would have added workers for them).
    active_workers: usize,
}

/// What serves a client taken over (`dispatch::serve_adopted`), given by the caller of
/// `Successor::take`: the take side hands clients to the dispatch without importing it.
pub type ServeAdopted = fn(
    Arc<App>,
    ClientGuard,
    Registration,
    ClientConn,
    Box<Session>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Reach the running process of `cfg`'s port and take its offer: the listening sockets, made
/// into this process's `Listeners` for `workers` workers. Must run inside a tokio runtime.
pub async fn connect(
    cfg: &Config,
    workers: usize,
) -> Result<(Listeners, Successor), TakeoverError> {
    let path = control_path(&cfg.settings).ok_or(TakeoverError::NoSocketDir)?;
    let sock = UnixStream::connect(&path)
        .await
        .map_err(|source| TakeoverError::Connect {
            path: path.display().to_string(),
            source,
        })?;
    let (mut reader, writer) = link::split(sock);
    writer
        .send(
            &Msg::Hello {
                version: VERSION,
                pid: std::process::id(),
            },
            &[],
        )
        .await?;
    match reader.recv_within(ANSWER_TIMEOUT).await? {
        (
            Msg::Offer {
                pid,
                active_workers,
                listeners,
            },
            fds,
        ) => {
            let l = super::listeners::rebuild(&listeners, fds, workers)
                .map_err(TakeoverError::Listeners)?;
            tracing::info!(
                "takeover: process {pid} offers {} listening sockets: {}",
                listeners.len(),
                listeners
                    .iter()
                    .map(|l| l.addr.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Ok((
                l,
                Successor {
                    reader,
                    writer,
                    old_pid: pid,
                    active_workers: usize::from(active_workers),
                },
            ))
        }
        (Msg::Refused { reason }, _) => Err(TakeoverError::Refused(reason)),
        _ => Err(TakeoverError::Unexpected("expected an offer")),
    }
}

impl Successor {
    /// Tell the running process to stop accepting (this process accepts once this returns), then
    /// adopt its clients and forward cancels to it in the background.
    pub async fn take(self, app: &Arc<App>, serve: ServeAdopted) -> Result<(), TakeoverError> {
        let Successor {
            mut reader,
            writer,
            old_pid,
            active_workers,
        } = self;
        writer.send(&Msg::Take, &[]).await?;
        match reader.recv_within(ANSWER_TIMEOUT).await? {
            (Msg::Taken, _) => {}
            (Msg::Refused { reason }, _) => return Err(TakeoverError::Refused(reason)),
            _ => return Err(TakeoverError::Unexpected("expected Taken")),
        }
        if active_workers > app.workers.active() {
            app.workers.set_active(active_workers);
        }
        let (queue, rx) = mpsc::unbounded_channel();
        let cancels = Arc::new(Mutex::new(HashMap::new()));
        *app.takeover.predecessor.lock() = Some(Predecessor {
            pid: old_pid,
            queue: queue.clone(),
            next_seq: AtomicU64::new(1),
            cancels: cancels.clone(),
        });
        tracing::info!(
            "takeover: took over the listening sockets of process {old_pid}; its clients follow \
             at their next transaction boundary"
        );
        tokio::spawn(write_loop(writer, rx));
        tokio::spawn(read_loop(
            app.clone(),
            reader,
            queue,
            cancels,
            old_pid,
            serve,
        ));
        Ok(())
    }
}

async fn write_loop(writer: LinkWriter, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    while let Some(out) = rx.recv().await {
        let (msg, written) = match out {
            Outgoing::Ack {
                id,
                taken,
                reason,
                written,
            } => (Msg::Ack { id, taken, reason }, written),
            Outgoing::Cancel { seq, key } => (Msg::Cancel { seq, key }, None),
        };
        let ok = writer.send(&msg, &[]).await.is_ok();
        if let Some(w) = written {
            let _ = w.send(ok);
        }
        if !ok {
            writer.shutdown();
            return;
        }
    }
}

async fn read_loop(
    app: Arc<App>,
    mut reader: LinkReader,
    queue: mpsc::UnboundedSender<Outgoing>,
    cancels: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    pid: u32,
    serve: ServeAdopted,
) {
    loop {
        match reader.recv().await {
            Ok((Msg::Client(state), mut fds)) => match fds.pop() {
                Some(fd) => adopt_one(&app, *state, fd, &queue, serve),
                None => break,
            },
            Ok((Msg::CancelDone { seq }, _)) => {
                if let Some(done) = cancels.lock().remove(&seq) {
                    let _ = done.send(());
                }
            }
            Ok(_) => {
                tracing::warn!("takeover: unexpected message from process {pid}; link closed");
                break;
            }
            Err(LinkError::Closed) => {
                tracing::info!("takeover: process {pid} has exited; the takeover is complete");
                break;
            }
            Err(e) => {
                tracing::warn!(
                    "takeover: link to process {pid} failed ({e}); the clients still there stay there"
                );
                break;
            }
        }
    }
    *app.takeover.predecessor.lock() = None;
    cancels.lock().clear();
}

/// Adopt one client, answer, and run its session once the answer is written: the old process
/// lets go of a client only when it reads that answer, and keeps serving it if the answer never
/// arrives, so a client whose answer could not be written is dropped here unserved (its socket
/// closed, not shut down: the old process still holds it).
fn adopt_one(
    app: &Arc<App>,
    state: ClientState,
    fd: std::os::fd::OwnedFd,
    queue: &mpsc::UnboundedSender<Outgoing>,
    serve: ServeAdopted,
) {
    let id = state.id;
    let label = format!("{}/{}@{}", state.database, state.user, state.peer);
    match super::state::adopt(app, state, fd) {
        Ok(adopted) => {
            let (written, was_written) = oneshot::channel();
            let _ = queue.send(Outgoing::Ack {
                id,
                taken: true,
                reason: String::new(),
                written: Some(written),
            });
            let app2 = app.clone();
            let run = async move {
                if was_written.await != Ok(true) {
                    return;
                }
                match adopted.connect(&app2) {
                    Ok((guard, registration, client, session)) => {
                        tracing::debug!("C-{}: {label} taken over", client.id);
                        serve(app2, guard, registration, client, session).await
                    }
                    Err(e) => tracing::warn!("takeover: cannot register {label}: {e}"),
                }
            };
            match app.workers.next_other() {
                Some(worker) => {
                    worker.spawn(run);
                }
                None => {
                    tokio::spawn(run);
                }
            }
        }
        Err(reason) => {
            tracing::warn!("takeover: {label} stays with the old process: {reason}");
            let _ = queue.send(Outgoing::Ack {
                id,
                taken: false,
                reason,
                written: None,
            });
        }
    }
}
