//! Pool timeouts and server checks through the real `sluice` binary: query_wait, query,
//! idle_transaction, client_idle, client_login, server_idle and server_lifetime timeouts,
//! min_pool_size, server_reset_query and discarding dead idle servers.

mod pooling_common;

use std::time::{Duration, Instant};

use sluice_e2e::{RawConn, Sluice};

use pooling_common::{
    connect, connect_db, err_text, join, new_role, pid, pid_alive, psql, servers, spawn_pid, start,
    wait_pid_gone, wait_servers, PW,
};

// ---------------------------------------------------------------------------------------------
// Timeouts
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_wait_timeout_disconnects_waiting_client() {
    let u = new_role("qwait").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nquery_wait_timeout = 1",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    a.batch_execute("BEGIN").await.unwrap();
    let (_b, r, took) = join(spawn_pid(b), Duration::from_secs(6), "waiting client").await;
    let e = r.expect_err("waiting client must time out");
    assert!(
        err_text(&e).contains("query_wait_timeout"),
        "{}",
        err_text(&e)
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "timed out after {took:?}"
    );
    // The holder is unaffected.
    a.batch_execute("SELECT 1; COMMIT").await.unwrap();
}

/// query_timeout counts the wait for a server too (as PgBouncer's janitor does): a client queued
/// behind a held server is refused with `query_timeout` long before query_wait_timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_fails_a_client_waiting_for_a_server() {
    let u = new_role("qtwait").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nquery_timeout = 1\nquery_wait_timeout = 60",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    a.batch_execute("BEGIN").await.unwrap();
    let (_b, r, took) = join(spawn_pid(b), Duration::from_secs(6), "waiting client").await;
    let e = r.expect_err("waiting client must time out");
    assert_eq!(err_text(&e), "08P01 query_timeout");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "timed out after {took:?}"
    );
    // The holder, idle in its transaction, is not running a query: untouched.
    a.batch_execute("SELECT 1; COMMIT").await.unwrap();
}

/// query_wait_timeout on a [databases] entry and in [users] (PgBouncer 1.26) overrides the
/// global one for that database's, or that user's, pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_wait_timeout_per_database_and_per_user() {
    let by_db = new_role("qwdb").await;
    let by_user = new_role("qwuser").await;
    let dbs = "app = host={pg_host} port={pg_port} dbname=app query_wait_timeout=1\n\
               other = host={pg_host} port={pg_port} dbname=other";
    let ini = Sluice::basic_ini(
        &format!(
            "pool_mode = transaction\ndefault_pool_size = 1\nquery_wait_timeout = 60\n\
             [users]\n{by_user} = query_wait_timeout=1"
        ),
        dbs,
    );
    let userlist = format!("\"{by_db}\" \"{PW}\"\n\"{by_user}\" \"{PW}\"\n");
    let s = Sluice::builder(&ini).userlist(&userlist).start();
    for (user, db) in [(&by_db, "app"), (&by_user, "other")] {
        let a = connect_db(&s, user, db).await;
        let b = connect_db(&s, user, db).await;
        a.batch_execute("BEGIN").await.unwrap();
        let (_b, r, took) = join(spawn_pid(b), Duration::from_secs(6), "waiting client").await;
        let e = r.expect_err("waiting client must time out");
        assert_eq!(err_text(&e), "08P01 query_wait_timeout", "{user}@{db}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "{user}@{db}: timed out after {took:?}"
        );
        a.batch_execute("COMMIT").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_closes_the_server_connection() {
    let u = new_role("qtimeout").await;
    // So that PostgreSQL notices a closed socket during pg_sleep (it only checks when idle otherwise).
    psql(&format!(
        "ALTER ROLE {u} SET client_connection_check_interval = '100ms'"
    ))
    .await;
    let s = start(
        "pool_mode = session\ndefault_pool_size = 2\nquery_timeout = 1",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let pa = pid(&a).await;
    let t0 = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(8),
        a.batch_execute("SELECT pg_sleep(6)"),
    )
    .await
    .expect("query_timeout did not fire");
    let took = t0.elapsed();
    let e = r.expect_err("pg_sleep(6) must fail with query_timeout=1");
    let text = err_text(&e);
    assert!(
        text.contains("query timeout") || text.contains("query_timeout"),
        "{text}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "failed after {took:?}: {}",
        err_text(&e)
    );
    // Not a cancel: the server connection itself is closed on PostgreSQL.
    assert!(
        wait_pid_gone(pa, Duration::from_secs(3)).await.is_some(),
        "server {pa} still connected after query_timeout"
    );
    // The pool recovers with a new server.
    let c = connect(&s, &u).await;
    assert_ne!(pid(&c).await, pa);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_transaction_timeout_closes_idle_in_transaction_server() {
    let u = new_role("idletx").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 2\nidle_transaction_timeout = 1",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    a.batch_execute("BEGIN").await.unwrap();
    let pa = pid(&a).await;
    b.batch_execute("SELECT 1").await.unwrap();
    let gone = wait_pid_gone(pa, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| {
            panic!(
                "idle-in-transaction server {pa} not closed\nlog:\n{}",
                s.log()
            )
        });
    assert!(gone >= Duration::from_millis(700), "closed after {gone:?}");
    assert!(
        a.batch_execute("SELECT 1").await.is_err(),
        "client of the closed transaction should be gone"
    );
    // A client idle outside a transaction for as long is untouched.
    b.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_idle_timeout_disconnects_idle_client() {
    let u = new_role("clidle").await;
    let s = start("pool_mode = transaction\nclient_idle_timeout = 1.5", &[&u]);
    let a = connect(&s, &u).await;
    // Activity more often than the timeout keeps the client.
    for _ in 0..5 {
        a.batch_execute("SELECT 1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let t0 = Instant::now();
    while !a.is_closed() && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = t0.elapsed();
    assert!(
        a.is_closed(),
        "idle client still connected after 5 s\nlog:\n{}",
        s.log()
    );
    assert!(took >= Duration::from_millis(500), "closed after {took:?}");
    assert!(a.batch_execute("SELECT 1").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_login_timeout_closes_silent_connections() {
    let s = start("client_login_timeout = 1\ntcp_defer_accept = 0", &[]);
    // A TCP connection that sends nothing at all.
    let t0 = Instant::now();
    let mut c = RawConn::connect(s.port).await;
    let (_, closed) = c.read_until_close(Duration::from_secs(6)).await;
    let took = t0.elapsed();
    assert!(closed, "silent connection not closed after 6 s");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "closed after {took:?}"
    );
    // One that sends only part of a startup packet.
    let t0 = Instant::now();
    let mut c = RawConn::connect(s.port).await;
    c.send(&[0, 0, 0, 40, 0, 3]).await;
    let (_, closed) = c.read_until_close(Duration::from_secs(6)).await;
    let took = t0.elapsed();
    assert!(closed, "half-sent startup not closed after 6 s");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "closed after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_idle_timeout_closes_idle_servers() {
    let u = new_role("svidle").await;
    let s = start("pool_mode = transaction\nserver_idle_timeout = 1.5", &[&u]);
    let a = connect(&s, &u).await;
    let p1 = pid(&a).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pid_alive(p1).await, "server closed right after release");
    let gone = wait_pid_gone(p1, Duration::from_secs(6))
        .await
        .unwrap_or_else(|| panic!("idle server {p1} not closed\nlog:\n{}", s.log()));
    let idle_for = Duration::from_millis(300) + gone;
    assert!(
        idle_for >= Duration::from_millis(1300),
        "closed after {idle_for:?}"
    );
    assert_eq!(servers(&[&u]).await, 0);
    // The client stays and gets a new server.
    assert_ne!(pid(&a).await, p1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_lifetime_retires_servers_once_released() {
    let u = new_role("svlife").await;
    let s = start(
        "pool_mode = transaction\nserver_lifetime = 1\nserver_idle_timeout = 0",
        &[&u],
    );
    let a = connect(&s, &u).await;
    // A server in use is not closed under a client, even past its lifetime.
    a.batch_execute("BEGIN").await.unwrap();
    let p1 = pid(&a).await;
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(pid(&a).await, p1, "server replaced inside a transaction");
    a.batch_execute("COMMIT").await.unwrap();
    // Released and older than server_lifetime: closed.
    assert!(
        wait_pid_gone(p1, Duration::from_secs(3)).await.is_some(),
        "server {p1} older than server_lifetime still open\nlog:\n{}",
        s.log()
    );
    let p2 = pid(&a).await;
    assert_ne!(p2, p1);
    // The new one is retired too once it is old enough.
    assert!(
        wait_pid_gone(p2, Duration::from_secs(4)).await.is_some(),
        "second server {p2} not retired"
    );
}

/// server_lifetime = 0: each server is used once (PgBouncer's "use once"). A new pool's first
/// server, whose parameters greet the first client, still serves that client; the servers are
/// logged as PgBouncer logs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_lifetime_zero_uses_each_server_once() {
    let u = new_role("svonce").await;
    let s = start("pool_mode = session\nserver_lifetime = 0", &[&u]);
    let mut pids = Vec::new();
    for _ in 0..2 {
        let a = connect(&s, &u).await;
        let p = pid(&a).await;
        assert_eq!(pid(&a).await, p, "a session keeps its server");
        pids.push(p);
        drop(a);
        assert!(
            wait_pid_gone(p, Duration::from_secs(3)).await.is_some(),
            "server {p} used once still open\nlog:\n{}",
            s.log()
        );
    }
    assert_ne!(pids[0], pids[1]);
    let log = s.log();
    let opened = log
        .lines()
        .filter(|l| l.contains("new connection to server (from 127.0.0.1:"))
        .count();
    assert_eq!(
        opened, 2,
        "one server per session, no reconnect loop:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.contains(&format!("app/{u}@"))
            && l.contains("closing because: server lifetime over (age=")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_opens_servers_after_login() {
    let u = new_role("minpool").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 4\nmin_pool_size = 3",
        &[&u],
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(servers(&[&u]).await, 0, "servers opened before any client");
    let a = connect(&s, &u).await;
    a.batch_execute("SELECT 1").await.unwrap();
    let (n, ok) = wait_servers(&[&u], Duration::from_secs(5), |n| n >= 3).await;
    assert!(
        ok,
        "only {n} servers with min_pool_size=3\nlog:\n{}",
        s.log()
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(servers(&[&u]).await, 3, "min_pool_size overshoot");
}

async fn reset_query_case(tag: &str, reset_line: &str) -> (String, i32, i32) {
    let u = new_role(tag).await;
    let s = start(
        &format!("pool_mode = session\ndefault_pool_size = 1\n{reset_line}"),
        &[&u],
    );
    let a = connect(&s, &u).await;
    a.batch_execute("SET work_mem = '7MB'").await.unwrap();
    let pa = pid(&a).await;
    drop(a);
    let b = connect(&s, &u).await;
    let pb = pid(&b).await;
    let wm: String = b
        .query_one("SELECT current_setting('work_mem')", &[])
        .await
        .unwrap()
        .get(0);
    (wm, pa, pb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_reset_query_clears_session_state() {
    let (wm, pa, pb) = reset_query_case("reset", "").await;
    assert_eq!(pa, pb, "B should get A's server (pool_size=1)");
    assert_eq!(wm, "4MB", "A's SET leaked to B despite DISCARD ALL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_server_reset_query_keeps_session_state() {
    let (wm, pa, pb) = reset_query_case("noreset", "server_reset_query =").await;
    assert_eq!(pa, pb, "B should get A's server (pool_size=1)");
    assert_eq!(
        wm, "7MB",
        "state reset although server_reset_query is empty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_idle_server_is_discarded_before_use() {
    for (tag, check) in [
        ("check1", "server_check_query = select 1"),
        ("check2", "server_check_query = <empty>"),
    ] {
        let u = new_role(tag).await;
        let s = start(
            &format!(
                "pool_mode = transaction\ndefault_pool_size = 1\nserver_check_delay = 0\n{check}"
            ),
            &[&u],
        );
        let a = connect(&s, &u).await;
        let p1 = pid(&a).await;
        assert_eq!(
            psql(&format!("SELECT pg_terminate_backend({p1})")).await,
            "t"
        );
        assert!(wait_pid_gone(p1, Duration::from_secs(3)).await.is_some());
        let b = connect(&s, &u).await;
        let r = b.query_one("SELECT pg_backend_pid()", &[]).await;
        let p2: i32 = r
            .unwrap_or_else(|e| {
                panic!(
                    "{check}: query on a fresh client failed: {}\nlog:\n{}",
                    err_text(&e),
                    s.log()
                )
            })
            .get(0);
        assert_ne!(p2, p1);
        // The client that had used the dead server is fine too.
        assert_eq!(pid(&a).await, p2, "{check}");
    }
}
