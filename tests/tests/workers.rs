//! Worker threads (`[sluice] workers`) through the real `sluice` binary: clients are spread over
//! every worker (one SO_REUSEPORT listening socket each), the pool and its limits stay shared by
//! all of them, and a second pooler cannot join those sockets.

mod pooling_common;

use std::collections::HashSet;

use std::time::Duration;

use sluice_e2e::Sluice;

use pooling_common::{connect, new_role, start, DATABASES};

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
        "pool_mode = transaction\ndefault_pool_size = 2\n[sluice]\nworkers = 2",
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
