//! Helpers shared by the pooling_* tests: per-test roles, server counts in pg_stat_activity,
//! starting sluice, connecting and timed tasks.
//!
//! Every test creates its own role(s) on the shared cluster, so its server connections can be counted
//! in pg_stat_activity by `usename` without seeing other tests; `pg_backend_pid()` tells which server a
//! client got.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use sluice_e2e::{PgCluster, Sluice};
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// Password of every role created by this file (plaintext in userlist.txt, SCRAM on PostgreSQL).
pub const PW: &str = "pool_pw";

/// Create a fresh LOGIN role `pool_<tag>` (unique per test) and return its name.
pub async fn new_role(tag: &str) -> String {
    let name = format!("pool_{tag}");
    psql(&format!("CREATE ROLE {name} LOGIN PASSWORD '{PW}'")).await;
    name
}

/// Run SQL as superuser on the cluster (blocking psql off the runtime threads).
pub async fn psql(sql: &str) -> String {
    let sql = sql.to_string();
    tokio::task::spawn_blocking(move || PgCluster::get().psql("postgres", &sql))
        .await
        .expect("psql task")
}

/// Number of server connections PostgreSQL has for `users` (comma-free role names).
pub async fn servers(users: &[&str]) -> i64 {
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

pub async fn pid_alive(pid: i32) -> bool {
    psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
    ))
    .await
        == "1"
}

/// Poll until `pid` is gone from pg_stat_activity; returns the time it took, None after `timeout`.
pub async fn wait_pid_gone(pid: i32, timeout: Duration) -> Option<Duration> {
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
pub async fn wait_servers(
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

pub const DATABASES: &str = "app = host={pg_host} port={pg_port} dbname=app\n\
                         other = host={pg_host} port={pg_port} dbname=other";

/// Start sluice with `extra` [pgbouncer] lines and a userlist holding `users` (password PW).
pub fn start(extra: &str, users: &[&str]) -> Sluice {
    let userlist: String = users
        .iter()
        .map(|u| format!("\"{u}\" \"{PW}\"\n"))
        .collect();
    Sluice::builder(&Sluice::basic_ini(extra, DATABASES))
        .userlist(&userlist)
        .start()
}

pub async fn connect_db(s: &Sluice, user: &str, db: &str) -> Client {
    s.connect(user, PW, db)
        .await
        .unwrap_or_else(|e| panic!("{user}@{db} cannot connect: {e:?}\nlog:\n{}", s.log()))
}

pub async fn connect(s: &Sluice, user: &str) -> Client {
    connect_db(s, user, "app").await
}

pub async fn pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("SELECT pg_backend_pid()")
        .get(0)
}

/// Run `SELECT pg_backend_pid()` on a client in a task; yields the client back with the result and
/// how long it took.
pub type PidTask = JoinHandle<(Client, Result<i32, tokio_postgres::Error>, Duration)>;
pub fn spawn_pid(c: Client) -> PidTask {
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
pub fn err_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => format!("{e} ({e:?})"),
    }
}

pub async fn join<T>(h: JoinHandle<T>, timeout: Duration, what: &str) -> T {
    tokio::time::timeout(timeout, h)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {timeout:?}"))
        .expect("task")
}
