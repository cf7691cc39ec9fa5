//! Worker threads (`[sluice] workers`) through the real `sluice` binary: clients are spread over
//! every worker (one SO_REUSEPORT listening socket each), the pool and its limits stay shared by
//! all of them, and a second pooler cannot join those sockets. Worker packing
//! (`worker_spread_percent`): a lightly loaded pooler gathers its clients on one worker (moving
//! them between transactions, steering new connections there) and spreads them again under load.

mod pooling_common;

use std::collections::HashSet;

use std::time::Duration;

use sluice_e2e::Sluice;

use pooling_common::{connect, new_role, start, DATABASES};
use sluice_e2e::{free_port, workers_now};
use tokio_postgres::Client;

/// CPU time (ns) each thread of `pid` has used, keyed by thread name; the main thread is "main".
fn thread_cpu(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir") {
        let dir = entry.expect("task entry").path();
        let tid: u32 = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        let name = if tid == pid {
            "main".to_string()
        } else {
            std::fs::read_to_string(dir.join("comm"))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        out.push((name, ns));
    }
    out
}

fn cpu_of(threads: &[(String, u64)], name: &str) -> u64 {
    threads
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no thread {name} in {threads:?}"))
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_spread_over_workers_that_share_one_pool() {
    let u = new_role("workers").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 2\n[sluice]\nworkers = 2\nworker_spread_percent = 0",
        &[&u],
    );
    let mut clients = Vec::new();
    // The kernel spreads connections over the workers' sockets by address hash: with 24 clients,
    // a worker gets fewer than 4 of them with a probability of about 1 in 3,400.
    for _ in 0..24 {
        clients.push(connect(&s, &u).await);
    }
    let before = thread_cpu(s.pid());
    let mut tasks = Vec::new();
    for c in clients {
        tasks.push(tokio::spawn(async move {
            let mut pids = HashSet::new();
            for _ in 0..150 {
                let row = c.query_one("SELECT pg_backend_pid()", &[]).await.unwrap();
                pids.insert(row.get::<_, i32>(0));
            }
            pids
        }));
    }
    let mut pids = HashSet::new();
    for t in tasks {
        pids.extend(t.await.unwrap());
    }
    let after = thread_cpu(s.pid());
    // One pool for the process: two workers never open more than default_pool_size servers.
    assert!(
        pids.len() <= 2,
        "{} server connections for a pool of 2",
        pids.len()
    );
    // Both workers relayed a fair share of the 3,600 transactions.
    let main = cpu_of(&after, "main") - cpu_of(&before, "main");
    let worker = cpu_of(&after, "sluice-worker-1") - cpu_of(&before, "sluice-worker-1");
    let total = main + worker;
    assert!(
        main * 8 >= total && worker * 8 >= total,
        "uneven work: main thread {main} ns, worker 1 {worker} ns\n{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_pooler_on_the_same_port_is_refused() {
    let u = new_role("workers_port").await;
    let first = start(
        "pool_mode = transaction
[sluice]
workers = 2",
        &[&u],
    );
    let ini = format!(
        "[databases]\n{DATABASES}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {}\n\
         unix_socket_dir = {{dir}}\nauth_file = {{userlist}}\n[sluice]\nworkers = 2\n",
        first.port
    );
    let (st, out) = Sluice::builder(&ini)
        .userlist("")
        .run_expect_exit(Duration::from_secs(10));
    assert!(
        !st.success(),
        "a second pooler started on the same port:\n{out}"
    );
    assert!(
        out.contains(&format!("cannot listen on 127.0.0.1:{}", first.port)),
        "{out}"
    );
    // The first one still serves.
    let c = connect(&first, &u).await;
    c.simple_query("SELECT 1").await.unwrap();
}

/// Every client runs one query and gets its own answer back.
async fn all_answer(clients: &[Client]) {
    for (i, c) in clients.iter().enumerate() {
        let row = c
            .query_one("SELECT $1::int + 1", &[&(i as i32)])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), i as i32 + 1);
    }
}

fn packing_ini(mport: u16, workers: u32, spread: u32) -> String {
    Sluice::basic_ini(
        &format!(
            "pool_mode = transaction\ndefault_pool_size = 4\n[sluice]\nworkers = {workers}\n\
             worker_spread_percent = {spread}\nmetrics_listen_addr = 127.0.0.1:{mport}"
        ),
        DATABASES,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_gather_on_one_worker_when_idle_and_spread_under_load() {
    let u = new_role("packing").await;
    let mport = free_port();
    let s = Sluice::builder(&packing_ini(mport, 2, 0))
        .userlist(&format!("\"{u}\" \"{}\"\n", pooling_common::PW))
        .start();
    // Spread (0): the kernel hashes 16 connections over both workers (all on one: 1 in 32,768).
    let mut clients = Vec::new();
    for _ in 0..16 {
        clients.push(connect(&s, &u).await);
    }
    all_answer(&clients).await;
    let (active, w0, w1, _) = workers_now(mport).await;
    assert_eq!((active, w0 + w1), (2.0, 16.0));
    assert!(w0 > 0.0 && w1 > 0.0, "clients on one worker: {w0} / {w1}");

    // Packing on: after a few calm seconds one worker is active, and every client that runs a
    // transaction moves to it afterwards.
    s.rewrite_config(&packing_ini(mport, 2, 75));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let mut now = (0.0, 0.0, 0.0, 0.0);
    for _ in 0..100 {
        all_answer(&clients).await;
        now = workers_now(mport).await;
        // All on worker 0: a client moving over has left worker 1 a moment before it counts on 0.
        if now.0 == 1.0 && now.1 == 16.0 && now.2 == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!((now.0, now.1, now.2), (1.0, 16.0, 0.0), "{}", s.log());
    assert!(now.3 >= w1, "moves counted: {now:?}");
    assert!(s.log().contains("workers: 1 of 2 active"), "{}", s.log());
    all_answer(&clients).await;

    // New connections are steered to the active worker (all 16 on worker 0 by chance: 1 in 65,536).
    for _ in 0..16 {
        clients.push(connect(&s, &u).await);
    }
    all_answer(&clients).await;
    assert_eq!(
        workers_now(mport).await.2,
        0.0,
        "a new client landed on worker 1"
    );

    // Under load past the threshold (1% of a CPU here), the second worker takes half the clients.
    s.rewrite_config(&packing_ini(mport, 2, 1));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let clients = std::sync::Arc::new(clients);
    let mut spread = (0.0, 0.0, 0.0, 0.0);
    for _ in 0..100 {
        let mut tasks = Vec::new();
        for i in 0..clients.len() {
            let clients = clients.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    clients[i].simple_query("SELECT 1").await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        spread = workers_now(mport).await;
        if spread.0 == 2.0 && spread.2 >= 8.0 {
            break;
        }
    }
    assert_eq!(spread.0, 2.0, "{}", s.log());
    assert!(spread.2 >= 8.0 && spread.1 + spread.2 == 32.0, "{spread:?}");
    assert!(s.log().contains("workers: 2 of 2 active"), "{}", s.log());
    all_answer(&clients).await;
}

/// Gathering after a spread goes straight to the workers the load needs: eight workers, all in use
/// (worker_spread_percent = 0), then packing on with nearly no load -> one worker within a few
/// calm seconds, not one worker fewer every 3 s (21 s for eight, 45 s for sixteen, every second
/// of it paying the idle workers' wake-ups per login).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathering_after_a_spread_goes_straight_to_the_workers_the_load_needs() {
    let u = new_role("gather").await;
    let mport = free_port();
    let ini = |spread: u32| packing_ini(mport, 8, spread);
    let s = Sluice::builder(&ini(0))
        .userlist(&format!("\"{u}\" \"{}\"\n", pooling_common::PW))
        .start();
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(connect(&s, &u).await);
    }
    all_answer(&clients).await;
    assert_eq!(workers_now(mport).await.0, 8.0);

    s.rewrite_config(&ini(75));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let started = std::time::Instant::now();
    let mut active = 8.0;
    while started.elapsed() < Duration::from_secs(15) {
        all_answer(&clients).await;
        active = workers_now(mport).await.0;
        if active == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    assert_eq!(active, 1.0, "{}", s.log());
    // 3 calm periods of 1 s after the reload, plus a period's slack; one at a time took 21 s.
    assert!(took < Duration::from_secs(8), "took {took:?}:\n{}", s.log());
    assert!(
        !s.log().contains("workers: 7 of 8 active"),
        "stepped down one worker at a time:\n{}",
        s.log()
    );
    all_answer(&clients).await;
}
