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

/// The console's listings as PgBouncer 1.25.2 lays them out: SHOW POOLS and SHOW DATABASES by
/// name (the console's own `pgbouncer` among them, not first), the console's SHOW DATABASES row,
/// and every SHOW CONFIG row PgBouncer shows, in its order, with its values and defaults
/// (`conffile` the file it runs on, unix_socket_mode in decimal, no default for verbose, no
/// `service_name` row: an alias); STATS_AVERAGES counting before the first stats_period has
/// ended. The harness's own paths and port are written `{dir}` and
/// `{port}`; logfile and pidfile, which the harness sets for PgBouncer only, are left out.
async fn listings(port: u16, dir: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for db in ["zzz", "app", "mmm"] {
        let mut c = RawConn::connect(port).await;
        c.send(&RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", db),
        ]))
        .await;
        ready(&mut c).await;
        run(&mut c, "SELECT 1").await;
    }
    let mut con = console(port).await;
    // Averages count from the start, before the first stats_period (60 s) has ended.
    let avgs = show(&mut con, "STATS_AVERAGES").await;
    let (name, xact_time) = (avgs.col("database"), avgs.col("xact_time"));
    let app_avg = avgs
        .rows
        .iter()
        .find(|r| r[name].as_deref() == Some("app"))
        .and_then(|r| r[xact_time].clone())
        .and_then(|v| v.parse::<u64>().ok());
    out.push((
        "SHOW STATS_AVERAGES xact_time in the first period".into(),
        match app_avg {
            Some(0) => "0".into(),
            Some(_) => "counts".into(),
            None => "no row".into(),
        },
    ));
    let pools = show(&mut con, "POOLS").await;
    let order = |rs: &ConsoleResult, cols: &[&str]| {
        let idx: Vec<usize> = cols.iter().map(|c| rs.col(c)).collect();
        rs.rows
            .iter()
            .map(|r| {
                idx.iter()
                    .map(|&i| r[i].clone().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    out.push((
        "SHOW POOLS order".into(),
        order(&pools, &["database", "user"]),
    ));
    let dbs = show(&mut con, "DATABASES").await;
    out.push(("SHOW DATABASES order".into(), order(&dbs, &["name"])));
    let console_row = dbs
        .rows
        .iter()
        .find(|r| r[0].as_deref() == Some("pgbouncer"))
        .map(|r| {
            r.iter()
                .map(|v| v.clone().unwrap_or_else(|| "NULL".into()))
                .collect::<Vec<_>>()
                .join("|")
                .replace(&port.to_string(), "{port}")
        })
        .unwrap_or_default();
    out.push(("SHOW DATABASES console row".into(), console_row));
    // application_name_add_host: the console client's name carries its address too.
    let clients = show(&mut con, "CLIENTS").await;
    let named = clients
        .rows
        .iter()
        .find(|r| r[clients.col("database")].as_deref() == Some("pgbouncer"))
        .and_then(|r| r[clients.col("application_name")].clone())
        .unwrap_or_default();
    let named = match named.rsplit_once(':') {
        Some((host, _port)) => format!("{host}:<port>"),
        None => named,
    };
    out.push((
        "console client application_name with add_host".into(),
        named,
    ));
    let cfg = show(&mut con, "CONFIG").await;
    // PgBouncer's rows; Sluice's own [sluice] keys follow them.
    for (i, r) in cfg.rows.iter().take(PGBOUNCER_CONFIG_ROWS).enumerate() {
        let cell = |j: usize| {
            r[j].clone()
                .unwrap_or_default()
                .replace(dir, "{dir}")
                .replace(&port.to_string(), "{port}")
        };
        let key = cell(0);
        let shown = if matches!(key.as_str(), "logfile" | "pidfile") {
            "(set by the harness)".to_string()
        } else {
            format!("{} default={} changeable={}", cell(1), cell(2), cell(3))
        };
        out.push((format!("SHOW CONFIG row {i}: {key}"), shown));
    }
    out
}

/// PgBouncer 1.25.2's SHOW CONFIG row count.
const PGBOUNCER_CONFIG_ROWS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_listings_match_pgbouncer() {
    let dbs = "app = host={pg_host} port={pg_port} dbname=app\n\
               zzz = host={pg_host} port={pg_port} dbname=app\n\
               mmm = host={pg_host} port={pg_port} dbname=app";
    let base = format!("{BASE}\napplication_name_add_host = 1");
    let Some(p) = super::pair_with(&base, dbs, super::USERS, &[]) else {
        return;
    };
    let b = listings(p.sl.port, &p.sl.dir.path().display().to_string()).await;
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(
        got("SHOW POOLS order"),
        "app/trust_user mmm/trust_user pgbouncer/pgbouncer zzz/trust_user"
    );
    assert!(got("SHOW CONFIG row 23: conffile").starts_with("{dir}/pgbouncer.ini"));
    assert_eq!(
        got("SHOW STATS_AVERAGES xact_time in the first period"),
        "counts"
    );
    let a = listings(p.pgb.port, &p.pgb.dir.path().display().to_string()).await;
    report(&side_by_side(a, b), 5 + PGBOUNCER_CONFIG_ROWS);
}
