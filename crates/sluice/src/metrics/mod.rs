//! The built-in HTTP endpoint (`[sluice] metrics_listen_addr`): Prometheus `/metrics`, and
//! `/health` (also `/health/ready`: 200 while listening and not shutting down, else 503) and
//! `/health/live` (200 while the process serves). A minimal HTTP/1.x server: one request per
//! connection, bounded in size and time.

mod dashboard;
mod exporter;
pub mod process;
pub mod render;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::app::App;

const MAX_REQUEST: usize = 8 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Accept HTTP connections until the process exits (the endpoint stays up while shutting down so
/// probes can see "not ready").
pub async fn serve(app: Arc<App>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                tokio::spawn(handle(app.clone(), sock));
            }
            Err(e) => {
                tracing::warn!("metrics accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Ready for traffic: listening and not shutting down.
pub fn is_ready(app: &App) -> bool {
    app.listening.load(Ordering::Acquire) && app.lifecycle.is_running()
}

/// The response to `GET path`: (status line, content type, body).
pub fn respond(app: &std::sync::Arc<App>, path: &str) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match path {
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render::render(app),
        ),
        "/" | "/dashboard" => (
            "200 OK",
            "text/html; charset=utf-8",
            dashboard::PAGE.to_string(),
        ),
        "/dashboard.json" => ("200 OK", "application/json", dashboard::json(app)),
        "/advice" => (
            "200 OK",
            "application/json",
            crate::advice::to_json(&app.advisor.findings(app)),
        ),
        "/health" | "/health/ready" | "/ready" => {
            if is_ready(app) {
                ("200 OK", TEXT, "ready\n".into())
            } else {
                (
                    "503 Service Unavailable",
                    TEXT,
                    "not ready: shutting down\n".into(),
                )
            }
        }
        "/health/live" | "/live" => ("200 OK", TEXT, "alive\n".into()),
        _ => (
            "404 Not Found",
            TEXT,
            "not found; try /metrics or /health\n".into(),
        ),
    }
}

async fn read_head(sock: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Some(buf);
        }
        if buf.len() > MAX_REQUEST {
            return None;
        }
    }
}

async fn handle(app: Arc<App>, mut sock: TcpStream) {
    let Ok(Some(head)) = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut sock)).await else {
        return;
    };
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.lines().next().unwrap_or("").split_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/");
    let (status, ctype, body) = match method {
        "GET" | "HEAD" => respond(&app, path),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".into(),
        ),
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        resp.push_str(&body);
    }
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, sock.write_all(resp.as_bytes())).await;
    let _ = sock.shutdown().await;
}
