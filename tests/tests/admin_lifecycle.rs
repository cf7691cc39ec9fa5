//! The console's lifecycle commands and signals through the real `sluice` binary (reference §2.4,
//! §4.2): SIGUSR1/SIGUSR2 pause and resume, SHUTDOWN and SHUTDOWN WAIT_FOR_CLIENTS, and
//! client_login_timeout bounding the login phase only.

mod admin_common;

use std::time::Duration;

use admin_common::{admin, paused, show, start};
use nix::sys::signal::Signal;

#[tokio::test]
async fn sigusr1_pauses_and_sigusr2_resumes() {
    let s = start("", 2);
    let mut c = admin(&s).await;
    s.signal(Signal::SIGUSR1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(paused(&mut c).await.as_deref(), Some("yes"));
    s.signal(Signal::SIGUSR2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(paused(&mut c).await.as_deref(), Some("no"));
    let a = s.connect("app", "apppw", "app").await.unwrap();
    a.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn shutdown_wait_for_clients_exits_when_the_last_client_leaves() {
    let mut s = start("", 2);
    let a = s.connect("app", "apppw", "app").await.unwrap();
    a.simple_query("SELECT 1").await.unwrap();
    let mut c = admin(&s).await;
    assert_eq!(
        c.query("SHUTDOWN WAIT_FOR_CLIENTS").await.unwrap().tag,
        "SHUTDOWN"
    );
    drop(c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        s.connect("app", "apppw", "app").await.is_err(),
        "no new clients"
    );
    a.simple_query("SELECT 1")
        .await
        .expect("connected clients keep working");
    assert!(
        s.wait_exit(Duration::from_millis(300)).is_none(),
        "still a client"
    );
    drop(a);
    // Let the connection task send Terminate before this thread blocks in wait_exit.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        s.wait_exit(Duration::from_secs(3)).is_some(),
        "exits after the last client"
    );
}

#[tokio::test]
async fn shutdown_exits_now() {
    let mut s = start("", 2);
    let mut c = admin(&s).await;
    c.send_raw(b"Q\x00\x00\x00\x0dSHUTDOWN\x00").await;
    assert!(s.wait_exit(Duration::from_secs(3)).is_some());
}

/// client_login_timeout bounds the login phase only: a console and a pool client that logged in
/// stay connected past it, and SHOW CLIENTS no longer lists them as logging in.
#[tokio::test]
async fn logged_in_clients_outlive_client_login_timeout() {
    let s = start("client_login_timeout = 1", 1);
    let mut c = admin(&s).await;
    let app = s.connect("app", "apppw", "app").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    app.simple_query("SELECT 1")
        .await
        .expect("pool client still connected");
    let clients = show(&mut c, "clients").await;
    assert_eq!(clients.rows.len(), 2, "app client + this console");
    assert!(
        clients
            .rows
            .iter()
            .all(|r| r[clients.col("state")].as_deref() != Some("login")),
        "{clients:?}"
    );
}

/// SET verbose applies at once (PgBouncer's tests switch it on to read debug lines): the pooler's
/// SET of a client's DateStyle is logged once, and the server's spelling of it ('ISO, MDY')
/// becomes the client's, so the next transaction on a server is not set again.
#[tokio::test]
async fn set_verbose_switches_debug_lines_at_once() {
    let s = start("", 1);
    let mut c = admin(&s).await;
    let dsn = format!(
        "host=127.0.0.1 port={} user=app password=apppw dbname=app options='-c DateStyle=ISO'",
        s.port
    );
    let count = |what: &str| s.log().matches(what).count();
    let quiet = {
        let (a, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        a.simple_query("SELECT 1").await.unwrap();
        a
    };
    drop(quiet);
    assert_eq!(count("varcache_apply"), 0, "debug lines at verbose 0");
    c.query("SET verbose = 2").await.unwrap();
    let (a, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    for _ in 0..3 {
        a.simple_query("SELECT 1").await.unwrap();
    }
    assert_eq!(
        count("varcache_apply: SET DateStyle='ISO'"),
        1,
        "{}",
        s.log()
    );
    assert_eq!(count("varcache_set_canonical: setting DateStyle"), 1);
    c.query("SET verbose = 0").await.unwrap();
    let before = count("DEBUG");
    a.simple_query("SELECT 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(count("DEBUG"), before, "debug lines after SET verbose = 0");
}
