//! Side by side with PgBouncer 1.25.2 (`sluice_e2e::Anchor`): the same pgbouncer.ini lines, the
//! same userlist and the same client steps against both, and the same observable result (SQLSTATE,
//! message, columns, figures). Each case names the PgBouncer behaviour it pins. Differences kept on
//! purpose are listed in `DELIBERATE` with their reason (also in docs/compat.md); any other
//! difference fails, and so does a listed case where Sluice does not give the listed answer. Each
//! group checks that it ran every case it defines. A missing reference binary fails the tests
//! (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line and the PgBouncer side is not run); a reference
//! PgBouncer that does not start fails them with its log.

mod bad_input_common;
// More cases, one file per group: tests/tests/parity/*.rs.
#[path = "parity/auth_query.rs"]
mod auth_query;
#[path = "parity/autodb.rs"]
mod autodb;
#[path = "parity/client_limits.rs"]
mod client_limits;
#[path = "parity/config_refusals.rs"]
mod config_refusals;
#[path = "parity/console_commands.rs"]
mod console_commands;
#[path = "parity/error_texts.rs"]
mod error_texts;
#[path = "parity/fast_close.rs"]
mod fast_close;
#[path = "parity/hosts.rs"]
mod hosts;
#[path = "parity/lifecycle.rs"]
mod lifecycle;
#[path = "parity/log_lines.rs"]
mod log_lines;
#[path = "parity/login_and_pqexec.rs"]
mod login_and_pqexec;
#[path = "parity/pool_sizes.rs"]
mod pool_sizes;
#[path = "parity/prepared.rs"]
mod prepared;
#[path = "parity/replication.rs"]
mod replication;
#[path = "parity/show_columns.rs"]
mod show_columns;
#[path = "parity/startup_options.rs"]
mod startup_options;
#[path = "parity/timeouts.rs"]
mod timeouts;

use std::time::Duration;

use sluice_e2e::{error_fields, Anchor, Console, RawConn, Sluice};

const DB: &str = "app = host={pg_host} port={pg_port} dbname=app";
const USERS: &str = "\"trust_user\" \"\"\n\"md5_user\" \"md5_pass\"\n\"admin\" \"\"\n";

/// A difference kept on purpose (also in docs/compat.md): the cases it covers (`case`, where one
/// `*` stands for any text; the first entry that matches a case is the one used), the answer
/// Sluice gives there instead of PgBouncer's (one of `sluice`, exactly: a deliberate case is
/// still asserted, so a login that succeeds where Sluice means to refuse it fails), and why.
struct Deliberate {
    case: &'static str,
    sluice: &'static [&'static str],
    why: &'static str,
}

const fn deliberate(
    case: &'static str,
    sluice: &'static [&'static str],
    why: &'static str,
) -> Deliberate {
    Deliberate { case, sluice, why }
}

const PREPARED_WHY: &str = "a Bind/Describe of a statement name the client has not prepared (never, or forgotten by its DEALLOCATE ALL / DISCARD ALL) or a Parse of a name in use: PostgreSQL's ERROR (26000 / 42P05, the client's name), the rest of the batch skipped to Sync, an open transaction failed, the connection kept, as on PostgreSQL (PgBouncer: FATAL 08P01 'prepared statement did not exist', connection closed)";

/// An unknown user under auth_query with a password method (every auth_query configuration of
/// `parity/auth_query.rs` but trust, where both say 'no such user').
const GHOST_ANSWERS: &[&str] = &[
    "08P01 password authentication failed",
    "08P01 SASL authentication failed",
];
const GHOST_WHY: &str = "a user neither the auth file nor auth_query knows under a password method: Sluice answers as for a wrong password (md5/plain 'password authentication failed', SCRAM 'SASL authentication failed'); PgBouncer answers '08P01 no such user', telling an unauthenticated client which user names exist (under trust both say 'no such user': a known user logs in with no secret, so the text tells nothing more)";

/// Cases where Sluice answers differently on purpose.
const DELIBERATE: &[Deliberate] = &[
    deliberate(
        "SHOW CONFIG row 93: track_extra_parameters",
        &["IntervalStyle,search_path,default_transaction_read_only default=IntervalStyle,search_path,default_transaction_read_only changeable=no"],
        "PgBouncer 1.26's default (docs/compat.md, 'Which PgBouncer version each behaviour follows'): search_path and default_transaction_read_only sent at startup are kept per client",
    ),
    deliberate(
        "application_name of 200 bytes in options",
        &["application_name=<63 bytes>"],
        "PostgreSQL truncates it to 63 bytes, as on a direct connection (PgBouncer drops a tracked value longer than its cache keeps and the server shows it empty)",
    ),
    deliberate(
        "application_name of 200 bytes",
        &["application_name=<63 bytes>"],
        "the same, as a startup parameter",
    ),
    deliberate(
        "global max_db_client_connections=2: step 4 md5_user!@app",
        &["08P01 password authentication failed"],
        "a wrong password over a client limit: Sluice authenticates before telling a client anything of the database or user (PgBouncer answers 'client connections exceeded' first)",
    ),
    deliberate(
        "global max_user_client_connections=1: step 1 md5_user!@other",
        &["08P01 password authentication failed"],
        "the same for max_user_client_connections (PgBouncer's answer would tell an unauthenticated client that the user exists and is connected)",
    ),
    deliberate("global auth_user: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate("auth_user in [databases]: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate("forced user: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate("forced user, auth_user in [databases]: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate("global auth_dbname: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate("auth_dbname in [databases]: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate("statement pooling: ghost@app", GHOST_ANSWERS, GHOST_WHY),
    deliberate(
        "hba: no line for the user",
        &["28000 no hba entry for host \"127.0.0.1\", user \"trust_user\", database \"app\""],
        "Sluice names host, user and database (28000 'no hba entry for host ...', as PostgreSQL), so the operator sees which line is missing; PgBouncer: 08P01 'no authentication method is found'",
    ),
    deliberate(
        "hba: a reject line",
        &["28000 hba rejects connection for host \"127.0.0.1\", user \"plain_user\", database \"app\""],
        "the same for a reject line (28000 'hba rejects connection for host ...'; PgBouncer: 08P01 'login rejected')",
    ),
    deliberate(
        "a pam line in the HBA file at startup",
        &["refused; the log names the file, line and pam: true"],
        "Sluice refuses the HBA file (file, line, method named; a RELOAD keeps the rules in force); PgBouncer built without PAM warns, skips the line and starts",
    ),
    deliberate(
        "a pam line in the HBA file: PgBouncer's login under it",
        &["refused at startup"],
        "the skipped line lets the client fall through to the next line (here md5): a login the operator meant for PAM is decided by another method",
    ),
    deliberate(
        "prepared_statement_cache_size at startup",
        &["started"],
        "Sluice reads the seed-style key as max_prepared_statements (the log says so); PgBouncer refuses the unknown key",
    ),
    deliberate(
        "logical replication without the REPLICATION attribute",
        &["login: 42501 must be superuser or replication role to start walsender"],
        "a replication client's server login refused by PostgreSQL: Sluice passes PostgreSQL's error on (42501 ...), as for any server login it refuses; PgBouncer answers 08P01 'login failed'",
    ),
    deliberate(
        "physical replication without a pg_hba.conf line",
        &["login: 28000 no pg_hba.conf entry for replication connection from host \"127.0.0.1\", user \"trust_user\", no encryption"],
        "the same (28000 no pg_hba.conf entry for replication connection ...)",
    ),
    deliberate(
        "replication=DATABASE",
        &["login: 22023 invalid value for parameter \"replication\": \"DATABASE\""],
        "a replication value PostgreSQL does not accept is refused as PostgreSQL refuses it (22023 invalid value for parameter \"replication\"); PgBouncer makes such a client an ordinary one, which a replication tool then misreads",
    ),
    deliberate(
        "WAIT_FOR_SERVERS: the queued client",
        &["57P01 server shutting down"],
        "a client failed by a shutdown gets PostgreSQL's code for it, 57P01 admin_shutdown ('server shutting down'), which drivers and pools read as 'reconnect elsewhere' (PgBouncer: 08P01, the same text)",
    ),
    deliberate(
        "PAUSE, then SHUTDOWN WAIT_FOR_SERVERS: the paused client",
        &["57P01 server shutting down"],
        "the same: 57P01 'server shutting down' (PgBouncer: 08P01)",
    ),
    deliberate(
        "WAIT_FOR_SERVERS: the idle client's query",
        &["57P01 server shutting down"],
        "the same for an idle client, told at its next query: 57P01 'server shutting down' (PgBouncer: 08P01)",
    ),
    deliberate(
        "a port per host",
        &["ok; 127.0.0.1 2, 127.0.0.2 0, the other port 2"],
        "`port=p1,p2` gives each host of `host=` its port, as in libpq (PgBouncer 1.25.2 reads the first number and uses it for every host)",
    ),
    deliberate(
        "duplicate prepared statement",
        &["42P05 prepared statement \"s1\" already exists"],
        "PostgreSQL's ERROR 42P05 and text, the connection kept (PgBouncer: FATAL 08P01 'prepared statement name is already in use', connection closed)",
    ),
    // The prepared statement errors (parity/prepared.rs): the error, then whether the client
    // still works (a Parse, Bind, Execute of `SELECT 9`).
    deliberate(
        "prepared statement error: Parse of a name in use, then",
        &["EZ status I; ERROR 42P05 prepared statement \"s1\" already exists"],
        PREPARED_WHY,
    ),
    deliberate(
        "a new client after RELOAD changed the entry's timezone",
        &["Asia/Tokyo"],
        "a RELOAD that changes an entry's client_encoding, datestyle, timezone or application_name \
         applies to the clients that log in after it (Sluice replaces the pool's servers as they \
         are released); PgBouncer keeps its servers and its pool's welcome, so the change reaches \
         nobody until the servers are replaced (docs/compat.md)",
    ),
    deliberate(
        "prepared statement error: a name never prepared inside BEGIN, then",
        &["1EZ status E; ERROR 25P02 current transaction is aborted, commands ignored until end of transaction block"],
        PREPARED_WHY,
    ),
    deliberate(
        "prepared statement error: *, then",
        &["12DCZ status I value 9"],
        PREPARED_WHY,
    ),
    deliberate(
        "prepared statement error: Parse of a name in use",
        &["EZ status I; ERROR 42P05 prepared statement \"s1\" already exists"],
        PREPARED_WHY,
    ),
    deliberate(
        "prepared statement error: a name never prepared inside BEGIN",
        &["EZ status E; ERROR 26000 prepared statement \"nope\" does not exist"],
        PREPARED_WHY,
    ),
    deliberate(
        "prepared statement error: a name never prepared: *",
        &["EZ status I; ERROR 26000 prepared statement \"nope\" does not exist"],
        PREPARED_WHY,
    ),
    deliberate(
        "prepared statement error: s1 after *",
        &["EZ status I; ERROR 26000 prepared statement \"s1\" does not exist"],
        PREPARED_WHY,
    ),
];

/// Whether `case` matches `pattern` (one `*` stands for any text).
fn matches(pattern: &str, case: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == case,
        Some((head, tail)) => {
            case.len() >= head.len() + tail.len() && case.starts_with(head) && case.ends_with(tail)
        }
    }
}

/// The entry of `DELIBERATE` that covers `case`, if any.
fn deliberate_entry(case: &str) -> Option<&'static Deliberate> {
    DELIBERATE.iter().find(|d| matches(d.case, case))
}

/// The two processes of one case.
struct Pair {
    pgb: Anchor,
    sl: Sluice,
}

/// Both processes on `extra`. None only where the reference binary is missing and
/// `SLUICE_ALLOW_MISSING_TOOLS=1` (said loudly); without the opt-out that fails the test, and so
/// does a PgBouncer that does not start.
fn pair(extra: &str) -> Option<Pair> {
    pair_with(extra, DB, USERS, &[])
}

/// Both processes on `extra` [pgbouncer] lines (a `[users]` section may follow them), `databases`
/// lines, the `users` auth file and more files of their directories (`{dir}`, `{hba}` name them).
fn pair_with(extra: &str, databases: &str, users: &str, files: &[(&str, &str)]) -> Option<Pair> {
    let pgb = Anchor::start_with(extra, databases, users, files)?;
    let ini = Sluice::basic_ini(extra, &databases.replace("{pg_host}", "127.0.0.1"));
    let mut b = Sluice::builder(&ini).userlist(users);
    for (name, text) in files {
        b = b.file(name, text);
    }
    let sl = b.start();
    Some(Pair { pgb, sl })
}

/// What a connection attempt observed: an error's (SQLSTATE, message) or "ok".
async fn login(port: u16, user: &str, password: &str, db: &str) -> String {
    let cs = format!(
        "host=127.0.0.1 port={port} user={user} password={password} dbname={db} connect_timeout=5"
    );
    match tokio_postgres::connect(&cs, tokio_postgres::NoTls).await {
        Ok((c, conn)) => {
            tokio::spawn(conn);
            drop(c);
            "ok".to_string()
        }
        Err(e) => match e.as_db_error() {
            Some(d) => format!("{} {}", d.code().code(), d.message()),
            None => format!("error: {e}"),
        },
    }
}

async fn console(port: u16) -> Console {
    Console::connect(port, "admin", "").await.unwrap()
}

/// Two runs of the same scenario, (case, observation) each, as (case, PgBouncer's, Sluice's).
fn side_by_side(
    pgbouncer: Vec<(String, String)>,
    sluice: Vec<(String, String)>,
) -> Vec<(String, String, String)> {
    pgbouncer
        .into_iter()
        .zip(sluice)
        .map(|((case, x), (_, y))| (case, x, y))
        .collect()
}

/// Print every case and fail on a difference not listed in `DELIBERATE`, on a listed case where
/// Sluice does not give the listed answer, and when the group ran other than the `cases` cases
/// it defines (a case dropped on the way asserts nothing).
fn report(results: &[(String, String, String)], cases: usize) {
    let mut differ = Vec::new();
    let mut wrong = Vec::new();
    for (case, pgb, sl) in results {
        let same = pgb == sl;
        let entry = deliberate_entry(case);
        eprintln!(
            "{} {case}: PgBouncer {pgb:?} / Sluice {sl:?}",
            match (same, entry) {
                (true, _) => "same      ",
                (false, Some(_)) => "deliberate",
                (false, None) => "DIFFERS   ",
            }
        );
        match entry {
            Some(d) if !d.sluice.contains(&sl.as_str()) => wrong.push(format!(
                "{case}: Sluice answers {sl:?}, its deliberate answer is one of {:?} \
                 (PgBouncer: {pgb:?}; kept because: {}; if Sluice now answers as PgBouncer, \
                 drop the entry)",
                d.sluice, d.why
            )),
            Some(_) => {}
            None if !same => differ.push(case.clone()),
            None => {}
        }
    }
    eprintln!(
        "parity: {} cases, {} the same, {} deliberate differences",
        results.len(),
        results.iter().filter(|(_, a, b)| a == b).count(),
        results.iter().filter(|(_, a, b)| a != b).count()
    );
    assert!(
        differ.is_empty(),
        "cases that differ from PgBouncer 1.25.2: {differ:?}"
    );
    assert!(
        wrong.is_empty(),
        "deliberate cases where Sluice does not answer as listed:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        results.len(),
        cases,
        "the group ran {} cases, it defines {cases}",
        results.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_and_errors_match_pgbouncer() {
    let Some(p) = pair("auth_type = md5\nadmin_users = admin\nmax_client_conn = 20") else {
        return;
    };
    let mut results = Vec::new();
    let mut case = |name: &str, pgb: String, sl: String| results.push((name.to_string(), pgb, sl));
    let (a, b) = (p.pgb.port, p.sl.port);

    // PgBouncer: "no such database: nosuchdb" (08P01) for a database not in [databases].
    case(
        "unknown database",
        login(a, "md5_user", "md5_pass", "nosuchdb").await,
        login(b, "md5_user", "md5_pass", "nosuchdb").await,
    );
    // md5 with a wrong password: 08P01 "password authentication failed" (no user named).
    case(
        "wrong password",
        login(a, "md5_user", "nope", "app").await,
        login(b, "md5_user", "nope", "app").await,
    );
    // A user not in the auth file gets the same answer as a wrong password.
    case(
        "unknown user",
        login(a, "ghost", "x", "app").await,
        login(b, "ghost", "x", "app").await,
    );
    // The console for a user that is neither admin nor stats user.
    case(
        "console refused",
        login(a, "md5_user", "md5_pass", "pgbouncer").await,
        login(b, "md5_user", "md5_pass", "pgbouncer").await,
    );
    case(
        "login ok",
        login(a, "md5_user", "md5_pass", "app").await,
        login(b, "md5_user", "md5_pass", "app").await,
    );

    report(&results, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_matches_pgbouncer() {
    let Some(p) = pair("auth_type = trust\nadmin_users = admin\nmax_client_conn = 20") else {
        return;
    };
    let mut results = Vec::new();
    let mut case = |name: &str, pgb: String, sl: String| results.push((name.to_string(), pgb, sl));
    let (a, b) = (p.pgb.port, p.sl.port);
    // The console for a user that is neither admin nor stats user (trust: no password step).
    case(
        "console refused (trust)",
        login(a, "trust_user", "", "pgbouncer").await,
        login(b, "trust_user", "", "pgbouncer").await,
    );
    // SHOW VERSION: tools pick column layouts from its first words.
    let mut ca = console(a).await;
    let mut cb = console(b).await;
    let va = ca.query("SHOW VERSION").await.unwrap().rows[0][0]
        .clone()
        .unwrap();
    let vb = cb.query("SHOW VERSION").await.unwrap().rows[0][0]
        .clone()
        .unwrap();
    case(
        "SHOW VERSION prefix",
        va.clone(),
        vb.split(" (Sluice").next().unwrap().to_string(),
    );
    // Column names of the SHOWs monitoring reads.
    for what in [
        "POOLS",
        "STATS",
        "DATABASES",
        "USERS",
        "CLIENTS",
        "SERVERS",
        "LISTS",
        "MEM",
    ] {
        let ra = ca.query(&format!("SHOW {what}")).await.unwrap();
        let rb = cb.query(&format!("SHOW {what}")).await.unwrap();
        case(
            &format!("SHOW {what} columns"),
            ra.names().join(","),
            rb.names().join(","),
        );
    }
    // A pool client's figures (session mode): three queries, then a transaction of three.
    for port in [a, b] {
        let cs = format!("host=127.0.0.1 port={port} user=trust_user dbname=app");
        let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        for sql in [
            "SELECT 1", "SELECT 2", "SELECT 3", "BEGIN", "SELECT 4", "COMMIT",
        ] {
            c.simple_query(sql).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (sa, sb) = (
        ca.query("SHOW STATS").await.unwrap(),
        cb.query("SHOW STATS").await.unwrap(),
    );
    for col in [
        "total_server_assignment_count",
        "total_xact_count",
        "total_query_count",
        "total_client_login_count",
    ] {
        case(
            &format!("SHOW STATS app row {col}"),
            sa.get("app", col).unwrap_or_default(),
            sb.get("app", col).unwrap_or_default(),
        );
    }
    // The console's own row in SHOW STATS, after the commands above (the same number on both).
    let sa = ca.query("SHOW STATS").await.unwrap();
    let sb = cb.query("SHOW STATS").await.unwrap();
    for col in [
        "total_server_assignment_count",
        "total_xact_count",
        "total_query_count",
        "total_received",
        "total_sent",
        "total_xact_time",
        "total_query_time",
        "total_wait_time",
        "total_client_parse_count",
        "total_server_parse_count",
        "total_bind_count",
        "total_client_login_count",
    ] {
        case(
            &format!("SHOW STATS console row {col}"),
            sa.get("pgbouncer", col).unwrap_or_default(),
            sb.get("pgbouncer", col).unwrap_or_default(),
        );
    }
    // RELOAD of a broken file: F0000 and a pointer to the log.
    let broken = |cfg: String| cfg.replace("max_client_conn = 20", "max_client_conn = lots");
    p.pgb.write_file("pgbouncer.ini", &broken(p.pgb.config()));
    let sl_ini = std::fs::read_to_string(p.sl.dir.path().join("pgbouncer.ini")).unwrap();
    std::fs::write(p.sl.dir.path().join("pgbouncer.ini"), broken(sl_ini)).unwrap();
    let err = |r: Result<sluice_e2e::ConsoleResult, std::collections::HashMap<u8, String>>| match r
    {
        Ok(_) => "ok".to_string(),
        Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
    };
    case(
        "RELOAD of a broken file",
        err(ca.query("RELOAD").await),
        err(cb.query("RELOAD").await),
    );
    // The console refused, SHOW VERSION, 8 SHOWs' columns, 4 + 12 SHOW STATS figures, RELOAD.
    report(&results, 1 + 1 + 8 + 4 + 12 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_edges_match_pgbouncer() {
    let Some(p) = pair("auth_type = trust\npool_mode = transaction\nmax_prepared_statements = 100")
    else {
        return;
    };
    let mut results = Vec::new();
    let (a, b) = (p.pgb.port, p.sl.port);

    // A startup packet whose protocol version cannot be valid, sent without the rest: refused at
    // once with 08P01 (PgBouncer 1.25 reads the 8-byte header first).
    async fn bad_version(port: u16) -> String {
        let mut c = RawConn::connect(port).await;
        c.send(&[0, 0, 0, 40, 0, 4, 0, 0]).await;
        match c.read_message(Duration::from_secs(3)).await {
            Some((b'E', body)) => {
                let f = error_fields(&body);
                format!("{} FATAL", f[&b'C'])
            }
            other => format!("{other:?}"),
        }
    }
    results.push((
        "bad protocol version".into(),
        bad_version(a).await,
        bad_version(b).await,
    ));

    // Re-preparing a name already prepared in the session.
    async fn duplicate_prepare(port: u16) -> String {
        let mut c = RawConn::connect(port).await;
        c.send(&RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
        ]))
        .await;
        bad_input_common::read_until_ready(&mut c).await;
        let parse = |n: &str| {
            let mut body = n.as_bytes().to_vec();
            body.extend_from_slice(b"\0SELECT 1\0\0\0");
            let mut m = RawConn::message(b'P', &body);
            m.extend_from_slice(&RawConn::message(b'S', b""));
            m
        };
        c.send(&parse("s1")).await;
        bad_input_common::read_until_ready(&mut c).await;
        c.send(&parse("s1")).await;
        match c.read_message(Duration::from_secs(3)).await {
            Some((b'E', body)) => {
                let f = error_fields(&body);
                format!("{} {}", f[&b'C'], f[&b'M'])
            }
            other => format!("{other:?}"),
        }
    }
    results.push((
        "duplicate prepared statement".into(),
        duplicate_prepare(a).await,
        duplicate_prepare(b).await,
    ));
    report(&results, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_failures_match_pgbouncer() {
    let mut results = Vec::new();
    for auth in ["scram-sha-256", "plain"] {
        let Some(p) = pair(&format!("auth_type = {auth}")) else {
            return;
        };
        let (a, b) = (p.pgb.port, p.sl.port);
        results.push((
            format!("{auth}: wrong password"),
            login(a, "md5_user", "nope", "app").await,
            login(b, "md5_user", "nope", "app").await,
        ));
        results.push((
            format!("{auth}: unknown user"),
            login(a, "ghost", "x", "app").await,
            login(b, "ghost", "x", "app").await,
        ));
    }
    // Two auth types, two cases each.
    report(&results, 2 * 2);
}

/// query_wait_notify: a client queued longer than it gets PgBouncer 1.25's NOTICE, then its result.
async fn queued_notice(port: u16) -> String {
    let mut holder = RawConn::connect(port).await;
    holder
        .send(&RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
        ]))
        .await;
    bad_input_common::read_until_ready(&mut holder).await;
    holder.send(&RawConn::message(b'Q', b"BEGIN\0")).await;
    bad_input_common::read_until_ready(&mut holder).await;
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    bad_input_common::read_until_ready(&mut c).await;
    c.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let notice = match c.read_message(Duration::from_secs(4)).await {
        Some((b'N', body)) => {
            let f = error_fields(&body);
            format!("N {} {} {}", f[&b'S'], f[&b'C'], f[&b'M'])
        }
        other => format!("{other:?}"),
    };
    holder.send(&RawConn::message(b'Q', b"COMMIT\0")).await;
    let rest = bad_input_common::read_until_ready(&mut c).await;
    let got_row = rest.iter().any(|(t, _)| *t == b'D');
    format!("{notice}; then the row: {got_row}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_client_is_told_as_pgbouncer_tells_it() {
    let extra =
        "auth_type = trust\npool_mode = transaction\ndefault_pool_size = 1\nquery_wait_notify = 1";
    // Sluice on its own first (the check does not need the reference binary).
    let sl = Sluice::builder(&Sluice::basic_ini(
        extra,
        &DB.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(USERS)
    .start();
    let b = queued_notice(sl.port).await;
    assert!(
        b.starts_with(
            "N NOTICE 00000 No server connection available in postgres backend, client being queued"
        ),
        "{b}"
    );
    assert!(b.ends_with("the row: true"), "{b}");
    let Some(p) = pair(extra) else {
        return;
    };
    let (a, b) = (
        queued_notice(p.pgb.port).await,
        queued_notice(p.sl.port).await,
    );
    report(&[("query_wait_notify NOTICE".to_string(), a, b)], 1);
}
