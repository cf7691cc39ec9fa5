//! SHOW WORKERS and SHOW CROSS_WORKER (Sluice's own views, not PgBouncer's): the worker threads
//! (which take clients, how many clients and server connections each carries, how busy each is) and the events where work
//! crossed from one worker to another, in total and per transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::result::{num, text, Col, ResultSet};
use crate::app::App;
use crate::workers::cross::CrossEvent;

pub const WORKERS_COLUMNS: &[(&str, Col)] = &[
    ("worker", Col::Int4),
    ("active", Col::Int4),
    ("clients", Col::Int8),
    ("servers", Col::Int8),
    ("busy_percent", Col::Numeric),
];

pub const CROSS_WORKER_COLUMNS: &[(&str, Col)] = &[
    ("kind", Col::Text),
    ("events", Col::Int8),
    ("per_xact", Col::Numeric),
];

pub fn workers(app: &Arc<App>) -> ResultSet {
    let w = &app.workers;
    let active = w.active();
    let pools = app.pools.all();
    let mut rs = ResultSet::new(WORKERS_COLUMNS);
    for (i, slot) in w.slots().iter().enumerate() {
        let servers: usize = pools.iter().map(|p| p.homed(i)).sum();
        let busy = f64::from(slot.busy_permille.load(Ordering::Relaxed)) / 10.0;
        rs.push(vec![
            num(i),
            num(u8::from(i < active)),
            num(slot.clients.load(Ordering::Relaxed)),
            num(servers),
            num(format!("{busy:.1}")),
        ]);
    }
    rs
}

/// Every kind with its total over all pools (client moves are the workers' own count).
pub fn cross_totals(app: &App) -> Vec<(&'static str, u64)> {
    let pools = app.pools.all();
    let mut out: Vec<(&'static str, u64)> = CrossEvent::ALL
        .iter()
        .map(|&e| (e.name(), pools.iter().map(|p| p.cross.get(e)).sum()))
        .collect();
    out.push(("client_move", app.workers.moves.load(Ordering::Relaxed)));
    out
}

pub fn cross_worker(app: &Arc<App>) -> ResultSet {
    let xacts: u64 = app
        .pools
        .all()
        .iter()
        .map(|p| p.stats.snapshot().xact_count)
        .sum();
    let mut rs = ResultSet::new(CROSS_WORKER_COLUMNS);
    for (kind, n) in cross_totals(app) {
        let per = if xacts == 0 {
            0.0
        } else {
            n as f64 / xacts as f64
        };
        rs.push(vec![text(kind), num(n), num(format!("{per:.4}"))]);
    }
    rs
}
