//! The HTTP endpoint's limits, TLS and basic auth through the real binary: an oversized request
//! head is answered 431 and the server goes on serving; a client that sends half a request and
//! stalls is dropped within the head timeout; a request body is refused; basic auth answers 401
//! (with the challenge) to no or wrong credentials and serves the right ones, while the health
//! probes stay open; HTTPS with the test CA serves /metrics and a plaintext request to the TLS port
//! gets no answer; a half TLS pair or an unreadable file is refused at start naming the line and key.
//! No PostgreSQL is needed: nothing here logs in.

mod tls_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use sluice_e2e::{free_port, http_get, Sluice};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use tls_support::Certs;

const WAIT: Duration = Duration::from_secs(15);
/// `metrics::HEAD_TIMEOUT` in the pooler.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const USERS: &str = "\"prom\" \"scrape-pw\"\n\"grafana\" \"g:pw\"\n";

/// A pooler whose database is never reached, with `[sluice]` lines after metrics_listen_addr.
fn ini(mport: u16, sluice_lines: &str) -> String {
    Sluice::basic_ini(
        "auth_type = trust\n",
        "app = host=127.0.0.1 port=1 dbname=app",
    ) + &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n{sluice_lines}")
}

fn start(sluice_lines: &str) -> (Sluice, u16) {
    start_with(sluice_lines, &[])
}

fn start_with(sluice_lines: &str, files: &[(&str, &str)]) -> (Sluice, u16) {
    let mport = free_port();
    let mut b = Sluice::builder(&ini(mport, sluice_lines));
    for (name, text) in files {
        b = b.file(name, text);
    }
    (b.start(), mport)
}

/// Send `request` and read until the server closes: the whole answer ("" when closed unanswered).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request: &[u8]) -> String {
    // A server that answers and closes early may reset the rest of a large write: keep reading.
    let _ = s.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("answer or close in time");
    String::from_utf8_lossy(&out).into_owned()
}

async fn plain(port: u16, request: &[u8]) -> String {
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    exchange(s, request).await
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

fn get(path: &str, authorization: Option<&str>) -> Vec<u8> {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").into_bytes()
}

fn basic(user_pass: &str) -> String {
    // base64 by hand (the e2e crate has no base64 dependency).
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in user_pass.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

#[tokio::test]
async fn an_oversized_head_is_refused_and_serving_goes_on() {
    let (_s, mport) = start("");
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let answer = plain(mport, big.as_bytes()).await;
    assert_eq!(status(&answer), 431, "{answer}");
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let answer = plain(
        mport,
        format!("GET /metrics HTTP/1.1\r\n{many}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&answer), 431, "{answer}");
    let (code, body) = http_get(mport, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("sluice_info{"), "{body}");
    assert_eq!(http_get(mport, "/health").await.0, 200);
}

#[tokio::test]
async fn a_stalled_half_request_is_dropped_within_the_head_timeout() {
    let (_s, mport) = start("");
    let mut stalled = TcpStream::connect(("127.0.0.1", mport)).await.unwrap();
    stalled
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let t0 = Instant::now();
    // Others are served meanwhile.
    assert_eq!(http_get(mport, "/health").await.0, 200);
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(WAIT, stalled.read(&mut buf))
        .await
        .expect("the stalled connection is closed in time")
        .unwrap_or(0);
    let took = t0.elapsed();
    assert!(
        took >= HEAD_TIMEOUT - Duration::from_millis(500) && took < HEAD_TIMEOUT * 2,
        "closed after {took:?}"
    );
    // Closed without serving the half request (hyper closes a timed-out head silently).
    assert!(
        !String::from_utf8_lossy(&buf[..n]).contains(" 200 "),
        "{:?}",
        &buf[..n]
    );
    // A silent client (connects, sends nothing) goes the same way.
    let mut silent = TcpStream::connect(("127.0.0.1", mport)).await.unwrap();
    let t0 = Instant::now();
    let _ = tokio::time::timeout(WAIT, silent.read(&mut buf))
        .await
        .expect("the silent connection is closed in time");
    assert!(t0.elapsed() < HEAD_TIMEOUT * 2, "{:?}", t0.elapsed());
}

#[tokio::test]
async fn bodies_and_other_methods_are_refused() {
    let (_s, mport) = start("");
    let answer = plain(
        mport,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert_eq!(status(&answer), 413, "{answer}");
    let answer = plain(
        mport,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    )
    .await;
    assert_eq!(status(&answer), 405, "{answer}");
    assert!(answer.contains("Allow: GET, HEAD"), "{answer}");
    let answer = plain(mport, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "HEAD has no body: {answer}");
}

#[tokio::test]
async fn basic_auth_guards_all_but_the_health_probes() {
    let (_s, mport) = start_with(
        "metrics_auth_file = {dir}/metrics-users.txt\n",
        &[("metrics-users.txt", USERS)],
    );
    for path in ["/metrics", "/", "/dashboard.json", "/advice", "/nope"] {
        let answer = plain(mport, &get(path, None)).await;
        assert_eq!(status(&answer), 401, "{path}: {answer}");
        // Header names are case-insensitive (hyper writes this one "Www-Authenticate").
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("\r\nwww-authenticate: basic realm=\"sluice\"\r\n"),
            "{path}: {answer}"
        );
    }
    for wrong in [
        "prom:wrong",
        "prom:",
        "nobody:scrape-pw",
        "prom:scrape-pw2",
        "grafana:g",
    ] {
        let answer = plain(mport, &get("/metrics", Some(&basic(wrong)))).await;
        assert_eq!(status(&answer), 401, "{wrong}: {answer}");
        assert!(!answer.contains("sluice_info"), "{wrong}: {answer}");
    }
    let answer = plain(mport, &get("/metrics", Some("Bearer scrape-pw"))).await;
    assert_eq!(status(&answer), 401, "{answer}");
    let answer = plain(mport, &get("/metrics", Some(&basic("prom:scrape-pw")))).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains("\nsluice_info{"), "{answer}");
    // The password may hold ':' (the user name ends at the first one).
    let answer = plain(mport, &get("/dashboard.json", Some(&basic("grafana:g:pw")))).await;
    assert_eq!(status(&answer), 200, "{answer}");
    // Probes carry no credentials.
    for path in ["/health", "/health/ready", "/health/live"] {
        assert_eq!(http_get(mport, path).await.0, 200, "{path}");
    }
}

#[tokio::test]
async fn the_auth_file_is_read_again_on_reload() {
    let mport = free_port();
    let lines = "metrics_auth_file = {dir}/metrics-users.txt\n";
    let s = Sluice::builder(&ini(mport, lines))
        .file("metrics-users.txt", USERS)
        .start();
    let old = basic("prom:scrape-pw");
    let new = basic("prom:rotated");
    assert_eq!(
        status(&plain(mport, &get("/metrics", Some(&old))).await),
        200
    );
    s.write_file("metrics-users.txt", "\"prom\" \"rotated\"\n");
    let before = s.log().matches("configuration reloaded").count();
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + WAIT;
    while s.log().matches("configuration reloaded").count() == before {
        assert!(Instant::now() < deadline, "no reload; log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status(&plain(mport, &get("/metrics", Some(&old))).await),
        401
    );
    assert_eq!(
        status(&plain(mport, &get("/metrics", Some(&new))).await),
        200
    );
}

fn tls_client() -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(Certs::get().ca.pem.cert.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

async fn https(port: u16, request: &[u8]) -> String {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio::time::timeout(WAIT, tls_client().connect(name, tcp))
        .await
        .expect("handshake in time")
        .expect("handshake with the test CA");
    exchange(tls, request).await
}

fn tls_files() -> [(&'static str, &'static str); 3] {
    let c = Certs::get();
    [
        ("metrics.crt", c.sluice.cert.as_str()),
        ("metrics.key", c.sluice.key.as_str()),
        ("metrics-users.txt", USERS),
    ]
}

#[tokio::test]
async fn https_serves_metrics_and_plaintext_gets_nothing() {
    let (_s, mport) = start_with(
        "metrics_tls_cert_file = {dir}/metrics.crt\nmetrics_tls_key_file = {dir}/metrics.key\n",
        &tls_files(),
    );
    let answer = https(mport, &get("/metrics", None)).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains("\nsluice_info{"), "{answer}");
    assert_eq!(status(&https(mport, &get("/health", None)).await), 200);
    let answer = plain(mport, &get("/metrics", None)).await;
    assert!(
        !answer.starts_with("HTTP/") && !answer.contains("sluice_info"),
        "plaintext answered: {answer:?}"
    );
    // And the TLS port still serves.
    assert_eq!(status(&https(mport, &get("/metrics", None)).await), 200);
}

#[tokio::test]
async fn https_with_basic_auth() {
    let (_s, mport) = start_with(
        "metrics_tls_cert_file = {dir}/metrics.crt\nmetrics_tls_key_file = {dir}/metrics.key\n\
         metrics_auth_file = {dir}/metrics-users.txt\n",
        &tls_files(),
    );
    assert_eq!(status(&https(mport, &get("/metrics", None)).await), 401);
    let answer = https(mport, &get("/metrics", Some(&basic("prom:scrape-pw")))).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.contains("\nsluice_info{"), "{answer}");
    assert_eq!(status(&https(mport, &get("/health/live", None)).await), 200);
}

/// Start with `[sluice]` lines that cannot work: a non-zero exit whose log names pgbouncer.ini at
/// the line holding `key`, and each of `needles`.
fn expect_refused(sluice_lines: &str, key: &str, needles: &[&str]) {
    let config = ini(free_port(), sluice_lines);
    let line = config
        .lines()
        .position(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("{key} not in config"))
        + 1;
    let mut b = Sluice::builder(&config);
    for (name, text) in tls_files() {
        b = b.file(name, text);
    }
    let (st, out) = b.run_expect_exit(WAIT);
    assert!(!st.success(), "accepted:\n{config}\n{out}");
    let place = format!("pgbouncer.ini:{line}: {key}: ");
    assert!(out.contains(&place), "no {place:?} in:\n{out}");
    for n in needles {
        assert!(out.contains(n), "no {n:?} in:\n{out}");
    }
}

#[test]
fn bad_endpoint_settings_are_refused_at_start() {
    expect_refused(
        "metrics_tls_cert_file = {dir}/metrics.crt\n",
        "metrics_tls_cert_file",
        &["metrics_tls_key_file"],
    );
    expect_refused(
        "metrics_tls_key_file = {dir}/metrics.key\n",
        "metrics_tls_key_file",
        &["metrics_tls_cert_file"],
    );
    expect_refused(
        "metrics_tls_cert_file = {dir}/missing.crt\nmetrics_tls_key_file = {dir}/metrics.key\n",
        "metrics_tls_cert_file",
        &["missing.crt", "cannot read file"],
    );
    expect_refused(
        "metrics_tls_cert_file = {dir}/metrics.crt\nmetrics_tls_key_file = {dir}/metrics.crt\n",
        "metrics_tls_key_file",
        &["metrics.crt", "no usable private key"],
    );
    expect_refused(
        "metrics_auth_file = {dir}/missing-users.txt\n",
        "metrics_auth_file",
        &["missing-users.txt", "cannot read file"],
    );
}
