//! Console and lifecycle side by side: SHOW SOCKETS (its states are the lists' names, its ids
//! those of SHOW CLIENTS / SERVERS and unique among all connections), SHUTDOWN WAIT_FOR_SERVERS
//! and WAIT_FOR_CLIENTS (PgBouncer 1.24+: who may still log in and run queries, when the process
//! exits), a client queued for a server or held by PAUSE when the shutdown starts, and SIGUSR2
//! (RESUME) during a shutdown.

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sluice_e2e::{Anchor, Sluice};

use super::{console, report, side_by_side};

const DB: &str = "app = host={pg_host} port={pg_port} dbname=app";
const USERS: &str = "\"trust_user\" \"\"\n\"admin\" \"\"\n";
const BASE: &str = "auth_type = trust\nadmin_users = admin\npool_mode = transaction\n\
                    default_pool_size = 1\nquery_wait_timeout = 30";

/// One pooler process of a case: its port and pid.
struct Proc {
    port: u16,
    pid: i32,
}

/// Sluice, then PgBouncer on the same lines (None only where the reference binary is missing and
/// SLUICE_ALLOW_MISSING_TOOLS=1, said loudly: the Sluice-only checks still run).
fn start(extra: &str) -> (Sluice, Option<Anchor>) {
    let sl = Sluice::builder(&Sluice::basic_ini(
        extra,
        &DB.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(USERS)
    .start();
    (sl, Anchor::start(extra, DB, USERS))
}

fn anchor_proc(a: &Anchor) -> Proc {
    let pid = std::fs::read_to_string(a.dir.path().join("pgbouncer.pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("PgBouncer's pidfile");
    Proc { port: a.port, pid }
}

fn alive(pid: i32) -> bool {
    // A zombie (exited, not reaped by its parent yet) counts as gone.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    kill(Pid::from_raw(pid), None).is_ok() && !stat.contains(") Z ")
}

/// Whether the process is gone within `secs` seconds.
async fn exits_within(pid: i32, secs: u64) -> String {
    for _ in 0..secs * 10 {
        if !alive(pid) {
            return "exited".into();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    "still running".into()
}

/// A client of `app`; what a statement answered: rows' first value, an error, or closed.
async fn client(port: u16) -> Result<tokio_postgres::Client, String> {
    let cs = format!("host=127.0.0.1 port={port} user=trust_user dbname=app connect_timeout=5");
    match tokio_postgres::connect(&cs, tokio_postgres::NoTls).await {
        Ok((c, conn)) => {
            tokio::spawn(conn);
            Ok(c)
        }
        Err(e) => Err(describe(&e)),
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} {}", d.code().code(), d.message()),
        None if e.is_closed() => "connection closed".into(),
        None => format!("error: {e}"),
    }
}

async fn run(c: &tokio_postgres::Client, sql: &str) -> String {
    let q = c.simple_query(sql);
    match tokio::time::timeout(Duration::from_secs(8), q).await {
        Err(_) => "no answer".into(),
        Ok(Ok(msgs)) => msgs
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(format!("ok {n}")),
                _ => None,
            })
            .unwrap_or_else(|| "ok".into()),
        Ok(Err(e)) => describe(&e),
    }
}

async fn login(port: u16) -> String {
    match client(port).await {
        Ok(c) => run(&c, "SELECT 1").await,
        Err(e) => e,
    }
}

/// SHOW SOCKETS with a console, an idle client and its server.
async fn sockets(p: &Proc) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let c = client(p.port).await.unwrap();
    let _ = run(&c, "SELECT 1").await;
    let mut con = console(p.port).await;
    let s = con.query("SHOW SOCKETS").await.unwrap();
    let (ty, st, id) = (s.col("type"), s.col("state"), s.col("id"));
    out.push(("SHOW SOCKETS columns".into(), s.names().join(",")));
    let mut states: Vec<String> = s
        .rows
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r[ty].clone().unwrap_or_default(),
                r[st].clone().unwrap_or_default()
            )
        })
        .collect();
    states.sort();
    out.push(("SHOW SOCKETS states".into(), states.join(", ")));
    let ids: Vec<String> = s
        .rows
        .iter()
        .map(|r| r[id].clone().unwrap_or_default())
        .collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    out.push((
        "SHOW SOCKETS ids are unique".into(),
        (unique.len() == ids.len()).to_string(),
    ));
    let of = |rs: &sluice_e2e::ConsoleResult| -> BTreeSet<String> {
        let i = rs.col("id");
        rs.rows
            .iter()
            .map(|r| r[i].clone().unwrap_or_default())
            .collect()
    };
    let clients = con.query("SHOW CLIENTS").await.unwrap();
    let servers = con.query("SHOW SERVERS").await.unwrap();
    let both: BTreeSet<String> = of(&clients).union(&of(&servers)).cloned().collect();
    out.push((
        "SHOW SOCKETS ids are those of SHOW CLIENTS and SHOW SERVERS".into(),
        (both == unique.into_iter().cloned().collect()).to_string(),
    ));
    out
}

/// SHUTDOWN WAIT_FOR_SERVERS with an idle client, one in a transaction and one queued behind it.
async fn wait_for_servers(p: &Proc) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let idle = client(p.port).await.unwrap();
    let _ = run(&idle, "SELECT 1").await;
    let busy = client(p.port).await.unwrap();
    let _ = run(&busy, "BEGIN").await;
    let queued = client(p.port).await.unwrap();
    let waiting = tokio::spawn(async move { run(&queued, "SELECT 2").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut con = console(p.port).await;
    let tag = match con.query("SHUTDOWN WAIT_FOR_SERVERS").await {
        Ok(r) => r.tag,
        Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
    };
    out.push(("SHUTDOWN WAIT_FOR_SERVERS answer".into(), tag));
    tokio::time::sleep(Duration::from_millis(500)).await;
    out.push((
        "WAIT_FOR_SERVERS: the queued client".into(),
        tokio::time::timeout(Duration::from_secs(3), waiting)
            .await
            .map(|r| r.unwrap())
            .unwrap_or_else(|_| "still waiting".into()),
    ));
    out.push(("WAIT_FOR_SERVERS: a new login".into(), login(p.port).await));
    out.push((
        "WAIT_FOR_SERVERS: the idle client's query".into(),
        run(&idle, "SELECT 1").await,
    ));
    out.push((
        "WAIT_FOR_SERVERS: the transaction goes on".into(),
        run(&busy, "SELECT 3").await,
    ));
    out.push((
        "WAIT_FOR_SERVERS: its COMMIT".into(),
        run(&busy, "COMMIT").await,
    ));
    out.push((
        "WAIT_FOR_SERVERS: the process once no server is in use".into(),
        exits_within(p.pid, 5).await,
    ));
    out
}

/// SHUTDOWN WAIT_FOR_CLIENTS with an idle client.
async fn wait_for_clients(p: &Proc) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let idle = client(p.port).await.unwrap();
    let _ = run(&idle, "SELECT 1").await;
    let mut con = console(p.port).await;
    let tag = match con.query("SHUTDOWN WAIT_FOR_CLIENTS").await {
        Ok(r) => r.tag,
        Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
    };
    out.push(("SHUTDOWN WAIT_FOR_CLIENTS answer".into(), tag));
    drop(con);
    tokio::time::sleep(Duration::from_millis(300)).await;
    out.push(("WAIT_FOR_CLIENTS: a new login".into(), login(p.port).await));
    out.push((
        "WAIT_FOR_CLIENTS: the connected client's queries".into(),
        run(&idle, "SELECT 4").await,
    ));
    out.push((
        "WAIT_FOR_CLIENTS: the process while a client is connected".into(),
        exits_within(p.pid, 1).await,
    ));
    drop(idle);
    out.push((
        "WAIT_FOR_CLIENTS: the process once the last client left".into(),
        exits_within(p.pid, 5).await,
    ));
    out
}

/// SIGUSR2 (RESUME) while SHUTDOWN WAIT_FOR_SERVERS waits for a transaction.
async fn resume_during_shutdown(p: &Proc) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let busy = client(p.port).await.unwrap();
    let _ = run(&busy, "BEGIN").await;
    let mut con = console(p.port).await;
    let _ = con.query("SHUTDOWN WAIT_FOR_SERVERS").await;
    drop(con);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = kill(Pid::from_raw(p.pid), Signal::SIGUSR2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    out.push((
        "SIGUSR2 during WAIT_FOR_SERVERS: a new login".into(),
        login(p.port).await,
    ));
    out.push((
        "SIGUSR2 during WAIT_FOR_SERVERS: the transaction's COMMIT".into(),
        run(&busy, "COMMIT").await,
    ));
    out.push((
        "SIGUSR2 during WAIT_FOR_SERVERS: the process after it".into(),
        exits_within(p.pid, 5).await,
    ));
    out
}

/// PAUSE, a client's query held by it, then SHUTDOWN WAIT_FOR_SERVERS.
async fn paused_then_shutdown(p: &Proc) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let c = client(p.port).await.unwrap();
    let _ = run(&c, "SELECT 1").await;
    let mut con = console(p.port).await;
    let tag = match con.query("PAUSE").await {
        Ok(r) => r.tag,
        Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
    };
    out.push(("PAUSE answer".into(), tag));
    let held = tokio::spawn(async move { run(&c, "SELECT 5").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tag = match con.query("SHUTDOWN WAIT_FOR_SERVERS").await {
        Ok(r) => r.tag,
        Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
    };
    out.push(("PAUSE, then SHUTDOWN WAIT_FOR_SERVERS answer".into(), tag));
    out.push((
        "PAUSE, then SHUTDOWN WAIT_FOR_SERVERS: the paused client".into(),
        tokio::time::timeout(Duration::from_secs(3), held)
            .await
            .map(|r| r.unwrap())
            .unwrap_or_else(|_| "still waiting".into()),
    ));
    out.push((
        "PAUSE, then SHUTDOWN WAIT_FOR_SERVERS: the process".into(),
        exits_within(p.pid, 5).await,
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_sockets_matches_pgbouncer() {
    let (sl, a) = start(BASE);
    let b = sockets(&Proc {
        port: sl.port,
        pid: sl.pid() as i32,
    })
    .await;
    eprintln!("Sluice: {b:#?}");
    assert_eq!(b[1].1, "C cl_active, C cl_active, S sv_idle");
    assert_eq!(b[2].1, "true", "ids unique");
    assert_eq!(b[3].1, "true", "ids of SHOW CLIENTS / SERVERS");
    let Some(a) = a else { return };
    let a = sockets(&anchor_proc(&a)).await;
    report(&side_by_side(a, b), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_modes_match_pgbouncer() {
    let mut results = Vec::new();
    let mut compared = true;
    type Scenario = for<'a> fn(
        &'a Proc,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Vec<(String, String)>> + Send + 'a>,
    >;
    let scenarios: [Scenario; 4] = [
        |p| Box::pin(wait_for_servers(p)),
        |p| Box::pin(paused_then_shutdown(p)),
        |p| Box::pin(wait_for_clients(p)),
        |p| Box::pin(resume_during_shutdown(p)),
    ];
    for scenario in scenarios {
        let (sl, a) = start(BASE);
        let b = scenario(&Proc {
            port: sl.port,
            pid: sl.pid() as i32,
        })
        .await;
        eprintln!("Sluice: {b:#?}");
        for (case, got) in &b {
            // Sluice alone: every client with a request open is told, and the process exits
            // when its condition is met.
            if case.ends_with("queued client") || case.ends_with("paused client") {
                assert_eq!(got, "57P01 server shutting down", "{case}");
            }
            if case.ends_with("the process once no server is in use")
                || case.ends_with("once the last client left")
            {
                assert_eq!(got, "exited", "{case}");
            }
            if case.ends_with("while a client is connected") {
                assert_eq!(got, "still running", "{case}");
            }
        }
        let Some(a) = a else {
            compared = false;
            continue;
        };
        let a = scenario(&anchor_proc(&a)).await;
        results.extend(side_by_side(a, b));
    }
    if compared {
        // What the four scenarios observe.
        report(&results, 19);
    }
}
