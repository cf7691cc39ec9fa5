//! The seed articles' load test through the real `sluice` binary: `pgbench -c 1000 -T ..` (the
//! TPC-B-like default script, tables made by `pgbench -i` through the pooler) with the seeds'
//! settings (transaction pooling, max_client_conn = 5000, the default pool of 20 servers), where
//! a direct run fails on max_connections. Asserted: every client gets in, no transaction fails,
//! PostgreSQL never sees more than the pool's 20 servers, and nothing is lost or applied twice:
//! pgbench_history holds one row per transaction pgbench counted, and the balances of accounts,
//! tellers and branches each add up to the history's deltas.

mod pooling_common;

use std::time::Duration;

use pooling_common::{new_role, psql, servers, PW};
use sluice_e2e::{pgbench, raise_own_nofile, PgCluster, Sluice};

const CLIENTS: &str = "1000";

/// `pgbench <args> -h 127.0.0.1 -p <sluice> -U <user> seedbench` off the runtime threads.
async fn run_pgbench(port: u16, user: &str, args: &[&str]) -> (bool, String, String) {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let port = port.to_string();
    all.extend(["-h", "127.0.0.1", "-p", &port, "-U", user, "seedbench"].map(String::from));
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let (st, out, err) = pgbench(&refs, PW);
        (st.success(), out, err)
    })
    .await
    .expect("pgbench task")
}

/// The number after `label` in pgbench's report ("number of transactions actually processed:
/// 1234/5678" gives 1234).
fn figure(out: &str, label: &str) -> Option<i64> {
    let rest = out.lines().find_map(|l| l.strip_prefix(label))?;
    rest.trim().split('/').next()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_clients_tpcb_through_twenty_servers_lose_nothing() {
    // pgbench holds a socket per client: 1000 of them and its own files come close to a default
    // soft limit of 1024.
    assert!(
        raise_own_nofile() >= 1100,
        "open-files hard limit too low for 1000 pgbench clients"
    );
    let u = new_role("seed1000").await;
    psql(&format!("CREATE DATABASE seedbench OWNER {u}")).await;
    let s = Sluice::builder(&Sluice::basic_ini(
        "pool_mode = transaction\nmax_client_conn = 5000\nauth_type = md5",
        "seedbench = host={pg_host} port={pg_port} dbname=seedbench",
    ))
    .userlist(&format!("\"{u}\" \"{PW}\"\n"))
    .start();

    // Tables and data through the pooler, as an operator would (COPY, VACUUM, ALTER TABLE).
    let (ok, out, err) = run_pgbench(s.port, &u, &["-i", "-s", "1"]).await;
    assert!(ok, "pgbench -i failed\n{out}\n{err}\nlog:\n{}", s.log());

    // Sample the server count while the thousand clients run.
    let sampler = {
        let u = u.clone();
        tokio::spawn(async move {
            let mut most = 0;
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                most = most.max(servers(&[&u]).await);
            }
            most
        })
    };
    let (ok, out, err) = run_pgbench(s.port, &u, &["-c", CLIENTS, "-j", "2", "-T", "5"]).await;
    assert!(
        ok,
        "pgbench -c 1000 failed\n{out}\n{err}\nlog:\n{}",
        s.log()
    );
    assert_eq!(
        figure(&out, "number of clients:"),
        Some(1000),
        "{out}\n{err}"
    );
    assert_eq!(
        figure(&out, "number of failed transactions:").unwrap_or(0),
        0,
        "{out}\n{err}"
    );
    let done = figure(&out, "number of transactions actually processed:").expect("processed");
    assert!(done >= 1000, "fewer transactions than clients: {out}");
    let most = sampler.await.expect("sampler");
    assert!(
        (1..=20).contains(&most),
        "PostgreSQL saw {most} servers for the pool of 20"
    );

    // Nothing lost, nothing applied twice: one history row per counted transaction, and every
    // balance table sums to the history's deltas.
    let check = tokio::task::spawn_blocking(|| {
        PgCluster::get().psql(
            "seedbench",
            "SELECT (SELECT count(*) FROM pgbench_history) || ' ' || \
             (SELECT coalesce(sum(delta), 0) FROM pgbench_history) || ' ' || \
             (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || \
             (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || \
             (SELECT sum(bbalance) FROM pgbench_branches)",
        )
    })
    .await
    .expect("check task");
    let v: Vec<i64> = check
        .split(' ')
        .map(|x| x.parse().expect("number"))
        .collect();
    assert_eq!(v[0], done, "history rows vs transactions pgbench counted");
    assert_eq!(v[2], v[1], "accounts balance vs history deltas");
    assert_eq!(v[3], v[1], "tellers balance vs history deltas");
    assert_eq!(v[4], v[1], "branches balance vs history deltas");
}
