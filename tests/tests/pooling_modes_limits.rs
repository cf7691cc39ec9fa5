//! Pool modes and size limits through the real `sluice` binary: the reference §6.1 release rules of
//! session / transaction / statement mode, default and reserve pool sizes, max_db_connections,
//! max_user_connections and max_client_conn.

mod pooling_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pooling_common::{
    connect, connect_db, err_text, join, new_role, pid, pid_alive, psql, servers, spawn_pid, start,
    PW,
};

// ---------------------------------------------------------------------------------------------
// §6.1 release rules
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_keeps_one_server_per_client() {
    let u = new_role("sess").await;
    let s = start("pool_mode = session\ndefault_pool_size = 5", &[&u]);
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    let pa = pid(&a).await;
    let pb = pid(&b).await;
    assert_ne!(pa, pb, "two session clients share a server");
    for _ in 0..3 {
        // B's queries while A sits idle must not be given A's server, and vice versa.
        assert_eq!(pid(&b).await, pb);
        assert_eq!(pid(&a).await, pa);
    }
    a.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
    assert_eq!(
        pid(&a).await,
        pa,
        "server changed after a transaction in session mode"
    );
    assert_eq!(servers(&[&u]).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_second_client_waits_until_first_disconnects() {
    let u = new_role("sess1").await;
    let s = start(
        "pool_mode = session\ndefault_pool_size = 1\nquery_wait_timeout = 10",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let pa = pid(&a).await;
    // A is idle (no transaction) but keeps its server: B has to wait.
    let sb = Arc::new(s);
    let s2 = sb.clone();
    let u2 = u.clone();
    let hb = tokio::spawn(async move {
        let b = connect(&s2, &u2).await;
        let t0 = Instant::now();
        let p = pid(&b).await;
        (b, p, t0)
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !hb.is_finished(),
        "B got a server while A (session mode, pool_size=1) is still connected"
    );
    assert_eq!(servers(&[&u]).await, 1);
    drop(a);
    let (_b, pb, _) = join(hb, Duration::from_secs(5), "B after A left").await;
    assert_eq!(pb, pa, "B should reuse A's released server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_clients_alternate_on_one_server() {
    let u = new_role("tx").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nquery_wait_timeout = 10",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    let p0 = pid(&a).await;
    for _ in 0..3 {
        assert_eq!(pid(&b).await, p0);
        assert_eq!(pid(&a).await, p0);
    }
    assert_eq!(servers(&[&u]).await, 1);

    // A inside BEGIN keeps the server; B waits until COMMIT.
    a.batch_execute("BEGIN").await.unwrap();
    assert_eq!(pid(&a).await, p0);
    let hb = spawn_pid(b);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!hb.is_finished(), "B ran while A was inside a transaction");
    assert_eq!(pid(&a).await, p0, "A lost its server inside a transaction");
    let t_commit = Instant::now();
    a.batch_execute("COMMIT").await.unwrap();
    let (_b, r, took) = join(hb, Duration::from_secs(5), "B after COMMIT").await;
    assert_eq!(r.expect("B's query"), p0);
    assert!(took >= Duration::from_millis(700), "B took {took:?}");
    assert!(t_commit.elapsed() < Duration::from_secs(3));
    assert_eq!(pid(&a).await, p0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refuses_transaction_blocks() {
    let u = new_role("stmt").await;
    let s = start("pool_mode = statement\ndefault_pool_size = 2", &[&u]);
    let a = connect(&s, &u).await;
    let row = a.query_one("SELECT 40 + 2", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    let e = a
        .batch_execute("BEGIN")
        .await
        .expect_err("BEGIN must be refused in statement mode");
    assert!(
        err_text(&e).contains("transaction blocks not allowed in statement pooling mode"),
        "{}",
        err_text(&e)
    );
    // Single statements keep working (on a new client: the pooler may drop the offending one).
    let c = connect(&s, &u).await;
    for _ in 0..3 {
        let row = c.query_one("SELECT 1 + 1", &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 2);
    }
    // No server is left stuck inside the refused transaction.
    let n = servers(&[&u]).await;
    let in_tx = psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = '{u}' AND state LIKE 'idle in transaction%'"
    ))
    .await;
    assert_eq!(
        in_tx, "0",
        "a server is still in the refused transaction ({n} servers)"
    );
}

// ---------------------------------------------------------------------------------------------
// Pool limits
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_pool_size_caps_server_connections() {
    let u = new_role("cap").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 2\nquery_wait_timeout = 20",
        &[&u],
    );
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(connect(&s, &u).await);
    }
    let t0 = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| {
            tokio::spawn(async move { c.batch_execute("SELECT pg_sleep(0.4)").await.map(|_| c) })
        })
        .collect();
    let mut max = 0;
    while tasks.iter().any(|t| !t.is_finished()) && t0.elapsed() < Duration::from_secs(15) {
        max = max.max(servers(&[&u]).await);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let took = t0.elapsed();
    for t in tasks {
        t.await.unwrap().expect("pg_sleep through sluice");
    }
    assert!(
        max <= 2,
        "saw {max} server connections with default_pool_size=2"
    );
    assert_eq!(max, 2, "the pool never used both servers");
    // 6 x 0.4 s on 2 servers cannot finish in less than 3 rounds.
    assert!(
        took >= Duration::from_millis(1150),
        "6 sleeps done in {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_pool_opens_extra_server_after_timeout() {
    let u = new_role("reserve").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nreserve_pool_size = 1\n\
         reserve_pool_timeout = 0.5\nquery_wait_timeout = 10",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    a.batch_execute("BEGIN").await.unwrap();
    let pa = pid(&a).await;
    let hb = spawn_pid(b);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        !hb.is_finished(),
        "B got a server before reserve_pool_timeout"
    );
    assert_eq!(
        servers(&[&u]).await,
        1,
        "extra server before reserve_pool_timeout"
    );
    let (_b, r, took) = join(hb, Duration::from_secs(5), "B via reserve pool").await;
    let pb = r.unwrap_or_else(|e| panic!("B failed: {}\nlog:\n{}", err_text(&e), s.log()));
    assert_ne!(pb, pa);
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(3),
        "reserve server after {took:?}"
    );
    assert_eq!(servers(&[&u]).await, 2);
    a.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_pool_size_zero_never_grows() {
    let u = new_role("noreserve").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nreserve_pool_size = 0\n\
         reserve_pool_timeout = 0.2\nquery_wait_timeout = 10",
        &[&u],
    );
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    a.batch_execute("BEGIN").await.unwrap();
    let hb = spawn_pid(b);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!hb.is_finished(), "B got a server without a reserve pool");
    assert_eq!(servers(&[&u]).await, 1);
    a.batch_execute("COMMIT").await.unwrap();
    let (_b, r, _) = join(hb, Duration::from_secs(5), "B after COMMIT").await;
    r.expect("B's query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_db_connections_spans_users_of_one_db() {
    let u1 = new_role("maxdb1").await;
    let u2 = new_role("maxdb2").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 5\nmax_db_connections = 1\n\
         query_wait_timeout = 10",
        &[&u1, &u2],
    );
    let a = connect(&s, &u1).await;
    let b = connect(&s, &u2).await;
    a.batch_execute("BEGIN").await.unwrap();
    let pa = pid(&a).await;
    let hb = spawn_pid(b);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !hb.is_finished(),
        "user 2 got a server beyond max_db_connections"
    );
    assert_eq!(servers(&[&u1, &u2]).await, 1);
    a.batch_execute("COMMIT").await.unwrap();
    // User 1's server is idle now; user 2 gets in once it is closed (other pool, same db).
    let (_b, r, _) = join(hb, Duration::from_secs(6), "user 2 after COMMIT").await;
    let pb = r.unwrap_or_else(|e| panic!("user 2 failed: {}\nlog:\n{}", err_text(&e), s.log()));
    assert_ne!(pb, pa);
    assert_eq!(
        servers(&[&u1, &u2]).await,
        1,
        "limit exceeded after handover"
    );
    assert!(
        !pid_alive(pa).await,
        "user 1's idle server should have been closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_user_connections_spans_dbs_of_one_user() {
    let u = new_role("maxuser").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 5\nmax_user_connections = 1\n\
         query_wait_timeout = 10",
        &[&u],
    );
    let a = connect_db(&s, &u, "app").await;
    let b = connect_db(&s, &u, "other").await;
    a.batch_execute("BEGIN").await.unwrap();
    let pa = pid(&a).await;
    let hb = spawn_pid(b);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !hb.is_finished(),
        "db other got a server beyond max_user_connections"
    );
    assert_eq!(servers(&[&u]).await, 1);
    a.batch_execute("COMMIT").await.unwrap();
    let (b, r, _) = join(hb, Duration::from_secs(6), "db other after COMMIT").await;
    let pb = r.unwrap_or_else(|e| panic!("db other failed: {}\nlog:\n{}", err_text(&e), s.log()));
    assert_ne!(pb, pa);
    let db: String = b
        .query_one("SELECT current_database()::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(db, "other");
    assert_eq!(servers(&[&u]).await, 1, "limit exceeded after handover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_client_conn_refuses_extra_clients() {
    let u = new_role("maxcl").await;
    let s = start("pool_mode = transaction\nmax_client_conn = 2", &[&u]);
    // Let sluice notice that the harness' readiness probe connection is gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = connect(&s, &u).await;
    let b = connect(&s, &u).await;
    let e = match s.connect(&u, PW, "app").await {
        Ok(_) => panic!("third client accepted with max_client_conn=2"),
        Err(e) => e,
    };
    assert!(
        err_text(&e).contains("no more connections allowed (max_client_conn)"),
        "{}",
        err_text(&e)
    );
    // The two admitted clients are unaffected.
    assert_eq!(pid(&a).await, pid(&a).await);
    b.batch_execute("SELECT 1").await.unwrap();
    // A slot frees up when a client leaves.
    drop(b);
    let t0 = Instant::now();
    let c = loop {
        match s.connect(&u, PW, "app").await {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < Duration::from_secs(3) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no slot after a client left: {}", err_text(&e)),
        }
    };
    c.batch_execute("SELECT 1").await.unwrap();
}
