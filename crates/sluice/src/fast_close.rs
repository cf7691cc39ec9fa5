//! server_fast_close: in session mode, a client linked to a server that is due to close (RECONNECT,
//! a RELOAD that changed its database's connection settings) is closed with it at the janitor's
//! next pass that finds the session idle (`FATAL 08P01 database configuration changed`), one in a
//! transaction after the transaction, as PgBouncer does; without it, at the end of the session.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use sluice_config::PoolMode;

use crate::app::App;

/// One janitor pass: flag the session clients whose server is due to close and wake them.
pub fn sweep(app: &App) {
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
            if pool.close_needed(r.id, r.generation, &settings) {
                due.insert(r.id.0);
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
