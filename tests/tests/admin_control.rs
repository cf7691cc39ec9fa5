//! The admin console's control commands through the real `sluice` binary and a real PostgreSQL:
//! PAUSE/RESUME under pgbench load, RELOAD and SET, SET auth_file, KILL_CLIENT, DISABLE/ENABLE,
//! RECONNECT, WAIT_CLOSE and KILL (reference §4.1). SHOW columns, figures and access rules:
//! `admin.rs`; signals, SHUTDOWN and the login timeout: `admin_lifecycle.rs`.

mod admin_common;

use std::time::{Duration, Instant};

use admin_common::{admin, num, paused, show, start};
use sluice_e2e::{pgbench, PgCluster, Sluice};

#[tokio::test]
async fn pause_during_pgbench_holds_clients_and_resume_lets_them_finish() {
    let s = start("", 2);
    let script = s.dir.path().join("tx.sql");
    std::fs::write(
        &script,
        "BEGIN;\nSELECT pg_sleep(0.01);\nSELECT 1;\nCOMMIT;\n",
    )
    .unwrap();
    let port = s.port.to_string();
    let script_s = script.display().to_string();
    let bench = tokio::task::spawn_blocking(move || {
        pgbench(
            &[
                "-n",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "app",
                "-c",
                "4",
                "-T",
                "3",
                "-f",
                &script_s,
                "app",
            ],
            "apppw",
        )
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut c = admin(&s).await;
    let t0 = Instant::now();
    let r = c
        .query_timeout("PAUSE", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.tag, "PAUSE");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "PAUSE waits only for running transactions"
    );
    let p = show(&mut c, "pools").await;
    assert_eq!(
        num(&p, "app", "sv_active"),
        0,
        "no server in use once PAUSE returned"
    );
    assert_eq!(
        num(&p, "app", "sv_idle"),
        0,
        "paused pools give their servers up"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = show(&mut c, "pools").await;
    assert!(
        num(&p, "app", "cl_waiting") >= 1,
        "clients are held, not failed"
    );
    assert_eq!(paused(&mut c).await.as_deref(), Some("yes"));
    assert_eq!(num(&show(&mut c, "databases").await, "app", "paused"), 1);
    let e = c.query("PAUSE").await.unwrap_err();
    assert_eq!(e[&b'M'], "already suspended/paused");
    assert_eq!(c.query("RESUME").await.unwrap().tag, "RESUME");
    let (st, out, err) = bench.await.unwrap();
    assert!(st.success(), "pgbench failed: {out}\n{err}");
    assert!(
        out.contains("number of failed transactions: 0") || !out.contains("failed transactions"),
        "{out}"
    );
    assert!(!err.contains("aborted"), "{err}");
    let e = c.query("RESUME").await.unwrap_err();
    assert_eq!(e[&b'M'], "pooler is not paused/suspended");
    // Per-database pause and the admin db.
    assert_eq!(c.query("PAUSE app").await.unwrap().tag, "PAUSE");
    assert_eq!(
        c.query("PAUSE pgbouncer").await.unwrap_err()[&b'M'],
        "cannot pause admin db"
    );
    assert_eq!(
        c.query("RESUME other").await.unwrap_err()[&b'M'],
        "no such database: other"
    );
    assert_eq!(c.query("RESUME app").await.unwrap().tag, "RESUME");
}

#[tokio::test]
async fn reload_and_set_change_pool_size() {
    let s = start("", 1);
    let mut c = admin(&s).await;
    assert_eq!(num(&show(&mut c, "databases").await, "app", "pool_size"), 1);
    let pg = PgCluster::get();
    s.rewrite_config(&Sluice::basic_ini(
        "auth_type = plain\nadmin_users = admin\nstats_users = watcher\npool_mode = transaction\ndefault_pool_size = 3\n",
        &format!("app = host=127.0.0.1 port={} dbname=app user=trust_user", pg.port),
    ));
    assert_eq!(c.query("RELOAD").await.unwrap().tag, "RELOAD");
    assert_eq!(num(&show(&mut c, "databases").await, "app", "pool_size"), 3);
    // Three clients in transactions at once now get three servers.
    let mut held = Vec::new();
    for _ in 0..3 {
        let cl = s.connect("app", "apppw", "app").await.unwrap();
        cl.batch_execute("BEGIN; SELECT 1").await.unwrap();
        held.push(cl);
    }
    assert_eq!(num(&show(&mut c, "pools").await, "app", "sv_active"), 3);
    let r = c.query("SET default_pool_size = 5").await.unwrap();
    assert_eq!(r.tag, "SET default_pool_size=5");
    assert_eq!(
        show(&mut c, "config")
            .await
            .get("default_pool_size", "value")
            .as_deref(),
        Some("5")
    );
    assert_eq!(num(&show(&mut c, "databases").await, "app", "pool_size"), 5);
    let e = c.query("SET no_such_key = 1").await.unwrap_err();
    assert!(e[&b'M'].contains("no_such_key"), "{e:?}");
    // RELOAD of a broken file fails with F0000 and keeps the running config.
    s.rewrite_config("[pgbouncer]\nbogus line without equals\n");
    let e = c.query("RELOAD").await.unwrap_err();
    assert_eq!(e[&b'C'], "F0000");
    assert_eq!(num(&show(&mut c, "databases").await, "app", "pool_size"), 5);
}

/// SET runs what its key's change takes (the settings table's effect column), as RELOAD does: SET
/// auth_file reads the new file at once (a user only it lists logs in), and a file that cannot be
/// read refuses the SET and keeps the running secrets.
#[tokio::test]
async fn set_auth_file_reads_the_new_file() {
    let s = start("", 1);
    let mut c = admin(&s).await;
    assert!(s.connect("newcomer", "newpw", "app").await.is_err());
    s.write_file(
        "userlist2.txt",
        "\"admin\" \"adminpw\"\n\"app\" \"apppw\"\n\"newcomer\" \"newpw\"\n",
    );
    let path = s.dir.path().join("userlist2.txt");
    let r = c
        .query(&format!("SET auth_file = '{}'", path.display()))
        .await
        .unwrap();
    assert!(r.tag.starts_with("SET auth_file="), "{}", r.tag);
    let n = s
        .connect("newcomer", "newpw", "app")
        .await
        .unwrap_or_else(|e| panic!("user of the new auth_file refused: {e:?}\n{}", s.log()));
    n.simple_query("SELECT 1").await.unwrap();
    let e = c
        .query("SET auth_file = '/nonexistent/userlist.txt'")
        .await
        .unwrap_err();
    assert!(e[&b'M'].contains("nonexistent"), "{e:?}");
    assert_eq!(
        show(&mut c, "config").await.get("auth_file", "value"),
        Some(path.display().to_string())
    );
    s.connect("newcomer", "newpw", "app").await.unwrap();
}

#[tokio::test]
async fn kill_client_drops_exactly_one() {
    let s = start("", 2);
    let a = s.connect("app", "apppw", "app").await.unwrap();
    let b = s.connect("app", "apppw", "app").await.unwrap();
    a.simple_query("SELECT 1").await.unwrap();
    let mut c = admin(&s).await;
    let cl = show(&mut c, "clients").await;
    let ids: Vec<String> = cl
        .rows
        .iter()
        .filter(|r| r[cl.col("database")].as_deref() == Some("app"))
        .map(|r| r[cl.col("id")].clone().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    let victim = &ids[0];
    assert_eq!(
        c.query(&format!("KILL_CLIENT {victim}")).await.unwrap().tag,
        "KILL_CLIENT"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        a.simple_query("SELECT 1").await.is_err(),
        "the killed client is gone"
    );
    b.simple_query("SELECT 1")
        .await
        .expect("the other client works");
    assert_eq!(show(&mut c, "clients").await.rows.len(), 2, "b + console");
    assert_eq!(
        c.query("KILL_CLIENT 999999").await.unwrap_err()[&b'M'],
        "client not found"
    );
    assert_eq!(
        c.query("KILL_CLIENT abc").await.unwrap_err()[&b'M'],
        "invalid client pointer supplied"
    );
    assert!(s.log().contains("admin forced disconnect"));
}

#[tokio::test]
async fn disable_enable_reconnect_wait_close_kill() {
    let s = start("", 2);
    let a = s.connect("app", "apppw", "app").await.unwrap();
    a.simple_query("SELECT 1").await.unwrap();
    let mut c = admin(&s).await;
    let pid_before = show(&mut c, "servers")
        .await
        .find("remote_pid", |_| true)
        .unwrap();
    assert_eq!(c.query("RECONNECT app").await.unwrap().tag, "RECONNECT");
    assert_eq!(c.query("WAIT_CLOSE app").await.unwrap().tag, "WAIT_CLOSE");
    a.simple_query("SELECT 1").await.unwrap();
    let pid_after = show(&mut c, "servers")
        .await
        .find("remote_pid", |_| true)
        .unwrap();
    assert_ne!(pid_before, pid_after, "RECONNECT replaced the server");
    assert_eq!(c.query("DISABLE app").await.unwrap().tag, "DISABLE");
    let e = s
        .connect("app", "apppw", "app")
        .await
        .expect_err("disabled");
    let msg = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert_eq!(msg, "database \"app\" is disabled");
    assert_eq!(num(&show(&mut c, "databases").await, "app", "disabled"), 1);
    c.query("ENABLE app").await.unwrap();
    let b = s.connect("app", "apppw", "app").await.unwrap();
    b.simple_query("SELECT 1").await.unwrap();
    assert_eq!(c.query("KILL app").await.unwrap().tag, "KILL");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(a.simple_query("SELECT 1").await.is_err() && b.simple_query("SELECT 1").await.is_err());
    assert_eq!(
        num(&show(&mut c, "databases").await, "app", "paused"),
        1,
        "KILL leaves it paused"
    );
    c.query("RESUME app").await.unwrap();
    let d = s.connect("app", "apppw", "app").await.unwrap();
    d.simple_query("SELECT 1").await.unwrap();
    assert_eq!(
        c.query("DISABLE nosuch").await.unwrap_err()[&b'M'],
        "no such database: nosuch"
    );
}
