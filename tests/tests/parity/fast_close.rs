//! Servers due to close in session mode, side by side: a RELOAD that changes a database's
//! connection settings (here connect_query) marks the servers of its linked session clients
//! close_needed (SHOW SERVERS). With server_fast_close off (the default) the clients keep them,
//! idle or in a transaction, until they leave; with it on, PgBouncer 1.25.2's janitor closes an
//! idle one with its server (`FATAL 08P01 database configuration changed`), and one in a
//! transaction once the transaction is over.

use std::time::Duration;

use sluice_e2e::{error_fields, RawConn};

use super::{bad_input_common, console, pair_with, report, USERS};

/// What a raw client sees over `wait`: the first error (or "nothing"), and whether it is closed.
async fn watch(c: &mut RawConn, wait: Duration) -> String {
    match c.read_message(wait).await {
        Some((b'E', body)) => {
            let f = error_fields(&body);
            format!("{} {} {}", f[&b'S'], f[&b'C'], f[&b'M'])
        }
        Some((t, _)) => format!("message {}", t as char),
        None => "nothing".into(),
    }
}

async fn query(c: &mut RawConn, sql: &str) -> String {
    c.send(&RawConn::message(b'Q', format!("{sql}\0").as_bytes()))
        .await;
    let mut out = "ok".to_string();
    loop {
        match c.read_message(Duration::from_secs(3)).await {
            Some((b'Z', _)) => return out,
            Some((b'E', body)) => {
                let f = error_fields(&body);
                out = format!("{} {}", f[&b'C'], f[&b'M']);
            }
            Some(_) => continue,
            None if out == "ok" => return "connection closed".into(),
            None => return format!("{out}, then closed"),
        }
    }
}

async fn login(port: u16) -> RawConn {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    bad_input_common::read_until_ready(&mut c).await;
    c
}

/// An idle client and one in a transaction, then `trigger` marks their servers to be closed
/// (RECONNECT, or a RELOAD that changes the database's connection settings): what each sees.
async fn steps(port: u16, trigger: impl FnOnce()) -> Vec<(&'static str, String)> {
    let mut idle = login(port).await;
    let mut in_tx = login(port).await;
    let mut seen = vec![
        ("idle: a first query", query(&mut idle, "SELECT 1").await),
        ("in a transaction: BEGIN", query(&mut in_tx, "BEGIN").await),
    ];
    trigger();
    let mut c = console(port).await;
    c.query("RELOAD").await.unwrap();
    let r = c.query("SHOW SERVERS").await.unwrap();
    let i = r.col("close_needed");
    let mut due: Vec<String> = r.rows.iter().map(|row| row[i].clone().unwrap()).collect();
    due.sort();
    seen.push(("SHOW SERVERS close_needed", due.join(",")));
    seen.push(("idle: told", watch(&mut idle, Duration::from_secs(2)).await));
    seen.push(("idle: a query", query(&mut idle, "SELECT 1").await));
    seen.push((
        "in a transaction: a query",
        query(&mut in_tx, "SELECT 1").await,
    ));
    seen.push((
        "in a transaction: COMMIT",
        query(&mut in_tx, "COMMIT").await,
    ));
    seen.push((
        "in a transaction: after",
        query(&mut in_tx, "SELECT 1").await,
    ));
    seen.push((
        "in a transaction: told after",
        watch(&mut in_tx, Duration::from_secs(2)).await,
    ));
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_fast_close_matches_pgbouncer() {
    let mut results = Vec::new();
    for (label, extra) in [
        ("server_fast_close=1", "server_fast_close = 1"),
        ("server_fast_close unset", ""),
        ("server_fast_close=0", "server_fast_close = 0"),
    ] {
        let Some(p) = pair_with(
            &format!("auth_type = trust\nadmin_users = admin\npool_mode = session\n{extra}"),
            super::DB,
            USERS,
            &[],
        ) else {
            return;
        };
        // The entry's connect_query changes: a connection setting, so the servers are due.
        let changed =
            |cfg: String| cfg.replace("dbname=app", "dbname=app connect_query='SELECT 2'");
        let a = steps(p.pgb.port, || {
            p.pgb.write_file("pgbouncer.ini", &changed(p.pgb.config()))
        })
        .await;
        let sl_ini = p.sl.dir.path().join("pgbouncer.ini");
        let b = steps(p.sl.port, || {
            std::fs::write(&sl_ini, changed(std::fs::read_to_string(&sl_ini).unwrap())).unwrap()
        })
        .await;
        for ((step, x), (_, y)) in a.into_iter().zip(b) {
            results.push((format!("{label}: {step}"), x, y));
        }
    }
    // Three configurations, nine observations each.
    report(&results, 3 * 9);
}
