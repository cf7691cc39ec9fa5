//! One client's bytes never reach another client: message types the protocol does not define are
//! refused by the pooler (never forwarded to a server, whose FATAL would land on the next client
//! of that server), and a pool whose size a reload or SET lowers shrinks at once.

mod bad_input_common;
mod pooling_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::Sluice;

use bad_input_common::{expect_fatal, raw_login, raw_query, raw_scalar, PROMPT};
use pooling_common::{connect, new_role, psql, wait_servers};

/// A message of type `tag` with a 4-byte body.
fn message(tag: u8) -> Vec<u8> {
    vec![tag, 0, 0, 0, 8, 1, 2, 3, 4]
}

/// Message types PostgreSQL does not define after login (the fault run's, plus a password
/// message, which belongs to authentication only).
const UNDEFINED: [u8; 6] = [0x00, 0x01, b'J', b'z', b'~', b'p'];

/// Idle, and inside a transaction holding the only server: each undefined type gets 08P01 naming
/// it and a close; the server is never sent the message (its backend lives on and serves the
/// next client, outside the refused client's transaction).
#[tokio::test]
async fn undefined_message_types_are_refused_without_touching_a_server() {
    let s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 1");
    let mut probe = raw_login(&s, &[]).await;
    for tag in UNDEFINED {
        // Idle (unlinked): refused before a server is taken.
        let mut c = raw_login(&s, &[]).await;
        c.send(&message(tag)).await;
        let f = expect_fatal(&mut c, "08P01").await;
        assert!(
            f[&b'M'].contains(&format!("invalid frontend message type {tag}")),
            "type {tag}: {f:?}"
        );

        // Linked, mid-transaction: refused, and the server (in a transaction) is not reused.
        let mut c = raw_login(&s, &[]).await;
        let (r, status) = raw_query(&mut c, "BEGIN; SET LOCAL application_name = 'refused'").await;
        r.unwrap();
        assert_eq!(status, b'T');
        c.send(&message(tag)).await;
        let f = expect_fatal(&mut c, "08P01").await;
        assert!(
            f[&b'M'].contains(&format!("invalid frontend message type {tag}")),
            "type {tag}: {f:?}"
        );
        let app = tokio::time::timeout(PROMPT, raw_scalar(&mut probe, "SHOW application_name"))
            .await
            .unwrap_or_else(|_| panic!("next client hung after type {tag}\n{}", s.log()));
        assert_ne!(
            app, "refused",
            "next client inherited the refused client's transaction"
        );
    }
    bad_input_common::assert_works(&s).await;
}

/// The idle refusal keeps the server: with one server and no transaction open, the same backend
/// serves before and after a client sent an undefined type (PostgreSQL would have closed it).
#[tokio::test]
async fn an_idle_refusal_keeps_the_server_open() {
    let s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 1");
    let mut probe = raw_login(&s, &[]).await;
    let before = raw_scalar(&mut probe, "SELECT pg_backend_pid()").await;
    for tag in UNDEFINED {
        let mut c = raw_login(&s, &[]).await;
        // A query first links the server, and the undefined message follows once it is back.
        let (r, _) = raw_query(&mut c, "SELECT 1").await;
        r.unwrap();
        c.send(&message(tag)).await;
        expect_fatal(&mut c, "08P01").await;
    }
    let after = raw_scalar(&mut probe, "SELECT pg_backend_pid()").await;
    assert_eq!(
        before, after,
        "the server was closed: a refused message reached it"
    );
}

/// A header announcing more than PostgreSQL accepts for its type (1 GiB - 2 for a Query, 10,000
/// bytes for a Sync) gets 08P01 at once, idle and mid-transaction; PostgreSQL would hang up without
/// a word while the client waited for a reply (PgBouncer: "server conn crashed?"). The refused
/// idle client's server is untouched: the same backend serves the next client.
#[tokio::test]
async fn a_header_longer_than_postgresql_accepts_is_refused_at_once() {
    let s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 1");
    let mut probe = raw_login(&s, &[]).await;
    let before = raw_scalar(&mut probe, "SELECT pg_backend_pid()").await;
    // Idle first (the backend must survive), then mid-transaction (the server in a transaction is
    // closed, not reused).
    for in_transaction in [false, true] {
        for (tag, len) in [(b'Q', 0x4000_0000u32), (b'Q', 0x3fff_ffff), (b'S', 10_001)] {
            let mut c = raw_login(&s, &[]).await;
            if in_transaction {
                let (r, status) = raw_query(&mut c, "BEGIN").await;
                r.unwrap();
                assert_eq!(status, b'T');
            }
            let mut m = vec![tag];
            m.extend_from_slice(&len.to_be_bytes());
            c.send(&m).await;
            let started = Instant::now();
            let f = expect_fatal(&mut c, "08P01").await;
            let want = format!(
                "invalid message length: message type '{}' announces {len} bytes",
                tag as char
            );
            assert!(f[&b'M'].contains(&want), "{f:?}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{:?}",
                started.elapsed()
            );
        }
        if !in_transaction {
            let after = raw_scalar(&mut probe, "SELECT pg_backend_pid()").await;
            assert_eq!(before, after, "an idle refusal closed the pool's server");
        }
    }
    bad_input_common::assert_works(&s).await;
}

/// During COPY FROM STDIN only CopyData/CopyDone/CopyFail/Flush/Sync are defined: a Query there is
/// refused by the pooler, and the server (mid-COPY) is closed, not reused.
#[tokio::test]
async fn a_query_inside_copy_in_is_refused() {
    let s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 1");
    bad_input_common::su(
        "app",
        "DROP TABLE IF EXISTS isolation_copy; CREATE TABLE isolation_copy(x int); \
         GRANT ALL ON isolation_copy TO PUBLIC"
            .into(),
    )
    .await;
    let mut c = raw_login(&s, &[]).await;
    let mut q = b"QCOPY isolation_copy FROM STDIN\0".to_vec();
    let len = (q.len() - 1 + 4) as u32;
    q.splice(1..1, len.to_be_bytes());
    c.send(&q).await;
    let (tag, _) = c.read_message(PROMPT).await.expect("CopyInResponse");
    assert_eq!(tag, b'G', "expected CopyInResponse");
    let mut bad = b"QSELECT 1\0".to_vec();
    let len = (bad.len() - 1 + 4) as u32;
    bad.splice(1..1, len.to_be_bytes());
    c.send(&bad).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(
        f[&b'M'].contains("invalid frontend message type 81"),
        "{f:?}"
    );
    bad_input_common::assert_works(&s).await;
    let n = bad_input_common::su("app", "SELECT count(*) FROM isolation_copy".into()).await;
    assert_eq!(n, "0");
}

/// COPY FROM STDIN over the extended protocol, as tokio-postgres sends it (Parse/Bind/Execute/Sync
/// in one write, then the data once CopyInResponse came): the Sync sent before the data is
/// ignored by the server, so the server still owes a ReadyForQuery (for the Sync after CopyDone)
/// and stays the copying client's. Another client queued for the only server must not get it
/// mid-COPY (its query would break the COPY, or the COPY's data would reach another server).
#[tokio::test]
async fn copy_in_over_the_extended_protocol_keeps_its_server_until_it_ends() {
    // Without prepared-statement rewriting the relay keeps no reply queue: only its counts say
    // that the COPY is still open.
    copy_in_extended("max_prepared_statements = 0").await;
    copy_in_extended("max_prepared_statements = 100").await;
}

async fn copy_in_extended(extra: &str) {
    use sluice_e2e::RawConn;
    let s = bad_input_common::start(&format!(
        "pool_mode = transaction\ndefault_pool_size = 1\n{extra}"
    ));
    bad_input_common::su(
        "app",
        "DROP TABLE IF EXISTS isolation_copy_ext; CREATE TABLE isolation_copy_ext(x int); \
         GRANT ALL ON isolation_copy_ext TO PUBLIC"
            .into(),
    )
    .await;
    let mut a = raw_login(&s, &[]).await;
    let mut b = raw_login(&s, &[]).await;
    let mut batch = RawConn::message(b'P', b"\0COPY isolation_copy_ext FROM STDIN\0\0\0");
    batch.extend(RawConn::message(b'B', b"\0\0\0\0\0\0\0\0"));
    batch.extend(RawConn::message(b'E', b"\0\0\0\0\0"));
    batch.extend(RawConn::message(b'S', b""));
    a.send(&batch).await;
    for want in [b'1', b'2', b'G'] {
        let (tag, body) = a
            .read_message(PROMPT)
            .await
            .expect("a reply to the COPY batch");
        assert_eq!(tag, want, "{:?}", String::from_utf8_lossy(&body));
    }
    // Another client asks for the only server while the COPY is open.
    let other = tokio::spawn(async move {
        let r =
            tokio::time::timeout(Duration::from_secs(5), raw_scalar(&mut b, "SELECT 41 + 1")).await;
        (r, b)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut rest = RawConn::message(b'd', b"7\n");
    rest.extend(RawConn::message(b'c', b""));
    rest.extend(RawConn::message(b'S', b""));
    a.send(&rest).await;
    let mut tags = Vec::new();
    loop {
        let (tag, body) = a.read_message(PROMPT).await.expect("the end of the COPY");
        assert_ne!(
            tag,
            b'E',
            "COPY failed: {:?}",
            String::from_utf8_lossy(&body)
        );
        tags.push(tag);
        if tag == b'Z' {
            break;
        }
    }
    assert_eq!(tags, b"CZ");
    let (r, _b) = other.await.unwrap();
    assert_eq!(
        r.expect("the queued client was served after the COPY"),
        "42"
    );
    let n = bad_input_common::su("app", "SELECT count(*) FROM isolation_copy_ext".into()).await;
    assert_eq!(n, "1");
}

/// The fault run's scenario: connections sending undefined types beside a steady load on a small
/// pool; not one of the normal clients' queries fails.
#[tokio::test]
async fn garbage_senders_beside_load_break_no_one() {
    let s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 4");
    let s = Arc::new(s);
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(2);
    let mut load = Vec::new();
    for _ in 0..12 {
        let c = s.connect("trust_user", "", "app").await.unwrap();
        let (failures, done) = (failures.clone(), done.clone());
        load.push(tokio::spawn(async move {
            while Instant::now() < until {
                match c.simple_query("SELECT 1").await {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        eprintln!("normal client failed: {e:?}");
                        failures.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
            }
        }));
    }
    let mut garbage = Vec::new();
    for i in 0..12 {
        let s = s.clone();
        garbage.push(tokio::spawn(async move {
            while Instant::now() < until {
                let mut c = raw_login(&s, &[]).await;
                if i % 2 == 0 {
                    let (r, _) = raw_query(&mut c, "SELECT 1").await;
                    r.unwrap();
                }
                c.send(&message(UNDEFINED[i % UNDEFINED.len()])).await;
                let _ = c.read_until_close(PROMPT).await;
            }
        }));
    }
    for h in load.into_iter().chain(garbage) {
        h.await.unwrap();
    }
    let (ok, bad) = (
        done.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    );
    println!("garbage beside load: {ok} queries, {bad} failed");
    assert!(ok > 100, "the load barely ran: {ok}");
    assert_eq!(
        bad,
        0,
        "normal clients failed beside garbage senders\n{}",
        s.log()
    );
}

/// Run `n` clients of `role` through `SELECT pg_sleep(secs)` at once; the most PostgreSQL saw
/// running together.
async fn peak_concurrency(s: &Sluice, role: &str, n: usize, secs: f64) -> i64 {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let c = connect(s, role).await;
        tasks.push(tokio::spawn(async move {
            c.simple_query(&format!("SELECT pg_sleep({secs})"))
                .await
                .map(|_| ())
        }));
    }
    let mut peak = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        let n: i64 = psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{role}' \
             AND query LIKE 'SELECT pg_sleep%' AND state = 'active'"
        ))
        .await
        .parse()
        .unwrap();
        peak = peak.max(n);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    peak
}

fn shrink_ini(size: u32) -> String {
    Sluice::basic_ini(
        &format!("pool_mode = transaction\ndefault_pool_size = {size}\nquery_wait_timeout = 20"),
        pooling_common::DATABASES,
    )
}

/// default_pool_size 4 -> 2 -> 4 by SIGHUP: idle servers above the new size close at once, busy
/// ones when they come back, and new work runs two at a time; growing works again afterwards.
#[tokio::test]
async fn reload_shrinks_and_grows_a_pool() {
    let role = new_role("iso_shrink").await;
    let userlist = format!("\"{role}\" \"{}\"\n", pooling_common::PW);
    let s = Sluice::builder(&shrink_ini(4)).userlist(&userlist).start();
    let peak = peak_concurrency(&s, &role, 8, 0.3).await;
    assert_eq!(peak, 4, "the pool did not reach its size");
    let (n, ok) = wait_servers(&[&role], Duration::from_secs(2), |n| n == 4).await;
    assert!(ok, "expected 4 idle servers, saw {n}");

    // Busy servers at reload time close as they come back.
    let busy = connect(&s, &role).await;
    let running = tokio::spawn(async move {
        busy.simple_query("SELECT pg_sleep(0.5)")
            .await
            .map(|_| busy)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.rewrite_config(&shrink_ini(2));
    s.signal(Signal::SIGHUP);
    let (n, ok) = wait_servers(&[&role], Duration::from_secs(2), |n| n <= 2).await;
    assert!(
        ok,
        "the pool did not shrink to 2 after the reload: {n} servers\n{}",
        s.log()
    );
    running.await.unwrap().unwrap();
    let (n, ok) = wait_servers(&[&role], Duration::from_secs(2), |n| n <= 2).await;
    assert!(ok, "{n} servers once the busy one came back");
    let peak = peak_concurrency(&s, &role, 8, 0.3).await;
    assert!(
        peak <= 2,
        "{peak} queries ran at once with default_pool_size = 2"
    );

    s.rewrite_config(&shrink_ini(4));
    s.signal(Signal::SIGHUP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let peak = peak_concurrency(&s, &role, 8, 0.3).await;
    assert_eq!(peak, 4, "the pool did not grow back to 4");
}

/// The same by the console's SET, and for max_db_connections.
#[tokio::test]
async fn set_lowers_pool_size_and_max_db_connections_at_once() {
    let role = new_role("iso_set").await;
    let userlist = format!("\"{role}\" \"{}\"\n", pooling_common::PW);
    let ini = Sluice::basic_ini(
        &format!("pool_mode = transaction\ndefault_pool_size = 4\nquery_wait_timeout = 20\nadmin_users = {role}"),
        pooling_common::DATABASES,
    );
    let s = Sluice::builder(&ini).userlist(&userlist).start();
    assert_eq!(peak_concurrency(&s, &role, 8, 0.3).await, 4);
    let console = pooling_common::connect_db(&s, &role, "pgbouncer").await;
    console
        .simple_query("SET default_pool_size = 3")
        .await
        .unwrap();
    let (n, ok) = wait_servers(&[&role], Duration::from_secs(2), |n| n <= 3).await;
    assert!(ok, "SET default_pool_size = 3 left {n} servers");
    assert!(peak_concurrency(&s, &role, 8, 0.3).await <= 3);
    console
        .simple_query("SET max_db_connections = 1")
        .await
        .unwrap();
    let (n, ok) = wait_servers(&[&role], Duration::from_secs(2), |n| n <= 1).await;
    assert!(ok, "SET max_db_connections = 1 left {n} servers");
    assert_eq!(peak_concurrency(&s, &role, 4, 0.2).await, 1);
}
