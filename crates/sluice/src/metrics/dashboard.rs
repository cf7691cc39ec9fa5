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

use crate::json::escape as esc;

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
    let advice = crate::advice::to_json(&app.advisor.findings(app));
    format!(
        "{{\"time_ms\":{now_ms},\"bounds_us\":{},\"process\":{{\"rss_bytes\":{rss},\
         \"cpu_seconds\":{cpu},\"clients\":{},\"max_client_conn\":{},\"workers\":[{}]}},\
         \"pools\":[{}],\"advice\":{}}}\n",
        list(BOUNDS_US.iter().copied()),
        app.client_count.load(Ordering::Relaxed),
        cfg.settings.max_client_conn,
        workers.join(","),
        pools.join(","),
        advice.trim_end(),
    )
}
