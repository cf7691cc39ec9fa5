//! A connection from accept to disconnect: which session it runs. The startup packet decides
//! between a pool session (`client/`) and the admin console (`admin/`); this is the one module
//! that knows both. It also counts the client while it lives, carries its session between
//! workers, and owns the disconnect logging.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use crate::app::App;
use crate::client::guard::ClientGuard;
use crate::client::{kill, login, registry, session, startup};
use crate::conn::{ClientConn, EndReason};
use crate::error::ClientNotice;
use crate::net::{PeerAddr, Stream};
use crate::takeover::give::{self, Handoff};

/// Counts a pool client on the worker running its session (`Workers::enter`), while it runs there.
struct WorkerSeat<'a> {
    app: &'a App,
    worker: usize,
}

impl<'a> WorkerSeat<'a> {
    fn take(app: &'a App) -> Self {
        WorkerSeat {
            worker: app.workers.enter(),
            app,
        }
    }
}

impl Drop for WorkerSeat<'_> {
    fn drop(&mut self) {
        self.app.workers.leave(self.worker);
    }
}

/// What a client's task carries from worker to worker besides its session.
struct Carried {
    /// Held for their `Drop`: the client counts and its SHOW CLIENTS entry end with the client.
    _guard: ClientGuard,
    registration: registry::Registration,
    client: ClientConn,
}

/// Serve one accepted connection to completion.
///
/// A plain fn that sets the client up at once and returns an `async move` block, rather than an
/// `async fn`: an async fn's state keeps its by-value arguments, and here also the socket moved
/// into the `ClientConn`, next to the locals made from them (~160 bytes), and this state is
/// every client's task for its whole life.
///
/// `listen_addr`: the listening socket's address when it names one IP, which is then the
/// connection's local address (SHOW CLIENTS) without a `getsockname` call per login; `None` for a
/// wildcard listener (`*`), where the call is made.
pub fn serve(
    app: Arc<App>,
    stream: Stream,
    peer: PeerAddr,
    listen_addr: Option<std::net::SocketAddr>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (guard, count) = ClientGuard::new(&app);
    let id = app.next_client_id();
    let registration = app.registry.register(id, peer.clone());
    if let Some(s) = stream.tcp() {
        if let Some(a) = listen_addr.or_else(|| s.local_addr().ok()) {
            let _ = registration.entry.local_addr.set(a);
        }
    }
    let mut client = ClientConn::new(id, stream, peer, app.control.gate().clone());
    async move {
        let outcome = run(&app, &mut client, count, &registration.entry).await;
        let carried = Carried {
            _guard: guard,
            registration,
            client,
        };
        // Boxed: the closing steps (a FATAL bounded in time, the shutdown) would otherwise size every
        // idle client's task for them, although they run once, at the end.
        Box::pin(conclude(app, carried, outcome)).await;
    }
}

/// A client another process handed over (`takeover::state::adopt`), counted and registered
/// there as `serve` does: its session goes on where the old process stopped.
pub fn serve_adopted(
    app: Arc<App>,
    guard: ClientGuard,
    registration: registry::Registration,
    client: ClientConn,
    s: Box<session::Session>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let carried = Carried {
        _guard: guard,
        registration,
        client,
    };
    async move {
        let mut carried = carried;
        let outcome = {
            let _seat = WorkerSeat::take(&app);
            Box::pin(session::run(&app, &mut carried.client, s)).await
        };
        Box::pin(conclude(app, carried, outcome)).await;
    }
}

/// After a session run: close the client, or carry its session over to another worker's task.
async fn conclude(app: Arc<App>, mut carried: Carried, outcome: session::Outcome) {
    match outcome {
        session::Outcome::End(reason) => {
            let age = carried.registration.entry.connected_at().elapsed();
            end(&app, &mut carried.client, reason, age).await
        }
        // Between transactions while a successor takes the clients. Boxed, as the other rare
        // steps: its future would otherwise size every client's task.
        session::Outcome::HandOver(mut s) => {
            match Box::pin(give::hand_over(&app, &carried.client, &s)).await {
                // The successor serves it now: not a byte more from here, and no shutdown (the
                // socket is shared with the other process); dropping only closes this process's
                // descriptor.
                Handoff::Taken => {
                    if app.config().settings.log_disconnections {
                        tracing::info!(
                            "C-{}: {} handed over to the new process",
                            carried.client.id,
                            carried.client.label()
                        );
                    }
                }
                Handoff::Refused => {
                    s.stays_here = true;
                    go_on(app, carried, s).await
                }
                Handoff::Failed => go_on(app, carried, s).await,
            }
        }
        session::Outcome::Move(to, s) => {
            let workers = &app.workers;
            workers.spawn_on(to, resume(app.clone(), carried, s));
        }
    }
}

/// The session goes on on this worker where it stopped (between transactions): after a hand-over
/// that did not happen, or once a moved client's socket is here (`resume`). Boxed: the session
/// may move or be handed over again from inside it.
fn go_on(
    app: Arc<App>,
    mut carried: Carried,
    s: Box<session::Session>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let outcome = {
            let _seat = WorkerSeat::take(&app);
            Box::pin(session::run(&app, &mut carried.client, s)).await
        };
        Box::pin(conclude(app, carried, outcome)).await;
    })
}

/// The session of a client that moved here from another worker: its socket is registered with this
/// worker's IO driver, then the session loop goes on where it stopped (between transactions).
/// A boxed trait object so that a session may move again from inside it.
fn resume(
    app: Arc<App>,
    mut carried: Carried,
    s: Box<session::Session>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        if let Err(e) = carried.client.stream.move_to_current_worker() {
            tracing::warn!(
                "C-{}: {} cannot move to another worker: {e}",
                carried.client.id,
                carried.client.label()
            );
            return;
        }
        go_on(app, carried, s).await;
    })
}

/// The end of a client: the disconnect log line, the FATAL it is owed, the socket shut down. The
/// lines are written before the FATAL goes out, as PgBouncer writes them (`closing because: ...
/// (age=Ns)`, then `pooler error: ...`): whoever reads the log once the client has its answer
/// finds them there.
async fn end(app: &App, client: &mut ClientConn, reason: EndReason, age: std::time::Duration) {
    let cfg = app.config();
    let fatal = match &reason {
        EndReason::Error(n) => Some(n.clone()),
        EndReason::LoginTimeout => Some(ClientNotice::new(
            crate::error::sqlstate::PROTOCOL_VIOLATION,
            "client_login_timeout",
        )),
        EndReason::Shutdown => Some(ClientNotice::new(
            crate::error::sqlstate::ADMIN_SHUTDOWN,
            "server shutting down",
        )),
        EndReason::ClientClosed | EndReason::ClientEof | EndReason::NoSession => None,
    };
    if cfg.settings.log_disconnections && !matches!(reason, EndReason::NoSession) {
        let why = match (&fatal, &reason) {
            (Some(n), _) => n.message.as_str(),
            (None, EndReason::ClientEof) => "client unexpected eof",
            (None, _) => "client close request",
        };
        tracing::info!(
            "C-{}: {} closing because: {} (age={}s)",
            client.id,
            client.label(),
            why,
            age.as_secs()
        );
    }
    if let Some(n) = &fatal {
        if cfg.settings.log_pooler_errors && !matches!(reason, EndReason::LoginTimeout) {
            // (A message that is already a pooler error is not prefixed twice.)
            let message = n
                .message
                .strip_prefix("pooler error: ")
                .unwrap_or(&n.message);
            tracing::warn!(
                "C-{}: {} pooler error: {message}",
                client.id,
                client.label(),
            );
        }
        client.send_fatal(n).await;
    }
    // A plaintext client that closed (Terminate or EOF) is owed nothing more: closing the socket
    // (on drop) sends the FIN, a shutdown first would be one more system call per login. TLS
    // still sends its close_notify; after an error the FIN goes out behind the FATAL.
    if client.stream.is_tls()
        || !matches!(
            reason,
            EndReason::ClientClosed | EndReason::ClientEof | EndReason::NoSession
        )
    {
        let _ = client.stream.shutdown().await;
    }
}

/// Where a login leads: a pool, or the admin console.
enum LoggedIn {
    /// Boxed: it lives as long as the client and is much larger than the admin variant.
    Pool(Box<session::Session>),
    /// Boxed: this enum sits in the login phase's state, which every login in flight holds.
    Admin(Box<(startup::StartupInfo, crate::admin::session::ConsoleLogin)>),
    /// A replication client: its whole session runs in the login phase, as a console's does.
    Replication(Box<crate::client::replication::Start>),
}

async fn run(
    app: &Arc<App>,
    client: &mut ClientConn,
    count: usize,
    entry: &Arc<registry::ClientEntry>,
) -> session::Outcome {
    let accepted = tokio::time::Instant::now();
    // In a block, so that nothing of the login (its result, the config it read) is kept in this
    // future while the session runs: the session's future holds only what the session needs.
    let s = {
        // Boxed: the login state machine (TLS handshake, SASL exchange: ~3 KiB, and the login
        // timer) is freed once the client is in, instead of staying inside every idle client's
        // task for its lifetime (an admin console client's session runs in it).
        // Polled through `dyn`: its poll (the startup packet, authentication, the console's
        // whole session) is not inlined into this future's, which stays small enough to be
        // inlined into the task's own poll at every request of the session after it.
        let login: Pin<Box<dyn Future<Output = LoginPhase> + Send + '_>> =
            Box::pin(login_phase(app, client, count, entry));
        match login.await {
            Ok(s) => s,
            Err(outcome) => return outcome,
        }
    };
    s.pool
        .stats
        .login_time
        .observe_us(accepted.elapsed().as_micros() as u64);
    // Boxed: the session's state machine is large, and keeping it out of the spawned
    // future spares copying it while the task is created and polled. The session stays
    // in its own box: an async fn keeps a by-value argument twice in its state (as the
    // argument and as the local), which every idle client would pay for.
    let _seat = WorkerSeat::take(app);
    Box::pin(session::run(app, client, s)).await
}

/// What the login phase ends with: the pool session to run, or how the client ended.
type LoginPhase = Result<Box<session::Session>, session::Outcome>;

/// PgBouncer's label for a client of a database or user it cannot find: `(nodb)/<user>`, after
/// its `no such user` line for the latter. Out of line: the login future that would hold it is
/// polled at every request of the session (inlined, it made that poll a call of its own).
#[inline(never)]
fn label_unknown(
    app: &App,
    cfg: &sluice_config::Config,
    client: &mut ClientConn,
    info: &startup::StartupInfo,
) {
    if crate::auth::exchange::unknown_user(app, cfg, &info.user, &info.database) {
        tracing::info!(
            "C-{}: (nodb)/(nouser)@{} no such user: {}",
            client.id,
            client.peer,
            info.user
        );
        client.names = Some(crate::conn::ClientNames::new("(nodb)", &info.user));
    } else if crate::targets::is_unknown_database(cfg, &info.database) {
        client.names = Some(crate::conn::ClientNames::new("(nodb)", &info.user));
    }
}

/// The startup packet, authentication and pool login, stopped by the kill switch: KILL_CLIENT,
/// SUSPEND running out of suspend_timeout, or the janitor when client_login_timeout ran out
/// (`ClientRegistry::expire_logins`). The pool session to run, or how the client ended (an admin
/// console client's whole session runs in here, after its login phase).
async fn login_phase(
    app: &Arc<App>,
    client: &mut ClientConn,
    count: usize,
    entry: &Arc<registry::ClientEntry>,
) -> Result<Box<session::Session>, session::Outcome> {
    let cfg = app.config();
    let in_login = app.registry.login_started(entry);
    // Boxed where it is made (its ~3 KiB are then copied once, into the box, not again into the
    // select below, whose state holds the box's pointer).
    let login = Box::pin(async {
        let info = match startup::read_startup(app, client).await {
            Ok(startup::Startup::Login(info)) => {
                if let Some(tls) = client.tls.as_deref() {
                    let _ = entry.tls.set(tls.description.clone());
                }
                if info.database != crate::admin::ADMIN_DB {
                    label_unknown(app, &cfg, client, &info);
                }
                // Before authentication, as PgBouncer writes it: every attempt, failed ones and
                // console logins included, is in the log.
                if cfg.settings.log_connections {
                    tracing::info!(
                        "C-{}: {} login attempt: db={} user={} tls={} replication={}",
                        client.id,
                        client.label(),
                        info.database,
                        info.user,
                        client
                            .tls
                            .as_deref()
                            .map_or("no", |t| t.description.as_str()),
                        info.replication.log_value()
                    );
                }
                info
            }
            Ok(startup::Startup::Done) => return Err(EndReason::NoSession),
            Err(e) => return Err(e),
        };
        // The console is reachable even when max_client_conn is used up, as in PgBouncer.
        if info.database == crate::admin::ADMIN_DB {
            // Boxed: the console's login state would size every pool login for it.
            let console = Box::pin(crate::admin::session::login(app, client, &info)).await?;
            return Ok(LoggedIn::Admin(Box::new((info, console))));
        }
        // During a shutdown the Unix socket still accepts, for the console alone (PgBouncer's
        // words).
        if !app.lifecycle.phase().accepts_pool_logins() {
            return Err(EndReason::Error(ClientNotice::new(
                crate::error::sqlstate::PROTOCOL_VIOLATION,
                "pooler is shutting down",
            )));
        }
        if count > cfg.settings.max_client_conn as usize && cfg.settings.max_client_conn != 0 {
            return Err(EndReason::Error(ClientNotice::new(
                crate::error::sqlstate::PROTOCOL_VIOLATION,
                "no more connections allowed (max_client_conn)",
            )));
        }
        login::login(app, client, info, entry.clone())
            .await
            .map(|j| match j {
                login::Joined::Pool(s) => LoggedIn::Pool(s),
                login::Joined::Replication(r) => LoggedIn::Replication(r),
            })
    });
    let logged_in = tokio::select! {
        r = login => r,
        _ = entry.kill.cancelled() => Err(match entry.kill.reason() {
            kill::KillReason::LoginTimeout => EndReason::LoginTimeout,
            _ => EndReason::Error(entry.kill.notice()),
        }),
    };
    drop(in_login);
    match logged_in {
        Ok(LoggedIn::Pool(s)) => Ok(s),
        Ok(LoggedIn::Admin(console)) => {
            // The console login (its place in the client counts) lives as long as the session.
            let (info, login) = &*console;
            Err(session::Outcome::End(
                Box::pin(crate::admin::session::run(
                    app,
                    client,
                    info,
                    login.access,
                    entry,
                ))
                .await,
            ))
        }
        Ok(LoggedIn::Replication(start)) => Err(session::Outcome::End(
            Box::pin(crate::client::replication::run(app, client, entry, start)).await,
        )),
        Err(reason) => Err(session::Outcome::End(reason)),
    }
}
