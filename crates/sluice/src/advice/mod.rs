//! The pool advisor: at every stats period each pool's figures become a window (`rules::Window`),
//! the last few are kept, and `findings` runs the rules over them with what the config says of the
//! pool. Served as SHOW ADVICE on the console and `/advice` (JSON) on the metrics listener.

pub mod rules;

use std::collections::{BTreeMap, VecDeque};

use parking_lot::Mutex;

use crate::app::App;
use crate::pool::PoolKey;
use crate::stats::StatsSnapshot;
use rules::{Finding, PoolFacts, SizeFrom, Window};

/// Windows kept per pool.
const KEEP: usize = 6;

#[derive(Default)]
struct PoolHistory {
    last: StatsSnapshot,
    windows: VecDeque<Window>,
}

/// Per-pool windows of the last stats periods.
#[derive(Default)]
pub struct Advisor {
    pools: Mutex<BTreeMap<PoolKey, PoolHistory>>,
}

impl Advisor {
    /// Close a stats period of `secs` seconds: one window per pool; pools that are gone are
    /// forgotten.
    pub fn observe(&self, app: &App, secs: f64) {
        let live = app.pools.all();
        let mut pools = self.pools.lock();
        pools.retain(|k, _| live.iter().any(|p| &p.key == k));
        for p in &live {
            let now = p.stats.snapshot();
            let h = pools.entry(p.key.clone()).or_default();
            let d = now.delta(&h.last);
            h.last = now;
            let c = p.counts();
            h.windows.push_back(Window {
                secs,
                xacts: d.xact_count,
                xact_time_us: d.xact_time_us,
                wait_time_us: d.wait_time_us,
                open: c.total,
                clients: c.clients,
            });
            while h.windows.len() > KEEP {
                h.windows.pop_front();
            }
        }
    }

    /// Every finding now, pools in name order, process-wide ones last.
    pub fn findings(&self, app: &App) -> Vec<Finding> {
        let cfg = app.config();
        let g = &cfg.settings;
        let mut out = Vec::new();
        let pools = self.pools.lock();
        for p in app.pools.all() {
            let Some(h) = pools.get(&p.key) else { continue };
            let settings = p.settings();
            let db = cfg.database(&p.key.database);
            let size_from = match (
                cfg.user(&p.key.user).and_then(|u| u.pool_size),
                db.and_then(|d| d.pool_size),
            ) {
                (Some(_), _) => SizeFrom::User(p.key.user.clone()),
                (None, Some(_)) => SizeFrom::Database(p.key.database.clone()),
                (None, None) => SizeFrom::Default,
            };
            let facts = PoolFacts {
                database: p.key.database.clone(),
                user: p.key.user.clone(),
                pool_size: settings.limits.pool_size,
                size_from,
                min_pool_size: settings.limits.min_pool_size,
                max_db_connections: settings.max_db_connections as u32,
                pooled: settings.mode != sluice_config::PoolMode::Session,
                reset_always: settings.reset_always && settings.reset_query.is_some(),
                pinned: p.pinned_clients(),
            };
            let windows: Vec<Window> = h.windows.iter().copied().collect();
            out.extend(rules::pool_findings(&facts, &windows));
        }
        let clients = app.client_count.load(std::sync::atomic::Ordering::Relaxed);
        out.extend(rules::global_findings(clients, g.max_client_conn));
        out
    }
}

/// The findings as a JSON array (the `/advice` endpoint).
pub fn to_json(findings: &[Finding]) -> String {
    use crate::json::escape as esc;
    let items: Vec<String> = findings
        .iter()
        .map(|f| {
            format!(
                "{{\"database\":\"{}\",\"user\":\"{}\",\"rule\":\"{}\",\"evidence\":\"{}\",\"change\":\"{}\"}}",
                esc(&f.database),
                esc(&f.user),
                f.rule,
                esc(&f.evidence),
                esc(&f.change)
            )
        })
        .collect();
    format!("[{}]\n", items.join(","))
}
