//! Replication connections side by side (`replication=database|true`, PgBouncer 1.23+): each
//! replication client gets a server of its own, opened with `replication`, its tracked startup
//! parameters and its `options` as they are, never pooled, closed when the client leaves, counted
//! under pool_size (an idle server of the pool is closed to make room) and shown in SHOW CLIENTS /
//! SHOW SERVERS `replication`. pg_basebackup, pg_receivewal and pg_recvlogical run through both.
//! The cluster allows replication for `repl_user` (tests/src/cluster.rs).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_e2e::{client_bin, error_fields, missing_tool, Anchor, PgCluster, RawConn, Sluice};

use super::{console, report, side_by_side};

const DBS: &str = "app = host={pg_host} port={pg_port} dbname=app\n\
                   * = host={pg_host} port={pg_port}";
const USERS: &str = "\"repl_user\" \"\"\n\"trust_user\" \"\"\n\"admin\" \"\"\n";
/// server_login_retry = 1: PgBouncer holds a pool's logins for that long after one failed (the
/// refused replication logins below), 15 s by default.
const BASE: &str =
    "auth_type = trust\nadmin_users = admin\npool_mode = transaction\nserver_login_retry = 1";

/// Log in with `params` (user, database, replication...): the login error, or the connection.
async fn open(port: u16, params: &[(&str, &str)]) -> Result<RawConn, String> {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(params)).await;
    loop {
        match c.read_message(Duration::from_secs(10)).await {
            Some((b'E', body)) => {
                let f = error_fields(&body);
                return Err(format!("login: {} {}", f[&b'C'], f[&b'M']));
            }
            Some((b'Z', _)) => return Ok(c),
            Some(_) => {}
            None => return Err("login: no answer".into()),
        }
    }
}

/// A simple query's rows (columns joined with `|`, rows with `;`) or its error.
async fn query(c: &mut RawConn, sql: &str) -> String {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    c.send(&RawConn::message(b'Q', &body)).await;
    let mut rows: Vec<String> = Vec::new();
    let mut err = None;
    loop {
        match c.read_message(Duration::from_secs(10)).await {
            Some((b'D', body)) => rows.push(row_text(&body).join("|")),
            Some((b'E', body)) => {
                let f = error_fields(&body);
                err = Some(format!("error: {} {}", f[&b'C'], f[&b'M']));
            }
            Some((b'Z', _)) => break,
            Some(_) => {}
            None => return "no answer".into(),
        }
    }
    err.unwrap_or_else(|| rows.join(";"))
}

fn row_text(body: &[u8]) -> Vec<String> {
    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
    let mut p = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = i32::from_be_bytes([body[p], body[p + 1], body[p + 2], body[p + 3]]);
        p += 4;
        if len < 0 {
            out.push("NULL".to_string());
        } else {
            out.push(String::from_utf8_lossy(&body[p..p + len as usize]).into_owned());
            p += len as usize;
        }
    }
    out
}

/// Log in and run one query: the query's answer, or the login's error.
async fn login_and_query(port: u16, params: &[(&str, &str)], sql: &str) -> String {
    match open(port, params).await {
        Ok(mut c) => query(&mut c, sql).await,
        Err(e) => e,
    }
}

/// IDENTIFY_SYSTEM's shape (its position moves): columns and dbname.
fn identify(answer: &str) -> String {
    let cols: Vec<&str> = answer.split('|').collect();
    if cols.len() != 4 {
        return answer.to_string();
    }
    format!("4 columns, dbname {}", cols[3])
}

/// walsender backends of repl_user, once they are down to `want` (within 5 s) or the last count.
async fn walsenders_settle(want: usize) -> usize {
    let mut n = usize::MAX;
    for _ in 0..50 {
        n = tokio::task::spawn_blocking(|| {
            PgCluster::get().psql(
                "postgres",
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender' \
                 AND usename = 'repl_user'",
            )
        })
        .await
        .unwrap()
        .parse()
        .unwrap();
        if n == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    n
}

/// What one pooler does with replication clients, as (case, observation) pairs.
async fn scenario(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut case = |name: &str, v: String| out.push((name.to_string(), v));
    let logical = [
        ("user", "repl_user"),
        ("database", "app"),
        ("replication", "database"),
    ];
    let physical = [
        ("user", "repl_user"),
        ("database", "app"),
        ("replication", "true"),
    ];
    // PostgreSQL answers IDENTIFY_SYSTEM; a logical connection names its database.
    case(
        "logical IDENTIFY_SYSTEM",
        identify(&login_and_query(port, &logical, "IDENTIFY_SYSTEM").await),
    );
    case(
        "physical IDENTIFY_SYSTEM",
        identify(&login_and_query(port, &physical, "IDENTIFY_SYSTEM").await),
    );
    // Booleans as PostgreSQL reads them.
    for v in ["on", "yes", "1"] {
        let p = [
            ("user", "repl_user"),
            ("database", "app"),
            ("replication", v),
        ];
        case(
            &format!("replication={v} IDENTIFY_SYSTEM"),
            identify(&login_and_query(port, &p, "IDENTIFY_SYSTEM").await),
        );
    }
    // A physical walsender refuses SQL: PostgreSQL's own error reaches the client.
    case(
        "physical replication SQL",
        login_and_query(port, &physical, "SELECT 1").await,
    );
    // A logical connection runs SQL too; its startup parameters and `options` (any setting,
    // passed as they are) reach its server.
    let mut with_params = logical.to_vec();
    with_params.push(("application_name", "abc"));
    with_params.push(("options", "-c work_mem=2MB"));
    case(
        "logical SQL, application_name and options",
        login_and_query(
            port,
            &with_params,
            "SELECT current_setting('application_name'), current_setting('work_mem')",
        )
        .await,
    );
    // A false value is an ordinary client.
    for v in ["false", "off", "0"] {
        let p = [
            ("user", "repl_user"),
            ("database", "app"),
            ("replication", v),
        ];
        case(
            &format!("replication={v}"),
            login_and_query(port, &p, "SELECT 1").await,
        );
    }
    // Not allowed by PostgreSQL (no REPLICATION attribute; no replication line in pg_hba.conf).
    case(
        "logical replication without the REPLICATION attribute",
        login_and_query(
            port,
            &[
                ("user", "trust_user"),
                ("database", "app"),
                ("replication", "database"),
            ],
            "IDENTIFY_SYSTEM",
        )
        .await,
    );
    case(
        "physical replication without a pg_hba.conf line",
        login_and_query(
            port,
            &[
                ("user", "trust_user"),
                ("database", "app"),
                ("replication", "true"),
            ],
            "IDENTIFY_SYSTEM",
        )
        .await,
    );
    case(
        "replication=DATABASE",
        login_and_query(
            port,
            &[
                ("user", "repl_user"),
                ("database", "app"),
                ("replication", "DATABASE"),
            ],
            "SELECT 1",
        )
        .await,
    );
    // While a logical client is connected: its row and its server's row, and the pool's counts.
    let mut held = open(port, &logical).await.expect("logical login");
    let _ = query(&mut held, "SELECT 1").await;
    let mut con = console(port).await;
    let clients = con.query("SHOW CLIENTS").await.unwrap();
    let servers = con.query("SHOW SERVERS").await.unwrap();
    let pools = con.query("SHOW POOLS").await.unwrap();
    let repl_rows = |r: &sluice_e2e::ConsoleResult| {
        let (u, rep, st) = (r.col("user"), r.col("replication"), r.col("state"));
        let mut v: Vec<String> = r
            .rows
            .iter()
            .filter(|row| row[u].as_deref() == Some("repl_user"))
            .map(|row| {
                format!(
                    "{} {}",
                    row[rep].clone().unwrap_or_default(),
                    row[st].clone().unwrap_or_default()
                )
            })
            .collect();
        v.sort();
        v.join(", ")
    };
    case("SHOW CLIENTS replication, state", repl_rows(&clients));
    case("SHOW SERVERS replication, state", repl_rows(&servers));
    let pool_row = |col: &str| {
        pools
            .find(col, |row| {
                row[pools.col("database")].as_deref() == Some("app")
                    && row[pools.col("user")].as_deref() == Some("repl_user")
            })
            .unwrap_or_default()
    };
    for col in ["cl_active", "sv_active", "sv_idle"] {
        case(
            &format!("SHOW POOLS {col} with a logical client"),
            pool_row(col),
        );
    }
    case(
        "walsenders while connected",
        walsenders_settle(1).await.to_string(),
    );
    drop(held);
    // Its server closes with it.
    case(
        "walsenders after it left",
        walsenders_settle(0).await.to_string(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let servers = con.query("SHOW SERVERS").await.unwrap();
    case("SHOW SERVERS after it left", repl_rows(&servers));
    out
}

/// pool_size: an idle server of the pool makes room for a replication client.
async fn eviction(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let normal = [("user", "repl_user"), ("database", "app")];
    let mut c = open(port, &normal).await.expect("login");
    let _ = query(&mut c, "SELECT 1").await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logical = [
        ("user", "repl_user"),
        ("database", "app"),
        ("replication", "database"),
    ];
    let mut held = open(port, &logical).await;
    let got = match &mut held {
        Ok(c) => query(c, "SELECT 1").await,
        Err(e) => e.clone(),
    };
    out.push(("pool_size=1: replication client in a full pool".into(), got));
    let mut con = console(port).await;
    let servers = con.query("SHOW SERVERS").await.unwrap();
    let rep = servers.col("replication");
    let mut rows: Vec<String> = servers
        .rows
        .iter()
        .map(|r| r[rep].clone().unwrap_or_default())
        .collect();
    rows.sort();
    out.push((
        "pool_size=1: SHOW SERVERS replication".into(),
        rows.join(","),
    ));
    drop(held);
    let _ = walsenders_settle(0).await;
    out
}

/// Run a client program to its end within `limit`: "ok" or its exit and stderr.
fn run_tool(mut cmd: Command, limit: Duration) -> String {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client program");
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return if st.success() {
                "ok".into()
            } else {
                format!("{st}: {}", String::from_utf8_lossy(&out.stderr).trim())
            };
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return "timed out".into();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// pg_basebackup (WAL streamed on a second replication connection), pg_receivewal for 3 seconds
/// on a slot it creates, and pg_recvlogical reading a row inserted into a logical slot.
fn tools(port: u16, tag: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let conn = format!("host=127.0.0.1 port={port} user=repl_user dbname=app");
    let backup = dir.path().join("backup");
    let mut cmd = Command::new(client_bin("pg_basebackup"));
    cmd.args(["-d", &conn, "-X", "stream", "-c", "fast", "--no-sync", "-D"])
        .arg(&backup);
    let r = run_tool(cmd, Duration::from_secs(120));
    let complete = backup.join("PG_VERSION").exists() && backup.join("backup_manifest").exists();
    out.push((
        "pg_basebackup -X stream".into(),
        format!("{r}, complete: {complete}"),
    ));

    let slot = format!("sluice_wal_{tag}");
    let wal = dir.path().join("wal");
    std::fs::create_dir(&wal).unwrap();
    let mut create = Command::new(client_bin("pg_receivewal"));
    create.args(["-d", &conn, "--create-slot", "--slot", &slot]);
    let created = run_tool(create, Duration::from_secs(30));
    let mut recv = Command::new(client_bin("pg_receivewal"));
    recv.args(["-d", &conn, "--slot", &slot, "--no-loop", "-v", "-D"])
        .arg(&wal)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = recv.spawn().expect("pg_receivewal");
    // Some WAL to receive (flushed: the cluster runs with synchronous_commit off).
    std::thread::sleep(Duration::from_secs(1));
    PgCluster::get().psql(
        "postgres",
        "SET synchronous_commit = on; SELECT pg_logical_emit_message(true, 'sluice', 'wal')",
    );
    std::thread::sleep(Duration::from_secs(2));
    use nix::sys::signal::{kill, Signal};
    let _ = kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        Signal::SIGINT,
    );
    let res = child.wait_with_output().unwrap();
    let files = std::fs::read_dir(&wal).map(|d| d.count()).unwrap_or(0);
    if files == 0 {
        eprintln!("pg_receivewal: {}", String::from_utf8_lossy(&res.stderr));
    }
    out.push((
        "pg_receivewal --create-slot, then 3 s of WAL".into(),
        format!(
            "create: {created}, exit: {}, segments written: {}",
            res.status.success(),
            files > 0
        ),
    ));
    let pg = PgCluster::get();
    pg.psql(
        "postgres",
        &format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = '{slot}'"
        ),
    );

    let lslot = format!("sluice_logical_{tag}");
    let table = format!("repl_{tag}");
    pg.psql("app", &format!("CREATE TABLE {table} (a int)"));
    let mut create = Command::new(client_bin("pg_recvlogical"));
    create.args([
        "-d",
        &conn,
        "--slot",
        &lslot,
        "--create-slot",
        "-P",
        "test_decoding",
    ]);
    let created = run_tool(create, Duration::from_secs(30));
    pg.psql(
        "app",
        &format!("SET synchronous_commit = on; INSERT INTO {table} VALUES (1)"),
    );
    let end = pg.psql("app", "SELECT pg_current_wal_flush_lsn()");
    let mut read = Command::new(client_bin("pg_recvlogical"));
    read.args([
        "-d",
        &conn,
        "--slot",
        &lslot,
        "--start",
        "--no-loop",
        "-v",
        "-E",
        &end,
        "-f",
        "-",
    ]);
    let got = read.stdin(Stdio::null()).output().expect("pg_recvlogical");
    let text = String::from_utf8_lossy(&got.stdout);
    let insert = text.contains(&format!("table public.{table}: INSERT: a[integer]:1"));
    if !insert {
        eprintln!(
            "pg_recvlogical: {text} {}",
            String::from_utf8_lossy(&got.stderr)
        );
    }
    out.push((
        "pg_recvlogical --create-slot, then the INSERT read".into(),
        format!("create: {created}, row read: {insert}"),
    ));
    pg.psql(
        "postgres",
        &format!(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = '{lslot}'"
        ),
    );
    pg.psql("app", &format!("DROP TABLE {table}"));
    out
}

/// CREATE_REPLICATION_SLOT ... LOGICAL pgoutput over `replication=database`, then the slot's
/// row in pg_replication_slots.
async fn pgoutput_slot(port: u16, tag: &str) -> String {
    let slot = format!("sluice_pgoutput_{tag}");
    let logical = [
        ("user", "repl_user"),
        ("database", "app"),
        ("replication", "database"),
    ];
    let answer = login_and_query(
        port,
        &logical,
        &format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"),
    )
    .await;
    let cols: Vec<&str> = answer.split('|').collect();
    let shape = if cols.len() == 4 {
        format!("slot {}, plugin {}", cols[0] == slot, cols[3])
    } else {
        answer.clone()
    };
    let sql = format!(
        "SELECT slot_type || ' ' || plugin FROM pg_replication_slots WHERE slot_name = '{slot}'"
    );
    let row = tokio::task::spawn_blocking(move || PgCluster::get().psql("postgres", &sql))
        .await
        .unwrap();
    let drop_sql = format!("SELECT pg_drop_replication_slot('{slot}')");
    tokio::task::spawn_blocking(move || PgCluster::get().psql("postgres", &drop_sql))
        .await
        .unwrap();
    format!("{shape}; pg_replication_slots: {row}")
}

fn bin_present(name: &str) -> bool {
    let p = client_bin(name);
    p.is_absolute() && Path::new(&p).exists() || p.exists()
}

/// Sluice alone on `extra` (the checks that need no reference binary run first), then
/// PgBouncer on the same lines when its binary is here.
fn sluice(extra: &str) -> Sluice {
    Sluice::builder(&Sluice::basic_ini(
        extra,
        &DBS.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(USERS)
    .start()
}

/// None only where the reference binary is missing and SLUICE_ALLOW_MISSING_TOOLS=1 (said loudly).
fn anchor(extra: &str) -> Option<Anchor> {
    Anchor::start_with(extra, DBS, USERS, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_clients_match_pgbouncer() {
    let sl = sluice(BASE);
    let mut b = scenario(sl.port).await;
    b.push((
        "CREATE_REPLICATION_SLOT LOGICAL pgoutput".into(),
        pgoutput_slot(sl.port, "sl").await,
    ));
    eprintln!("Sluice: {b:#?}");
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(got("logical IDENTIFY_SYSTEM"), "4 columns, dbname app");
    assert_eq!(got("physical IDENTIFY_SYSTEM"), "4 columns, dbname NULL");
    assert_eq!(got("logical SQL, application_name and options"), "abc|2MB");
    assert_eq!(got("SHOW CLIENTS replication, state"), "logical active");
    assert!(got("SHOW SERVERS replication, state").starts_with("logical active"));
    assert_eq!(got("walsenders while connected"), "1");
    assert_eq!(got("walsenders after it left"), "0");
    assert_eq!(
        got("CREATE_REPLICATION_SLOT LOGICAL pgoutput"),
        "slot true, plugin pgoutput; pg_replication_slots: logical pgoutput"
    );
    let Some(pgb) = anchor(BASE) else { return };
    let mut a = scenario(pgb.port).await;
    a.push((
        "CREATE_REPLICATION_SLOT LOGICAL pgoutput".into(),
        pgoutput_slot(pgb.port, "pgb").await,
    ));
    // The scenario's cases and the pgoutput slot.
    report(&side_by_side(a, b), 21 + 1);
}

/// An auth_hba_file with `replication` lines, as PostgreSQL's own pg_hba.conf has them: a physical
/// replication connection matches only `replication` lines (not `all`), every other connection
/// (a logical one included) only lines that name its database or say `all`.
const REPLICATION_HBA: &str = "\
local   all          all                       trust
local   replication  all                       trust
host    all          trust_user  127.0.0.1/32  trust
host    replication  repl_user   127.0.0.1/32  trust
host    replication  all         127.0.0.1/32  reject
host    all          repl_user   127.0.0.1/32  trust
host    all          all         127.0.0.1/32  reject
";

/// Which line each kind of connection met: its answer when let in, `refused` when not (the two
/// poolers word a refusal differently: docs/compat.md, auth_type = hba).
async fn hba_lines(port: u16) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let kinds: [(&str, Option<&str>, &str); 3] = [
        ("physical", Some("true"), "IDENTIFY_SYSTEM"),
        ("logical", Some("database"), "IDENTIFY_SYSTEM"),
        ("ordinary", None, "SELECT current_user"),
    ];
    for (kind, replication, sql) in kinds {
        for user in ["repl_user", "trust_user", "admin"] {
            // trust_user has no REPLICATION attribute: PostgreSQL itself would refuse its
            // logical login, and the poolers word that differently too.
            if kind == "logical" && user != "repl_user" {
                continue;
            }
            let mut p = vec![("user", user), ("database", "app")];
            if let Some(r) = replication {
                p.push(("replication", r));
            }
            let answer = match open(port, &p).await {
                Ok(mut c) => {
                    let a = query(&mut c, sql).await;
                    if sql == "IDENTIFY_SYSTEM" {
                        identify(&a)
                    } else {
                        a
                    }
                }
                Err(e) => format!("refused ({e})"),
            };
            let refused = answer.starts_with("refused");
            out.push((
                format!("hba {kind} {user}"),
                if refused { "refused".into() } else { answer },
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hba_replication_lines_match_as_in_pgbouncer() {
    let extra = "auth_type = hba\nauth_hba_file = {hba}\npool_mode = transaction";
    let files = [("hba.conf", REPLICATION_HBA)];
    // Before, Sluice refused this file at startup (`database keyword "replication" is not
    // supported`): PostgreSQL's default pg_hba.conf has such lines.
    let sl = Sluice::builder(&Sluice::basic_ini(
        extra,
        &DBS.replace("{pg_host}", "127.0.0.1"),
    ))
    .userlist(USERS)
    .file("hba.conf", REPLICATION_HBA)
    .start();
    let b = hba_lines(sl.port).await;
    eprintln!("Sluice: {b:#?}");
    let got = |name: &str| b.iter().find(|r| r.0 == name).unwrap().1.clone();
    assert_eq!(got("hba physical repl_user"), "4 columns, dbname NULL");
    assert_eq!(
        got("hba physical trust_user"),
        "refused",
        "`all` matched it"
    );
    assert_eq!(got("hba physical admin"), "refused");
    assert_eq!(got("hba logical repl_user"), "4 columns, dbname app");
    assert_eq!(got("hba ordinary repl_user"), "repl_user");
    assert_eq!(got("hba ordinary trust_user"), "trust_user");
    assert_eq!(got("hba ordinary admin"), "refused");
    let Some(pgb) = Anchor::start_with(extra, DBS, USERS, &files) else {
        return;
    };
    let a = hba_lines(pgb.port).await;
    report(&side_by_side(a, b), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replication_client_evicts_an_idle_server_as_pgbouncer_does() {
    let extra = format!("{BASE}\ndefault_pool_size = 1");
    let sl = sluice(&extra);
    let b = eviction(sl.port).await;
    eprintln!("Sluice: {b:#?}");
    assert_eq!(b[0].1, "1", "the replication client got in");
    assert_eq!(b[1].1, "logical", "the idle server was closed for it");
    let Some(pgb) = anchor(&extra) else { return };
    let a = eviction(pgb.port).await;
    report(&side_by_side(a, b), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_tools_work_through_both() {
    if !bin_present("pg_basebackup") {
        return missing_tool("pg_basebackup is not installed (Debian package postgresql-client)");
    }
    let sl = sluice(BASE);
    let port = sl.port;
    let b = tokio::task::spawn_blocking(move || tools(port, "sl"))
        .await
        .unwrap();
    eprintln!("Sluice: {b:#?}");
    assert_eq!(b[0].1, "ok, complete: true", "pg_basebackup through Sluice");
    assert_eq!(
        b[1].1, "create: ok, exit: true, segments written: true",
        "pg_receivewal through Sluice"
    );
    assert_eq!(
        b[2].1, "create: ok, row read: true",
        "pg_recvlogical through Sluice"
    );
    let Some(pgb) = anchor(BASE) else { return };
    let port = pgb.port;
    let a = tokio::task::spawn_blocking(move || tools(port, "pgb"))
        .await
        .unwrap();
    // pg_basebackup, pg_receivewal, pg_recvlogical.
    report(&side_by_side(a, b), 3);
}
