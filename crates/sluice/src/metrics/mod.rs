//! The built-in HTTP endpoint (`[sluice] metrics_listen_addr`): Prometheus `/metrics`, the
//! dashboard (`/`, `/dashboard.json`), the advisor (`/advice`), and `/health` (also
//! `/health/ready`: 200 while listening and not shutting down, else 503) and `/health/live` (200
//! while the process serves). What each path answers is here; the server (hyper, limits, TLS,
//! basic auth) is `http.rs`.

pub mod access;
mod basic_auth;
mod dashboard;
mod exporter;
mod exporter_families;
mod hosts;
mod http;
pub mod json;
mod out;
pub mod process;
pub mod render;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::StatusCode;

use crate::app::App;

pub use access::Access;
pub use http::{serve, HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_HEAD_BYTES, REQUEST_DEADLINE};

/// Ready for traffic: listening and not shutting down.
pub fn is_ready(app: &App) -> bool {
    app.listening.load(Ordering::Acquire) && app.lifecycle.is_running()
}

/// Paths that answer without credentials when basic auth is on: the health probes, since
/// Kubernetes probes (and most load balancers) cannot send any. They tell nothing but up or down.
pub fn is_probe(path: &str) -> bool {
    matches!(
        path,
        "/health" | "/health/ready" | "/ready" | "/health/live" | "/live"
    )
}

/// The response to `GET path`: (status, content type, body).
pub fn respond(app: &Arc<App>, path: &str) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            render::render(app),
        ),
        "/" | "/dashboard" => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            dashboard::PAGE.to_string(),
        ),
        "/dashboard.json" => (StatusCode::OK, "application/json", dashboard::json(app)),
        "/advice" => (
            StatusCode::OK,
            "application/json",
            crate::advice::to_json(&crate::advice::findings(app)),
        ),
        "/health" | "/health/ready" | "/ready" => {
            if is_ready(app) {
                (StatusCode::OK, TEXT, "ready\n".into())
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "not ready: shutting down\n".into(),
                )
            }
        }
        "/health/live" | "/live" => (StatusCode::OK, TEXT, "alive\n".into()),
        _ => (
            StatusCode::NOT_FOUND,
            TEXT,
            "not found; try /metrics or /health\n".into(),
        ),
    }
}
