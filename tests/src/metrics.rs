//! The pooler's HTTP endpoint (`[sluice] metrics_listen_addr`) as tests read it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET http://127.0.0.1:`port``path` -> (status code, body).
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("metrics port");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .expect("http answer in time")
        .unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("http head");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        code,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    )
}

/// The body of a chunked HTTP/1.1 answer (Go's net/http sends large ones so).
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|e| panic!("chunk size {size:?}: {e}"));
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// GET /metrics on 127.0.0.1:`port`: the response body.
pub async fn metrics(port: u16) -> String {
    http_get(port, "/metrics").await.1
}

/// The value of one sample (`name{labels}` or `name`) in a metrics text; panics when absent.
pub fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

/// Worker packing as the metrics show it: (workers active, clients on worker 0, clients on
/// worker 1, client moves so far).
pub async fn workers_now(port: u16) -> (f64, f64, f64, f64) {
    let m = metrics(port).await;
    (
        sample(&m, "sluice_workers_active"),
        sample(&m, "sluice_worker_clients{worker=\"0\"}"),
        sample(&m, "sluice_worker_clients{worker=\"1\"}"),
        sample(&m, "sluice_worker_client_moves_total"),
    )
}
