//! Protocol-level prepared statements in transaction mode side by side: a statement executed after
//! the client's DEALLOCATE ALL or DISCARD ALL, a name prepared twice, a name never prepared (also
//! inside a transaction block), Close and re-Parse, the per-server cache at
//! max_prepared_statements (eviction and re-prepare), and the prepared-statement counters of SHOW
//! STATS. Sluice answers as PostgreSQL does (an ERROR, the rest of the batch skipped until Sync,
//! the connection kept); PgBouncer 1.25.2 closes the connection (deliberate, see `DELIBERATE`).

use std::time::Duration;

use sluice_e2e::{error_fields, Anchor, RawConn, Sluice};

use super::{console, report, side_by_side};

const DB: &str = "app = host={pg_host} port={pg_port} dbname=app";
const USERS: &str = "\"trust_user\" \"\"\n\"admin\" \"\"\n";
const BASE: &str = "auth_type = trust\nadmin_users = admin\npool_mode = transaction\n\
                    default_pool_size = 1\nmax_prepared_statements = 2";

fn msg(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    RawConn::message(tag, &parts.concat())
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    msg(
        b'P',
        &[name.as_bytes(), b"\0", sql.as_bytes(), b"\0", &[0, 0]],
    )
}

fn bind(stmt: &str) -> Vec<u8> {
    msg(b'B', &[b"\0", stmt.as_bytes(), b"\0", &[0, 0, 0, 0, 0, 0]])
}

fn describe(stmt: &str) -> Vec<u8> {
    msg(b'D', &[b"S", stmt.as_bytes(), b"\0"])
}

fn close(stmt: &str) -> Vec<u8> {
    msg(b'C', &[b"S", stmt.as_bytes(), b"\0"])
}

fn execute() -> Vec<u8> {
    msg(b'E', &[b"\0", &[0, 0, 0, 0]])
}

fn sync() -> Vec<u8> {
    msg(b'S', &[])
}

fn query(sql: &str) -> Vec<u8> {
    msg(b'Q', &[sql.as_bytes(), b"\0"])
}

/// One client on raw protocol; `closed` once the connection ended.
struct Client {
    c: RawConn,
    closed: bool,
}

impl Client {
    async fn login(port: u16) -> Client {
        let mut c = RawConn::connect(port).await;
        c.send(&RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
        ]))
        .await;
        loop {
            match c.read_message(Duration::from_secs(5)).await {
                Some((b'Z', _)) | None => break,
                _ => {}
            }
        }
        Client { c, closed: false }
    }

    /// Send `msgs` and read to ReadyForQuery: the reply tags, the first DataRow's value, the
    /// errors (severity, SQLSTATE, message), the transaction status; or how the connection ended.
    async fn run(&mut self, msgs: &[Vec<u8>]) -> String {
        if self.closed {
            return "(closed before)".into();
        }
        self.c.send(&msgs.concat()).await;
        let (mut tags, mut value, mut errors) = (String::new(), None, Vec::new());
        loop {
            match self.c.read_message(Duration::from_secs(5)).await {
                Some((b'Z', body)) => {
                    tags.push('Z');
                    let mut out = format!("{tags} status {}", body[0] as char);
                    if let Some(v) = value {
                        out.push_str(&format!(" value {v}"));
                    }
                    for e in errors {
                        out.push_str(&format!("; {e}"));
                    }
                    return out;
                }
                Some((t, body)) => {
                    tags.push(t as char);
                    if t == b'E' {
                        let f = error_fields(&body);
                        errors.push(format!("{} {} {}", f[&b'S'], f[&b'C'], f[&b'M']));
                    }
                    if t == b'D' && value.is_none() && body.len() > 6 {
                        value = Some(String::from_utf8_lossy(&body[6..]).into_owned());
                    }
                }
                None => {
                    self.closed = true;
                    return format!("closed after {tags}; {}", errors.join("; "));
                }
            }
        }
    }
}

/// The common start of the error cases' names (listed as one deliberate difference).
pub const ERROR_CASE: &str = "prepared statement error: ";

/// Requests PostgreSQL answers with an ERROR: each on a client of its own (PgBouncer closes the
/// connection), then whether that client still works. As (case, observation).
async fn errors(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let cases: [(&str, Vec<Vec<Vec<u8>>>); 6] = [
        (
            "a name never prepared: Bind",
            vec![vec![bind("nope"), execute(), sync()]],
        ),
        (
            "a name never prepared: Describe",
            vec![vec![describe("nope"), sync()]],
        ),
        (
            "Parse of a name in use",
            vec![
                vec![parse("s1", "SELECT 1"), sync()],
                vec![parse("s1", "SELECT 2"), sync()],
            ],
        ),
        (
            "a name never prepared inside BEGIN",
            vec![vec![query("BEGIN")], vec![bind("nope"), execute(), sync()]],
        ),
        (
            "s1 after DEALLOCATE ALL",
            vec![
                vec![parse("s1", "SELECT 1"), bind("s1"), execute(), sync()],
                vec![query("DEALLOCATE ALL")],
                vec![bind("s1"), execute(), sync()],
            ],
        ),
        (
            "s1 after DISCARD ALL",
            vec![
                vec![parse("s1", "SELECT 1"), bind("s1"), execute(), sync()],
                vec![query("DISCARD ALL")],
                vec![bind("s1"), execute(), sync()],
            ],
        ),
    ];
    for (name, steps) in cases {
        let mut c = Client::login(port).await;
        let mut last = String::new();
        for s in &steps {
            last = c.run(s).await;
        }
        out.push((format!("{ERROR_CASE}{name}"), last));
        out.push((
            format!("{ERROR_CASE}{name}, then"),
            c.run(&[parse("s1", "SELECT 9"), bind("s1"), execute(), sync()])
                .await,
        ));
    }
    out
}

/// Statements that succeed: Close and re-Parse of a name, and max_prepared_statements = 2 on
/// the one server (four statements, each used twice: evicted and prepared again), then the
/// counters of SHOW STATS.
async fn cache(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut c = Client::login(port).await;
    let mut step = |name: &str, v: String| out.push((name.to_string(), v));
    step(
        "Parse s1, Bind, Execute",
        c.run(&[parse("s1", "SELECT 1"), bind("s1"), execute(), sync()])
            .await,
    );
    step(
        "Close s1, then Parse s1 again",
        c.run(&[
            close("s1"),
            parse("s1", "SELECT 3"),
            bind("s1"),
            execute(),
            sync(),
        ])
        .await,
    );
    for i in 0..4 {
        let name = format!("e{i}");
        let sql = format!("SELECT {}", 10 + i);
        step(
            &format!("cache of 2: Parse and run e{i}"),
            c.run(&[parse(&name, &sql), bind(&name), execute(), sync()])
                .await,
        );
    }
    for i in 0..4 {
        let name = format!("e{i}");
        step(
            &format!("cache of 2: run e{i} again"),
            c.run(&[bind(&name), execute(), sync()]).await,
        );
    }
    drop(c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut con = console(port).await;
    let stats = con.query("SHOW STATS").await.unwrap();
    for col in [
        "total_client_parse_count",
        "total_server_parse_count",
        "total_bind_count",
    ] {
        step(
            &format!("SHOW STATS {col}"),
            stats.get("app", col).unwrap_or_default(),
        );
    }
    out
}

fn sluice() -> Sluice {
    Sluice::builder(&Sluice::basic_ini(
        BASE,
        &DB.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(USERS)
    .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statement_errors_are_postgresqls() {
    let sl = sluice();
    let b = errors(sl.port).await;
    eprintln!("Sluice: {b:#?}");
    let got = |name: &str| {
        let case = format!("{ERROR_CASE}{name}");
        b.iter().find(|r| r.0 == case).unwrap().1.clone()
    };
    // PostgreSQL's answers; the connection stays and works.
    let missing =
        |n: &str| format!("EZ status I; ERROR 26000 prepared statement \"{n}\" does not exist");
    assert_eq!(got("a name never prepared: Bind"), missing("nope"));
    assert_eq!(got("a name never prepared: Describe"), missing("nope"));
    assert_eq!(got("s1 after DEALLOCATE ALL"), missing("s1"));
    assert_eq!(got("s1 after DISCARD ALL"), missing("s1"));
    assert_eq!(
        got("Parse of a name in use"),
        "EZ status I; ERROR 42P05 prepared statement \"s1\" already exists"
    );
    // The client still works: its next Parse of s1 (in use) is refused the same way.
    assert_eq!(
        got("Parse of a name in use, then"),
        "EZ status I; ERROR 42P05 prepared statement \"s1\" already exists"
    );
    assert_eq!(
        got("a name never prepared inside BEGIN"),
        "EZ status E; ERROR 26000 prepared statement \"nope\" does not exist"
    );
    for name in [
        "a name never prepared: Bind",
        "a name never prepared: Describe",
        "s1 after DEALLOCATE ALL",
        "s1 after DISCARD ALL",
    ] {
        assert_eq!(
            got(&format!("{name}, then")),
            "12DCZ status I value 9",
            "{name}"
        );
    }
    // A transaction the error failed: its statements are refused until ROLLBACK, as on PostgreSQL.
    assert!(got("a name never prepared inside BEGIN, then").contains("25P02"));
    let Some(pgb) = Anchor::start(BASE, DB, USERS) else {
        return;
    };
    let a = errors(pgb.port).await;
    // Six requests, each with what its client does next.
    report(&side_by_side(a, b), 6 * 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statement_cache_and_its_counters_match_pgbouncer() {
    let sl = sluice();
    let b = cache(sl.port).await;
    eprintln!("Sluice: {b:#?}");
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(
        got("Close s1, then Parse s1 again"),
        "312DCZ status I value 3"
    );
    assert_eq!(got("cache of 2: run e0 again"), "2DCZ status I value 10");
    let Some(pgb) = Anchor::start(BASE, DB, USERS) else {
        return;
    };
    let a = cache(pgb.port).await;
    // Two steps, 4 + 4 of the cache of 2, three counters.
    report(&side_by_side(a, b), 2 + 8 + 3);
}
