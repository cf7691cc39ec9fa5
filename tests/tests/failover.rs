//! Host roles, health and failover against a real primary and streaming standbys
//! (`sluice_e2e::ReplicaSet`): target_session_attrs picks the right host; a promotion after the
//! primary crashed under load, where idle and waiting clients continue on the new primary without
//! an error; a planned switchover; a lagging standby taken out of rotation and brought back; an
//! old primary that comes back beside the new one (split brain) is never written to; and
//! failover_timeout's clear error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_e2e::{host_list, start_over_replicas, Console, PgNode, ReplicaSet, Sluice};

fn hosts(nodes: &[&PgNode]) -> String {
    host_list(nodes)
}

fn start(databases: &str, sluice_lines: &str) -> Sluice {
    start_over_replicas(databases, sluice_lines)
}

async fn client(s: &Sluice, db: &str) -> tokio_postgres::Client {
    s.connect("postgres", "", db)
        .await
        .unwrap_or_else(|e| panic!("connect to {db}: {e}; log:\n{}", s.log()))
}

/// The port of the server that ran the statement.
async fn port_of(c: &tokio_postgres::Client) -> Result<u16, tokio_postgres::Error> {
    let row = c
        .query_one("SELECT current_setting('port')::int", &[])
        .await?;
    Ok(row.get::<_, i32>(0) as u16)
}

async fn insert_port(c: &tokio_postgres::Client) -> Result<u16, tokio_postgres::Error> {
    let row = c
        .query_one(
            "INSERT INTO t(v) VALUES (current_setting('port')::int) RETURNING v",
            &[],
        )
        .await?;
    Ok(row.get::<_, i32>(0) as u16)
}

/// SHOW HOSTS' row of the host on `port`, as (role, state, reason).
async fn host_row(s: &Sluice, port: u16) -> Option<(String, String, String)> {
    let mut con = Console::connect(s.port, "postgres", "").await.ok()?;
    let r = con.query("SHOW HOSTS").await.ok()?;
    let (pc, rc, sc, why) = (
        r.col("port"),
        r.col("role"),
        r.col("state"),
        r.col("reason"),
    );
    let row = r
        .rows
        .iter()
        .find(|row| row[pc].as_deref() == Some(&port.to_string()))?;
    let get = |i: usize| row[i].clone().unwrap_or_default();
    Some((get(rc), get(sc), get(why)))
}

/// Wait (up to `limit`) until the host on `port` satisfies `pred`; its last row otherwise.
async fn wait_host(
    s: &Sluice,
    port: u16,
    limit: Duration,
    pred: impl Fn(&(String, String, String)) -> bool,
) -> Result<(), Option<(String, String, String)>> {
    let deadline = Instant::now() + limit;
    loop {
        let row = host_row(s, port).await;
        if row.as_ref().is_some_and(&pred) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(row);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn make_table(primary: &PgNode) {
    primary.psql(
        "postgres",
        "CREATE TABLE t(id bigserial PRIMARY KEY, v int)",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_session_attrs_picks_the_right_host_and_failover_timeout_says_why() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    let dbs = format!(
        "rw = {} target_session_attrs=read-write\n\
         pr = {} target_session_attrs=primary\n\
         ro = {} target_session_attrs=read-only\n\
         sb = {} target_session_attrs=standby\n\
         ps = {} target_session_attrs=prefer-standby\n\
         lone = {} target_session_attrs=read-write\n",
        hosts(&[sb, p]),
        hosts(&[sb, p]),
        hosts(&[p, sb]),
        hosts(&[p, sb]),
        hosts(&[p, sb]),
        hosts(&[sb]),
    );
    let mport = sluice_e2e::free_port();
    let s = start(
        &dbs,
        &format!("failover_timeout = 1\nmetrics_listen_addr = 127.0.0.1:{mport}"),
    );
    for (db, want) in [
        ("rw", p.port),
        ("pr", p.port),
        ("ro", sb.port),
        ("sb", sb.port),
        ("ps", sb.port),
    ] {
        for _ in 0..3 {
            let c = client(&s, db).await;
            assert_eq!(port_of(&c).await.unwrap(), want, "{db}");
        }
    }
    // Only a standby where a primary is needed: held failover_timeout, then a clear error.
    // (The pool's first client logs in with its first server: the error comes at login.)
    let t0 = Instant::now();
    let e = match s.connect("postgres", "", "lone").await {
        Ok(c) => port_of(&c).await.expect_err("no primary in the list"),
        Err(e) => e,
    };
    let db = e.as_db_error().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(db.code().code(), "08006", "{db:?}");
    assert!(
        db.message().contains("failover_timeout") && db.message().contains("standby"),
        "{}",
        db.message()
    );
    assert!(t0.elapsed() >= Duration::from_millis(900), "held first");
    let primary = host_row(&s, p.port).await.expect("a row for the primary");
    assert_eq!(
        (primary.0.as_str(), primary.1.as_str()),
        ("primary", "in rotation")
    );
    let standby = host_row(&s, sb.port).await.expect("a row for the standby");
    assert_eq!(
        (standby.0.as_str(), standby.1.as_str()),
        ("standby", "in rotation")
    );
    let m = sluice_e2e::metrics(mport).await;
    assert!(
        m.contains(&format!(
            "sluice_host_role{{host=\"127.0.0.1\",port=\"{}\",role=\"standby\"}} 1",
            sb.port
        )),
        "{m}"
    );
    let (_, dash) = sluice_e2e::http_get(mport, "/dashboard.json").await;
    assert!(
        dash.contains(&format!(
            "{{\"addr\":\"127.0.0.1:{}\",\"role\":\"standby\",\"healthy\":true",
            sb.port
        )),
        "{dash}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_under_load_idle_and_waiting_clients_see_no_error() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    let dbs = format!("app = {} target_session_attrs=read-write", hosts(&[p, sb]));
    let s = Arc::new(start(&dbs, "failover_timeout = 20"));
    let stop = Arc::new(AtomicBool::new(false));
    let promoted_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut loaded = Vec::new();
    for _ in 0..3 {
        let (s, stop, promoted_at) = (s.clone(), stop.clone(), promoted_at.clone());
        loaded.push(tokio::spawn(async move {
            let (mut errors, mut wrote_after) = (0usize, false);
            let mut c = Some(client(&s, "app").await);
            while !stop.load(Ordering::Relaxed) {
                let Some(cl) = c.as_ref() else {
                    c = s.connect("postgres", "", "app").await.ok();
                    continue;
                };
                match insert_port(cl).await {
                    Ok(_) => {
                        if promoted_at.lock().unwrap().is_some() {
                            wrote_after = true;
                        }
                    }
                    Err(_) => {
                        errors += 1;
                        if cl.is_closed() {
                            c = None;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            (errors, wrote_after)
        }));
    }
    let mut idle = Vec::new();
    for _ in 0..3 {
        let c = client(&s, "app").await;
        assert_eq!(insert_port(&c).await.unwrap(), p.port);
        idle.push(c);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.stop("immediate");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Clients that ask for a server while there is no primary are held.
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let s = s.clone();
        waiting.push(tokio::spawn(async move {
            let c = client(&s, "app").await;
            insert_port(&c).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    sb.promote();
    *promoted_at.lock().unwrap() = Some(Instant::now());
    for c in &idle {
        let port = insert_port(c)
            .await
            .unwrap_or_else(|e| panic!("idle client saw {e}; log:\n{}", s.log()));
        assert_eq!(port, sb.port);
    }
    for w in waiting {
        let port = w
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("waiting client saw {e}"));
        assert_eq!(port, sb.port);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for l in loaded {
        let (_errors, wrote_after) = l.await.unwrap();
        assert!(
            wrote_after,
            "a loaded client writes again; log:\n{}",
            s.log()
        );
    }
    let log = s.log();
    if std::env::var_os("FAILOVER_LOG").is_some() {
        eprintln!("{log}");
    }
    assert!(log.contains("failover began"), "{log}");
    assert!(log.contains("failover ended"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_switchover_clients_continue_on_the_new_primary() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    let dbs = format!("app = {} target_session_attrs=read-write", hosts(&[p, sb]));
    let s = start(&dbs, "failover_timeout = 20");
    let mut idle = Vec::new();
    for _ in 0..3 {
        let c = client(&s, "app").await;
        assert_eq!(insert_port(&c).await.unwrap(), p.port);
        idle.push(c);
    }
    p.stop("fast");
    tokio::time::sleep(Duration::from_millis(300)).await;
    sb.promote();
    p.start_as_standby_of(sb);
    for c in &idle {
        let port = insert_port(c)
            .await
            .unwrap_or_else(|e| panic!("idle client saw {e}; log:\n{}", s.log()));
        assert_eq!(port, sb.port);
    }
    wait_host(&s, p.port, Duration::from_secs(10), |r| {
        r.0 == "standby" && r.1 == "in rotation"
    })
    .await
    .unwrap_or_else(|row| panic!("old primary not a standby in rotation: {row:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_standby_is_taken_out_and_brought_back() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    let dbs = format!("ro = {} target_session_attrs=standby", hosts(&[p, sb]));
    let s = start(&dbs, "failover_timeout = 30\nmax_replica_lag = 1s");
    let c = client(&s, "ro").await;
    assert_eq!(port_of(&c).await.unwrap(), sb.port);
    sb.psql("postgres", "SELECT pg_wal_replay_pause()");
    // Writes on the primary leave WAL pending on the paused standby: its lag grows.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut out = false;
    while Instant::now() < deadline {
        p.psql("postgres", "INSERT INTO t(v) VALUES (0)");
        if let Some(row) = host_row(&s, sb.port).await {
            if row.1 == "out of rotation" && row.2.contains("max_replica_lag") {
                out = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        out,
        "the lagging standby left rotation: {:?}",
        host_row(&s, sb.port).await
    );
    // A client needing a standby is held while the only one lags...
    let held = {
        let c = client(&s, "ro").await;
        tokio::spawn(async move { port_of(&c).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "held while the standby lags");
    // ...and served once it caught up.
    sb.psql("postgres", "SELECT pg_wal_replay_resume()");
    let port = tokio::time::timeout(Duration::from_secs(15), held)
        .await
        .expect("served after the standby caught up")
        .unwrap()
        .unwrap();
    assert_eq!(port, sb.port);
    wait_host(&s, sb.port, Duration::from_secs(5), |r| {
        r.1 == "in rotation"
    })
    .await
    .unwrap_or_else(|row| panic!("standby back in rotation: {row:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_primary_after_split_brain_is_never_written_to() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    let dbs = format!("app = {} target_session_attrs=read-write", hosts(&[p, sb]));
    let s = start(&dbs, "failover_timeout = 20");
    let c = client(&s, "app").await;
    assert_eq!(insert_port(&c).await.unwrap(), p.port);
    p.stop("immediate");
    sb.promote();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match insert_port(&c).await {
            Ok(port) => {
                assert_eq!(port, sb.port);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "no write after promotion: {e}"),
        }
    }
    let before = p.port;
    // The old primary comes back as a primary on the old timeline.
    p.start();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..10 {
        let fresh = client(&s, "app").await;
        assert_eq!(insert_port(&fresh).await.unwrap(), sb.port);
        assert_eq!(insert_port(&c).await.unwrap(), sb.port);
    }
    let row = host_row(&s, before)
        .await
        .expect("a row for the old primary");
    assert_eq!(row.1, "out of rotation", "{row:?}");
    assert!(row.2.contains("stale primary"), "{row:?}");
    let on_old = p.psql(
        "postgres",
        &format!("SELECT count(*) FROM t WHERE v = {}", sb.port),
    );
    assert_eq!(on_old, "0", "nothing written to the stale primary");
}
