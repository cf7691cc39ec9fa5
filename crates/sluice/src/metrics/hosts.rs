//! /metrics families of host roles and health (databases whose entry sets
//! target_session_attrs): what SHOW HOSTS shows, one series per host.

use super::out::Out;
use crate::app::App;
use std::sync::atomic::Ordering;

use crate::hosts::{HostHealth, Role};
use crate::server::ServerAddr;

pub(super) fn render(out: &mut Out, app: &App) {
    let Some(book) = app.pools.host_book() else {
        return;
    };
    let hosts = book.all();
    let rows: Vec<_> = hosts
        .iter()
        .map(|h| {
            let (host, port) = match &h.addr {
                ServerAddr::Tcp { host, port } => (host.clone(), port.to_string()),
                ServerAddr::Unix { path } => (path.display().to_string(), String::new()),
            };
            (host, port, h.view())
        })
        .collect();
    out.family(
        "sluice_host_up",
        "gauge",
        "1 while the host is in rotation (reachable, checked, within max_replica_lag, not a stale primary).",
    );
    for (host, port, v) in &rows {
        let l = [("host", host.as_str()), ("port", port.as_str())];
        out.sample("sluice_host_up", &l, f64::from(u8::from(v.healthy)));
    }
    out.family(
        "sluice_host_role",
        "gauge",
        "1 for the role the host's last check saw (primary, standby or unknown).",
    );
    for (host, port, v) in &rows {
        for r in [Role::Primary, Role::Standby, Role::Unknown] {
            let l = [
                ("host", host.as_str()),
                ("port", port.as_str()),
                ("role", r.as_str()),
            ];
            out.sample("sluice_host_role", &l, f64::from(u8::from(v.role == r)));
        }
    }
    out.family(
        "sluice_host_replay_lag_seconds",
        "gauge",
        "A standby's replay lag in time while WAL is pending replay.",
    );
    for (host, port, v) in &rows {
        if let Some(t) = v.lag_time {
            let l = [("host", host.as_str()), ("port", port.as_str())];
            out.sample("sluice_host_replay_lag_seconds", &l, t.as_secs_f64());
        }
    }
    out.family(
        "sluice_host_replay_lag_bytes",
        "gauge",
        "A standby's replay position behind the primary's current WAL position.",
    );
    for (host, port, v) in &rows {
        if let Some(b) = v.lag_bytes {
            let l = [("host", host.as_str()), ("port", port.as_str())];
            out.sample("sluice_host_replay_lag_bytes", &l, b as f64);
        }
    }
    out.family(
        "sluice_host_checks_total",
        "counter",
        "Health checks of the host completed (failed ones included).",
    );
    for (host, port, v) in &rows {
        let l = [("host", host.as_str()), ("port", port.as_str())];
        out.sample("sluice_host_checks_total", &l, v.checks as f64);
    }
    let counter = |out: &mut Out, name: &str, help: &str, get: fn(&HostHealth) -> u64| {
        out.family(name, "counter", help);
        for (h, (host, port, _)) in hosts.iter().zip(&rows) {
            let l = [("host", host.as_str()), ("port", port.as_str())];
            out.sample(name, &l, get(h) as f64);
        }
    };
    counter(
        out,
        "sluice_host_routed_reads_total",
        "Transactions read routing (route_reads) sent to this standby.",
        |h| h.routed_reads.load(Ordering::Relaxed),
    );
    counter(
        out,
        "sluice_host_reads_replayed_total",
        "Reads this standby refused with 25006 before any row reached the client, run again on the primary.",
        |h| h.reads_replayed.load(Ordering::Relaxed),
    );
}
