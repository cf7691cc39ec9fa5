//! The fault suite: what happens to clients when servers die, clients misbehave or the operator
//! acts while load runs. Each scenario is bounded to a few seconds, asserts what must hold (no
//! hang, no client broken by another's fault, no committed work lost, the pool recovers) and
//! prints its figures. PostgreSQL restarts under load are in `faults_restart.rs` (their own
//! process: they stop this binary's cluster).

mod bad_input_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::{raise_own_nofile, Console, Sluice};
use tokio::task::JoinHandle;

use bad_input_common::{raw_login, raw_query, raw_scalar, rss_kib, su, PROMPT};

/// A query that takes longer than this counts as a hang.
const HANG: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    failed: AtomicUsize,
    hung: AtomicUsize,
}

impl Tally {
    fn get(&self) -> (usize, usize, usize) {
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.hung.load(Ordering::Relaxed),
        )
    }
}

/// `clients` clients running `sql` in a loop for `dur`; a client whose query fails reconnects.
fn load(
    s: &Arc<Sluice>,
    clients: usize,
    sql: &'static str,
    dur: Duration,
) -> (Arc<Tally>, Vec<JoinHandle<()>>) {
    let tally = Arc::new(Tally::default());
    let until = Instant::now() + dur;
    let tasks = (0..clients)
        .map(|_| {
            let (s, tally) = (s.clone(), tally.clone());
            tokio::spawn(async move {
                let mut client = None;
                while Instant::now() < until {
                    if client.is_none() {
                        match tokio::time::timeout(HANG, s.connect("trust_user", "", "app")).await {
                            Ok(Ok(c)) => client = Some(c),
                            Ok(Err(e)) => {
                                if tally.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                    eprintln!("connect failed: {e:?}");
                                }
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                            Err(_) => {
                                tally.hung.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        }
                    }
                    let c = client.as_ref().unwrap();
                    match tokio::time::timeout(HANG, c.simple_query(sql)).await {
                        Ok(Ok(_)) => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Err(e)) => {
                            if tally.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("query failed: {e:?}");
                            }
                            client = None;
                        }
                        Err(_) => {
                            tally.hung.fetch_add(1, Ordering::Relaxed);
                            client = None;
                        }
                    }
                }
            })
        })
        .collect();
    (tally, tasks)
}

async fn finish(tasks: Vec<JoinHandle<()>>) {
    for t in tasks {
        tokio::time::timeout(HANG + HANG, t)
            .await
            .expect("a load client hung")
            .unwrap();
    }
}

async fn console(s: &Sluice) -> Console {
    Console::connect(s.port, "trust_user", "")
        .await
        .unwrap_or_else(|e| panic!("console login: {e:?}"))
}

/// pg_terminate_backend of every pooled server, five times, while 8 clients run on 4 servers: no
/// client hangs, each kill fails at most the one client on that backend, and the pool recovers.
#[tokio::test]
async fn terminated_backends_under_load() {
    let s = Arc::new(bad_input_common::start(
        "pool_mode = transaction\ndefault_pool_size = 4",
    ));
    // The name marks this test's servers (a tracked SET: each server carries it once used), so
    // the kills spare the servers of tests running beside it on the same cluster.
    let (tally, tasks) = load(
        &s,
        8,
        "SET application_name = 'faults_kill'; SELECT 1",
        Duration::from_secs(3),
    );
    let mut killed = 0usize;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let n = su(
            "postgres",
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'faults_kill'"
                .into(),
        )
        .await;
        killed += n.trim().parse::<usize>().unwrap();
    }
    finish(tasks).await;
    let (ok, failed, hung) = tally.get();
    eprintln!(
        "terminated backends: {killed} killed; queries ok {ok}, failed {failed}, hung {hung}"
    );
    assert_eq!(hung, 0);
    // A backend killed while a client uses it fails that client's query (PgBouncer's too); one
    // killed between a request and its statements sent ahead can fail the follow-up as well.
    // A server handed out dead again and again would fail far more.
    assert!(
        failed <= 2 * killed,
        "{failed} failures for {killed} killed backends\n{}",
        s.log()
    );
    assert!(ok > 100, "too little got through: {ok}");
    bad_input_common::assert_works(&s).await;
}

/// A client killed inside a transaction that holds a row lock: its server is closed (never
/// reused mid-transaction), so the lock is freed at once and the next client of the only server
/// is outside any transaction.
#[tokio::test]
async fn a_client_killed_holding_a_row_lock_frees_it() {
    let s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 1");
    su(
        "app",
        "DROP TABLE IF EXISTS faults_lock; CREATE TABLE faults_lock(id int PRIMARY KEY, v int); \
         INSERT INTO faults_lock VALUES (1, 0); GRANT ALL ON faults_lock TO PUBLIC"
            .into(),
    )
    .await;
    let mut holder = raw_login(&s, &[]).await;
    let (r, status) = raw_query(
        &mut holder,
        "BEGIN; SELECT v FROM faults_lock WHERE id = 1 FOR UPDATE",
    )
    .await;
    r.unwrap();
    assert_eq!(status, b'T');
    let holder_pid = raw_scalar(&mut holder, "SELECT pg_backend_pid()").await;
    drop(holder);
    let t0 = Instant::now();
    let c = s.connect("trust_user", "", "app").await.unwrap();
    tokio::time::timeout(
        PROMPT,
        c.simple_query("SET lock_timeout = '4s'; UPDATE faults_lock SET v = v + 1 WHERE id = 1"),
    )
    .await
    .expect("the update hung")
    .expect("the row lock was not freed");
    let freed = t0.elapsed();
    let mut next = raw_login(&s, &[]).await;
    let (r, status) = raw_query(&mut next, "SELECT pg_backend_pid()").await;
    let pid = r.unwrap()[0][0].clone().unwrap();
    eprintln!("row lock of a killed client freed after {freed:?}");
    assert_eq!(status, b'I', "the next client landed inside a transaction");
    assert_ne!(pid, holder_pid, "the lock holder's server was reused");
}

/// A client that asks for a 200 MB result and never reads it: the pooler's memory stays bounded
/// (it stops reading the server), the other server keeps serving, and once the reader leaves its
/// server is closed and replaced.
#[tokio::test]
async fn a_client_that_never_reads_does_not_grow_the_pooler() {
    let s = Arc::new(bad_input_common::start(
        "pool_mode = transaction\ndefault_pool_size = 2",
    ));
    bad_input_common::assert_works(&s).await;
    let before = rss_kib(s.pid());
    let mut reader = raw_login(&s, &[]).await;
    reader
        .send(&sluice_e2e::RawConn::message(
            b'Q',
            b"SELECT repeat('x', 1000) FROM generate_series(1, 200000)\0",
        ))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (tally, tasks) = load(&s, 4, "SELECT 1", Duration::from_secs(1));
    finish(tasks).await;
    let (ok, failed, hung) = tally.get();
    let grown = rss_kib(s.pid()).saturating_sub(before);
    assert_eq!((failed, hung), (0, 0));
    assert!(ok > 50, "the other server did not serve: {ok}");
    assert!(
        grown < 32 * 1024,
        "RSS grew by {grown} KiB for an unread result"
    );
    drop(reader);
    // Both servers usable again: two transactions at once.
    let t0 = Instant::now();
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    for c in [&a, &b] {
        tokio::time::timeout(PROMPT, c.simple_query("BEGIN"))
            .await
            .expect("the unread server was not freed")
            .unwrap();
    }
    let freed = t0.elapsed();
    eprintln!("unread 200 MB result: RSS +{grown} KiB; others served {ok} queries; server freed after {freed:?}");
}

/// SIGINT (safe shutdown) while clients run three-statement transactions: every transaction that
/// began commits; what fails is refused at its start; the process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_lets_transactions_in_flight_finish() {
    let mut s = bad_input_common::start("pool_mode = transaction\ndefault_pool_size = 4");
    let torn = Arc::new(AtomicUsize::new(0));
    let committed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = s.connect("trust_user", "", "app").await.unwrap();
        let (torn, committed) = (torn.clone(), committed.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if c.simple_query("BEGIN").await.is_err() {
                    return;
                }
                let rest = async {
                    c.simple_query("SELECT pg_sleep(0.05)").await?;
                    c.simple_query("COMMIT").await
                };
                match tokio::time::timeout(HANG, rest).await {
                    Ok(Ok(_)) => {
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        torn.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.signal(Signal::SIGINT);
    let status = tokio::task::block_in_place(|| s.wait_exit(Duration::from_secs(10)));
    for t in tasks {
        tokio::time::timeout(HANG, t)
            .await
            .expect("a client hung")
            .unwrap();
    }
    let (torn, committed) = (
        torn.load(Ordering::Relaxed),
        committed.load(Ordering::Relaxed),
    );
    eprintln!("SIGINT under load: {committed} committed, {torn} torn, exit {status:?}");
    assert!(
        status.is_some(),
        "sluice did not exit after SIGINT\n{}",
        s.log()
    );
    assert_eq!(torn, 0, "a transaction in flight was cut\n{}", s.log());
    assert!(committed > 0);
}

/// PAUSE while 8 clients run: traffic stops, nothing fails; RESUME: it goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_under_load() {
    let s = Arc::new(bad_input_common::start(
        "pool_mode = transaction\ndefault_pool_size = 4\nadmin_users = trust_user",
    ));
    let (tally, tasks) = load(&s, 8, "SELECT 1", Duration::from_secs(3));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut con = console(&s).await;
    con.query("PAUSE app").await.unwrap();
    let paused_at = tally.get().0;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let during = tally.get().0 - paused_at;
    con.query("RESUME app").await.unwrap();
    finish(tasks).await;
    let (ok, failed, hung) = tally.get();
    eprintln!(
        "PAUSE/RESUME under load: {ok} ok ({during} while paused), {failed} failed, {hung} hung"
    );
    assert_eq!((failed, hung), (0, 0));
    // A query already answered when PAUSE returned may be counted just after it.
    assert!(during <= 8, "{during} queries ran while paused");
    assert!(ok > paused_at + 50, "little traffic after RESUME");
}

/// server_lifetime = 1 under load: servers are replaced as they come back, and no query fails.
#[tokio::test]
async fn server_lifetime_rotation_under_load() {
    let s = Arc::new(bad_input_common::start(
        "pool_mode = transaction\ndefault_pool_size = 4\nserver_lifetime = 1",
    ));
    let (tally, tasks) = load(
        &s,
        8,
        "SELECT pg_backend_pid()",
        Duration::from_millis(3500),
    );
    let mut seen = std::collections::HashSet::new();
    let probe = s.connect("trust_user", "", "app").await.unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let rows = probe.simple_query("SELECT pg_backend_pid()").await.unwrap();
        for m in rows {
            if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                seen.insert(r.get(0).unwrap().to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    finish(tasks).await;
    let (ok, failed, hung) = tally.get();
    eprintln!(
        "server_lifetime = 1: {} backends seen by one client in 3 s; {ok} ok, {failed} failed",
        seen.len()
    );
    assert_eq!((failed, hung), (0, 0));
    assert!(seen.len() > 4, "servers were not rotated: {seen:?}");
}

/// 4,000 clients log in at once and each runs a query (or as many as the open-files limit
/// allows): all are served; the pooler's memory per client is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_four_thousand_clients_is_served() {
    let own = raise_own_nofile();
    let n = 4000usize.min(own.saturating_sub(500) as usize);
    assert!(
        n >= 1000,
        "open-files hard limit {own} too low for this test"
    );
    let s = Arc::new(
        Sluice::builder(&Sluice::basic_ini(
            "auth_type = trust\nmax_client_conn = 10000\nlisten_backlog = 4096\n\
             pool_mode = transaction\ndefault_pool_size = 20\nclient_login_timeout = 30",
            bad_input_common::DB_LINE,
        ))
        .userlist(bad_input_common::USERLIST)
        .start(),
    );
    bad_input_common::assert_works(&s).await;
    let before = rss_kib(s.pid());
    let t0 = Instant::now();
    let served = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (s, served, gate) = (s.clone(), served.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = raw_login(&s, &[]).await;
            let (r, _) = raw_query(&mut c, "SELECT 1").await;
            if r.is_ok() {
                served.fetch_add(1, Ordering::Relaxed);
            }
            // Everyone stays connected until all have been served (the storm's peak).
            gate.wait().await;
        }));
    }
    let pid = s.pid();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (peak2, stop2) = (peak.clone(), stop.clone());
    let sampler = tokio::spawn(async move {
        while !stop2.load(Ordering::Relaxed) {
            peak2.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    tokio::time::timeout(Duration::from_secs(60), gate.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "storm not served: {} of {n}",
                served.load(Ordering::Relaxed)
            )
        });
    peak.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let took = t0.elapsed();
    for t in tasks {
        t.await.unwrap();
    }
    let peak = peak.load(Ordering::Relaxed) as u64;
    eprintln!(
        "storm of {n} clients: served in {took:?}; RSS {before} KiB before, peak {peak} KiB ({} bytes per client)",
        (peak.saturating_sub(before) * 1024) / n as u64
    );
    assert_eq!(served.load(Ordering::Relaxed), n);
    bad_input_common::assert_works(&s).await;
}
