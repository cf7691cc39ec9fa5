//! Console commands side by side: the answer to a command the console does not have (PgBouncer
//! quotes the query as typed: `invalid command 'show Bogus', use SHOW HELP;`, also for an
//! argument to a command that takes none and an unknown SHUTDOWN mode), the errors of commands
//! missing their database or naming an unknown one, and KILL: `KILL db` drops the database's
//! clients ("database removed") and servers and leaves it paused until `RESUME db`; a bare `KILL`
//! does that to every database with a pool (a bare RESUME does not undo it); both are refused
//! while the pooler is paused. A RELOAD that drops a database from the config disconnects its
//! clients ("database removed", in the middle of a transaction too).

use std::time::Duration;

use sluice_e2e::{error_fields, Console, RawConn};

use super::{console, pair, pair_with, report, side_by_side, USERS};

const BASE: &str =
    "auth_type = trust\nadmin_users = admin\nstats_users = trust_user\npool_mode = session";

/// A command's tag, or its error's "SQLSTATE message".
async fn answer(c: &mut Console, cmd: &str) -> String {
    match c.query(cmd).await {
        Ok(r) => r.tag,
        Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
    }
}

/// Commands whose error texts tools and runbooks read.
const ERRORS: &[&str] = &[
    "show Bogus",
    "show   bogus ;",
    "SHOW POOLS x",
    "FOO bar",
    "SELECT 1",
    "SHUTDOWN bogus",
    "RELOAD x",
    "SUSPEND x",
    "ENABLE",
    "DISABLE",
    "PAUSE nosuch",
    "RESUME nosuch",
    "KILL nosuch",
    "RECONNECT nosuch",
    "KILL_CLIENT abc",
    "KILL_CLIENT 999999",
    "RESUME",
];

/// The same for a stats user: unknown commands are that for anyone, the rest need an admin.
const STATS_USER: &[&str] = &["bogus", "SHOW bogus", "RELOAD", "SHOW FDS", "KILL_CLIENT 1"];

async fn errors(port: u16) -> Vec<(String, String)> {
    let mut c = console(port).await;
    let mut out = Vec::new();
    for cmd in ERRORS {
        out.push((format!("`{cmd}`"), answer(&mut c, cmd).await));
    }
    let mut stats = Console::connect(port, "trust_user", "").await.unwrap();
    for cmd in STATS_USER {
        out.push((
            format!("stats user: `{cmd}`"),
            answer(&mut stats, cmd).await,
        ));
    }
    out
}

/// A trust client of `app`, logged in (Err: its login error, or none within `wait`).
async fn client(port: u16, wait: Duration) -> Result<RawConn, String> {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    loop {
        match c.read_message(wait).await {
            Some((b'Z', _)) => return Ok(c),
            Some((b'E', body)) => {
                let f = error_fields(&body);
                return Err(format!("{} {}", f[&b'C'], f[&b'M']));
            }
            None => return Err("waits (login)".into()),
            Some(_) => {}
        }
    }
}

/// `SELECT 1` on `c`: "served", the error's "SQLSTATE message", or "waits" after `wait`.
async fn select_1(c: &mut RawConn, wait: Duration) -> String {
    c.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let mut got = "waits".to_string();
    loop {
        match c.read_message(wait).await {
            Some((b'E', body)) => {
                let f = error_fields(&body);
                got = format!("{} {}", f[&b'C'], f[&b'M']);
            }
            Some((b'Z', _)) => return if got == "waits" { "served".into() } else { got },
            Some(_) => got = "served".into(),
            None => return got,
        }
    }
}

/// What a connected client hears when KILL drops it (its next read).
async fn hears(c: &mut RawConn) -> String {
    match c.read_message(Duration::from_secs(5)).await {
        Some((b'E', body)) => {
            let f = error_fields(&body);
            format!("{} {}", f[&b'C'], f[&b'M'])
        }
        Some((tag, _)) => format!("message '{}'", tag as char),
        None => "nothing".into(),
    }
}

/// A new client's fate: logged in and served, or still waiting after a second (the login or
/// its first query held).
async fn newcomer(port: u16) -> (String, Option<RawConn>) {
    let wait = Duration::from_secs(1);
    let mut c = match client(port, wait).await {
        Ok(c) => c,
        Err(e) => return (e, None),
    };
    let got = select_1(&mut c, wait).await;
    (got, Some(c))
}

async fn kill(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut case = |name: &str, v: String| out.push((name.to_string(), v));
    let mut con = console(port).await;
    let paused = |r: &sluice_e2e::ConsoleResult| r.get("app", "paused").unwrap_or_default();
    let wait = Duration::from_secs(5);

    // KILL app: its clients are dropped and it stays paused until RESUME.
    let mut a = client(port, wait).await.unwrap();
    assert_eq!(select_1(&mut a, wait).await, "served");
    case("KILL app", answer(&mut con, "KILL app").await);
    case("KILL app: its client hears", hears(&mut a).await);
    let dbs = con.query("SHOW DATABASES").await.unwrap();
    case("KILL app: SHOW DATABASES paused", paused(&dbs));
    case("RESUME app", answer(&mut con, "RESUME app").await);
    let (fate, b) = newcomer(port).await;
    case("RESUME app: a new client", fate);

    // A bare KILL: every client dropped, each database with a pool paused (not the pooler:
    // a bare RESUME has nothing to resume, RESUME app does it).
    case("KILL", answer(&mut con, "KILL").await);
    let heard = match b {
        Some(mut b) => hears(&mut b).await,
        None => "no client".into(),
    };
    case("KILL: a client hears", heard);
    let dbs = con.query("SHOW DATABASES").await.unwrap();
    case("KILL: SHOW DATABASES paused", paused(&dbs));
    let state = con.query("SHOW STATE").await.unwrap();
    case(
        "KILL: SHOW STATE paused",
        state.get("paused", "value").unwrap_or_default(),
    );
    case("KILL: RESUME", answer(&mut con, "RESUME").await);
    case("KILL: RESUME app", answer(&mut con, "RESUME app").await);
    case("KILL, RESUME app: a new client", newcomer(port).await.0);
    // Both refused while the pooler is paused.
    case("PAUSE", answer(&mut con, "PAUSE").await);
    case("KILL while paused", answer(&mut con, "KILL").await);
    case("KILL app while paused", answer(&mut con, "KILL app").await);
    case("RESUME after PAUSE", answer(&mut con, "RESUME").await);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_errors_match_pgbouncer() {
    let Some(p) = pair(BASE) else { return };
    let b = errors(p.sl.port).await;
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(
        got("`show Bogus`"),
        "08P01 invalid command 'show Bogus', use SHOW HELP;"
    );
    assert_eq!(
        got("`RELOAD x`"),
        "08P01 invalid command 'RELOAD x', use SHOW HELP;"
    );
    assert_eq!(got("`ENABLE`"), "08P01 a database is required");
    assert_eq!(got("`RESUME nosuch`"), "08P01 no such database: nosuch");
    assert_eq!(
        got("stats user: `bogus`"),
        "08P01 invalid command 'bogus', use SHOW HELP;"
    );
    assert_eq!(got("stats user: `RELOAD`"), "08P01 admin access needed");
    let a = errors(p.pgb.port).await;
    report(&side_by_side(a, b), ERRORS.len() + STATS_USER.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_matches_pgbouncer() {
    let Some(p) = pair(BASE) else { return };
    let b = kill(p.sl.port).await;
    eprintln!("Sluice: {b:#?}");
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(got("KILL app: its client hears"), "08P01 database removed");
    assert_eq!(got("KILL app: SHOW DATABASES paused"), "1");
    assert_eq!(got("RESUME app: a new client"), "served");
    assert_eq!(got("KILL: a client hears"), "08P01 database removed");
    assert_eq!(got("KILL: SHOW DATABASES paused"), "1");
    assert_eq!(got("KILL: SHOW STATE paused"), "no");
    assert_eq!(got("KILL: RESUME"), "08P01 pooler is not paused/suspended");
    assert_eq!(got("KILL, RESUME app: a new client"), "served");
    assert_eq!(got("KILL while paused"), "08P01 already suspended/paused");
    let a = kill(p.pgb.port).await;
    report(&side_by_side(a, b), 16);
}

/// A client that arrives while `KILL app` holds the database waits, and RESUME serves it.
/// (PgBouncer 1.25.2 differs, as a fault: once a client has arrived at the killed database,
/// `RESUME app` answers RESUME but SHOW DATABASES keeps `paused` at 1 and every later login of
/// the database waits; docs/compat.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_held_by_kill_is_served_after_resume() {
    let s = sluice_e2e::Sluice::builder(&sluice_e2e::Sluice::basic_ini(
        BASE,
        &super::DB.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(super::USERS)
    .start();
    let mut con = console(s.port).await;
    assert_eq!(answer(&mut con, "KILL app").await, "KILL");
    let (fate, held) = newcomer(s.port).await;
    assert!(fate.starts_with("waits"), "{fate}");
    assert_eq!(answer(&mut con, "RESUME app").await, "RESUME");
    let served = match held {
        Some(mut c) => select_1(&mut c, Duration::from_secs(5)).await,
        None => newcomer(s.port).await.0,
    };
    assert_eq!(served, "served");
    assert_eq!(newcomer(s.port).await.0, "served");
}

/// A database dropped from the config by RELOAD: its clients hear "database removed" at once,
/// one idle and one in the middle of a transaction; new logins are told it does not exist.
async fn removed_by_reload(port: u16, rewrite: impl FnOnce()) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let wait = Duration::from_secs(5);
    let login =
        |db: &'static str| RawConn::startup_packet(&[("user", "trust_user"), ("database", db)]);
    let mut idle = RawConn::connect(port).await;
    idle.send(&login("app2")).await;
    let mut in_tx = RawConn::connect(port).await;
    in_tx.send(&login("app2")).await;
    for c in [&mut idle, &mut in_tx] {
        while !matches!(c.read_message(wait).await, Some((b'Z', _)) | None) {}
    }
    assert_eq!(select_1(&mut idle, wait).await, "served");
    in_tx
        .send(&RawConn::message(b'Q', b"BEGIN; SELECT 1\0"))
        .await;
    while !matches!(in_tx.read_message(wait).await, Some((b'Z', _)) | None) {}
    rewrite();
    let mut con = console(port).await;
    out.push(("RELOAD".to_string(), answer(&mut con, "RELOAD").await));
    out.push((
        "an idle client of app2 hears".to_string(),
        hears(&mut idle).await,
    ));
    out.push((
        "a client of app2 in a transaction hears".to_string(),
        hears(&mut in_tx).await,
    ));
    let dbs = con.query("SHOW DATABASES").await.unwrap();
    let mut names: Vec<String> = dbs.rows.iter().filter_map(|r| r[0].clone()).collect();
    names.sort();
    out.push(("SHOW DATABASES".to_string(), names.join(",")));
    let mut late = RawConn::connect(port).await;
    late.send(&login("app2")).await;
    let mut refused = hears(&mut late).await;
    // Trust: AuthenticationOk may come first.
    while refused.starts_with("message") {
        refused = hears(&mut late).await;
    }
    out.push(("a new login to app2".to_string(), refused));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_dropped_by_reload_disconnects_its_clients_as_in_pgbouncer() {
    let dbs = "app = host={pg_host} port={pg_port} dbname=app\n\
               app2 = host={pg_host} port={pg_port} dbname=app";
    let Some(p) = pair_with(BASE, dbs, USERS, &[]) else {
        return;
    };
    let without_app2 = |ini: String| {
        ini.lines()
            .filter(|l| !l.starts_with("app2 ="))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let sl_ini = p.sl.dir.path().join("pgbouncer.ini");
    let b = removed_by_reload(p.sl.port, || {
        let text = std::fs::read_to_string(&sl_ini).unwrap();
        std::fs::write(&sl_ini, without_app2(text)).unwrap();
    })
    .await;
    eprintln!("Sluice: {b:#?}");
    assert_eq!(b[1].1, "08P01 database removed");
    assert_eq!(b[2].1, "08P01 database removed");
    assert_eq!(b[4].1, "08P01 no such database: app2");
    let a = removed_by_reload(p.pgb.port, || {
        p.pgb
            .write_file("pgbouncer.ini", &without_app2(p.pgb.config()))
    })
    .await;
    report(&side_by_side(a, b), 5);
}

/// A database paused and disabled, then dropped by RELOAD: its pause is forgotten with it (it no
/// longer blocks SUSPEND), and added again it starts afresh, as PgBouncer frees the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_database_takes_its_pause_with_it() {
    let two = "app = host=127.0.0.1 port={pg_port} dbname=app\n\
               app2 = host=127.0.0.1 port={pg_port} dbname=app";
    let s = sluice_e2e::Sluice::builder(&sluice_e2e::Sluice::basic_ini(BASE, two))
        .userlist(USERS)
        .start();
    let ini = s.dir.path().join("pgbouncer.ini");
    let with_app2 = std::fs::read_to_string(&ini).unwrap();
    let mut con = console(s.port).await;
    assert_eq!(answer(&mut con, "PAUSE app2").await, "PAUSE");
    assert_eq!(answer(&mut con, "DISABLE app2").await, "DISABLE");
    assert_eq!(
        answer(&mut con, "SUSPEND").await,
        "08P01 cannot suspend with paused databases"
    );
    let without: String = with_app2
        .lines()
        .filter(|l| !l.starts_with("app2 ="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&ini, without).unwrap();
    assert_eq!(answer(&mut con, "RELOAD").await, "RELOAD");
    assert_eq!(answer(&mut con, "SUSPEND").await, "SUSPEND");
    assert_eq!(answer(&mut con, "RESUME").await, "RESUME");
    std::fs::write(&ini, &with_app2).unwrap();
    assert_eq!(answer(&mut con, "RELOAD").await, "RELOAD");
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app2"),
    ]))
    .await;
    while !matches!(
        c.read_message(Duration::from_secs(5)).await,
        Some((b'Z' | b'E', _)) | None
    ) {}
    assert_eq!(select_1(&mut c, Duration::from_secs(2)).await, "served");
}

/// `SHOW timezone` through a new trust client of `app`.
async fn timezone(c: &tokio_postgres::Client) -> String {
    match c.simple_query("SHOW timezone").await {
        Ok(msgs) => msgs
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .unwrap_or_default(),
        Err(e) => format!("error: {e}"),
    }
}

async fn trust_client(port: u16) -> tokio_postgres::Client {
    let cs = format!("host=127.0.0.1 port={port} user=trust_user dbname=app");
    let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

/// An entry's `timezone=` changed by RELOAD: a client from before keeps its value; a new client
/// gets the new one in Sluice, the old one in PgBouncer (its servers and its pool's welcome stay).
async fn startup_parameter_reload(port: u16, rewrite: impl FnOnce()) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let before = trust_client(port).await;
    out.push(("client from before".to_string(), timezone(&before).await));
    rewrite();
    let mut con = console(port).await;
    out.push(("RELOAD".to_string(), answer(&mut con, "RELOAD").await));
    let after = trust_client(port).await;
    out.push((
        "a new client after RELOAD changed the entry's timezone".to_string(),
        timezone(&after).await,
    ));
    out.push((
        "client from before, after RELOAD".to_string(),
        timezone(&before).await,
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_an_entrys_timezone_reaches_new_clients() {
    let dbs = "app = host={pg_host} port={pg_port} dbname=app timezone=UTC";
    let Some(p) = pair_with(BASE, dbs, USERS, &[]) else {
        return;
    };
    let tokyo = |ini: String| ini.replace("timezone=UTC", "timezone=Asia/Tokyo");
    let sl_ini = p.sl.dir.path().join("pgbouncer.ini");
    let b = startup_parameter_reload(p.sl.port, || {
        let text = std::fs::read_to_string(&sl_ini).unwrap();
        std::fs::write(&sl_ini, tokyo(text)).unwrap();
    })
    .await;
    assert_eq!(b[0].1, "UTC");
    assert_eq!(b[2].1, "Asia/Tokyo");
    assert_eq!(b[3].1, "UTC");
    let a = startup_parameter_reload(p.pgb.port, || {
        p.pgb.write_file("pgbouncer.ini", &tokyo(p.pgb.config()))
    })
    .await;
    report(&side_by_side(a, b), 4);
}
