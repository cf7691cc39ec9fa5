//! Startup parameter tracking across a shared server and cancel requests, through the real
//! `sluice` binary.

mod pooling_common;

use std::time::{Duration, Instant};

use sluice_e2e::Sluice;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use pooling_common::{connect, err_text, join, new_role, pid, start, PW};

// ---------------------------------------------------------------------------------------------
// Startup parameter tracking
// ---------------------------------------------------------------------------------------------

async fn connect_params(s: &Sluice, user: &str, app: &str, tz: &str) -> Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(s.port)
        .user(user)
        .password(PW)
        .dbname("app")
        .application_name(app)
        .options(format!("-c TimeZone={tz}"));
    let (client, conn) = cfg
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {app}: {}\nlog:\n{}", err_text(&e), s.log()));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

async fn settings(c: &Client) -> (String, String, i32) {
    let row = c
        .query_one(
            "SELECT current_setting('application_name'), current_setting('TimeZone'), pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    let show = c.simple_query("SHOW timezone").await.unwrap();
    let tz_show = show
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap();
    let tz: String = row.get(1);
    assert_eq!(tz, tz_show);
    (row.get(0), tz, row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_follow_the_client_across_a_shared_server() {
    let u = new_role("params").await;
    let s = start(
        "pool_mode = transaction\ndefault_pool_size = 1\nquery_wait_timeout = 10",
        &[&u],
    );
    let a = connect_params(&s, &u, "client_a", "UTC").await;
    let b = connect_params(&s, &u, "client_b", "Asia/Tokyo").await;
    let mut pids = Vec::new();
    for _ in 0..3 {
        let (app, tz, p) = settings(&a).await;
        assert_eq!((app.as_str(), tz.as_str()), ("client_a", "UTC"));
        pids.push(p);
        let (app, tz, p) = settings(&b).await;
        assert_eq!((app.as_str(), tz.as_str()), ("client_b", "Asia/Tokyo"));
        pids.push(p);
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "not one shared server: {pids:?}"
    );
    // A SET of a tracked parameter follows the client too.
    a.batch_execute("SET TimeZone = 'Europe/Paris'")
        .await
        .unwrap();
    assert_eq!(settings(&b).await.1, "Asia/Tokyo");
    assert_eq!(settings(&a).await.1, "Europe/Paris");
    assert_eq!(settings(&b).await.1, "Asia/Tokyo");
}

// ---------------------------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let u = new_role("cancel").await;
    let s = start("pool_mode = transaction\ndefault_pool_size = 1", &[&u]);
    let a = connect(&s, &u).await;
    let pa = pid(&a).await;
    let token = a.cancel_token();
    let h = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = a.batch_execute("SELECT pg_sleep(30)").await;
        (a, r, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!h.is_finished());
    token
        .cancel_query(NoTls)
        .await
        .unwrap_or_else(|e| panic!("cancel_query: {e:?}\nlog:\n{}", s.log()));
    let (a, r, took) = join(h, Duration::from_secs(5), "cancelled query").await;
    let e = r.expect_err("pg_sleep(30) should have been cancelled");
    assert_eq!(
        e.code(),
        Some(&SqlState::QUERY_CANCELED),
        "{}",
        err_text(&e)
    );
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");
    // The pool is usable after: same client, same server (a cancel is not a disconnect), and others.
    assert_eq!(pid(&a).await, pa);
    let b = connect(&s, &u).await;
    assert_eq!(pid(&b).await, pa);
}
