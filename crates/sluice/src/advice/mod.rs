//! The pool advisor: at every stats period each pool's figures become a window (`rules::Window`),
//! the last few are kept, and `findings` runs the rules over them with what the config says of the
//! pool. Served as SHOW ADVICE on the console and `/advice` (JSON) on the metrics listener.

pub mod backend_cost;
pub mod history;
pub mod rules;
pub mod server_rules;

use crate::app::App;
use std::path::Path;

use crate::pool::servers::ServerState;
use crate::pool::{Pool, PoolSettings};
use backend_cost::BackendCost;
use rules::{Finding, PoolFacts, Room, SizeFrom, Window};
use server_rules::PoolClaim;

/// Every finding now, pools in name order, then per PostgreSQL server, process-wide ones last
/// (from the windows `App::advisor` keeps: `history.rs`).
pub fn findings(app: &App) -> Vec<Finding> {
    let advisor = &app.advisor;
    let cfg = app.config();
    let g = &cfg.settings;
    let mut out = Vec::new();
    let live = app.pools.all();
    let book = app.pools.server_facts();
    // Each pool's claim on each of its servers' connections.
    let claims: Vec<(PoolClaim, Vec<String>)> = live
        .iter()
        .map(|p| {
            let settings = p.settings();
            let addrs = settings
                .target
                .addrs
                .iter()
                .map(|a| a.to_string())
                .collect();
            (claim_of(&cfg, p, &settings), addrs)
        })
        .collect();
    let on = |addr: &str| -> Vec<&PoolClaim> {
        claims
            .iter()
            .filter(|(_, a)| a.iter().any(|x| x == addr))
            .map(|(c, _)| c)
            .collect()
    };
    for (p, (claim, addrs)) in live.iter().zip(&claims) {
        let Some(windows) = advisor.windows(&p.key) else {
            continue;
        };
        let settings = p.settings();
        let learned = addrs.iter().find_map(|a| Some((a, book?.get(a)?)));
        let room = learned.map(|(a, facts)| Room {
            max_connections: facts.max_connections,
            headroom: facts.headroom(),
            left: server_rules::room_for(&facts, claim, &on(a)),
        });
        let facts = PoolFacts {
            database: p.key.database.clone(),
            user: p.key.user.clone(),
            pool_size: settings.limits.pool_size,
            size_from: claim.size_from.clone(),
            min_pool_size: settings.limits.min_pool_size,
            max_db_connections: settings.max_db_connections as u32,
            pooled: settings.mode != sluice_config::PoolMode::Session,
            reset_always: settings.reset_always && settings.reset_query.is_some(),
            pinned: p.pinned_clients(),
            pinned_by: p
                .pinned_by_feature()
                .into_iter()
                .map(|(f, n)| (f.describe(), n))
                .collect(),
            max_prepared: settings.session.max_prepared as u32,
            room,
            backend: backend_cost(p, addrs, learned.map(|(_, f)| f.work_mem_bytes), &windows),
        };
        out.extend(rules::pool_findings(&facts, &windows));
    }
    let mut seen: Vec<&String> = Vec::new();
    for (_, addrs) in &claims {
        for a in addrs {
            if seen.contains(&a) {
                continue;
            }
            seen.push(a);
            if let Some(facts) = book.and_then(|b| b.get(a)) {
                out.extend(server_rules::oversubscribed(a, &facts, &on(a)));
            }
        }
    }
    let clients = app.client_count.load(std::sync::atomic::Ordering::Relaxed);
    out.extend(rules::global_findings(clients, g.max_client_conn));
    out
}

/// Where a pool's size and reserve come from, and what it may open.
fn claim_of(cfg: &sluice_config::Config, p: &Pool, settings: &PoolSettings) -> PoolClaim {
    let user = cfg.user(&p.key.user);
    let db = cfg.database(&p.key.database);
    let from = |u: Option<u32>, d: Option<u32>| match (u, d) {
        (Some(_), _) => SizeFrom::User(p.key.user.clone()),
        (None, Some(_)) => SizeFrom::Database(p.key.database.clone()),
        (None, None) => SizeFrom::Default,
    };
    PoolClaim {
        database: p.key.database.clone(),
        user: p.key.user.clone(),
        pool_size: settings.limits.pool_size,
        reserve_pool_size: settings.limits.reserve_pool_size,
        size_from: from(user.and_then(|u| u.pool_size), db.and_then(|d| d.pool_size)),
        reserve_from: from(
            user.and_then(|u| u.reserve_pool_size),
            db.and_then(|d| d.reserve_pool_size),
        ),
        max_db_connections: settings.max_db_connections as u32,
    }
}

/// What an idle backend of `p` costs: measured from its servers' processes when they run on this
/// host (only for a pool the "too large" rule may look at: 4 servers open or more), else seed
/// 002's estimate.
fn backend_cost(
    p: &Pool,
    addrs: &[String],
    work_mem: Option<u64>,
    windows: &[Window],
) -> BackendCost {
    let candidate = windows.last().is_some_and(|w| w.open >= 4);
    if candidate && addrs.iter().any(|a| backend_cost::is_local(a)) {
        let servers = p.servers_book.all();
        let idle: Vec<u32> = servers
            .iter()
            .filter(|r| r.state() == ServerState::Idle)
            .map(|r| r.seen.remote_pid)
            .collect();
        if let Some((bytes, measured)) = backend_cost::measure(Path::new("/proc"), &idle) {
            return BackendCost {
                bytes,
                measured,
                work_mem,
            };
        }
    }
    BackendCost::estimate(work_mem)
}

/// The findings as a JSON array (the `/advice` endpoint).
pub fn to_json(findings: &[Finding]) -> String {
    use crate::metrics::json::escape as esc;
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
