//! Exact limits with several workers: one process, one set of numbers. Clients spread over two
//! workers (every worker active) run concurrent load, and PostgreSQL never sees more servers than
//! pool_size (+ reserve), max_db_connections or max_user_connections allow, while the limits are
//! reached; max_client_conn counts the clients of every worker. Clients moving between workers
//! mid-session keep their prepared statements, tracked SETs and pinned state.

mod pooling_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_e2e::{free_port, metrics, sample, workers_now, Sluice};
use tokio_postgres::Client;

use pooling_common::{connect, connect_db, new_role, psql, DATABASES, PW};

fn two_workers(extra: &str, users: &[&str], mport: u16) -> Sluice {
    let userlist: String = users
        .iter()
        .map(|u| format!("\"{u}\" \"{PW}\"\n"))
        .collect();
    let ini = Sluice::basic_ini(
        &format!(
            "pool_mode = transaction\nquery_wait_timeout = 30\nstats_users = {}\n{extra}\n\
             [sluice]\nworkers = 2\n\
             worker_spread_percent = 0\nmetrics_listen_addr = 127.0.0.1:{mport}",
            users.join(",")
        ),
        DATABASES,
    );
    Sluice::builder(&ini).userlist(&userlist).start()
}

/// Clients of each (user, database) run `SELECT pg_sleep(0.05)` in a loop for `secs`; returns the
/// most servers PostgreSQL had at once for `users` (sampled) and the clients per worker.
async fn load_and_peak(
    s: &Sluice,
    mport: u16,
    clients: &[(&str, &str, usize)],
    users: &[&str],
    secs: f64,
) -> (i64, (f64, f64)) {
    let mut conns: Vec<Client> = Vec::new();
    for (user, db, n) in clients {
        for _ in 0..*n {
            conns.push(connect_db(s, user, db).await);
        }
    }
    let (_, w0, w1, _) = workers_now(mport).await;
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for c in conns {
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                c.simple_query("SELECT pg_sleep(0.05)").await.unwrap();
            }
            c
        }));
    }
    let list = users
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(",");
    let mut peak = 0;
    while Instant::now() < until {
        let n: i64 = psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename IN ({list})"
        ))
        .await
        .parse()
        .unwrap();
        peak = peak.max(n);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    (peak, (w0, w1))
}

fn assert_on_both(w: (f64, f64)) {
    assert!(w.0 > 0.0 && w.1 > 0.0, "clients all on one worker: {w:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_size_is_exact_across_workers() {
    let u = new_role("wl_pool").await;
    let mport = free_port();
    let s = two_workers("default_pool_size = 3", &[&u], mport);
    let (peak, w) = load_and_peak(&s, mport, &[(&u, "app", 16)], &[&u], 1.5).await;
    assert_on_both(w);
    assert_eq!(peak, 3, "servers at once for a pool of 3 over two workers");

    // The cross-worker counts: on the console (with a rate per transaction) and on /metrics.
    let console = connect_db(&s, &u, "pgbouncer").await;
    let cross = rows(&console, "SHOW CROSS_WORKER").await;
    let kinds: Vec<&str> = cross.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "server_handoff",
            "remote_wake",
            "socket_move",
            "client_move"
        ]
    );
    let m = metrics(mport).await;
    for r in &cross {
        let events: f64 = r[1].parse().unwrap();
        let per_xact: f64 = r[2].parse().unwrap();
        assert!((0.0..=1.0).contains(&per_xact), "{r:?}");
        let on_metrics = sample(
            &m,
            &format!("sluice_cross_worker_events_total{{kind=\"{}\"}}", r[0]),
        );
        assert!(on_metrics >= events, "{r:?}: metrics say {on_metrics}");
    }
    let workers = rows(&console, "SHOW WORKERS").await;
    assert_eq!(workers.len(), 2, "{workers:?}");
    assert!(
        workers.iter().all(|w| w[1] == "1"),
        "both workers take clients: {workers:?}"
    );
    let servers: u32 = workers.iter().map(|w| w[3].parse::<u32>().unwrap()).sum();
    assert_eq!(
        servers, 3,
        "each open server counted on one worker: {workers:?}"
    );
}

/// A console result as text rows.
async fn rows(c: &Client, sql: &str) -> Vec<Vec<String>> {
    c.simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_pool_adds_exactly_its_size_across_workers() {
    let u = new_role("wl_reserve").await;
    let mport = free_port();
    let s = two_workers(
        "default_pool_size = 2\nreserve_pool_size = 2\nreserve_pool_timeout = 0.1",
        &[&u],
        mport,
    );
    let (peak, w) = load_and_peak(&s, mport, &[(&u, "app", 16)], &[&u], 1.5).await;
    assert_on_both(w);
    assert_eq!(peak, 4, "pool 2 + reserve 2 over two workers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_db_connections_is_exact_across_workers_and_users() {
    let (a, b) = (new_role("wl_db_a").await, new_role("wl_db_b").await);
    let mport = free_port();
    let s = two_workers(
        "default_pool_size = 3\nmax_db_connections = 4",
        &[&a, &b],
        mport,
    );
    let (peak, w) =
        load_and_peak(&s, mport, &[(&a, "app", 8), (&b, "app", 8)], &[&a, &b], 1.5).await;
    assert_on_both(w);
    assert_eq!(peak, 4, "two pools of 3 under max_db_connections = 4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_user_connections_is_exact_across_workers_and_databases() {
    let u = new_role("wl_user").await;
    let mport = free_port();
    let s = two_workers(
        "default_pool_size = 3\nmax_user_connections = 2",
        &[&u],
        mport,
    );
    let (peak, w) = load_and_peak(&s, mport, &[(&u, "app", 8), (&u, "other", 8)], &[&u], 1.5).await;
    assert_on_both(w);
    assert_eq!(peak, 2, "two pools of 3 under max_user_connections = 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_client_conn_counts_every_workers_clients() {
    let u = new_role("wl_clients").await;
    let mport = free_port();
    let s = two_workers("default_pool_size = 2\nmax_client_conn = 10", &[&u], mport);
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..14 {
        match s.connect(&u, PW, "app").await {
            Ok(c) => match c.simple_query("SELECT 1").await {
                Ok(_) => held.push(c),
                Err(_) => refused += 1,
            },
            Err(_) => refused += 1,
        }
    }
    assert_eq!(
        (held.len(), refused),
        (10, 4),
        "max_client_conn = 10 over two workers"
    );
    // (Both workers' clients count: the kernel put the ten on both, except 1 time in 512.)
    let (_, w0, w1, _) = workers_now(mport).await;
    assert_eq!(w0 + w1, 10.0);
    // A slot freed on either worker is usable again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = connect(&s, &u).await;
    c.simple_query("SELECT 1").await.unwrap();
}

/// Clients spread over both workers set up session state, then packing is switched on: after a
/// few calm seconds one worker is active and the clients of the other move to it at their next
/// transaction boundary. Their protocol-level prepared statements, tracked SETs and a pinned
/// client's temp table are all intact afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_moving_between_workers_keep_their_session() {
    let u = new_role("wl_move").await;
    let mport = free_port();
    let ini = |spread: u32| {
        Sluice::basic_ini(
            &format!(
                "pool_mode = transaction\ndefault_pool_size = 4\nmax_prepared_statements = 100\n\
                 [sluice]\nworkers = 2\nworker_spread_percent = {spread}\n\
                 metrics_listen_addr = 127.0.0.1:{mport}"
            ),
            DATABASES,
        )
    };
    let s = Sluice::builder(&ini(0))
        .userlist(&format!("\"{u}\" \"{PW}\"\n"))
        .start();
    // At least 12 movers, and more until both workers have some (the kernel hashes connections
    // over them: 12 on one worker happens 1 time in 2,048).
    let mut clients = Vec::new();
    for i in 0..40 {
        if i >= 12 {
            let (_, w0, w1, _) = workers_now(mport).await;
            if w0 > 0.0 && w1 > 0.0 {
                break;
            }
        }
        let c = connect(&s, &u).await;
        c.batch_execute(&format!("SET application_name = 'mover{i}'"))
            .await
            .unwrap();
        clients.push(c);
    }
    let stmts = {
        let mut v = Vec::new();
        for c in &clients {
            v.push(
                c.prepare("SELECT $1::int * 2, current_setting('application_name')")
                    .await
                    .unwrap(),
            );
        }
        v
    };
    let pinned = connect(&s, &u).await;
    pinned
        .batch_execute("CREATE TEMP TABLE wl_pinned(x int); INSERT INTO wl_pinned VALUES (7)")
        .await
        .unwrap();
    let (_, w0, w1, moves0) = workers_now(mport).await;
    assert!(
        w0 > 0.0 && w1 > 0.0,
        "clients all on one worker: {w0} / {w1}"
    );

    s.rewrite_config(&ini(75));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let clients = Arc::new(clients);
    let check = |round: i32| {
        let clients = clients.clone();
        let stmts = stmts.clone();
        async move {
            for (i, (c, st)) in clients.iter().zip(stmts.iter()).enumerate() {
                let row = c.query_one(st, &[&round]).await.unwrap();
                assert_eq!(row.get::<_, i32>(0), round * 2);
                assert_eq!(row.get::<_, String>(1), format!("mover{i}"), "SET lost");
            }
        }
    };
    let mut now = (0.0, 0.0, 0.0, 0.0);
    for round in 0..100 {
        check(round).await;
        now = workers_now(mport).await;
        // (The pinned client holds its server, so it stays wherever it is.)
        if now.0 == 1.0 && now.1 >= clients.len() as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        now.0 == 1.0 && now.1 >= clients.len() as f64,
        "clients did not gather: {now:?}\n{}",
        s.log()
    );
    assert!(now.3 > moves0, "no client moved: {now:?}");
    check(1000).await;
    // The pinned client kept its server (and its temp table) throughout.
    let row = pinned
        .query_one("SELECT x FROM wl_pinned", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 7);
}

/// `max_user_connections=0` in [users] means "not set", as in PgBouncer: the global limit holds
/// (it was read as "no limit").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_per_user_limit_leaves_the_global_one() {
    let u = new_role("wl_user_zero").await;
    let mport = free_port();
    let s = two_workers(
        &format!("default_pool_size = 3\nmax_user_connections = 2\n[users]\n{u} = max_user_connections=0"),
        &[&u],
        mport,
    );
    let (peak, _) = load_and_peak(&s, mport, &[(&u, "app", 8), (&u, "other", 8)], &[&u], 1.5).await;
    assert_eq!(
        peak, 2,
        "max_user_connections=0 in [users] left the global 2"
    );
}
