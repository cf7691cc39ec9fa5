//! SHOW CLIENTS / SHOW SERVERS columns that monitoring reads, side by side: a console client is
//! `idle` (linked to no server); `application_name` follows a client's `SET application_name`,
//! and a server shows the one its last client set (after that client left too); `wait` counts
//! for a linked client only while a query of its runs, from that query's start, which
//! `request_time` then shows.

use std::time::Duration;

use sluice_e2e::{Console, ConsoleResult, RawConn};

use super::{console, pair, report, side_by_side};

const BASE: &str = "auth_type = trust\nadmin_users = admin\npool_mode = transaction";

/// A logged-in trust client of `app` named `app_name`.
async fn client(port: u16, app_name: &str) -> RawConn {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
        ("application_name", app_name),
    ]))
    .await;
    ready(&mut c).await;
    c
}

/// Read through the next ReadyForQuery.
async fn ready(c: &mut RawConn) {
    loop {
        match c.read_message(Duration::from_secs(10)).await {
            Some((b'Z', _)) => return,
            Some(_) => {}
            None => panic!("no ReadyForQuery"),
        }
    }
}

async fn run(c: &mut RawConn, sql: &str) {
    c.send(&RawConn::message(b'Q', format!("{sql}\0").as_bytes()))
        .await;
    ready(c).await;
}

/// The value of `col` in the row of `rs` whose application_name is `app`.
fn of(rs: &ConsoleResult, app: &str, col: &str) -> String {
    let a = rs.col("application_name");
    let i = rs.col(col);
    rs.rows
        .iter()
        .find(|r| r[a].as_deref() == Some(app))
        .map(|r| r[i].clone().unwrap_or_default())
        .unwrap_or_else(|| format!("no row for {app}"))
}

/// Whether a SHOW CLIENTS row's wait (seconds and µs) is above zero.
fn waits(rs: &ConsoleResult, app: &str) -> String {
    let counting = of(rs, app, "wait") != "0" || of(rs, app, "wait_us") != "0";
    (if counting { "counts" } else { "0" }).to_string()
}

async fn show(con: &mut Console, what: &str) -> ConsoleResult {
    con.query(&format!("SHOW {what}")).await.unwrap()
}

async fn columns(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut case = |name: &str, v: String| out.push((name.to_string(), v));
    let mut con = console(port).await;

    // The console client itself, and an idle client between transactions.
    let mut idle = client(port, "idle_one").await;
    run(&mut idle, "SELECT 1").await;
    let clients = show(&mut con, "CLIENTS").await;
    case("console client: state", of(&clients, "", "state"));
    case("idle client: state", of(&clients, "idle_one", "state"));
    case("idle client: wait", waits(&clients, "idle_one"));

    // SET application_name shows in SHOW CLIENTS and on the server that ran it.
    run(&mut idle, "SET application_name = 'renamed'").await;
    let clients = show(&mut con, "CLIENTS").await;
    case("after SET: client application_name", {
        let a = of(&clients, "renamed", "state");
        if a.starts_with("no row") {
            a
        } else {
            "renamed".into()
        }
    });
    let servers = show(&mut con, "SERVERS").await;
    case("after SET: server state", of(&servers, "renamed", "state"));
    drop(idle);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let servers = show(&mut con, "SERVERS").await;
    case(
        "after its client left: server state",
        of(&servers, "renamed", "state"),
    );

    // A transaction: its first query, a pause, a second query that runs while SHOW looks.
    let mut tx = client(port, "in_tx").await;
    run(&mut tx, "BEGIN").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tx.send(&RawConn::message(b'Q', b"SELECT pg_sleep(1.5)\0"))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let clients = show(&mut con, "CLIENTS").await;
    case("query running: state", of(&clients, "in_tx", "state"));
    case("query running: wait", waits(&clients, "in_tx"));
    case(
        "query running: request_time is the query's start",
        if of(&clients, "in_tx", "request_time") > of(&clients, "in_tx", "connect_time") {
            "later than connect_time".into()
        } else {
            "connect_time".into()
        },
    );
    let servers = show(&mut con, "SERVERS").await;
    case(
        "query running: its server's application_name",
        of(&servers, "in_tx", "state"),
    );
    ready(&mut tx).await;
    let clients = show(&mut con, "CLIENTS").await;
    case("idle in transaction: state", of(&clients, "in_tx", "state"));
    case("idle in transaction: wait", waits(&clients, "in_tx"));
    run(&mut tx, "COMMIT").await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_clients_and_servers_columns_match_pgbouncer() {
    let Some(p) = pair(BASE) else { return };
    let b = columns(p.sl.port).await;
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(got("console client: state"), "idle");
    assert_eq!(got("after SET: client application_name"), "renamed");
    assert_eq!(got("after its client left: server state"), "idle");
    assert_eq!(got("query running: wait"), "counts");
    assert_eq!(
        got("query running: request_time is the query's start"),
        "later than connect_time"
    );
    assert_eq!(got("idle in transaction: wait"), "0");
    let a = columns(p.pgb.port).await;
    report(&side_by_side(a, b), 12);
}
