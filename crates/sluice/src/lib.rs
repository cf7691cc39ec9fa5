//! Sluice: a multi-core PostgreSQL connection pooler that is a drop-in successor to PgBouncer.
//! `run` drives one pooler instance; everything it needs is passed in (no globals).

pub mod admin;
pub mod advice;
pub mod app;
pub mod auth;
pub mod cancel;
pub mod client;
pub mod conn;
pub mod dispatch;
pub mod error;
pub mod fast_close;
pub mod forward;
pub mod hosts;
pub mod ids;
pub mod json;
pub mod keyed_hash;
pub mod lifecycle;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod net;
pub mod peers;
pub mod pool;
pub mod prefill;
pub mod prepared;
pub mod process;
pub mod route;
pub mod server;
pub mod session_state;
pub mod stamp;
pub mod stats;
pub mod suspend;
pub mod syslog;
pub mod takeover;
pub mod targets;
pub mod tls;
pub mod wake_gate;
pub mod workers;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use app::App;
use lifecycle::Phase;
use listener::Listeners;

/// How long a safe shutdown (WAIT_FOR_SERVERS) waits, at most, for the queued clients it failed
/// to receive their "server shutting down" before the process exits.
const TELL_CLIENTS: Duration = Duration::from_secs(2);

/// Start the accept loops of `listeners` (client ports, HTTP endpoint, takeover socket); they end
/// when the lifecycle stops accepting or the listeners change hands (`takeover::Takeover`).
pub fn spawn_listeners(app: &Arc<App>, listeners: Listeners) {
    let t = &app.takeover;
    for l in listeners.tcp {
        let worker = l.worker;
        let accept = listener::accept_tcp(app.clone(), l, app.lifecycle.subscribe());
        app.workers.spawn_on(worker, t.while_current(accept));
    }
    if let Some((l, _)) = listeners.unix {
        let accept = listener::accept_unix(app.clone(), l, app.lifecycle.subscribe());
        tokio::spawn(t.while_current(accept));
    }
    if let Some(l) = listeners.metrics {
        tokio::spawn(t.while_current(metrics::serve(app.clone(), l)));
    }
    if let Some((l, _)) = listeners.control {
        tokio::spawn(t.while_current(takeover::give::accept_control(app.clone(), l)));
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
    let janitor = tokio::spawn(janitor_loop(app.clone()));
    let stats = tokio::spawn(stats_loop(app.clone()));
    let balancer = tokio::spawn(balance_loop(app.clone()));

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
                        p.close_idle();
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
                    tracing::info!("got SIGINT, shutting down, waiting for servers");
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
                    break;
                }
            }
            Phase::WaitForClients => {
                if app.client_count.load(std::sync::atomic::Ordering::Acquire) == 0 {
                    break;
                }
            }
        }
        tokio::select! {
            r = phase.changed() => if r.is_err() { break },
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
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

async fn janitor_loop(app: Arc<App>) {
    let mut ticks: u32 = 0;
    let mut tick = tokio::time::interval(pool::janitor::JANITOR_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        // Logins run out of time under SUSPEND too (they did when each had its own timer).
        if let Some(timeout) = app.config().settings.client_login_timeout.as_duration() {
            app.registry.expire_logins(Instant::now(), timeout);
        }
        // As PgBouncer: no maintenance while suspended, so nothing closes or opens under SUSPEND;
        // none while handing over either (min_pool_size would open servers for nobody).
        if !app.control.gate().is_suspended()
            && app.lifecycle.phase() != lifecycle::Phase::HandingOver
        {
            let cfg = app.config();
            let auto = pool::registry::AutoDatabases {
                is_auto: &|db| targets::is_auto_database(&cfg, db),
                idle_timeout: cfg.settings.autodb_idle_timeout.as_duration(),
                paused: &|db| app.control.db_paused(db),
            };
            prefill::forced_user_pools(&app);
            fast_close::sweep(&app);
            let pool_idle = cfg.settings.pool_idle_timeout.as_duration();
            pool::janitor::tick(&app.pools, &auto, pool_idle);
        }
        // query_wait_notify, about once a second: a client queued that long is told so.
        ticks = ticks.wrapping_add(1);
        let notify = app.config().settings.query_wait_notify;
        if notify > 0 && ticks.is_multiple_of(5) {
            let now = std::time::Instant::now();
            let limit = Duration::from_secs(notify.into());
            for c in app.registry.all() {
                if c.wait_notice_needed(now, limit) {
                    c.kill.nudge();
                }
            }
        }
    }
}

/// Once a second: how many workers take clients (`workers::balance`).
async fn balance_loop(app: Arc<App>) {
    let mut balancer = workers::balance::Balancer::new(&app.workers);
    let mut tick = tokio::time::interval(workers::balance::PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let spread = app.config().sluice.worker_spread_percent;
        let pools = app.pools.all();
        let wait_us = pools.iter().map(|p| p.stats.snapshot().wait_time_us).sum();
        let servers: Vec<usize> = (0..app.workers.count())
            .map(|w| pools.iter().map(|p| p.homed(w)).sum())
            .collect();
        balancer.tick(&app.workers, spread, wait_us, &servers);
    }
}

/// Every stats_period: close the averaging period (SHOW STATS avg_*) and log the stats line.
async fn stats_loop(app: Arc<App>) {
    app.stats_book
        .close_period(&admin::show_stats::totals_by_db(&app), 1.0);
    let mut last_at = Instant::now();
    loop {
        let period = app.config().settings.stats_period.max(1);
        tokio::time::sleep(Duration::from_secs(period.into())).await;
        let now = admin::show_stats::totals_by_db(&app);
        let secs = last_at.elapsed().as_secs_f64();
        let avg = app.stats_book.close_period(&now, secs);
        app.advisor.observe(&app.pools.all(), secs);
        last_at = Instant::now();
        if app.config().settings.log_stats {
            tracing::info!("{}", stats::reporter::stats_line(&avg));
        }
    }
}
