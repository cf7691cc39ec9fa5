//! Pooling semantics through the real `sluice` binary (reference §6.1 release rules, pool limits,
//! timeouts, server checks, startup parameter tracking, cancel).
//!
//! Every test creates its own role(s) on the shared cluster, so its server connections can be counted
//! in pg_stat_activity by `usename` without seeing other tests; `pg_backend_pid()` tells which server a
//! client got.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_e2e::{PgCluster, RawConn, Sluice};
use tokio::task::JoinHandle;
use tokio_postgres::{error::SqlState, Client, NoTls};

/// Password of every role created by this file (plaintext in userlist.txt, SCRAM on PostgreSQL).
const PW: &str = "pool_pw";

/// Create a fresh LOGIN role `pool_<tag>` (unique per test) and return its name.
async fn new_role(tag: &str) -> String {
    let name = format!("pool_{tag}");
    psql(&format!("CREATE ROLE {name} LOGIN PASSWORD '{PW}'")).await;
    name
}

/// Run SQL as superuser on the cluster (blocking psql off the runtime threads).
async fn psql(sql: &str) -> String {
    let sql = sql.to_string();
    tokio::task::spawn_blocking(move || PgCluster::get().psql("postgres", &sql))
        .await
        .expect("psql task")
}

/// Number of server connections PostgreSQL has for `users` (comma-free role names).
async fn servers(users: &[&str]) -> i64 {
    let list = users
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(",");
    psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE usename IN ({list})"
    ))
    .await
    .parse()
    .expect("count")
}

async fn pid_alive(pid: i32) -> bool {
    psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
    ))
    .await
        == "1"
}

/// Poll until `pid` is gone from pg_stat_activity; returns the time it took, None after `timeout`.
async fn wait_pid_gone(pid: i32, timeout: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if !pid_alive(pid).await {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Poll until the server count of `users` satisfies `pred`; returns the last count seen and whether
/// the predicate held before `timeout`.
async fn wait_servers(
    users: &[&str],
    timeout: Duration,
    pred: impl Fn(i64) -> bool,
) -> (i64, bool) {
    let t0 = Instant::now();
    loop {
        let n = servers(users).await;
        if pred(n) {
            return (n, true);
        }
        if t0.elapsed() >= timeout {
            return (n, false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const DATABASES: &str = "app = host={pg_host} port={pg_port} dbname=app\n\
                         other = host={pg_host} port={pg_port} dbname=other";

/// Start sluice with `extra` [pgbouncer] lines and a userlist holding `users` (password PW).
fn start(extra: &str, users: &[&str]) -> Sluice {
    let userlist: String = users
        .iter()
        .map(|u| format!("\"{u}\" \"{PW}\"\n"))
        .collect();
    Sluice::builder(&Sluice::basic_ini(extra, DATABASES))
        .userlist(&userlist)
        .start()
}

async fn connect_db(s: &Sluice, user: &str, db: &str) -> Client {
    s.connect(user, PW, db)
        .await
        .unwrap_or_else(|e| panic!("{user}@{db} cannot connect: {e:?}\nlog:\n{}", s.log()))
}

async fn connect(s: &Sluice, user: &str) -> Client {
    connect_db(s, user, "app").await
}

async fn pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("SELECT pg_backend_pid()")
        .get(0)
}

/// Run `SELECT pg_backend_pid()` on a client in a task; yields the client back with the result and
/// how long it took.
type PidTask = JoinHandle<(Client, Result<i32, tokio_postgres::Error>, Duration)>;
fn spawn_pid(c: Client) -> PidTask {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let r = c
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .map(|row| row.get::<_, i32>(0));
        (c, r, t0.elapsed())
    })
}

/// SQLSTATE + message of a server/pooler error, else the display text.
fn err_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => format!("{e} ({e:?})"),
    }
}

async fn join<T>(h: JoinHandle<T>, timeout: Duration, what: &str) -> T {
    tokio::time::timeout(timeout, h)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {timeout:?}"))
        .expect("task")
}

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

// ---------------------------------------------------------------------------------------------
// Startup parameter tracking
// ---------------------------------------------------------------------------------------------

async fn connect_params(s: &Sluice, user: &str, app: &str, tz: &str) -> Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(s.port)
        .user(user)
        .password(PW)
        .dbname("app")
        .application_name(app)
        .options(format!("-c TimeZone={tz}"));
    let (client, conn) = cfg
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {app}: {}\nlog:\n{}", err_text(&e), s.log()));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

async fn settings(c: &Client) -> (String, String, i32) {
    let row = c
        .query_one(
            "SELECT current_setting('application_name'), current_setting('TimeZone'), pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    let show = c.simple_query("SHOW timezone").await.unwrap();
    let tz_show = show
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap();
    let tz: String = row.get(1);
    assert_eq!(tz, tz_show);
    (row.get(0), tz, row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_follow_the_client_across_a_shared_server() {
    let u = new_role("params").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nquery_wait_timeout = 10",
        &[&u],
    );
    let a = connect_params(&s, &u, "client_a", "UTC").await;
    let b = connect_params(&s, &u, "client_b", "Asia/Tokyo").await;
    let mut pids = Vec::new();
    for _ in 0..3 {
        let (app, tz, p) = settings(&a).await;
        assert_eq!((app.as_str(), tz.as_str()), ("client_a", "UTC"));
        pids.push(p);
        let (app, tz, p) = settings(&b).await;
        assert_eq!((app.as_str(), tz.as_str()), ("client_b", "Asia/Tokyo"));
        pids.push(p);
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "not one shared server: {pids:?}"
    );
    // A SET of a tracked parameter follows the client too.
    a.batch_execute("SET TimeZone = 'Europe/Paris'")
        .await
        .unwrap();
    assert_eq!(settings(&b).await.1, "Asia/Tokyo");
    assert_eq!(settings(&a).await.1, "Europe/Paris");
    assert_eq!(settings(&b).await.1, "Asia/Tokyo");
}

// ---------------------------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let u = new_role("cancel").await;
    let s = start("pool_mode = transaction\ndefault_pool_size = 1", &[&u]);
    let a = connect(&s, &u).await;
    let pa = pid(&a).await;
    let token = a.cancel_token();
    let h = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = a.batch_execute("SELECT pg_sleep(30)").await;
        (a, r, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!h.is_finished());
    token
        .cancel_query(NoTls)
        .await
        .unwrap_or_else(|e| panic!("cancel_query: {e:?}\nlog:\n{}", s.log()));
    let (a, r, took) = join(h, Duration::from_secs(5), "cancelled query").await;
    let e = r.expect_err("pg_sleep(30) should have been cancelled");
    assert_eq!(
        e.code(),
        Some(&SqlState::QUERY_CANCELED),
        "{}",
        err_text(&e)
    );
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");
    // The pool is usable after: same client, same server (a cancel is not a disconnect), and others.
    assert_eq!(pid(&a).await, pa);
    let b = connect(&s, &u).await;
    assert_eq!(pid(&b).await, pa);
}
