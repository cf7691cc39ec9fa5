//! login_notify_message and disable_pqexec side by side: the NOTICE a client gets after its login
//! (where in the greeting, severity, code, text), and what a simple Query gets when only the
//! extended protocol is allowed (the extended one still works).

use std::time::Duration;

use sluice_e2e::{error_fields, RawConn};

use super::{bad_input_common, pair, report};

/// The greeting's message tags in order, ParameterStatus folded to one `S`, with the notice's
/// fields where it came.
async fn greeting(port: u16) -> String {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    let mut seen: Vec<String> = Vec::new();
    loop {
        let Some((tag, body)) = c.read_message(Duration::from_secs(4)).await else {
            seen.push("(nothing more)".into());
            break;
        };
        let item = match tag {
            b'N' => {
                let f = error_fields(&body);
                format!("N[{} {} {}]", f[&b'S'], f[&b'C'], f[&b'M'])
            }
            t => (t as char).to_string(),
        };
        if !(item == "S" && seen.last().is_some_and(|l| l == "S")) {
            seen.push(item);
        }
        if tag == b'Z' {
            break;
        }
    }
    seen.join(" ")
}

/// A simple Query's answer (error fields and whether the connection stays), then an extended
/// one on a new connection.
async fn simple_then_extended(port: u16) -> String {
    let mut c = bad_input_common::raw_login_at(port, &[]).await;
    c.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let simple = match c.read_message(Duration::from_secs(4)).await {
        Some((b'E', body)) => {
            let f = error_fields(&body);
            let (_, closed) = c.read_until_close(Duration::from_secs(4)).await;
            format!("{} {} {} closed={closed}", f[&b'S'], f[&b'C'], f[&b'M'])
        }
        other => format!("{other:?}"),
    };
    let mut e = bad_input_common::raw_login_at(port, &[]).await;
    let mut batch = RawConn::message(b'P', b"\0SELECT 42\0\0\0");
    batch.extend(RawConn::message(b'B', b"\0\0\0\0\0\0\0\0"));
    batch.extend(RawConn::message(b'E', b"\0\0\0\0\0"));
    batch.extend(RawConn::message(b'S', b""));
    e.send(&batch).await;
    let msgs = bad_input_common::read_until_ready(&mut e).await;
    let row = msgs.iter().any(|(t, b)| *t == b'D' && b.ends_with(b"42"));
    format!("{simple}; extended row: {row}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_notice_and_disable_pqexec_match_pgbouncer() {
    let mut results = Vec::new();
    let Some(p) = pair(
        "auth_type = trust\npool_mode = transaction\nlogin_notify_message = Welcome to the pool",
    ) else {
        eprintln!("SKIP: the PgBouncer 1.25.2 reference binary is not here");
        return;
    };
    let (a, b) = (greeting(p.pgb.port).await, greeting(p.sl.port).await);
    assert!(b.contains("N[NOTICE 00000 Welcome to the pool]"), "{b}");
    results.push(("login_notify_message".to_string(), a, b));
    drop(p);
    let Some(p) = pair("auth_type = trust\npool_mode = transaction\ndisable_pqexec = 1") else {
        return;
    };
    let (a, b) = (
        simple_then_extended(p.pgb.port).await,
        simple_then_extended(p.sl.port).await,
    );
    assert!(b.contains("PQexec disallowed"), "{b}");
    assert!(b.ends_with("extended row: true"), "{b}");
    results.push(("disable_pqexec".to_string(), a, b));
    report(&results);
}
