//! Bad input from clients (broken startup packets, protocol violations, vanishing clients, killed
//! backends) against the real sluice binary: every case ends with the exact error and/or a close
//! within a couple of seconds, never a hang, and a normal client keeps working afterwards.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, PgCluster, RawConn, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DB_LINE: &str = "app = host={pg_host} port={pg_port} dbname=app";
const USERLIST: &str = "\"trust_user\" \"\"\n";
/// Generous bound for "promptly": every bad client must be answered well within this.
const PROMPT: Duration = Duration::from_secs(3);

/// A sluice with trust auth for `trust_user` and short timeouts, plus `extra` [pgbouncer] lines
/// (which replace the defaults below for the keys they set).
fn start(extra: &str) -> Sluice {
    let mut lines: Vec<String> = [
        "auth_type = trust",
        "query_wait_timeout = 5",
        "client_login_timeout = 5",
        "server_login_retry = 1",
    ]
    .iter()
    .filter(|d| {
        let key = d.split('=').next().unwrap().trim();
        !extra
            .lines()
            .any(|l| l.split('=').next().unwrap().trim() == key)
    })
    .map(|d| d.to_string())
    .collect();
    lines.push(extra.to_string());
    let ini = Sluice::basic_ini(&lines.join("\n"), DB_LINE);
    Sluice::builder(&ini).userlist(USERLIST).start()
}

/// A normal tokio-postgres client logs in through sluice and runs a query.
async fn assert_works(s: &Sluice) {
    let fut = async {
        let c = s
            .connect("trust_user", "", "app")
            .await
            .unwrap_or_else(|e| panic!("normal client cannot log in: {e:?}\nlog:\n{}", s.log()));
        let row = c.query_one("SELECT 40 + 2", &[]).await.expect("query");
        assert_eq!(row.get::<_, i32>(0), 42);
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("normal client hung\nlog:\n{}", s.log()));
}

/// Split raw backend bytes into (tag, body) messages; panics on a partial trailing message.
fn split_messages(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        assert!(b.len() >= 5, "partial message header: {b:?}");
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        assert!(len >= 4 && b.len() > len, "bad/partial message: {b:?}");
        out.push((b[0], b[5..1 + len].to_vec()));
        b = &b[1 + len..];
    }
    out
}

/// The peer answers with exactly one ErrorResponse carrying `sqlstate` and then closes, promptly.
async fn expect_fatal(c: &mut RawConn, sqlstate: &str) -> HashMap<u8, String> {
    let t0 = Instant::now();
    let (bytes, closed) = c.read_until_close(PROMPT).await;
    assert!(
        closed,
        "connection not closed within {PROMPT:?}; got {bytes:?}"
    );
    assert!(t0.elapsed() < PROMPT);
    let msgs = split_messages(&bytes);
    assert_eq!(
        msgs.len(),
        1,
        "expected exactly one ErrorResponse, got {msgs:?}"
    );
    let (tag, body) = &msgs[0];
    assert_eq!(*tag, b'E', "expected ErrorResponse, got {msgs:?}");
    let f = error_fields(body);
    assert_eq!(f.get(&b'C').map(String::as_str), Some(sqlstate), "{f:?}");
    assert_eq!(f.get(&b'S').map(String::as_str), Some("FATAL"), "{f:?}");
    f
}

/// Send `bytes` on a fresh connection and expect a FATAL `sqlstate` + close.
async fn bad_startup(s: &Sluice, bytes: &[u8], sqlstate: &str) -> HashMap<u8, String> {
    let mut c = RawConn::connect(s.port).await;
    c.send(bytes).await;
    expect_fatal(&mut c, sqlstate).await
}

/// Read the login answer until ReadyForQuery; panics on ErrorResponse or timeout.
async fn read_until_ready(c: &mut RawConn) -> Vec<(u8, Vec<u8>)> {
    let mut msgs = Vec::new();
    loop {
        let (tag, body) = c
            .read_message(PROMPT)
            .await
            .unwrap_or_else(|| panic!("no ReadyForQuery; got so far {msgs:?}"));
        if tag == b'E' {
            panic!("unexpected error: {:?}", error_fields(&body));
        }
        msgs.push((tag, body));
        if tag == b'Z' {
            return msgs;
        }
    }
}

/// Raw startup + trust login as trust_user/app (plus `extra` params) up to ReadyForQuery.
async fn raw_login(s: &Sluice, extra: &[(&str, &str)]) -> RawConn {
    let mut c = RawConn::connect(s.port).await;
    let mut params = vec![("user", "trust_user"), ("database", "app")];
    params.extend_from_slice(extra);
    c.send(&RawConn::startup_packet(&params)).await;
    let msgs = read_until_ready(&mut c).await;
    assert_eq!(msgs[0], (b'R', vec![0, 0, 0, 0]), "AuthenticationOk first");
    c
}

/// Simple query over a raw connection: the text of every DataRow column (None = NULL), or the
/// error fields; always consumed up to ReadyForQuery. Returns also the transaction status.
async fn raw_query(
    c: &mut RawConn,
    sql: &str,
) -> (Result<Vec<Vec<Option<String>>>, HashMap<u8, String>>, u8) {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    c.send(&RawConn::message(b'Q', &body)).await;
    let mut rows = Vec::new();
    let mut err = None;
    loop {
        let (tag, body) = c
            .read_message(PROMPT)
            .await
            .unwrap_or_else(|| panic!("no answer to {sql:?}"));
        match tag {
            b'D' => {
                let n = u16::from_be_bytes([body[0], body[1]]) as usize;
                let mut p = 2;
                let mut row = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = i32::from_be_bytes([body[p], body[p + 1], body[p + 2], body[p + 3]]);
                    p += 4;
                    if len < 0 {
                        row.push(None);
                    } else {
                        let len = len as usize;
                        row.push(Some(
                            String::from_utf8_lossy(&body[p..p + len]).into_owned(),
                        ));
                        p += len;
                    }
                }
                rows.push(row);
            }
            b'E' => err = Some(error_fields(&body)),
            b'Z' => {
                let status = body[0];
                return (err.map_or(Ok(rows), Err), status);
            }
            _ => {}
        }
    }
}

/// First column of the single row of `sql`, which must succeed.
async fn raw_scalar(c: &mut RawConn, sql: &str) -> String {
    let (r, _) = raw_query(c, sql).await;
    let rows = r.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0][0].clone().expect("NULL")
}

/// Untagged startup-phase packet: int32 length (may lie) followed by `body`.
fn packet_with_len(len: u32, body: &[u8]) -> Vec<u8> {
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Run SQL as superuser on the cluster without blocking the runtime.
async fn su(db: &'static str, sql: String) -> String {
    tokio::task::spawn_blocking(move || PgCluster::get().psql(db, &sql))
        .await
        .expect("psql task")
}

/// VmRSS of a process in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

// ---------------------------------------------------------------------------------------------
// Startup phase
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn garbage_instead_of_startup_packet_is_refused() {
    let s = start("");
    // An HTTP request: the "length" is 0x47455420 (far above the startup limit).
    let f = bad_startup(&s, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "08P01").await;
    assert!(f[&b'M'].contains("startup"), "{f:?}");
    assert_works(&s).await;
    // A plausible length with a nonsense protocol code.
    bad_startup(&s, &b"\0\0\0\x10garbage!garbage!"[..16], "08P01").await;
    assert_works(&s).await;
    // Random-looking binary bytes.
    bad_startup(
        &s,
        &[
            0x00, 0x00, 0x00, 0x0c, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04,
        ],
        "08P01",
    )
    .await;
    assert_works(&s).await;
}

#[tokio::test]
async fn truncated_startup_packet_then_close() {
    let s = start("");
    let full = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    // Half a packet, then the client closes its sending side: sluice reports the truncation and closes.
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    c.write_all(&full[..full.len() / 2]).await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(PROMPT, c.read_to_end(&mut got))
        .await
        .expect("sluice kept a half-closed truncated startup open")
        .ok();
    let msgs = split_messages(&got);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].0, b'E');
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert!(f[&b'M'].contains("truncated"), "{f:?}");
    assert_works(&s).await;

    // Only the first 2 bytes of the length, then a full close (nothing left to read on our side).
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    c.write_all(&full[..2]).await.unwrap();
    drop(c);
    assert_works(&s).await;
    // Sluice is still alive.
    assert!(std::path::Path::new(&format!("/proc/{}", s.pid())).exists());
}

#[tokio::test]
async fn stalled_partial_startup_hits_client_login_timeout() {
    let s = start("client_login_timeout = 1");
    let full = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    let mut c = RawConn::connect(s.port).await;
    c.send(&full[..full.len() - 3]).await;
    let t0 = Instant::now();
    let (bytes, closed) = c.read_until_close(Duration::from_secs(4)).await;
    assert!(closed, "stalled client not closed by client_login_timeout");
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    let msgs = split_messages(&bytes);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert!(f[&b'M'].contains("client_login_timeout"), "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn huge_startup_length_is_refused_without_allocating() {
    let s = start("");
    assert_works(&s).await;
    let before = rss_kib(s.pid());
    // 1 GiB announced, followed by some real bytes: refused at the header.
    let mut c = RawConn::connect(s.port).await;
    let mut bytes = packet_with_len(0x4000_0000, &196_608u32.to_be_bytes());
    bytes.extend_from_slice(&vec![b'x'; 64 * 1024]);
    c.send(&bytes).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(f[&b'M'].contains("startup"), "{f:?}");
    // Several at once must not add up either.
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut c = RawConn::connect(s.port).await;
        c.send(&packet_with_len(0x4000_0000, &196_608u32.to_be_bytes()))
            .await;
        conns.push(c);
    }
    for c in &mut conns {
        expect_fatal(c, "08P01").await;
    }
    let after = rss_kib(s.pid());
    assert!(
        after < before + 16 * 1024 && after < 128 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert_works(&s).await;
}

#[tokio::test]
async fn impossible_startup_lengths_are_refused() {
    let s = start("");
    for len in [0u32, 3, 7, 0x7fff_ffff, 0xffff_ffff] {
        let f = bad_startup(
            &s,
            &packet_with_len(len, &196_608u32.to_be_bytes()),
            "08P01",
        )
        .await;
        assert!(f[&b'M'].contains("startup"), "len {len}: {f:?}");
        assert_works(&s).await;
    }
    assert!(rss_kib(s.pid()) < 128 * 1024);
}

#[tokio::test]
async fn wrong_protocol_versions_are_refused() {
    let s = start("");
    for (major, minor) in [(2u32, 0u32), (4, 0), (1234, 1)] {
        let mut body = ((major << 16) | minor).to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0trust_user\0database\0app\0\0");
        let bytes = packet_with_len(body.len() as u32 + 4, &body);
        let f = bad_startup(&s, &bytes, "08P01").await;
        assert!(
            f[&b'M'].contains("protocol") || f[&b'M'].contains("version"),
            "{major}.{minor}: {f:?}"
        );
        assert_works(&s).await;
    }
}

#[tokio::test]
async fn minor_protocol_version_gets_negotiated_down() {
    let s = start("");
    let mut p = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    p[7] = 2; // 3.2
    let mut c = RawConn::connect(s.port).await;
    c.send(&p).await;
    let msgs = read_until_ready(&mut c).await;
    let (tag, body) = &msgs[0];
    assert_eq!(*tag, b'v', "NegotiateProtocolVersion first: {msgs:?}");
    assert_eq!(&body[..4], &0x0003_0000u32.to_be_bytes(), "{body:?}");
    assert_eq!(raw_scalar(&mut c, "SELECT 7").await, "7");
    assert_works(&s).await;
}

#[tokio::test]
async fn ssl_request_without_tls_gets_n_then_plain_startup_works() {
    let s = start("");
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::ssl_request()).await;
    assert_eq!(
        c.read_bytes(1, PROMPT).await.as_deref(),
        Some(&b"N"[..]),
        "SSLRequest must be answered with a single 'N'"
    );
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    let msgs = read_until_ready(&mut c).await;
    assert_eq!(msgs[0], (b'R', vec![0, 0, 0, 0]));
    assert_eq!(raw_scalar(&mut c, "SELECT 'ok'").await, "ok");
    c.send(&RawConn::message(b'X', &[])).await;
    let (rest, closed) = c.read_until_close(PROMPT).await;
    assert!(closed && rest.is_empty(), "{rest:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn gssenc_request_gets_n_then_plain_startup_works() {
    let s = start("");
    let mut c = RawConn::connect(s.port).await;
    c.send(&packet_with_len(8, &80_877_104u32.to_be_bytes()))
        .await;
    assert_eq!(c.read_bytes(1, PROMPT).await.as_deref(), Some(&b"N"[..]));
    // And an SSLRequest after the refused GSSENCRequest (what libpq does with gssencmode=prefer).
    c.send(&RawConn::ssl_request()).await;
    assert_eq!(c.read_bytes(1, PROMPT).await.as_deref(), Some(&b"N"[..]));
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    read_until_ready(&mut c).await;
    assert_eq!(raw_scalar(&mut c, "SELECT 1").await, "1");
    assert_works(&s).await;
}

#[tokio::test]
async fn ssl_request_with_pipelined_plaintext_is_refused() {
    let s = start("");
    let mut bytes = RawConn::ssl_request();
    bytes.extend_from_slice(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]));
    let mut c = RawConn::connect(s.port).await;
    c.send(&bytes).await; // one write: both packets arrive together
    let (got, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "not closed: {got:?}");
    // An 'N' before the refusal is tolerable; a login (AuthenticationOk) is not.
    let rest = got.strip_prefix(b"N").unwrap_or(&got);
    let msgs = split_messages(rest);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].0, b'E', "{msgs:?}");
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn startup_without_user_is_refused() {
    let s = start("");
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[("database", "app")]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("user"), "{f:?}");
    // An empty user is no better.
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[("user", ""), ("database", "app")]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("user"), "{f:?}");
    // Key without value / missing terminator: malformed packet.
    bad_startup(&s, b"\0\0\0\x0e\0\x03\0\0user\0\0", "08P01").await;
    bad_startup(&s, b"\0\0\0\x18\0\x03\0\0user\0trust_user\0\0", "08P01").await;
    assert_works(&s).await;
}

#[tokio::test]
async fn unsupported_startup_parameter_is_named() {
    let s = start("");
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
            ("extra_float_digits", "2"),
        ]),
        "08P01",
    )
    .await;
    assert!(
        f[&b'M'].contains("unsupported startup parameter")
            && f[&b'M'].contains("extra_float_digits"),
        "{f:?}"
    );
    // Unknown parameters inside `options` are refused too.
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
            ("options", "-c work_mem=64kB"),
        ]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("work_mem"), "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn ignore_startup_parameters_lets_them_pass() {
    let s = start("ignore_startup_parameters = extra_float_digits, options");
    let mut c = raw_login(
        &s,
        &[("extra_float_digits", "2"), ("options", "-c work_mem=64kB")],
    )
    .await;
    assert_eq!(raw_scalar(&mut c, "SELECT 5 * 5").await, "25");
    // Still refused: a parameter not in the list.
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[("user", "trust_user"), ("database", "app"), ("geqo", "off")]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("geqo"), "{f:?}");
    assert_works(&s).await;
}

// ---------------------------------------------------------------------------------------------
// After login
// ---------------------------------------------------------------------------------------------

/// `Q` with length 2 from an idle client (not linked) and from a client inside a transaction
/// (linked), in transaction mode with one server: 08P01 + close, and the other client carries on.
#[tokio::test]
async fn bad_message_length_after_login() {
    let s = start("pool_mode = transaction\ndefault_pool_size = 1");
    let other = s.connect("trust_user", "", "app").await.unwrap();
    other.simple_query("SELECT 1").await.unwrap();

    // Unlinked: right after login.
    let mut c = raw_login(&s, &[]).await;
    c.send(&[b'Q', 0, 0, 0, 2]).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(f[&b'M'].contains("packet"), "{f:?}");
    let row = tokio::time::timeout(PROMPT, other.query_one("SELECT 2", &[]))
        .await
        .expect("other client hung")
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);

    // Linked: in the middle of a transaction, holding the only server.
    let mut c = raw_login(&s, &[]).await;
    let (r, status) = raw_query(&mut c, MARK).await;
    r.unwrap();
    assert_eq!(status, b'T');
    c.send(&[b'Q', 0, 0, 0, 2, b'x']).await;
    expect_fatal(&mut c, "08P01").await;
    let row = tokio::time::timeout(PROMPT, other.query_one("SELECT 3", &[]))
        .await
        .expect("other client hung: the dirty server was not freed")
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 3);
    // The other client must not have inherited the open transaction.
    let row = other
        .query_one(
            "SELECT coalesce(current_setting('bad_input.marker', true), '')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, String>(0),
        "",
        "other client runs inside the leftover transaction"
    );
    assert_works(&s).await;
}

#[tokio::test]
async fn oversized_message_length_after_login_is_refused() {
    let s = start("max_packet_size = 1048576");
    assert_works(&s).await;
    let before = rss_kib(s.pid());
    let mut c = raw_login(&s, &[]).await;
    c.send(&[b'Q', 0x40, 0, 0, 0, b'S', b'E', b'L']).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(f[&b'M'].contains("packet"), "{f:?}");
    let after = rss_kib(s.pid());
    assert!(after < before + 16 * 1024, "RSS {before} -> {after} KiB");
    assert_works(&s).await;
}

#[tokio::test]
async fn cancel_request_with_random_key_is_ignored() {
    let s = start("");
    let busy = s.connect("trust_user", "", "app").await.unwrap();
    let sleeper =
        tokio::spawn(async move { busy.simple_query("SELECT pg_sleep(0.6)").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(150)).await;
    for key in [[0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0], [0; 8]] {
        let mut c = RawConn::connect(s.port).await;
        let mut body = 80_877_102u32.to_be_bytes().to_vec();
        body.extend_from_slice(&key);
        c.send(&packet_with_len(16, &body)).await;
        let t0 = Instant::now();
        let (bytes, closed) = c.read_until_close(PROMPT).await;
        assert!(closed, "cancel connection not closed");
        assert!(
            bytes.is_empty(),
            "cancel connection got an answer: {bytes:?}"
        );
        assert!(t0.elapsed() < PROMPT);
    }
    // Nothing else happened: the running query was not cancelled.
    tokio::time::timeout(PROMPT, sleeper)
        .await
        .expect("sleeper hung")
        .unwrap()
        .expect("a random cancel key cancelled someone's query");
    // A CancelRequest with the wrong length is a malformed packet.
    let mut body = 80_877_102u32.to_be_bytes().to_vec();
    body.extend_from_slice(&[1, 2, 3, 4]);
    bad_startup(&s, &packet_with_len(12, &body), "08P01").await;
    assert_works(&s).await;
}

// ---------------------------------------------------------------------------------------------
// Clients vanishing mid-transaction, servers dying
// ---------------------------------------------------------------------------------------------

/// How the client disappears.
#[derive(Clone, Copy, Debug)]
enum Vanish {
    /// Drop the TCP connection without Terminate.
    Abrupt,
    /// tokio-postgres drop: Terminate, then close.
    Terminate,
}

async fn vanish_mid_transaction(mode: &str, how: Vanish) {
    let table = format!("bad_input_vanish_{mode}_{how:?}").to_lowercase();
    su(
        "app",
        format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table}(x int); \
             GRANT ALL ON {table} TO PUBLIC"
        ),
    )
    .await;
    let s = start(&format!(
        "pool_mode = {mode}\ndefault_pool_size = 1\nserver_reset_query = DISCARD ALL"
    ));
    let insert = format!("INSERT INTO {table} VALUES (1)");
    let probe = "SELECT txid_current()::text || '|' || now()::text || '|' || pg_backend_pid()";

    let (a_txid, a_now, a_pid) = match how {
        Vanish::Abrupt => {
            let mut a = raw_login(&s, &[]).await;
            raw_query(&mut a, MARK).await.0.unwrap();
            let (r, status) = raw_query(&mut a, &insert).await;
            r.unwrap();
            assert_eq!(status, b'T');
            let v = raw_scalar(&mut a, probe).await;
            drop(a); // close without Terminate or COMMIT
            split3(&v)
        }
        Vanish::Terminate => {
            let a = s.connect("trust_user", "", "app").await.unwrap();
            a.batch_execute(MARK).await.unwrap();
            a.batch_execute(&insert).await.unwrap();
            let v: String = a.query_one(probe, &[]).await.unwrap().get(0);
            drop(a);
            split3(&v)
        }
    };

    // The next client (pool size 1: it can only get A's server or a fresh one).
    let b = tokio::time::timeout(Duration::from_secs(8), s.connect("trust_user", "", "app"))
        .await
        .expect("next client hung")
        .unwrap();
    let row = tokio::time::timeout(
        Duration::from_secs(8),
        b.query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {table}), txid_current()::text, now()::text, \
                 coalesce(current_setting('bad_input.marker', true), '')"
            ),
            &[],
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("next client's query hung\nlog:\n{}", s.log()))
    .unwrap();
    let (count, txid, now, marker): (i64, String, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        count, 0,
        "uncommitted row of the vanished client is visible"
    );
    assert_ne!(
        txid, a_txid,
        "next client runs in the vanished client's transaction"
    );
    assert_ne!(
        now, a_now,
        "next client runs in the vanished client's transaction"
    );
    assert_eq!(
        marker, "",
        "next client sees the vanished client's SET LOCAL"
    );

    // No session is left idle in transaction from A (closing a backend is asynchronous: poll).
    let deadline = Instant::now() + PROMPT;
    loop {
        let left = su(
            "app",
            format!(
                "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' \
                 AND (pid = {a_pid} OR query LIKE '%{table}%')"
            ),
        )
        .await;
        if left == "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} session(s) left idle in transaction by the vanished client (pid {a_pid})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        su("app", format!("SELECT count(*) FROM {table}")).await,
        "0"
    );
    drop(b);
    assert_works(&s).await;
    su("app", format!("DROP TABLE {table}")).await;
}

/// Opens a transaction with a transaction-local marker setting.
const MARK: &str = "BEGIN; SELECT set_config('bad_input.marker', 'dirty', true)";

fn split3(v: &str) -> (String, String, i32) {
    let mut it = v.split('|');
    let txid = it.next().unwrap().to_string();
    let now = it.next().unwrap().to_string();
    let pid = it.next().unwrap().parse().unwrap();
    (txid, now, pid)
}

#[tokio::test]
async fn vanished_client_mid_transaction_transaction_mode_abrupt() {
    vanish_mid_transaction("transaction", Vanish::Abrupt).await;
}

#[tokio::test]
async fn vanished_client_mid_transaction_transaction_mode_terminate() {
    vanish_mid_transaction("transaction", Vanish::Terminate).await;
}

#[tokio::test]
async fn vanished_client_mid_transaction_session_mode_abrupt() {
    vanish_mid_transaction("session", Vanish::Abrupt).await;
}

#[tokio::test]
async fn vanished_client_mid_transaction_session_mode_terminate() {
    vanish_mid_transaction("session", Vanish::Terminate).await;
}

#[tokio::test]
async fn killed_backend_of_idle_session_client() {
    let s = start("pool_mode = session\ndefault_pool_size = 2");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        su("postgres", format!("SELECT pg_terminate_backend({pid})")).await,
        "t"
    );
    // The client's next query fails promptly, it does not hang.
    let t0 = Instant::now();
    let r = tokio::time::timeout(PROMPT, a.simple_query("SELECT 1"))
        .await
        .unwrap_or_else(|_| panic!("query after backend kill hung\nlog:\n{}", s.log()));
    assert!(r.is_err(), "query on a killed backend succeeded: {r:?}");
    assert!(t0.elapsed() < PROMPT);
    drop(a);
    // A new client gets a working server (not the dead one).
    let b = s.connect("trust_user", "", "app").await.unwrap();
    let new_pid: i32 = b
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(new_pid, pid);
    assert_works(&s).await;
}

#[tokio::test]
async fn killed_backend_of_linked_raw_client_gets_error_message() {
    // Same as above on the raw protocol: the error sluice relays or reports carries a SQLSTATE and
    // the connection is closed.
    let s = start("pool_mode = session\ndefault_pool_size = 1");
    let mut a = raw_login(&s, &[]).await;
    let pid = raw_scalar(&mut a, "SELECT pg_backend_pid()").await;
    su("postgres", format!("SELECT pg_terminate_backend({pid})")).await;
    a.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let (bytes, closed) = a.read_until_close(PROMPT).await;
    assert!(closed, "client not closed after its server died: {bytes:?}");
    let msgs = split_messages(&bytes);
    let errors: Vec<_> = msgs
        .iter()
        .filter(|(t, _)| *t == b'E')
        .map(|(_, b)| error_fields(b))
        .collect();
    assert!(!errors.is_empty(), "no ErrorResponse: {msgs:?}");
    for f in &errors {
        let code = &f[&b'C'];
        assert!(
            code == "57P01" || code.starts_with("08"),
            "unexpected SQLSTATE: {f:?}"
        );
    }
    assert!(
        !msgs.iter().any(|(t, _)| *t == b'D'),
        "the query ran somewhere: {msgs:?}"
    );
    // Pool size 1: the dead server must have been dropped for this to work.
    assert_works(&s).await;
}

#[tokio::test]
async fn killed_idle_backend_in_transaction_mode_is_replaced() {
    // In transaction mode an idle client holds no server. Once the killed backend is gone, the
    // pool's dead idle server (it sent FATAL + EOF while idle) must not be handed out: the client's
    // next query runs on a fresh backend, with no error.
    let s = start("pool_mode = transaction\ndefault_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    su("postgres", format!("SELECT pg_terminate_backend({pid})")).await;
    wait_backend_gone(pid).await;
    let row = tokio::time::timeout(PROMPT, a.query_one("SELECT pg_backend_pid()", &[]))
        .await
        .unwrap_or_else(|_| panic!("query after idle backend kill hung\nlog:\n{}", s.log()))
        .unwrap_or_else(|e| panic!("dead idle server was handed out: {e:?}\nlog:\n{}", s.log()));
    assert_ne!(row.get::<_, i32>(0), pid);
    assert_works(&s).await;
}

/// Poll pg_stat_activity until backend `pid` has exited (it sent its FATAL message before).
async fn wait_backend_gone(pid: i32) {
    let deadline = Instant::now() + PROMPT;
    while su(
        "postgres",
        format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
    )
    .await
        != "0"
    {
        assert!(Instant::now() < deadline, "backend {pid} did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
