//! Three scenarios of the fault suite run the same way against PgBouncer 1.25.2 (the reference
//! binary, `Anchor`) and Sluice, each on a fresh process, with their figures printed side by side:
//! a client killed holding a row lock, a client that never reads a large result, and a storm of
//! logins. What must hold is asserted for Sluice (as in `faults.rs`); PgBouncer's column is for
//! comparison only. A missing reference binary fails the tests; under
//! `SLUICE_ALLOW_MISSING_TOOLS=1` (said loudly) PgBouncer's column is "-". Sluice is the build the
//! tests run (debug under `scripts/test.sh`): its speed and memory figures are the bench's to
//! compare (`bench/`, release builds), these show that both poolers meet each fault alike.

mod bad_input_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bad_input_common::{
    raw_login_at, raw_query, raw_scalar, rss_kib, status_kib, su, DB_LINE, USERLIST,
};
use sluice_e2e::{raise_own_nofile, Anchor, Console, RawConn, Sluice};

/// One pooler under test: where it listens and its process (for /proc figures).
struct Pooler {
    port: u16,
    pid: u32,
    /// Keeps the process alive.
    _keep: Box<dyn std::any::Any>,
}

const LINES: &str = "auth_type = trust\npool_mode = transaction\nmax_client_conn = 10000\n\
                     listen_backlog = 4096\nquery_wait_timeout = 30";

fn sluice(extra: &str) -> Pooler {
    let s = Sluice::builder(&Sluice::basic_ini(&format!("{LINES}\n{extra}"), DB_LINE))
        .userlist(USERLIST)
        .start();
    Pooler {
        port: s.port,
        pid: s.pid(),
        _keep: Box::new(s),
    }
}

/// PgBouncer on `extra`; None only where the reference binary is missing and
/// `SLUICE_ALLOW_MISSING_TOOLS=1`.
fn pgbouncer(extra: &str) -> Option<Pooler> {
    let a = Anchor::start(&format!("{LINES}\n{extra}"), DB_LINE, USERLIST)?;
    let pid = a.pid().expect("PgBouncer's pidfile");
    Some(Pooler {
        port: a.port,
        pid,
        _keep: Box::new(a),
    })
}

fn row(what: &str, pgbouncer: Option<String>, sluice: String) {
    eprintln!(
        "side by side | {what:<44} | PgBouncer 1.25.2: {:>14} | Sluice: {sluice:>14}",
        pgbouncer.unwrap_or_else(|| "-".into())
    );
}

/// A client killed inside a transaction that holds a row lock: how long until another client
/// gets the row, and whether the next client of the only server lands on a clean server.
/// (freed after, the next client's transaction status, whether the holder's backend was reused)
async fn killed_lock_holder(p: &Pooler) -> (Duration, u8, bool) {
    let mut holder = raw_login_at(p.port, &[]).await;
    let (r, status) = raw_query(
        &mut holder,
        "BEGIN; SELECT v FROM faults_sbs_lock WHERE id = 1 FOR UPDATE",
    )
    .await;
    r.unwrap();
    assert_eq!(status, b'T');
    let holder_pid = raw_scalar(&mut holder, "SELECT pg_backend_pid()").await;
    drop(holder);
    let t0 = Instant::now();
    let mut c = raw_login_at(p.port, &[]).await;
    let (r, _) = raw_query(
        &mut c,
        "SET lock_timeout = '2900ms'; UPDATE faults_sbs_lock SET v = v + 1 WHERE id = 1",
    )
    .await;
    r.expect("the row lock was not freed");
    let freed = t0.elapsed();
    drop(c);
    let mut next = raw_login_at(p.port, &[]).await;
    let (r, status) = raw_query(&mut next, "SELECT pg_backend_pid()").await;
    let pid = r.unwrap()[0][0].clone().unwrap();
    (freed, status, pid == holder_pid)
}

#[tokio::test]
async fn a_killed_lock_holder_side_by_side() {
    su(
        "app",
        "DROP TABLE IF EXISTS faults_sbs_lock; CREATE TABLE faults_sbs_lock(id int PRIMARY KEY, v int); \
         INSERT INTO faults_sbs_lock VALUES (1, 0); GRANT ALL ON faults_sbs_lock TO PUBLIC"
            .into(),
    )
    .await;
    let extra = "default_pool_size = 1";
    let theirs = match pgbouncer(extra) {
        Some(p) => Some(killed_lock_holder(&p).await),
        None => None,
    };
    let ours = killed_lock_holder(&sluice(extra)).await;
    row(
        "killed lock holder: row lock freed after",
        theirs.map(|t| format!("{:?}", t.0)),
        format!("{:?}", ours.0),
    );
    row(
        "killed lock holder: its backend reused",
        theirs.map(|t| t.2.to_string()),
        ours.2.to_string(),
    );
    assert_eq!(ours.1, b'I', "the next client landed inside a transaction");
    assert!(!ours.2, "the lock holder's server was reused");
}

/// A client asks for a 200 MB result and never reads it; 4 other clients run `SELECT 1` on the
/// other server for a second. (RSS growth in KiB, queries the others ran, time from the reader's
/// close until both servers are usable again)
async fn unread_result(p: &Pooler) -> (u64, usize, Duration) {
    let before = rss_kib(p.pid);
    let mut reader = raw_login_at(p.port, &[]).await;
    reader
        .send(&RawConn::message(
            b'Q',
            b"SELECT repeat('x', 1000) FROM generate_series(1, 200000)\0",
        ))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let served = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(1);
    let others: Vec<_> = (0..4)
        .map(|_| {
            let (port, served) = (p.port, served.clone());
            tokio::spawn(async move {
                let mut c = raw_login_at(port, &[]).await;
                while Instant::now() < until {
                    let (r, _) = raw_query(&mut c, "SELECT 1").await;
                    r.unwrap();
                    served.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in others {
        t.await.unwrap();
    }
    let grown = rss_kib(p.pid).saturating_sub(before);
    drop(reader);
    let t0 = Instant::now();
    let mut a = raw_login_at(p.port, &[]).await;
    let mut b = raw_login_at(p.port, &[]).await;
    for c in [&mut a, &mut b] {
        let (r, status) = raw_query(c, "BEGIN").await;
        r.unwrap();
        assert_eq!(status, b'T');
    }
    (grown, served.load(Ordering::Relaxed) as usize, t0.elapsed())
}

#[tokio::test]
async fn an_unread_result_side_by_side() {
    let extra = "default_pool_size = 2";
    let theirs = match pgbouncer(extra) {
        Some(p) => Some(unread_result(&p).await),
        None => None,
    };
    let ours = unread_result(&sluice(extra)).await;
    row(
        "unread 200 MB result: RSS growth",
        theirs.map(|t| format!("{} KiB", t.0)),
        format!("{} KiB", ours.0),
    );
    row(
        "unread 200 MB result: others' queries in 1 s",
        theirs.map(|t| t.1.to_string()),
        ours.1.to_string(),
    );
    row(
        "unread 200 MB result: both servers usable after",
        theirs.map(|t| format!("{:?}", t.2)),
        format!("{:?}", ours.2),
    );
    assert!(ours.0 < 32 * 1024, "RSS grew by {} KiB", ours.0);
    assert!(ours.1 > 50, "the other server did not serve: {}", ours.1);
}

/// `n` clients log in at once, each runs `SELECT 1` and stays until all are served. (peak RSS
/// over the process's start, per client in bytes; seconds until all were served)
async fn storm(p: &Pooler, n: usize) -> (u64, Duration) {
    let before = rss_kib(p.pid);
    let t0 = Instant::now();
    let gate = Arc::new(tokio::sync::Barrier::new(n + 1));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (port, gate) = (p.port, gate.clone());
            tokio::spawn(async move {
                let mut c = raw_login_at(port, &[]).await;
                let (r, _) = raw_query(&mut c, "SELECT 1").await;
                r.unwrap();
                gate.wait().await;
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(60), gate.wait())
        .await
        .expect("storm not served within 60 s");
    let took = t0.elapsed();
    let peak = status_kib(p.pid, "VmHWM");
    for t in tasks {
        t.await.unwrap();
    }
    (peak.saturating_sub(before) * 1024 / n as u64, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_side_by_side() {
    // 900: PgBouncer runs as postgres through runuser, whose session sets a soft limit of 1,024
    // open files (and this container lets no one raise another user's); the 4,000-client storm
    // side by side is the bench's (`storm_c4000`, docs/performance.md).
    let own = raise_own_nofile();
    let n = 900usize.min(own.saturating_sub(100) as usize);
    let extra = "default_pool_size = 20";
    let theirs = match pgbouncer(extra) {
        Some(p) => Some(storm(&p, n).await),
        None => None,
    };
    let ours = storm(&sluice(extra), n).await;
    row(
        &format!("storm of {n}: peak RSS per client"),
        theirs.map(|t| format!("{} bytes", t.0)),
        format!("{} bytes", ours.0),
    );
    row(
        &format!("storm of {n}: all served after"),
        theirs.map(|t| format!("{:?}", t.1)),
        format!("{:?}", ours.1),
    );
    // Not a comparison (timings and memory are the bench's): a bound that a leak per client
    // would break.
    assert!(ours.0 < 64 * 1024, "{} bytes per client", ours.0);
}

/// Three idle servers whose backends PostgreSQL then terminates (an operator's
/// pg_terminate_backend, a failover's fencing): how long until SHOW POOLS stops counting them
/// (None: still counted after 5 s), and whether a client is served right after.
async fn terminated_idle_servers(p: &Pooler) -> (Option<Duration>, String) {
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(raw_login_at(p.port, &[]).await);
    }
    // Three at once: three servers, each telling its backend's pid.
    let pids = futures_util::future::join_all(clients.iter_mut().map(|c| {
        raw_scalar(
            c,
            "SELECT pg_backend_pid()::text FROM pg_sleep(0.3) WHERE true",
        )
    }))
    .await;
    let mut console = Console::connect(p.port, "trust_user", "")
        .await
        .expect("console");
    let sv_idle = |r: &sluice_e2e::ConsoleResult| {
        r.find("sv_idle", |row| {
            row[r.col("database")].as_deref() == Some("app")
        })
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0)
    };
    let before = sv_idle(&console.query("SHOW POOLS").await.unwrap());
    assert_eq!(before, 3, "three idle servers before");
    su(
        "postgres",
        format!(
            "SELECT count(pg_terminate_backend(pid)) FROM unnest(array[{}]) pid",
            pids.join(",")
        ),
    )
    .await;
    let t0 = Instant::now();
    let gone = loop {
        if sv_idle(&console.query("SHOW POOLS").await.unwrap()) == 0 {
            break Some(t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(5) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let after = raw_scalar(&mut clients[0], "SELECT 41 + 1").await;
    (gone, after)
}

#[tokio::test]
async fn terminated_idle_servers_side_by_side() {
    let extra = "admin_users = trust_user";
    let theirs = match pgbouncer(extra) {
        Some(p) => Some(terminated_idle_servers(&p).await),
        None => None,
    };
    let ours = terminated_idle_servers(&sluice(extra)).await;
    row(
        "terminated idle servers: out of SHOW POOLS",
        theirs.as_ref().map(|t| format!("{:?}", t.0)),
        format!("{:?}", ours.0),
    );
    assert_eq!(ours.1, "42", "a client after the terminations");
    let gone = ours
        .0
        .expect("SHOW POOLS still counted the terminated servers after 5 s");
    assert!(gone < Duration::from_secs(2), "{gone:?}");
    if let Some(t) = theirs {
        assert_eq!(t.1, "42", "PgBouncer: a client after the terminations");
    }
}
