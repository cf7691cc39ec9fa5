//! The fault suite's PostgreSQL restart (a fast shutdown and start, as an operator or a failover
//! does) under load: no transaction acknowledged as committed is lost, clients get errors rather
//! than hangs while the server is down, and the pool recovers on its own. Its own test process:
//! it stops this process's cluster.

mod bad_input_common;

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_e2e::PgCluster;
use std::sync::Mutex;

use bad_input_common::su;

const HANG: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_restart_under_load_loses_no_commit() {
    let s = Arc::new(bad_input_common::start(
        "pool_mode = transaction\ndefault_pool_size = 4\nserver_login_retry = 1",
    ));
    su(
        "app",
        "DROP TABLE IF EXISTS faults_commits; CREATE TABLE faults_commits(id bigint PRIMARY KEY); \
         GRANT ALL ON faults_commits TO PUBLIC"
            .into(),
    )
    .await;
    let next_id = Arc::new(AtomicI64::new(1));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let (failed, hung) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let restarted = Arc::new(Mutex::new(None::<Instant>));
    let recovered = Arc::new(Mutex::new(None::<Instant>));
    let until = Instant::now() + Duration::from_secs(7);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (s, next_id, acked) = (s.clone(), next_id.clone(), acked.clone());
        let (failed, hung) = (failed.clone(), hung.clone());
        let (restarted, recovered) = (restarted.clone(), recovered.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = None;
            while Instant::now() < until {
                if client.is_none() {
                    match tokio::time::timeout(HANG, s.connect("trust_user", "", "app")).await {
                        Ok(Ok(c)) => client = Some(c),
                        Ok(Err(_)) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        Err(_) => {
                            hung.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                }
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                let sql = format!("INSERT INTO faults_commits VALUES ({id})");
                let c = client.as_ref().unwrap();
                match tokio::time::timeout(HANG, c.simple_query(&sql)).await {
                    Ok(Ok(_)) => {
                        acked.lock().unwrap().push(id);
                        if restarted.lock().unwrap().is_some() {
                            recovered.lock().unwrap().get_or_insert_with(Instant::now);
                        }
                    }
                    Ok(Err(_)) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        client = None;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(_) => {
                        hung.fetch_add(1, Ordering::Relaxed);
                        client = None;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = acked.lock().unwrap().len();
    let down_at = Instant::now();
    tokio::task::spawn_blocking(|| PgCluster::get().restart_fast())
        .await
        .unwrap();
    *restarted.lock().unwrap() = Some(Instant::now());
    let restart_took = down_at.elapsed();
    for t in tasks {
        tokio::time::timeout(HANG + HANG, t)
            .await
            .expect("a load client hung")
            .unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let in_table: std::collections::HashSet<i64> =
        su("app", "SELECT id FROM faults_commits".into())
            .await
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
    let lost: Vec<i64> = acked
        .iter()
        .copied()
        .filter(|id| !in_table.contains(id))
        .collect();
    let back_after = recovered
        .lock()
        .unwrap()
        .zip(*restarted.lock().unwrap())
        .map(|(r, up)| r.saturating_duration_since(up));
    eprintln!(
        "PostgreSQL restart under load: {} commits acknowledged ({before} before the restart), {} \
         failed, {} hung; restart took {restart_took:?}; first commit {back_after:?} after \
         PostgreSQL was back; {} lost",
        acked.len(),
        failed.load(Ordering::Relaxed),
        hung.load(Ordering::Relaxed),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged commits lost: {lost:?}");
    assert_eq!(hung.load(Ordering::Relaxed), 0, "{}", s.log());
    let back_after = back_after.expect("no commit after the restart: the pool did not recover");
    assert!(
        back_after < Duration::from_secs(4),
        "recovered only after {back_after:?}"
    );
    bad_input_common::assert_works(&s).await;
}
