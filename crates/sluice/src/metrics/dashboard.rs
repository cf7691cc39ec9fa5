//! The live dashboard on the metrics listener: `/` is one self-contained page (no asset from any
//! other place, no framework: `dashboard.html`, plain JavaScript drawing on canvases) that polls
//! `/dashboard.json` every second. The JSON carries counters and cumulative histograms; the page
//! turns them into rates and percentiles over each poll interval, as Prometheus would.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::admin::show_pools::pool_rows;
use crate::app::App;
use crate::stats::histogram::BOUNDS_US;

/// The page.
pub const PAGE: &str = include_str!("dashboard.html");

use crate::metrics::json::escape as esc;

fn list(v: impl IntoIterator<Item = u64>) -> String {
    let items: Vec<String> = v.into_iter().map(|n| n.to_string()).collect();
    format!("[{}]", items.join(","))
}

/// `/dashboard.json`: the figures of this moment.
pub fn json(app: &Arc<App>) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let cfg = app.config();
    let workers: Vec<String> = app
        .workers
        .slots()
        .iter()
        .map(|w| {
            format!(
                "{{\"busy_permille\":{},\"clients\":{}}}",
                w.busy_permille.load(Ordering::Relaxed),
                w.clients.load(Ordering::Relaxed)
            )
        })
        .collect();
    let rss = super::process::resident_bytes().unwrap_or(0);
    let cpu = super::process::cpu_seconds().unwrap_or(0.0);
    let mut pools = Vec::new();
    let live = app.pools.all();
    for row in pool_rows(app) {
        let Some(p) = live
            .iter()
            .find(|p| p.key.database == row.database && p.key.user == row.user)
        else {
            continue;
        };
        let s = p.stats.snapshot();
        let wait = p.stats.histogram(|s| s.wait_time_us.hist.snapshot());
        let query = p.stats.histogram(|s| s.query_time_us.hist.snapshot());
        pools.push(format!(
            "{{\"database\":\"{}\",\"user\":\"{}\",\"cl_active\":{},\"cl_waiting\":{},\
             \"sv_active\":{},\"sv_idle\":{},\"sv_used\":{},\"sv_login\":{},\"maxwait_us\":{},\
             \"pool_size\":{},\"xacts\":{},\"queries\":{},\"wait_hist\":{},\"query_hist\":{}}}",
            esc(&row.database),
            esc(&row.user),
            row.cl_active,
            row.cl_waiting,
            row.sv_active,
            row.sv_idle,
            row.sv_used,
            row.sv_login,
            row.maxwait.as_micros(),
            p.settings().limits.pool_size,
            s.xact_count,
            s.query_count,
            list(wait.cumulative.iter().copied()),
            list(query.cumulative.iter().copied()),
        ));
    }
    let advice = crate::advice::to_json(&crate::advice::findings(app));
    let servers: usize = live.iter().map(|p| p.servers_book.all().len()).sum();
    let pg = postgres_servers(app, &live);
    let hosts = hosts(app);
    format!(
        "{{\"time_ms\":{now_ms},\"bounds_us\":{},\"process\":{{\"rss_bytes\":{rss},\
         \"cpu_seconds\":{cpu},\"clients\":{},\"max_client_conn\":{},\"workers\":[{}],\
         \"servers\":{servers},\"postgres\":[{}]}},\"pools\":[{}],\"advice\":{},\
         \"hosts\":[{}]}}\n",
        list(BOUNDS_US.iter().copied()),
        app.client_count.load(Ordering::Relaxed),
        cfg.settings.max_client_conn,
        workers.join(","),
        pg.join(","),
        pools.join(","),
        advice.trim_end(),
        hosts.join(","),
    )
}

/// The hosts of databases with target_session_attrs, as SHOW HOSTS has them.
fn hosts(app: &App) -> Vec<String> {
    let Some(book) = app.pools.host_book() else {
        return Vec::new();
    };
    book.all()
        .iter()
        .map(|h| {
            let v = h.view();
            format!(
                "{{\"addr\":\"{}\",\"role\":\"{}\",\"healthy\":{},\"reason\":\"{}\",\"lag_ms\":{}}}",
                esc(&h.addr.to_string()),
                v.role.as_str(),
                v.healthy,
                esc(v.out_reason.as_deref().unwrap_or("")),
                v.lag_time
                    .map_or_else(|| "null".to_string(), |d| d.as_millis().to_string()),
            )
        })
        .collect()
}

/// Each PostgreSQL server whose max_connections Sluice has learned (`server::facts`): its
/// address, max_connections, what ordinary roles may open, and the connections Sluice holds there.
fn postgres_servers(app: &App, live: &[Arc<crate::pool::Pool>]) -> Vec<String> {
    let Some(book) = app.pools.server_facts() else {
        return Vec::new();
    };
    let mut addrs: Vec<String> = Vec::new();
    for p in live {
        for a in &p.settings().target.addrs {
            let a = a.to_string();
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
    }
    addrs
        .iter()
        .filter_map(|a| {
            let f = book.get(a)?;
            let open: usize = live
                .iter()
                .map(|p| {
                    p.servers_book
                        .all()
                        .iter()
                        .filter(|r| &r.seen.addr == a)
                        .count()
                })
                .sum();
            Some(format!(
                "{{\"addr\":\"{}\",\"max_connections\":{},\"headroom\":{},\"servers\":{open}}}",
                esc(a),
                f.max_connections,
                f.headroom()
            ))
        })
        .collect()
}
