//! autodb_idle_timeout side by side: a database made from the `*` entry is freed (gone from SHOW
//! DATABASES and SHOW POOLS) once it has had no clients and no servers for that long, and made
//! again by the next client; one still in use, or still holding a server, is kept.

use std::time::Duration;

use sluice_e2e::{Console, ConsoleResult};

use super::{console, pair_with, report, USERS};

const DBS: &str = "app = host={pg_host} port={pg_port} dbname=app\n\
                   * = host={pg_host} port={pg_port}";

/// Column `col` of every row but the console's, sorted and joined.
fn names(r: &ConsoleResult, col: &str) -> String {
    let i = r.col(col);
    let mut v: Vec<String> = r
        .rows
        .iter()
        .filter_map(|row| row[i].clone())
        .filter(|n| n != "pgbouncer")
        .collect();
    v.sort();
    v.join(",")
}

async fn seen(c: &mut Console) -> String {
    let d = c.query("SHOW DATABASES").await.unwrap();
    let p = c.query("SHOW POOLS").await.unwrap();
    format!(
        "databases [{}] pools [{}]",
        names(&d, "name"),
        names(&p, "database")
    )
}

async fn use_other(port: u16) -> tokio_postgres::Client {
    let cs = format!("host=127.0.0.1 port={port} user=trust_user dbname=other connect_timeout=5");
    let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c.simple_query("SELECT 1").await.unwrap();
    c
}

/// One configuration: a client uses the auto-database `other` (and stays when `stay`), then the
/// consoles are read at once and after `wait`; then a new client uses it again.
async fn run(
    results: &mut Vec<(String, String, String)>,
    label: &str,
    extra: &str,
    stay: bool,
    wait: Duration,
) {
    let Some(p) = pair_with(
        &format!("auth_type = trust\nadmin_users = admin\n{extra}"),
        DBS,
        USERS,
        &[],
    ) else {
        return;
    };
    let (mut ca, mut cb) = (console(p.pgb.port).await, console(p.sl.port).await);
    let (a, b) = (use_other(p.pgb.port).await, use_other(p.sl.port).await);
    let (a, b) = if stay {
        (Some(a), Some(b))
    } else {
        drop((a, b));
        (None, None)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    results.push((
        format!("{label}: in use"),
        seen(&mut ca).await,
        seen(&mut cb).await,
    ));
    tokio::time::sleep(wait).await;
    results.push((
        format!("{label}: after {wait:?}"),
        seen(&mut ca).await,
        seen(&mut cb).await,
    ));
    drop((a, b));
    let (a, b) = (use_other(p.pgb.port).await, use_other(p.sl.port).await);
    results.push((
        format!("{label}: used again"),
        seen(&mut ca).await,
        seen(&mut cb).await,
    ));
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_databases_are_freed_as_pgbouncer_frees_them() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    let mut results = Vec::new();
    let wait = Duration::from_secs(5);
    // No clients, no servers (server_idle_timeout closed it) for autodb_idle_timeout: freed.
    run(
        &mut results,
        "unused",
        "autodb_idle_timeout = 1\nserver_idle_timeout = 1",
        false,
        wait,
    )
    .await;
    // An idle server still open keeps the database.
    run(
        &mut results,
        "server still open",
        "autodb_idle_timeout = 1",
        false,
        wait,
    )
    .await;
    // A connected client keeps it, however long it stays idle.
    run(
        &mut results,
        "client connected",
        "autodb_idle_timeout = 1\nserver_idle_timeout = 1",
        true,
        wait,
    )
    .await;
    // The default (3600 s): still there.
    run(
        &mut results,
        "default timeout",
        "server_idle_timeout = 1",
        false,
        wait,
    )
    .await;
    // Four configurations, three observations each.
    report(&results, 4 * 3);
}

/// Sluice alone: a freed auto-database's metric series go with it (they grew for ever before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_auto_database_leaves_the_metrics() {
    let mport = sluice_e2e::free_port();
    let ini = sluice_e2e::Sluice::basic_ini(
        "auth_type = trust\nautodb_idle_timeout = 1\nserver_idle_timeout = 1",
        &DBS.replace("{pg_host}", "127.0.0.1"),
    ) + &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n");
    let sl = sluice_e2e::Sluice::builder(&ini).userlist(USERS).start();
    drop(use_other(sl.port).await);
    let series = |m: &str| {
        m.lines()
            .filter(|l| l.contains("database=\"other\""))
            .count()
    };
    let before = series(&sluice_e2e::metrics(mport).await);
    assert!(before > 0, "no series of the auto-database while in use");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let m = sluice_e2e::metrics(mport).await;
    assert_eq!(
        series(&m),
        0,
        "series left after freeing:\n{m}\nlog:\n{}",
        sl.log()
    );
    assert!(
        sl.log().contains("auto-database other freed"),
        "{}",
        sl.log()
    );
}
