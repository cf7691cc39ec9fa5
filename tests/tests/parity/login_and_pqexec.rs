//! login_notify_message and disable_pqexec side by side: the NOTICE a client gets after its login
//! (where in the greeting, severity, code, text), and what a simple Query gets when only the
//! extended protocol is allowed (the extended one still works).

use std::time::Duration;

use sluice_e2e::{error_fields, RawConn, Sluice};

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

const NOTICE: &str =
    "auth_type = trust\npool_mode = transaction\nlogin_notify_message = Welcome to the pool";
const PQEXEC: &str = "auth_type = trust\npool_mode = transaction\ndisable_pqexec = 1";
/// What Sluice answers, with or without the reference binary (the side-by-side test below
/// compares it with PgBouncer's).
const GREETING: &str = "R S K N[NOTICE 00000 Welcome to the pool] Z";
const REFUSED: &str = "FATAL 08P01 PQexec disallowed closed=true; extended row: true";

fn sluice(extra: &str) -> Sluice {
    Sluice::builder(&Sluice::basic_ini(
        extra,
        &super::DB.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(super::USERS)
    .start()
}

/// Sluice alone: the notice comes after BackendKeyData and before ReadyForQuery, as a NOTICE
/// with code 00000; without the key there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_notify_message_is_sent_after_the_login() {
    let sl = sluice(NOTICE);
    assert_eq!(greeting(sl.port).await, GREETING);
    let plain = sluice("auth_type = trust\npool_mode = transaction");
    assert_eq!(greeting(plain.port).await, "R S K Z");
}

/// Sluice alone: under disable_pqexec a simple Query is refused with FATAL 08P01 and the
/// connection closed; the extended protocol still runs; without the key the simple Query runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_pqexec_refuses_a_simple_query() {
    let sl = sluice(PQEXEC);
    assert_eq!(simple_then_extended(sl.port).await, REFUSED);
    let plain = sluice("auth_type = trust\npool_mode = transaction");
    let mut c = bad_input_common::raw_login_at(plain.port, &[]).await;
    c.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let msgs = bad_input_common::read_until_ready(&mut c).await;
    assert!(msgs.iter().any(|(t, _)| *t == b'D'), "{msgs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_notice_and_disable_pqexec_match_pgbouncer() {
    let mut results = Vec::new();
    let Some(p) = pair(NOTICE) else {
        return;
    };
    let (a, b) = (greeting(p.pgb.port).await, greeting(p.sl.port).await);
    assert_eq!(b, GREETING);
    results.push(("login_notify_message".to_string(), a, b));
    drop(p);
    let Some(p) = pair(PQEXEC) else {
        return;
    };
    let (a, b) = (
        simple_then_extended(p.pgb.port).await,
        simple_then_extended(p.sl.port).await,
    );
    assert_eq!(b, REFUSED);
    results.push(("disable_pqexec".to_string(), a, b));
    report(&results, 2);
}
