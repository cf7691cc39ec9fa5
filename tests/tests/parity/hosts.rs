//! Host lists in a `[databases]` entry, side by side: `host=a,b` with load_balance_hosts
//! round-robin (the default: the next host for each new server) or disable (the same host until a
//! connect to it fails), with every host up or the first one failing. Two fake servers of the test
//! on 127.0.0.1 and 127.0.0.2, same port (relays to the test's PostgreSQL,
//! `timeouts::FakeServer`), count the servers each gets. `port=p1,p2` (a port per host): PgBouncer
//! 1.25.2 reads the first number and uses it for every host; Sluice gives each host its port
//! (deliberate, see `DELIBERATE`).

use std::time::Duration;

use super::timeouts::{Behaviour, FakeServer};
use super::{pair_with, report, USERS};

/// Open `n` session-mode clients at once and keep them (each holds a server); "ok" or the first
/// error.
async fn clients(port: u16, n: usize) -> (String, Vec<tokio_postgres::Client>) {
    let mut held = Vec::new();
    let mut out = "ok".to_string();
    for _ in 0..n {
        let cs = format!("host=127.0.0.1 port={port} user=trust_user dbname=app connect_timeout=5");
        match tokio_postgres::connect(&cs, tokio_postgres::NoTls).await {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                match c.simple_query("SELECT 1").await {
                    Ok(_) => held.push(c),
                    Err(e) => {
                        out = e.as_db_error().map_or(e.to_string(), |d| {
                            format!("{} {}", d.code().code(), d.message())
                        })
                    }
                }
            }
            Err(e) => {
                out = e.as_db_error().map_or(e.to_string(), |d| {
                    format!("{} {}", d.code().code(), d.message())
                })
            }
        }
    }
    (out, held)
}

/// One configuration: `entry` with `{p1}` / `{p2}` for the two servers' ports; the first server
/// set to `first` before the clients come.
async fn run(
    results: &mut Vec<(String, String, String)>,
    label: &str,
    entry: &str,
    first: Behaviour,
) {
    let mut seen = Vec::new();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let s1 = FakeServer::start(Behaviour::Pass).await;
        let s2 = FakeServer::start_at(&format!("127.0.0.2:{}", s1.port), Behaviour::Pass).await;
        let other = FakeServer::start_at("127.0.0.2:0", Behaviour::Pass).await;
        // {p2}: a port of its own for the second host (a third server, on 127.0.0.2).
        let e = entry
            .replace("{p1}", &s1.port.to_string())
            .replace("{p2}", &other.port.to_string());
        let Some(p) = pair_with(
            "auth_type = trust\nserver_login_retry = 1\nquery_wait_timeout = 3",
            &format!("app = {e}"),
            USERS,
            &[],
        ) else {
            return;
        };
        s1.set(first);
        pairs.push((p, s1, s2, other));
    }
    let (a, b) = (&pairs[0], &pairs[1]);
    let ((ra, _ha), (rb, _hb)) = tokio::join!(clients(a.0.pgb.port, 4), clients(b.0.sl.port, 4));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (r, (_, s1, s2, other)) in [(ra, a), (rb, b)] {
        seen.push(format!(
            "{r}; 127.0.0.1 {}, 127.0.0.2 {}, the other port {}",
            s1.accepted(),
            s2.accepted(),
            other.accepted()
        ));
    }
    results.push((label.to_string(), seen[0].clone(), seen[1].clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_lists_match_pgbouncer() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    let mut results = Vec::new();
    let r = &mut results;
    let rr = "host=127.0.0.1,127.0.0.2 port={p1} dbname=app";
    run(r, "two hosts, round-robin", rr, Behaviour::Pass).await;
    let off = "host=127.0.0.1,127.0.0.2 port={p1} dbname=app load_balance_hosts=disable";
    run(
        r,
        "two hosts, load_balance_hosts=disable",
        off,
        Behaviour::Pass,
    )
    .await;
    run(
        r,
        "round-robin, first host refuses logins",
        rr,
        Behaviour::Refuse,
    )
    .await;
    run(
        r,
        "disable, first host closes at once",
        off,
        Behaviour::Close,
    )
    .await;
    run(
        r,
        "disable, first host refuses logins",
        off,
        Behaviour::Refuse,
    )
    .await;
    let ports = "host=127.0.0.1,127.0.0.2 port={p1},{p2} dbname=app";
    run(r, "a port per host", ports, Behaviour::Pass).await;
    report(&results, 6);
}

/// Log in and query a database whose host name does not resolve: what a client sees.
async fn unresolvable(port: u16) -> String {
    let (r, _held) = clients(port, 1).await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_that_does_not_resolve_matches_pgbouncer() {
    let Some(p) = pair_with(
        "auth_type = trust\nserver_login_retry = 1\nquery_wait_timeout = 3",
        "app = host=nosuchhost.invalid port=5432 dbname=app",
        USERS,
        &[],
    ) else {
        return;
    };
    let mut results = Vec::new();
    for step in ["first client", "second client"] {
        let (a, b) = tokio::join!(unresolvable(p.pgb.port), unresolvable(p.sl.port));
        results.push((format!("host does not resolve: {step}"), a, b));
    }
    report(&results, 2);
}
