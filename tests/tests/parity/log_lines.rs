//! The log lines operators and audit scripts grep for, side by side: the console's `<COMMAND>
//! ['<database>'] command issued` line for each control command (refused ones too, their error
//! then logged as `ERROR <message>` and the console's `pooler error`); a server's closing reason
//! when PAUSE, KILL, RECONNECT, a timeout or a client that leaves mid-transaction closes it; a
//! client that leaves without a Terminate (`client unexpected eof`) against one that sends it
//! (`client close request`); and nothing for a client that closes at a password request (psql's
//! first connection when it must ask for one); `(nodb)` for a client of a database that does
//! not exist, and its `login failed` line, or of a user nothing knows (`no such user`); a server
//! login PostgreSQL refuses has its `new connection to server` line too. Counted per pattern, not in order: the two
//! poolers write a client's line and its server's in either order.

use std::time::Duration;

use sluice_e2e::RawConn;

use super::{console, pair_with, report, side_by_side};

const USERS: &str =
    "\"trust_user\" \"\"\n\"md5_user\" \"md5_pass\"\n\"admin\" \"\"\n\"nosuchrole\" \"\"\n";
/// `app`, and a database whose forced user PostgreSQL does not have (its server logins fail).
const DBS: &str = "app = host={pg_host} port={pg_port} dbname=app\n\
                   norole = host={pg_host} port={pg_port} dbname=app user=nosuchrole";
const HBA: &str = "host all trust_user 127.0.0.1/32 trust\n\
                   host all admin 127.0.0.1/32 trust\n\
                   host all all 127.0.0.1/32 md5\n";
const BASE: &str = "auth_type = hba\nauth_hba_file = {hba}\nadmin_users = admin\n\
                    pool_mode = transaction\nquery_timeout = 1\nidle_transaction_timeout = 1";

/// A logged-in trust client of `app`.
async fn client(port: u16) -> RawConn {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    ready(&mut c).await;
    c
}

/// Read through the next ReadyForQuery (or to the close).
async fn ready(c: &mut RawConn) {
    while let Some((tag, _)) = c.read_message(Duration::from_secs(10)).await {
        if tag == b'Z' {
            return;
        }
    }
}

async fn run(c: &mut RawConn, sql: &str) {
    c.send(&RawConn::message(b'Q', format!("{sql}\0").as_bytes()))
        .await;
    ready(c).await;
}

/// The same steps against one process; its log is read afterwards.
async fn steps(port: u16) {
    // Gone without a Terminate, idle and then in a transaction; then with one.
    let mut c = client(port).await;
    run(&mut c, "SELECT 1").await;
    drop(c);
    let mut c = client(port).await;
    run(&mut c, "BEGIN").await;
    drop(c);
    let mut c = client(port).await;
    run(&mut c, "SELECT 1").await;
    c.send(&RawConn::message(b'X', b"")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut con = console(port).await;
    // PAUSE closes the idle server; RECONNECT and KILL close the next one each.
    for cmd in ["PAUSE app", "RESUME app"] {
        con.query(cmd).await.unwrap();
    }
    run(&mut client(port).await, "SELECT 1").await;
    con.query("RECONNECT app").await.unwrap();
    // (PgBouncer closes the idle server at its janitor's next pass, Sluice at once.)
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut killed = client(port).await;
    run(&mut killed, "SELECT 1").await;
    for cmd in ["KILL app", "RESUME app"] {
        con.query(cmd).await.unwrap();
    }
    // The timeouts close their servers.
    let mut c = client(port).await;
    run(&mut c, "SELECT pg_sleep(3)").await;
    let mut c = client(port).await;
    run(&mut c, "BEGIN").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;

    // The other commands, and refused ones.
    for cmd in [
        "SUSPEND",
        "RESUME",
        "RELOAD",
        "WAIT_CLOSE app",
        "DISABLE app",
        "ENABLE app",
        "PAUSE",
        "RESUME",
        "RECONNECT",
        "PAUSE nosuch",
        "DISABLE",
        "RESUME",
    ] {
        let _ = con.query(cmd).await;
    }

    // A database that does not exist: `(nodb)` in its lines.
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "nosuchdb"),
    ]))
    .await;
    ready(&mut c).await;

    // A server login PostgreSQL refuses: the server's `new connection` line comes first.
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "norole"),
    ]))
    .await;
    ready(&mut c).await;

    // A user that does not exist: `(nodb)` too, and PgBouncer's `no such user` line.
    let _ = super::login(port, "ghost", "wrong", "app").await;

    // A client that closes at its password request.
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "md5_user"),
        ("database", "app"),
    ]))
    .await;
    let asked = c.read_message(Duration::from_secs(5)).await;
    assert_eq!(asked.map(|m| m.0), Some(b'R'));
    drop(c);
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// What the log says, counted per pattern (every part of a pattern in one line).
fn counts(log: &str) -> Vec<(String, String)> {
    let patterns: &[(&str, &[&str])] = &[
        ("PAUSE 'app' issued", &["LOG PAUSE 'app' command issued"]),
        ("RESUME 'app' issued", &["LOG RESUME 'app' command issued"]),
        (
            "RECONNECT 'app' issued",
            &["LOG RECONNECT 'app' command issued"],
        ),
        ("KILL 'app' issued", &["LOG KILL 'app' command issued"]),
        ("SUSPEND issued", &["LOG SUSPEND command issued"]),
        ("RESUME issued", &["LOG RESUME command issued"]),
        ("RELOAD issued", &["LOG RELOAD command issued"]),
        (
            "WAIT_CLOSE 'app' issued",
            &["LOG WAIT_CLOSE 'app' command issued"],
        ),
        (
            "DISABLE 'app' issued",
            &["LOG DISABLE 'app' command issued"],
        ),
        ("ENABLE 'app' issued", &["LOG ENABLE 'app' command issued"]),
        ("PAUSE issued", &["LOG PAUSE command issued"]),
        ("RECONNECT issued", &["LOG RECONNECT command issued"]),
        (
            "PAUSE 'nosuch' issued",
            &["LOG PAUSE 'nosuch' command issued"],
        ),
        ("refused: the error", &["ERROR no such database: nosuch"]),
        (
            "refused: pooler error",
            &["pgbouncer/admin@", "pooler error: no such database: nosuch"],
        ),
        (
            "refused without a database: the error",
            &["ERROR a database is required"],
        ),
        (
            "RESUME when running: pooler error",
            &[
                "pgbouncer/admin@",
                "pooler error: pooler is not paused/suspended",
            ],
        ),
        (
            "server closed by PAUSE",
            &["app/trust_user@", "closing because: pause mode"],
        ),
        (
            "server closed by KILL",
            &["app/trust_user@", "closing because: database removed"],
        ),
        (
            "server closed by RECONNECT",
            &[
                "app/trust_user@",
                "closing because: database configuration changed",
            ],
        ),
        (
            "server of a client gone mid-transaction",
            &[
                "app/trust_user@",
                "closing because: client disconnect while server was not ready",
            ],
        ),
        (
            "server and client closed by query_timeout",
            &["app/trust_user@", "closing because: query timeout"],
        ),
        (
            "server and client closed by idle_transaction_timeout",
            &[
                "app/trust_user@",
                "closing because: idle transaction timeout",
            ],
        ),
        (
            "client gone without a Terminate",
            &["app/trust_user@", "closing because: client unexpected eof"],
        ),
        (
            "client that sent Terminate",
            &["app/trust_user@", "closing because: client close request"],
        ),
        (
            "unknown database: login attempt",
            &[
                "(nodb)/trust_user@",
                "login attempt: db=nosuchdb user=trust_user",
            ],
        ),
        (
            "unknown database: login failed",
            &[
                "(nodb)/trust_user@",
                "login failed: db=nosuchdb user=trust_user",
            ],
        ),
        (
            "unknown database: closing",
            &[
                "(nodb)/trust_user@",
                "closing because: no such database: nosuchdb",
            ],
        ),
        (
            "refused server login: new connection",
            &["norole/nosuchrole@", "new connection to server"],
        ),
        (
            "refused server login: closing",
            &[
                "norole/nosuchrole@",
                "closing because: role \"nosuchrole\" does not exist",
            ],
        ),
        (
            "unknown user: no such user",
            &["(nodb)/(nouser)@", "no such user: ghost"],
        ),
        (
            "unknown user: login attempt",
            &["(nodb)/ghost@", "login attempt: db=app user=ghost"],
        ),
        (
            "unknown user: closing",
            &[
                "(nodb)/ghost@",
                "closing because: password authentication failed",
            ],
        ),
        (
            "client that closed at its password request",
            &["app/md5_user@", "closing because:"],
        ),
    ];
    count_lines(log, patterns)
}

/// Per case, how many lines of `log` hold every part of its pattern.
fn count_lines(log: &str, patterns: &[(&str, &[&str])]) -> Vec<(String, String)> {
    patterns
        .iter()
        .map(|(case, parts)| {
            let n = log
                .lines()
                .filter(|l| parts.iter().all(|p| l.contains(p)))
                .count();
            (case.to_string(), n.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_match_pgbouncer() {
    let Some(p) = pair_with(BASE, DBS, USERS, &[("hba.conf", HBA)]) else {
        return;
    };
    steps(p.sl.port).await;
    let b = counts(&p.sl.log());
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(got("PAUSE 'app' issued"), "1", "{}", p.sl.log());
    assert_eq!(got("server closed by PAUSE"), "1", "{}", p.sl.log());
    assert_eq!(
        got("client gone without a Terminate"),
        "3",
        "{}",
        p.sl.log()
    );
    assert_eq!(
        got("client that closed at its password request"),
        "0",
        "{}",
        p.sl.log()
    );
    steps(p.pgb.port).await;
    let a = counts(&p.pgb.log());
    report(&side_by_side(a, b), 34);
}

/// Each signal's line in PgBouncer's words, in each state it can find: SIGHUP; SIGUSR1 (pausing
/// all activity, then already paused); SIGUSR2 (continuing from PAUSE, then not paused); SIGINT
/// (waiting for the servers, and the exit line once they are released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_are_logged_as_pgbouncer_logs_them() {
    use nix::sys::signal::Signal::{self, *};
    let Some(p) = pair_with(BASE, DBS, USERS, &[("hba.conf", HBA)]) else {
        return;
    };
    let lines: &[(&str, &[&str])] = &[
        ("SIGHUP", &["LOG got SIGHUP, re-reading config"]),
        ("SIGUSR1", &["LOG got SIGUSR1, pausing all activity"]),
        (
            "SIGUSR1 paused",
            &["LOG got SIGUSR1, but already paused/suspended"],
        ),
        ("SIGUSR2", &["LOG got SIGUSR2, continuing from PAUSE"]),
        (
            "SIGUSR2 running",
            &["LOG got SIGUSR2, but not paused/suspended"],
        ),
        (
            "SIGINT",
            &["LOG got SIGINT, shutting down, waiting for all servers connections to be released"],
        ),
        ("exit", &["LOG server connections dropped, exiting"]),
    ];
    async fn signals(send: impl Fn(Signal)) {
        for sig in [SIGHUP, SIGUSR1, SIGUSR1, SIGUSR2, SIGUSR2, SIGINT] {
            send(sig);
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let count = |log: &str| count_lines(log, lines);
    signals(|sig| p.sl.signal(sig)).await;
    let b = count(&p.sl.log());
    assert!(b.iter().all(|(_, n)| n == "1"), "{b:?}\n{}", p.sl.log());
    let pid = nix::unistd::Pid::from_raw(p.pgb.pid().expect("PgBouncer's pid") as i32);
    signals(|sig| nix::sys::signal::kill(pid, sig).unwrap()).await;
    let a = count(&p.pgb.log());
    report(&side_by_side(a, b), lines.len());
}
