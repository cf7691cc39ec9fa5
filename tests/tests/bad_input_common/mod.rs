//! Helpers shared by the bad_input_* tests: a sluice with trust auth and short timeouts, raw
//! protocol login and queries, the expected FATAL-then-close answer and superuser SQL.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, PgCluster, RawConn, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const DB_LINE: &str = "app = host={pg_host} port={pg_port} dbname=app";
pub const USERLIST: &str = "\"trust_user\" \"\"\n";
/// Generous bound for "promptly": every bad client must be answered well within this.
pub const PROMPT: Duration = Duration::from_secs(3);

/// A sluice with trust auth for `trust_user` and short timeouts, plus `extra` [pgbouncer] lines
/// (which replace the defaults below for the keys they set).
pub fn start(extra: &str) -> Sluice {
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
pub async fn assert_works(s: &Sluice) {
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
pub fn split_messages(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
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
pub async fn expect_fatal(c: &mut RawConn, sqlstate: &str) -> HashMap<u8, String> {
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
pub async fn bad_startup(s: &Sluice, bytes: &[u8], sqlstate: &str) -> HashMap<u8, String> {
    let mut c = RawConn::connect(s.port).await;
    c.send(bytes).await;
    expect_fatal(&mut c, sqlstate).await
}

/// Read the login answer until ReadyForQuery; panics on ErrorResponse or timeout.
pub async fn read_until_ready(c: &mut RawConn) -> Vec<(u8, Vec<u8>)> {
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
pub async fn raw_login(s: &Sluice, extra: &[(&str, &str)]) -> RawConn {
    raw_login_at(s.port, extra).await
}

/// `raw_login` to any pooler listening on 127.0.0.1:`port` (PgBouncer too) with trust auth.
pub async fn raw_login_at(port: u16, extra: &[(&str, &str)]) -> RawConn {
    let mut c = RawConn::connect(port).await;
    let mut params = vec![("user", "trust_user"), ("database", "app")];
    params.extend_from_slice(extra);
    c.send(&RawConn::startup_packet(&params)).await;
    let msgs = read_until_ready(&mut c).await;
    assert_eq!(msgs[0], (b'R', vec![0, 0, 0, 0]), "AuthenticationOk first");
    c
}

/// Simple query over a raw connection: the text of every DataRow column (None = NULL), or the
/// error fields; always consumed up to ReadyForQuery. Returns also the transaction status.
pub async fn raw_query(
    c: &mut RawConn,
    sql: &str,
) -> (Result<Vec<Vec<Option<String>>>, HashMap<u8, String>>, u8) {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    c.send(&RawConn::message(b'Q', &body)).await;
    raw_query_reply(c).await
}

/// The answer to a simple query already sent: rows or error fields, and the transaction status.
pub async fn raw_query_reply(
    c: &mut RawConn,
) -> (Result<Vec<Vec<Option<String>>>, HashMap<u8, String>>, u8) {
    let mut rows = Vec::new();
    let mut err = None;
    loop {
        let (tag, body) = c
            .read_message(PROMPT)
            .await
            .unwrap_or_else(|| panic!("no answer to the query"));
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
pub async fn raw_scalar(c: &mut RawConn, sql: &str) -> String {
    let (r, _) = raw_query(c, sql).await;
    let rows = r.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0][0].clone().expect("NULL")
}

/// Untagged startup-phase packet: int32 length (may lie) followed by `body`.
pub fn packet_with_len(len: u32, body: &[u8]) -> Vec<u8> {
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Run SQL as superuser on the cluster without blocking the runtime.
pub async fn su(db: &'static str, sql: String) -> String {
    tokio::task::spawn_blocking(move || PgCluster::get().psql(db, &sql))
        .await
        .expect("psql task")
}

/// After a half-close of our side, the peer must close within `PROMPT`; the bytes it sent are
/// complete messages. Returns them.
pub async fn closed_promptly(mut c: tokio::net::TcpStream, what: &str) -> Vec<(u8, Vec<u8>)> {
    let _ = c.shutdown().await;
    let mut got = Vec::new();
    let r = tokio::time::timeout(PROMPT, c.read_to_end(&mut got)).await;
    assert!(
        r.is_ok(),
        "{what}: not closed within {PROMPT:?}; got {got:?}"
    );
    split_messages(&got)
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// A kB line of /proc/<pid>/status (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} line"))
}
