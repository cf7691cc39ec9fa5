//! The runtime wing: what runs the pooler once it is set up. `run` (here) serves until the
//! lifecycle reaches an exit condition; `accept.rs` the accept loops; `janitor.rs` every periodic
//! duty (PgBouncer's janitor.c); `balance.rs` how many workers take clients; `stats_timer.rs`
//! the stats period. The top of the crate: nothing below names it (`takeover::give` is given
//! `spawn_listeners` to accept again after a failed takeover).

pub mod accept;
pub mod balance;
pub mod janitor;
pub mod stats_timer;
pub mod wake_gate;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::lifecycle::Phase;
use crate::net::listen::Listeners;
use crate::{client, error, metrics, takeover};

/// How long a safe shutdown (WAIT_FOR_SERVERS) waits, at most, for the queued clients it failed
/// to receive their "server shutting down" before the process exits.
const TELL_CLIENTS: Duration = Duration::from_secs(2);
/// How often the shutdown phases look at their exit conditions (clients gone, servers idle).
const SHUTDOWN_POLL: Duration = Duration::from_millis(100);

/// Start the accept loops of `listeners` (client ports, HTTP endpoint, takeover socket); they end
/// when the lifecycle stops accepting or the listeners change hands (`takeover::Takeover`).
pub fn spawn_listeners(app: &Arc<App>, listeners: Listeners) {
    let t = &app.takeover;
    for l in listeners.tcp {
        let worker = l.worker;
        let accept = accept::accept_tcp(app.clone(), l, app.lifecycle.subscribe());
        app.workers.spawn_on(worker, t.while_current(accept));
    }
    if let Some((l, _)) = listeners.unix {
        let accept = accept::accept_unix(app.clone(), l, app.lifecycle.subscribe());
        tokio::spawn(t.while_current(accept));
    }
    if let Some(l) = listeners.metrics {
        tokio::spawn(t.while_current(metrics::serve(app.clone(), l)));
    }
    if let Some((l, _)) = listeners.control {
        tokio::spawn(t.while_current(takeover::give::accept_control(
            app.clone(),
            l,
            spawn_listeners,
        )));
    }
}

/// Serve until the lifecycle reaches an exit condition. Returns when the process may exit.
pub async fn run(app: Arc<App>, listeners: Listeners) {
    let paths = listeners.paths();
    match takeover::listeners::keep(&listeners) {
        Ok(kept) => app.takeover.keep(kept),
        Err(e) => tracing::warn!(
            "cannot keep copies of the listening sockets: {e}; a takeover would offer none"
        ),
    }
    spawn_listeners(&app, listeners);
    app.listening.store(true, Ordering::Release);
    app.notify(&format!("READY=1\n{}", app.status_line()));
    let janitor = tokio::spawn(janitor::run(app.clone()));
    let stats = tokio::spawn(stats_timer::run(app.clone()));
    let balancer = tokio::spawn(balance::run(app.clone()));

    let mut phase = app.lifecycle.subscribe();
    let mut paused = false;
    let mut told_since = None;
    let mut nudged: Option<Phase> = None;
    let mut stopping = false;
    loop {
        let now = *phase.borrow_and_update();
        if !matches!(now, Phase::Running | Phase::HandingOver) && !stopping {
            stopping = true;
            app.takeover.forget_listeners();
            app.notify("STOPPING=1");
        }
        if (now.drops_idle_clients() || now == Phase::HandingOver) && nudged != Some(now) {
            // Idle clients look at the phase only when woken (`client::session`): wake them all.
            nudged = Some(now);
            for c in app.registry.all() {
                c.kill.nudge();
            }
        }
        match now {
            Phase::Running => nudged = None,
            Phase::Exit => break,
            Phase::HandingOver => {
                // Servers nobody here will use again; the successor dials its own.
                for p in app.pools.all() {
                    let c = p.counts();
                    if c.clients == 0 && c.idle + c.used > 0 {
                        p.close_idle(crate::server::log::reason::TAKEOVER);
                    }
                }
                let admins = app.admin_clients.load(Ordering::Acquire);
                if app.client_count.load(Ordering::Acquire) <= admins {
                    tracing::info!("takeover: every client has moved or left");
                    break;
                }
            }
            // Suspended connections cannot finish anything, so a graceful wait would never end.
            _ if app.control.is_suspended() => {
                tracing::info!("suspend was in progress, going down immediately");
                break;
            }
            Phase::WaitForServers => {
                if !paused {
                    for p in app.pools.all() {
                        p.set_paused(true);
                        p.fail_waiters(|| error::PoolError::ShuttingDown);
                    }
                    paused = true;
                    told_since = Some(tokio::time::Instant::now());
                }
                // The queued clients failed above are still writing their FATAL ("server
                // shutting down"): exiting under them would leave them a bare close. They get
                // up to TELL_CLIENTS to leave. Idle clients are told at their next request; those
                // that send none are closed with the process, as PgBouncer's.
                let told = told_since.is_some_and(|t| t.elapsed() >= TELL_CLIENTS)
                    || !app
                        .registry
                        .all()
                        .iter()
                        .any(|c| c.state() == client::registry::ClientState::Waiting);
                if told && app.pools.all().iter().all(|p| p.counts().active == 0) {
                    tracing::info!("server connections dropped, exiting");
                    break;
                }
            }
            Phase::WaitForClients => {
                if app.client_count.load(std::sync::atomic::Ordering::Acquire) == 0 {
                    tracing::info!("client connections dropped, exiting");
                    break;
                }
            }
        }
        // While running there is nothing to poll: only a phase change moves this loop (a timer
        // here woke the main thread ten times a second for nothing, the idle pooler's largest
        // share of wake-ups). The shutdown phases poll their exit conditions.
        if now == Phase::Running {
            if phase.changed().await.is_err() {
                break;
            }
            continue;
        }
        tokio::select! {
            r = phase.changed() => if r.is_err() { break },
            _ = tokio::time::sleep(SHUTDOWN_POLL) => {}
        }
    }
    janitor.abort();
    stats.abort();
    balancer.abort();
    app.takeover.stop_listeners();
    // A successor owns the socket files now.
    if !app.takeover.handed_over() {
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    }
    tracing::info!("shutting down");
}
