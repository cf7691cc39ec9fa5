//! The built-in HTTP endpoint: `/metrics` checked with the Prometheus project's own text parser
//! (Go, github.com/prometheus/common/expfmt, built from tests/go/promcheck) and against a known
//! workload; `/health` readiness. pgbouncer_exporter's families and queries: tests/tests/exporter.rs.
//! `go` (Debian package golang-go, installed by scripts/test.sh) and the proxy are required: without
//! them the checks fail saying why (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line, the Go checks not
//! run).

mod exporter_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use exporter_support::{go_available, run_go, start, target_dir};

use sluice_e2e::{http_get as get, require, sample, Console};

/// Build tests/go/promcheck once. When Go or its modules are missing the test fails
/// (`missing_tool`); None only under the opt-out.
fn promcheck() -> Option<PathBuf> {
    static BIN: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let built = BIN.get_or_init(|| {
        if !go_available() {
            return Err(
                "Prometheus parser check: `go` is not installed (Debian package golang-go)".into(),
            );
        }
        let out = target_dir().join("go-bin/promcheck");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("go/promcheck");
        let path = out.to_str().expect("a UTF-8 target dir");
        run_go(
            &["build", "-o", path, "."],
            &dir,
            None,
            Duration::from_secs(300),
        )
        .map(|_| out.clone())
        .map_err(|e| {
            format!("Prometheus parser check: cannot build it (Go module proxy unreachable?): {e}")
        })
    });
    require(built.clone())
}

/// Parse with the real Prometheus parser: family name -> (type, sample count).
fn parse_with_prometheus(
    bin: &Path,
    text: &str,
) -> std::collections::HashMap<String, (String, usize)> {
    use std::io::Write;
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "Prometheus parser rejected /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), (f[1].to_string(), f[2].parse().unwrap()))
        })
        .collect()
}

#[tokio::test]
async fn metrics_parse_and_count_a_known_workload() {
    let (s, mport) = start();
    let app = s.connect("app", "apppw", "app").await.unwrap();
    const N: usize = 20;
    for _ in 0..N {
        app.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
    }
    let (code, text) = get(mport, "/metrics").await;
    assert_eq!(code, 200);
    let pool = "database=\"app\",user=\"trust_user\"";
    assert_eq!(
        sample(&text, "sluice_transactions_total{database=\"app\"}"),
        N as f64
    );
    assert_eq!(
        sample(&text, "sluice_queries_total{database=\"app\"}"),
        N as f64
    );
    assert_eq!(
        sample(
            &text,
            &format!("sluice_transaction_duration_seconds_count{{{pool}}}")
        ),
        N as f64
    );
    assert_eq!(
        sample(
            &text,
            &format!("sluice_query_duration_seconds_bucket{{{pool},le=\"+Inf\"}}")
        ),
        N as f64
    );
    assert!(
        sample(
            &text,
            &format!("sluice_query_duration_seconds_sum{{{pool}}}")
        ) > 0.0
    );
    assert!(
        sample(
            &text,
            &format!("sluice_client_wait_duration_seconds_count{{{pool}}}")
        ) >= N as f64
    );
    assert_eq!(
        sample(
            &text,
            &format!("sluice_client_login_duration_seconds_count{{{pool}}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("sluice_server_connect_duration_seconds_count{{{pool}}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("sluice_pool_servers{{{pool},state=\"idle\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("sluice_pool_clients{{{pool},state=\"active\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(&text, "sluice_database_pool_size{database=\"app\"}"),
        2.0
    );
    assert_eq!(sample(&text, "sluice_list_items{list=\"pools\"}"), 2.0);
    assert!(sample(&text, "sluice_process_resident_memory_bytes") > 0.0);
    if let Some(bin) = promcheck() {
        let fams = parse_with_prometheus(&bin, &text);
        for (name, kind) in [
            ("sluice_query_duration_seconds", "HISTOGRAM"),
            ("sluice_transaction_duration_seconds", "HISTOGRAM"),
            ("sluice_client_wait_duration_seconds", "HISTOGRAM"),
            ("sluice_client_login_duration_seconds", "HISTOGRAM"),
            ("sluice_server_connect_duration_seconds", "HISTOGRAM"),
            ("sluice_transactions_total", "COUNTER"),
            ("sluice_pool_clients", "GAUGE"),
            ("sluice_pool_maxwait_seconds", "GAUGE"),
            ("sluice_database_current_connections", "GAUGE"),
            ("sluice_list_items", "GAUGE"),
        ] {
            assert_eq!(fams.get(name).map(|f| f.0.as_str()), Some(kind), "{name}");
        }
    }
}

#[tokio::test]
async fn health_is_ready_until_shutdown() {
    let (s, mport) = start();
    assert_eq!(get(mport, "/health").await.0, 200);
    assert_eq!(get(mport, "/health/live").await.0, 200);
    assert_eq!(get(mport, "/nope").await.0, 404);
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
    let mut c = Console::connect(s.port, "admin", "adminpw").await.unwrap();
    c.query("SHUTDOWN WAIT_FOR_CLIENTS").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, body) = get(mport, "/health").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(
        get(mport, "/health/live").await.0,
        200,
        "still alive while draining"
    );
}
