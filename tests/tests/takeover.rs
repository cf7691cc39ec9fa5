//! Binary upgrades that drop nobody (`sluice --takeover`, docs/deploy.md): a new process takes
//! the running one's listening sockets and, at their next transaction boundary, its clients with
//! their cancel keys, parameters, tracked SETs and prepared statements. pgbench across the
//! upgrade loses nothing; old cancel keys keep working (also for a client still in the old
//! process); a takeover that fails (a broken config, a successor killed mid-way) leaves the old
//! process serving; a second one while one runs is refused.

mod takeover_common;

use std::time::{Duration, Instant};

use sluice_e2e::{pgbench, Sluice};
use tokio_postgres::error::SqlState;

use takeover_common::*;

/// pgbench -c 50 (transaction mode, 20 servers, a three-statement transaction) for 10 s with the
/// takeover after 4 s: no failed transaction, no aborted client, the old process exits, the new
/// one serves on. The tps before and after are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_across_a_takeover_loses_no_transaction() {
    let shared = SharedDir::new();
    let mut old = start_old(&shared, "");
    let port = old.port;
    let script = shared.path().join("tx.sql");
    std::fs::write(&script, "BEGIN;\nSELECT 1;\nSELECT 2;\nCOMMIT;\n").unwrap();
    let args: Vec<String> = [
        "-n",
        "-f",
        &script.display().to_string(),
        "-c",
        "50",
        "-j",
        "2",
        "-T",
        "10",
        "-P",
        "1",
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "trust_user",
        "app",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let started = Instant::now();
    let bench = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        pgbench(&refs, "")
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let at = started.elapsed();
    let new = start_new(&shared, port, "");
    wait_for_log(
        &new,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    let exited = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(15)));
    let (st, out, err) = bench.await.unwrap();
    let (before, after) = tps_around(&err, at.as_secs_f64());
    eprintln!(
        "takeover under pgbench -c 50: switched at {at:.1?}; tps before {before:.0}, after \
         {after:.0}; old process exited {exited:?}\n{out}"
    );
    assert!(st.success(), "pgbench failed:\n{out}\n{err}");
    assert!(!err.contains("aborted"), "{err}");
    assert_eq!(failed_transactions(&out), Some(0), "{out}");
    assert!(
        exited.is_some_and(|s| s.success()),
        "the old process did not exit after handing its clients over\n{}",
        old.log()
    );
    assert!(
        old.log().contains("handed over to the new process"),
        "{}",
        old.log()
    );
    wait_for_log(&new, "the takeover is complete", Duration::from_secs(5));
    let c = new.connect("trust_user", "", "app").await.unwrap();
    c.simple_query("SELECT 1").await.unwrap();
}

/// A client connected before the takeover is cancelled after it with its old key: one still in
/// the old process mid-transaction (the new process forwards the cancel over the takeover
/// socket), and one already handed over (the new process knows its key). The old process exits
/// once the first leaves its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_cancel_keys_cancel_after_the_takeover() {
    let shared = SharedDir::new();
    let mut old = start_old(&shared, "");
    let port = old.port;
    let idle = old.connect("trust_user", "", "app").await.unwrap();
    let in_tx = old.connect("trust_user", "", "app").await.unwrap();
    in_tx.simple_query("BEGIN").await.unwrap();
    let new = start_new(&shared, port, "");
    wait_for_log(
        &new,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    wait_for_log(
        &old,
        "handed over to the new process",
        Duration::from_secs(10),
    );

    // Still in the old process: its transaction has not ended.
    let e = cancelled_sleep(&in_tx).await;
    assert_eq!(
        e,
        Some(SqlState::QUERY_CANCELED),
        "{}\n{}",
        old.log(),
        new.log()
    );
    assert!(
        old.child.try_wait().unwrap().is_none(),
        "the old process left too early"
    );
    in_tx.simple_query("ROLLBACK").await.unwrap();
    // Handed over now; its next query runs in the new process.
    in_tx.simple_query("SELECT 1").await.unwrap();

    let e = cancelled_sleep(&idle).await;
    assert_eq!(e, Some(SqlState::QUERY_CANCELED), "{}", new.log());
    let exited = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(10)));
    assert!(
        exited.is_some(),
        "the old process is still running\n{}",
        old.log()
    );
    idle.simple_query("SELECT 1").await.unwrap();
    in_tx.simple_query("SELECT 1").await.unwrap();
}

/// A client keeps its named prepared statement, its tracked SET and a reported parameter across
/// the handover: the new process's servers are fresh, so without the carried state the statement
/// would be unknown and the settings back to their defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_and_sets_survive_the_handover() {
    let shared = SharedDir::new();
    let mut old = start_old(&shared, "");
    let port = old.port;
    let c = old.connect("trust_user", "", "app").await.unwrap();
    c.simple_query("SET statement_timeout = '4321ms'")
        .await
        .unwrap();
    c.simple_query("SET application_name = 'before_takeover'")
        .await
        .unwrap();
    let stmt = c.prepare("SELECT $1::int + 1").await.unwrap();
    assert_eq!(
        c.query_one(&stmt, &[&1i32]).await.unwrap().get::<_, i32>(0),
        2
    );

    let new = start_new(&shared, port, "");
    wait_for_log(
        &new,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    let exited = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(10)));
    assert!(
        exited.is_some(),
        "the client was not handed over\n{}",
        old.log()
    );

    assert_eq!(
        c.query_one(&stmt, &[&41i32])
            .await
            .unwrap()
            .get::<_, i32>(0),
        42
    );
    assert_eq!(show(&c, "statement_timeout").await, "4321ms");
    assert_eq!(show(&c, "application_name").await, "before_takeover");
    // The new process's own server carries them (no old server is left).
    let backend: String = c
        .query_one("SELECT current_setting('statement_timeout')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(backend, "4321ms");
}

/// A successor that cannot load its config never reaches the running process; one that cannot
/// reach it says so. The old process serves its clients and new ones all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_with_a_broken_config_changes_nothing() {
    let shared = SharedDir::new();
    let old = start_old(&shared, "");
    let c = old.connect("trust_user", "", "app").await.unwrap();
    let (st, log) = Sluice::builder(&ini(&shared, "pool_mode = sometimes\n"))
        .userlist(USERLIST)
        .port(old.port)
        .arg("--takeover")
        .run_expect_exit(Duration::from_secs(10));
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains("pool_mode"), "{log}");
    assert!(log.contains("the running process keeps serving"), "{log}");
    // Nobody listens for a takeover on another port.
    let (st, log) = Sluice::builder(&ini(&shared, ""))
        .userlist(USERLIST)
        .arg("--takeover")
        .run_expect_exit(Duration::from_secs(10));
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains("cannot reach the running process"), "{log}");
    c.simple_query("SELECT 1").await.unwrap();
    let d = old.connect("trust_user", "", "app").await.unwrap();
    d.simple_query("SELECT 1").await.unwrap();
}

/// A real successor killed after it took the listeners, while a client is still mid-transaction
/// in the old process: the old process accepts again and that client finishes its transaction.
/// A second takeover then succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_killed_mid_way_leaves_the_old_process_serving() {
    let shared = SharedDir::new();
    let mut old = start_old(&shared, "");
    let port = old.port;
    let in_tx = old.connect("trust_user", "", "app").await.unwrap();
    in_tx.simple_query("BEGIN").await.unwrap();
    in_tx.simple_query("SELECT 1").await.unwrap();
    let mut new = start_new(&shared, port, "");
    wait_for_log(
        &new,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    new.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::task::block_in_place(|| new.wait_exit(Duration::from_secs(5)));
    wait_for_log(
        &old,
        "this process accepts and serves again",
        Duration::from_secs(5),
    );
    in_tx.simple_query("SELECT 2").await.unwrap();
    in_tx.simple_query("COMMIT").await.unwrap();
    let d = old.connect("trust_user", "", "app").await.unwrap();
    d.simple_query("SELECT 1").await.unwrap();

    let again = start_new(&shared, port, "");
    wait_for_log(
        &again,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    let exited = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(10)));
    assert!(exited.is_some(), "{}", old.log());
    in_tx.simple_query("SELECT 3").await.unwrap();
    d.simple_query("SELECT 3").await.unwrap();
}

/// A successor that dies with a client in flight (sent, not acknowledged: the test plays the
/// successor over the takeover socket) leaves that client with the old process, which accepts
/// again; a connection made while nobody accepted waits in the backlog and gets in. While a
/// successor holds the offer, a second takeover is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_client_stays_and_a_second_takeover_is_refused() {
    let shared = SharedDir::new();
    let old = start_old(&shared, "");
    let port = old.port;
    let c = old.connect("trust_user", "", "app").await.unwrap();
    let mut fake = FakeSuccessor::connect(&shared, port).await;
    let (st, log) = Sluice::builder(&ini(&shared, ""))
        .userlist(USERLIST)
        .port(port)
        .arg("--takeover")
        .run_expect_exit(Duration::from_secs(10));
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains("another takeover is in progress"), "{log}");

    fake.take().await;
    let handed = fake.next_client().await;
    assert_eq!(handed.database, "app");
    // Nobody accepts now: a new connection waits in the listen backlog.
    let conn_str = old.conn_str("trust_user", "", "app");
    let late = tokio::spawn(async move {
        let (c, conn) = tokio_postgres::connect(&conn_str, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        c.simple_query("SELECT 1").await.map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(fake);
    wait_for_log(
        &old,
        "this process accepts and serves again",
        Duration::from_secs(5),
    );
    c.simple_query("SELECT 1").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), late)
        .await
        .expect("the connection made meanwhile never got in")
        .unwrap()
        .unwrap();

    // The new process refuses a takeover of its own while the old one has a client left.
    let in_tx = old.connect("trust_user", "", "app").await.unwrap();
    in_tx.simple_query("BEGIN").await.unwrap();
    let new = start_new(&shared, port, "");
    wait_for_log(
        &new,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    let (st, log) = Sluice::builder(&ini(&shared, ""))
        .userlist(USERLIST)
        .port(port)
        .arg("-R")
        .run_expect_exit(Duration::from_secs(10));
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains("still taking over from process"), "{log}");
    in_tx.simple_query("COMMIT").await.unwrap();
    wait_for_log(&new, "the takeover is complete", Duration::from_secs(10));
    // The successor can be taken over in its turn.
    let mut new = new;
    let third = start_new(&shared, port, "");
    wait_for_log(
        &third,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    let exited = tokio::task::block_in_place(|| new.wait_exit(Duration::from_secs(10)));
    assert!(exited.is_some(), "{}", new.log());
    in_tx.simple_query("SELECT 1").await.unwrap();
}

/// Session mode: a client that holds no server moves at once; one linked to a server (whose
/// session state cannot be known) stays with the old process until it leaves, and the old process
/// exits then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_moves_idle_clients_and_keeps_linked_ones() {
    let shared = SharedDir::new();
    let mut old = start_old(&shared, "pool_mode = session\n");
    let port = old.port;
    let fresh = old.connect("trust_user", "", "app").await.unwrap();
    let linked = old.connect("trust_user", "", "app").await.unwrap();
    linked.simple_query("SET work_mem = '5MB'").await.unwrap();
    let new = start_new(&shared, port, "pool_mode = session\n");
    wait_for_log(
        &new,
        "took over the listening sockets",
        Duration::from_secs(10),
    );
    wait_for_log(
        &old,
        "handed over to the new process",
        Duration::from_secs(10),
    );
    fresh.simple_query("SELECT 1").await.unwrap();
    // Still the old process's server, with its session state.
    assert_eq!(show(&linked, "work_mem").await, "5MB");
    assert!(old.child.try_wait().unwrap().is_none());
    drop(linked);
    let exited = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(10)));
    assert!(exited.is_some(), "{}", old.log());
    fresh.simple_query("SELECT 1").await.unwrap();
}
