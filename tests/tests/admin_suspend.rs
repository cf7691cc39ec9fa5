//! SUSPEND and RESUME through the real `sluice` binary (reference §4.2): SUSPEND under a running
//! pgbench stops all traffic and new connections until RESUME; it is refused while a database is
//! paused; suspend_timeout closes the clients that cannot flush; the issuing console leaving
//! resumes; and a PAUSE whose console leaves stops waiting but stays in place.

mod admin_common;

use std::time::{Duration, Instant};

use admin_common::{admin, show, start};
use nix::sys::signal::Signal;
use sluice_e2e::{error_fields, pgbench, Console, ConsoleResult, RawConn};

const WAIT: Duration = Duration::from_secs(5);

async fn state(c: &mut Console, key: &str) -> String {
    show(c, "state").await.get(key, "value").unwrap_or_default()
}

async fn xact_count(c: &mut Console) -> i64 {
    show(c, "stats_totals")
        .await
        .get("app", "xact_count")
        .expect("app stats")
        .parse()
        .unwrap()
}

/// Clients of `db` in SHOW CLIENTS.
async fn clients_of(c: &mut Console, db: &str) -> usize {
    let r = show(c, "clients").await;
    let col = r.col("database");
    r.rows
        .iter()
        .filter(|row| row[col].as_deref() == Some(db))
        .count()
}

/// Poll SHOW STATE until `key` reads `want`, for up to 3 s.
async fn wait_state(c: &mut Console, key: &str, want: &str) {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let v = state(c, key).await;
        if v == want {
            return;
        }
        assert!(Instant::now() < until, "SHOW STATE {key} stays {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A raw client logged in to `app` (cleartext password), at ReadyForQuery.
async fn raw_app_client(port: u16) -> RawConn {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "app"),
        ("database", "app"),
    ]))
    .await;
    loop {
        let (tag, body) = c.read_message(WAIT).await.expect("login answer");
        match tag {
            b'R' if body[..4] == [0, 0, 0, 3] => {
                c.send(&RawConn::message(b'p', b"apppw\0")).await;
            }
            b'Z' => return c,
            b'E' => panic!("login failed: {:?}", error_fields(&body)),
            _ => {}
        }
    }
}

/// The client was sent a FATAL `message` and closed.
async fn closed_because(c: &mut RawConn, message: &str) {
    let mut seen = Vec::new();
    while let Some((tag, body)) = c.read_message(WAIT).await {
        if tag == b'E' {
            seen.push(error_fields(&body)[&b'M'].clone());
        }
    }
    assert!(
        seen.iter().any(|m| m == message),
        "expected FATAL {message:?}, got {seen:?}"
    );
    let (_, closed) = c.read_until_close(Duration::from_secs(1)).await;
    assert!(closed, "connection closed after the FATAL");
}

fn first_value(msgs: &[tokio_postgres::SimpleQueryMessage]) -> Option<String> {
    msgs.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    })
}

fn query_bytes(sql: &str) -> Vec<u8> {
    let mut q = sql.as_bytes().to_vec();
    q.push(0);
    RawConn::message(b'Q', &q)
}

#[tokio::test]
async fn suspend_during_pgbench_freezes_traffic_and_resume_lets_it_finish() {
    let s = start("", 4);
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
                "8",
                "-f",
                &script_s,
                "app",
            ],
            "apppw",
        )
    });
    let mut c = admin(&s).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(xact_count(&mut c).await > 0, "pgbench is running");

    let t0 = Instant::now();
    let r = c.query_timeout("SUSPEND", WAIT).await.unwrap();
    assert_eq!(r.tag, "SUSPEND");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "every client stops at once (suspend_timeout is 10 s): {:?}",
        t0.elapsed()
    );
    assert_eq!(state(&mut c, "suspended").await, "yes");
    assert_eq!(state(&mut c, "active").await, "no");
    assert_eq!(clients_of(&mut c, "app").await, 4, "nobody was dropped");

    // Nothing moves while suspended.
    let frozen = xact_count(&mut c).await;
    let totals = show(&mut c, "stats_totals").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(xact_count(&mut c).await, frozen, "transactions progressed");
    let later = show(&mut c, "stats_totals").await;
    for col in ["query_count", "bytes_received", "bytes_sent"] {
        assert_eq!(
            later.get("app", col),
            totals.get("app", col),
            "{col} moved while suspended"
        );
    }
    // New connections wait in the listen backlog: no answer to a startup packet.
    let mut newcomer = RawConn::connect(s.port).await;
    newcomer
        .send(&RawConn::startup_packet(&[
            ("user", "app"),
            ("database", "app"),
        ]))
        .await;
    assert!(
        newcomer
            .read_message(Duration::from_millis(500))
            .await
            .is_none(),
        "a new connection was served while suspended"
    );
    // SUSPEND and PAUSE are refused while suspended.
    assert_eq!(
        c.query("SUSPEND").await.unwrap_err()[&b'M'],
        "already suspended/paused"
    );
    assert_eq!(
        c.query("PAUSE").await.unwrap_err()[&b'M'],
        "already suspended/paused"
    );

    assert_eq!(c.query("RESUME").await.unwrap().tag, "RESUME");
    assert_eq!(state(&mut c, "suspended").await, "no");
    let (tag, _) = newcomer
        .read_message(WAIT)
        .await
        .expect("the queued connection is served after RESUME");
    assert_eq!(tag, b'R', "authentication request");

    let (st, out, err) = bench.await.unwrap();
    assert!(st.success(), "pgbench failed: {out}\n{err}");
    assert!(
        out.contains("number of failed transactions: 0") || !out.contains("failed transactions"),
        "{out}"
    );
    assert!(!err.contains("aborted"), "{err}");
    assert!(
        xact_count(&mut c).await > frozen,
        "transactions continued after RESUME"
    );
}

#[tokio::test]
async fn suspend_rules_and_sigusr2() {
    let s = start("", 2);
    let mut c = admin(&s).await;
    assert_eq!(c.query("PAUSE app").await.unwrap().tag, "PAUSE");
    assert_eq!(
        c.query("SUSPEND").await.unwrap_err()[&b'M'],
        "cannot suspend with paused databases"
    );
    assert_eq!(state(&mut c, "suspended").await, "no");
    assert_eq!(c.query("RESUME app").await.unwrap().tag, "RESUME");
    assert_eq!(c.query("SUSPEND").await.unwrap().tag, "SUSPEND");
    assert_eq!(state(&mut c, "suspended").await, "yes");
    assert_eq!(
        c.query("SUSPEND x").await.unwrap_err()[&b'M'],
        "invalid command 'SUSPEND x', use SHOW HELP;"
    );
    assert_eq!(c.query("RESUME").await.unwrap().tag, "RESUME");
    assert_eq!(
        c.query("RESUME").await.unwrap_err()[&b'M'],
        "pooler is not paused/suspended"
    );
    // SIGUSR2 resumes from SUSPEND too.
    assert_eq!(c.query("SUSPEND").await.unwrap().tag, "SUSPEND");
    s.signal(Signal::SIGUSR2);
    wait_state(&mut c, "suspended", "no").await;
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn janitor_rests_while_suspended() {
    let s = start("server_idle_timeout = 1", 2);
    let mut c = admin(&s).await;
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
    assert_eq!(c.query("SUSPEND").await.unwrap().tag, "SUSPEND");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let idle = |p: &ConsoleResult| p.get("app", "sv_idle").unwrap_or_default();
    assert_eq!(
        idle(&show(&mut c, "pools").await),
        "1",
        "server_idle_timeout did not close the idle server while suspended"
    );
    assert_eq!(c.query("RESUME").await.unwrap().tag, "RESUME");
    let until = Instant::now() + Duration::from_secs(3);
    while idle(&show(&mut c, "pools").await) != "0" {
        assert!(
            Instant::now() < until,
            "server_idle_timeout applies again after RESUME"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn graceful_shutdown_while_suspended_exits_now() {
    let mut s = start("", 2);
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
    let mut c = admin(&s).await;
    assert_eq!(c.query("SUSPEND").await.unwrap().tag, "SUSPEND");
    // SIGTERM would wait for the connected client; suspended, nothing could ever finish.
    s.signal(Signal::SIGTERM);
    assert!(
        s.wait_exit(Duration::from_secs(5)).is_some(),
        "still running"
    );
    assert!(s
        .log()
        .contains("suspend was in progress, going down immediately"));
}

#[tokio::test]
async fn suspend_timeout_closes_clients_that_cannot_flush() {
    let s = start("suspend_timeout = 1", 2);
    let good = s.connect("app", "apppw", "app").await.unwrap();
    good.simple_query("SELECT 1").await.unwrap();
    // Half a Query: the header announces 100 bytes, 4 arrive. The relay waits for the rest.
    let mut half_msg = raw_app_client(s.port).await;
    let mut q = vec![b'Q'];
    q.extend_from_slice(&100u32.to_be_bytes());
    q.extend_from_slice(b"SELE");
    half_msg.send(&q).await;
    // Three bytes of a message header, read by the idle client loop.
    let mut half_header = raw_app_client(s.port).await;
    half_header.send(&[b'Q', 0, 0]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut c = admin(&s).await;
    assert_eq!(clients_of(&mut c, "app").await, 3);
    let t0 = Instant::now();
    let r = c.query_timeout("SUSPEND", WAIT).await.unwrap();
    assert_eq!(r.tag, "SUSPEND");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(4),
        "SUSPEND waits suspend_timeout for the laggards, then returns: {took:?}"
    );
    closed_because(&mut half_msg, "suspend_timeout").await;
    closed_because(&mut half_header, "suspend_timeout").await;
    assert_eq!(
        clients_of(&mut c, "app").await,
        1,
        "the flushed client stays"
    );
    assert!(s.log().contains("closing because: suspend_timeout"));
    assert_eq!(c.query("RESUME").await.unwrap().tag, "RESUME");
    let msgs = tokio::time::timeout(WAIT, good.simple_query("SELECT 42"))
        .await
        .expect("query after RESUME")
        .unwrap();
    assert_eq!(first_value(&msgs).as_deref(), Some("42"));
}

#[tokio::test]
async fn the_issuing_console_leaving_resumes() {
    let s = start("suspend_timeout = 30", 2);
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
    let mut observer = admin(&s).await;

    // 1. After SUSPEND returned: idle clients are frozen until the console leaves.
    let mut issuer = admin(&s).await;
    assert_eq!(issuer.query("SUSPEND").await.unwrap().tag, "SUSPEND");
    assert_eq!(state(&mut observer, "suspended").await, "yes");
    let query = tokio::spawn(async move {
        let r = app.simple_query("SELECT 7").await.map(|m| first_value(&m));
        (app, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!query.is_finished(), "a query ran while suspended");
    drop(issuer);
    wait_state(&mut observer, "suspended", "no").await;
    let (app, r) = tokio::time::timeout(WAIT, query)
        .await
        .expect("query completes after the auto-RESUME")
        .unwrap();
    assert_eq!(r.unwrap().as_deref(), Some("7"));
    assert!(s
        .log()
        .contains("admin disappeared when suspended, doing RESUME"));

    // 2. While SUSPEND still waits for a laggard: leaving resumes too, and nobody is closed.
    let mut laggard = raw_app_client(s.port).await;
    laggard.send(&[b'Q', 0, 0]).await;
    let mut issuer = admin(&s).await;
    issuer.send_raw(&query_bytes("SUSPEND")).await;
    wait_state(&mut observer, "suspended", "yes").await;
    drop(issuer);
    wait_state(&mut observer, "suspended", "no").await;
    let (_, closed) = laggard.read_until_close(Duration::from_millis(300)).await;
    assert!(!closed, "the laggard was not closed");
    app.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn pause_stays_when_its_console_leaves() {
    let s = start("", 2);
    let holder = s.connect("app", "apppw", "app").await.unwrap();
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let mut observer = admin(&s).await;
    let mut issuer = admin(&s).await;
    // PAUSE waits for the open transaction.
    issuer.send_raw(&query_bytes("PAUSE")).await;
    wait_state(&mut observer, "paused", "yes").await;
    assert_eq!(clients_of(&mut observer, "pgbouncer").await, 2);
    drop(issuer);
    // The console is gone although the transaction is still open: PAUSE stopped waiting.
    let until = Instant::now() + Duration::from_secs(3);
    while clients_of(&mut observer, "pgbouncer").await != 1 {
        assert!(
            Instant::now() < until,
            "the PAUSE-ing console lingers until the transaction ends"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        state(&mut observer, "paused").await,
        "yes",
        "the pause stays, as in PgBouncer"
    );
    holder.batch_execute("SELECT 2; COMMIT").await.unwrap();
    assert_eq!(observer.query("RESUME").await.unwrap().tag, "RESUME");
    holder.simple_query("SELECT 3").await.unwrap();
}
