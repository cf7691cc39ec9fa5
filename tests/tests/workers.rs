//! Worker threads (`[sluice] workers`) through the real `sluice` binary: clients are spread over
//! every worker, and the pool and its limits stay shared by all of them.

mod pooling_common;

use std::collections::HashSet;

use pooling_common::{connect, new_role, start};

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
    for _ in 0..8 {
        clients.push(connect(&s, &u).await);
    }
    let before = thread_cpu(s.pid());
    let mut tasks = Vec::new();
    for c in clients {
        tasks.push(tokio::spawn(async move {
            let mut pids = HashSet::new();
            for _ in 0..400 {
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
    // Round-robin hand-out: both workers relayed a fair share of the 3,200 transactions.
    let main = cpu_of(&after, "main") - cpu_of(&before, "main");
    let worker = cpu_of(&after, "sluice-worker-1") - cpu_of(&before, "sluice-worker-1");
    let total = main + worker;
    assert!(
        main * 5 >= total && worker * 5 >= total,
        "uneven work: main thread {main} ns, worker 1 {worker} ns\n{after:?}"
    );
}
