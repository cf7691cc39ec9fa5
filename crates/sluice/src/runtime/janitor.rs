//! The one periodic task, as PgBouncer's janitor.c: client login timeouts, idle and lifetime
//! closing, min_pool_size, login retries, reserve pool activation, evicting idle servers of other
//! pools when a shared limit blocks a waiting pool, freeing auto-databases unused for
//! autodb_idle_timeout and pools unused for pool_idle_timeout, the pools of forced-user databases
//! made before any client comes, server_fast_close, query_wait_notify.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_config::PoolMode;

use crate::app::App;
use crate::lifecycle::Phase;
use crate::pool::registry::{AutoDatabases, PoolRegistry};
use crate::targets;

/// How often the janitor runs (PgBouncer runs its janitor three times a second).
pub const JANITOR_PERIOD: Duration = Duration::from_millis(200);

/// One janitor pass over every pool.
pub fn tick(registry: &PoolRegistry, auto: &AutoDatabases<'_>, pool_idle: Option<Duration>) {
    let pools = registry.all();
    for p in &pools {
        p.maintain();
    }
    // A pool with waiters that cannot grow because its database or user is at its limit gets room
    // by closing an idle server of a sibling pool.
    for p in pools.iter().filter(|p| p.starved_by_shared_limit()) {
        let evicted = pools
            .iter()
            .filter(|o| !Arc::ptr_eq(o, p))
            .filter(|o| o.key.database == p.key.database || o.key.user == p.key.user)
            .any(|o| o.evict_one_idle());
        if evicted {
            p.kick();
        }
    }
    drop(pools);
    registry.free_idle_auto_databases(auto);
    registry.free_idle_pools(pool_idle, auto.paused);
    registry.sweep_removed();
}

/// The janitor task: every JANITOR_PERIOD, one pass of every periodic duty.
pub async fn run(app: Arc<App>) {
    let mut ticks: u32 = 0;
    let mut timer = tokio::time::interval(JANITOR_PERIOD);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        timer.tick().await;
        // Logins run out of time under SUSPEND too (they did when each had its own timer).
        if let Some(timeout) = app.config().settings.client_login_timeout.as_duration() {
            app.registry.expire_logins(Instant::now(), timeout);
        }
        // As PgBouncer: no maintenance while suspended, so nothing closes or opens under SUSPEND;
        // none while handing over either (min_pool_size would open servers for nobody).
        if !app.control.gate().is_suspended() && app.lifecycle.phase() != Phase::HandingOver {
            let cfg = app.config();
            let auto = AutoDatabases {
                is_auto: &|db| targets::is_auto_database(&cfg, db),
                idle_timeout: cfg.settings.autodb_idle_timeout.as_duration(),
                paused: &|db| app.control.db_paused(db),
            };
            forced_user_pools(&app);
            fast_close_sweep(&app);
            let pool_idle = cfg.settings.pool_idle_timeout.as_duration();
            tick(&app.pools, &auto, pool_idle);
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

/// Pools made before any client comes: a [databases] entry with a forced user and a
/// min_pool_size gets its pool at start and after a reload (as PgBouncer 1.21+ does), so that the
/// janitor fills it to min_pool_size without waiting for a client.
///
/// Make the missing pools of forced-user databases whose min_pool_size is above 0. Called by the
/// janitor on each tick: cheap when every such pool exists (one map lookup each).
pub fn forced_user_pools(app: &App) {
    let cfg = app.config();
    for db in &cfg.databases {
        let Some(user) = db.user.as_deref() else {
            continue;
        };
        if db.min_pool_size.unwrap_or(cfg.settings.min_pool_size) == 0 {
            continue;
        }
        let pool = app.pools.get_or_create(&db.name, user, || {
            targets::pool_settings(
                &cfg,
                db,
                user,
                app.credentials.lookup(user),
                app.tls.load().server.clone(),
                |_| app.pools.current_generation(),
            )
        });
        if app.control.db_paused(&db.name) && !pool.is_paused() {
            pool.set_paused(true);
        }
    }
}

/// server_fast_close: in session mode, a client linked to a server that is due to close
/// (RECONNECT, a RELOAD that changed its database's connection settings) is closed with it at the
/// janitor's next pass that finds the session idle (`FATAL 08P01 database configuration
/// changed`), one in a transaction after the transaction, as PgBouncer does; without it, at the
/// end of the session.
///
/// One janitor pass: flag the session clients whose server is due to close and wake them.
pub fn fast_close_sweep(app: &App) {
    if !app.config().settings.server_fast_close {
        return;
    }
    let mut due: HashSet<u64> = HashSet::new();
    for pool in app.pools.all() {
        let settings = pool.settings();
        if settings.mode != PoolMode::Session {
            continue;
        }
        for r in pool.servers_book.all() {
            if pool.close_needed(r.seen.id, r.seen.generation, &settings) {
                due.insert(r.seen.id.0);
            }
        }
    }
    if due.is_empty() {
        return;
    }
    for c in app.registry.all() {
        if due.contains(&c.server_id.load(Ordering::Relaxed)) {
            c.close_when_idle.store(true, Ordering::Relaxed);
            c.kill.nudge();
        }
    }
}
