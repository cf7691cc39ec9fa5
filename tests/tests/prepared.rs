//! Protocol-level named prepared statements through transaction pooling: drivers that prepare
//! (tokio-postgres, pgbench -M prepared), statements following a client to another server, and
//! pipelines with Flush, errors mid-batch, Close and re-Parse, checked on the raw protocol.

use std::time::Duration;

use sluice_e2e::{error_fields, pgbench, Console, PgCluster, RawConn, Sluice};

const USERLIST: &str = "\"trust_user\" \"\"\n\"scram_user\" \"scram_pass\"\n";
const WAIT: Duration = Duration::from_secs(5);

fn start(extra: &str) -> Sluice {
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = trust\npool_mode = transaction\nquery_wait_timeout = 5\nserver_login_retry = 1\n{extra}"
        ),
        "app = host={pg_host} port={pg_port} dbname=app",
    );
    Sluice::builder(&ini).userlist(USERLIST).start()
}

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
    // unnamed portal, no parameters, no result formats
    msg(b'B', &[b"\0", stmt.as_bytes(), b"\0", &[0, 0, 0, 0, 0, 0]])
}

fn describe_stmt(name: &str) -> Vec<u8> {
    msg(b'D', &[b"S", name.as_bytes(), b"\0"])
}

fn close_stmt(name: &str) -> Vec<u8> {
    msg(b'C', &[b"S", name.as_bytes(), b"\0"])
}

fn execute() -> Vec<u8> {
    msg(b'E', &[b"\0", &[0, 0, 0, 0]])
}

fn sync() -> Vec<u8> {
    msg(b'S', &[])
}

fn flush() -> Vec<u8> {
    msg(b'H', &[])
}

async fn raw_login(s: &Sluice) -> RawConn {
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    read_until(&mut c, b'Z').await;
    c
}

/// Read messages until (and including) one with `last` tag; returns their tags and bodies.
async fn read_until(c: &mut RawConn, last: u8) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let m = c
            .read_message(WAIT)
            .await
            .expect("timed out waiting for the server");
        let done = m.0 == last;
        out.push(m);
        if done {
            return out;
        }
    }
}

fn tags(msgs: &[(u8, Vec<u8>)]) -> String {
    msgs.iter().map(|(t, _)| *t as char).collect()
}

fn first_value(msgs: &[(u8, Vec<u8>)]) -> String {
    let (_, body) = msgs.iter().find(|(t, _)| *t == b'D').expect("a DataRow");
    let len = u32::from_be_bytes([body[2], body[3], body[4], body[5]]) as usize;
    String::from_utf8(body[6..6 + len].to_vec()).unwrap()
}

#[tokio::test]
async fn tokio_postgres_statements_work_across_clients_sharing_one_server() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    let sa = a.prepare("SELECT $1::int + 1").await.unwrap();
    let sb = b.prepare("SELECT $1::int * 2").await.unwrap();
    let same_text = b.prepare("SELECT $1::int + 1").await.unwrap();
    for i in 0..20 {
        let ra: i32 = a.query_one(&sa, &[&i]).await.unwrap().get(0);
        let rb: i32 = b.query_one(&sb, &[&i]).await.unwrap().get(0);
        let rc: i32 = b.query_one(&same_text, &[&i]).await.unwrap().get(0);
        assert_eq!((ra, rb, rc), (i + 1, i * 2, i + 1));
        // ad-hoc queries prepare (and close) a statement each time in tokio-postgres
        let n: i64 = a
            .query_one(
                "SELECT count(*) FROM pg_class WHERE oid > $1",
                &[&(i as u32)],
            )
            .await
            .unwrap()
            .get(0);
        assert!(n > 0);
    }
    let pids: Vec<i32> = vec![
        a.query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0),
        b.query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0),
    ];
    assert_eq!(
        pids[0], pids[1],
        "pool_size=1: both clients used the same server"
    );
}

#[tokio::test]
async fn a_statement_follows_its_client_to_another_server() {
    let s = start("default_pool_size = 2");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let holder = s.connect("trust_user", "", "app").await.unwrap();
    let st = a
        .prepare("SELECT pg_backend_pid(), $1::text")
        .await
        .unwrap();
    let first: i32 = a.query_one(&st, &[&"x"]).await.unwrap().get(0);
    // Hold the server `a` used inside a transaction so that `a` must take the other one.
    holder.batch_execute("BEGIN").await.unwrap();
    let held: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // Only one server existed when `holder` began, so it holds the one `a` prepared on.
    assert_eq!(
        held, first,
        "holder took the server the statement was prepared on"
    );
    for _ in 0..5 {
        let row = a.query_one(&st, &[&"y"]).await.unwrap();
        assert_ne!(row.get::<_, i32>(0), held, "a ran on the other server");
        assert_eq!(row.get::<_, String>(1), "y");
    }
    holder.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test]
async fn pgbench_prepared_in_transaction_mode_has_no_failures() {
    let pg = PgCluster::get();
    pg.psql(
        "app",
        "CREATE TABLE IF NOT EXISTS prep_bench(id int primary key, v int)",
    );
    pg.psql(
        "app",
        "INSERT INTO prep_bench SELECT g, g FROM generate_series(1, 100) g ON CONFLICT DO NOTHING",
    );
    pg.psql("app", "GRANT ALL ON prep_bench TO PUBLIC");
    let s = start("default_pool_size = 3\nmax_client_conn = 100");
    // One thread per client: pgbench prepares with a blocking PQprepare, and a thread blocked waiting
    // for a server would stall its other clients that hold servers inside BEGIN (with any pooler).
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("prep.sql");
    std::fs::write(&script, "\\set id random(1, 100)\nSELECT v FROM prep_bench WHERE id = :id;\nBEGIN;\nUPDATE prep_bench SET v = v + 1 WHERE id = :id;\nCOMMIT;\n").unwrap();
    let port = s.port.to_string();
    let (status, out, err) = pgbench(
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "trust_user",
            "-n",
            "-M",
            "prepared",
            "-c",
            "8",
            "-j",
            "8",
            "-T",
            "3",
            "-f",
            script.to_str().unwrap(),
            "app",
        ],
        "",
    );
    assert!(
        status.success(),
        "pgbench failed: {out}\n{err}\nlog:\n{}",
        s.log()
    );
    assert!(out.contains("number of failed transactions: 0"), "{out}");
    assert!(!err.contains("aborted"), "{err}");
}

#[tokio::test]
async fn parse_complete_is_synthesized_for_a_statement_the_server_already_has() {
    let s = start("default_pool_size = 1");
    for round in 0..2 {
        let mut c = raw_login(&s).await;
        // Flush, not Sync: the replies must come without a ReadyForQuery.
        c.send(&[parse("q", "SELECT 41 + 1"), describe_stmt("q"), flush()].concat())
            .await;
        let got = read_until(&mut c, b'T').await;
        assert_eq!(tags(&got), "1tT", "round {round}");
        c.send(&[bind("q"), execute(), sync()].concat()).await;
        let got = read_until(&mut c, b'Z').await;
        assert_eq!(tags(&got), "2DCZ", "round {round}");
        assert_eq!(first_value(&got), "42");
    }
}

#[tokio::test]
async fn an_error_mid_batch_skips_to_sync_and_forgets_the_failed_statement() {
    let s = start("default_pool_size = 1");
    let mut c = raw_login(&s).await;
    c.send(&[parse("bad", "SELEC 1"), bind("bad"), execute(), sync()].concat())
        .await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "EZ");
    assert_eq!(error_fields(&got[0].1)[&b'C'], "42601");
    // The connection is usable and a good statement works after the error.
    c.send(&[parse("good", "SELECT 7"), bind("good"), execute(), sync()].concat())
        .await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "12DCZ");
    assert_eq!(first_value(&got), "7");
    // An error in the middle of a batch whose Parse was absorbed: nothing after it is answered.
    c.send(
        &[
            parse("good2", "SELECT 7"),
            bind("nope_unnamed_ok"),
            execute(),
            sync(),
        ]
        .concat(),
    )
    .await;
    // As on PostgreSQL: ParseComplete, the ERROR, ReadyForQuery; the connection stays.
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "1EZ");
    let f = error_fields(&got[1].1);
    assert_eq!(
        (f[&b'S'].as_str(), f[&b'C'].as_str(), f[&b'M'].as_str()),
        (
            "ERROR",
            "26000",
            "prepared statement \"nope_unnamed_ok\" does not exist"
        )
    );
    c.send(&[bind("good2"), execute(), sync()].concat()).await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "2DCZ");
}

#[tokio::test]
async fn close_then_reparse_the_same_name() {
    let s = start("default_pool_size = 1");
    let mut c = raw_login(&s).await;
    c.send(&[parse("s1", "SELECT 1"), bind("s1"), execute(), sync()].concat())
        .await;
    assert_eq!(first_value(&read_until(&mut c, b'Z').await), "1");
    c.send(&[close_stmt("s1"), sync()].concat()).await;
    assert_eq!(tags(&read_until(&mut c, b'Z').await), "3Z");
    c.send(&[parse("s1", "SELECT 2"), bind("s1"), execute(), sync()].concat())
        .await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "12DCZ");
    assert_eq!(first_value(&got), "2");
}

#[tokio::test]
async fn a_duplicate_statement_name_is_refused() {
    let s = start("");
    let mut c = raw_login(&s).await;
    c.send(&[parse("dup", "SELECT 1"), sync()].concat()).await;
    assert_eq!(tags(&read_until(&mut c, b'Z').await), "1Z");
    c.send(&[parse("dup", "SELECT 2"), sync()].concat()).await;
    // PostgreSQL's answer, and the connection stays; the name keeps its first statement.
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "EZ");
    let f = error_fields(&got[0].1);
    assert_eq!(
        (f[&b'C'].as_str(), f[&b'M'].as_str()),
        ("42P05", "prepared statement \"dup\" already exists")
    );
    c.send(&[bind("dup"), execute(), sync()].concat()).await;
    assert_eq!(first_value(&read_until(&mut c, b'Z').await), "1");
    // PgBouncer's log lines, which operators grep for, are written before the client's reply.
    c.send(&[describe_stmt("gone"), sync()].concat()).await;
    assert_eq!(tags(&read_until(&mut c, b'Z').await), "EZ");
    let log = s.log();
    assert!(
        log.contains("prepared statement 'dup' was already prepared")
            && log.contains("prepared statement 'gone' not found"),
        "{log}"
    );
}

#[tokio::test]
async fn a_statement_name_longer_than_postgresqls_small_message_limit_works() {
    let s = start("");
    let mut c = raw_login(&s).await;
    // Describe and Close of such a name exceed the 10,000 bytes PostgreSQL accepts for them, but
    // the server only ever sees the pooler's short name.
    let name = "a".repeat(16 * 1024);
    c.send(&[parse(&name, "SELECT 7"), describe_stmt(&name), sync()].concat())
        .await;
    assert_eq!(tags(&read_until(&mut c, b'Z').await), "1tTZ");
    c.send(&[bind(&name), execute(), close_stmt(&name), sync()].concat())
        .await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "2DC3Z");
    assert_eq!(first_value(&got), "7");
    // A Describe that goes to the server as sent (a portal) keeps PostgreSQL's limit.
    c.send(&[msg(b'D', &[b"P", name.as_bytes(), b"\0"]), sync()].concat())
        .await;
    let got = read_until(&mut c, b'E').await;
    let f = error_fields(&got.last().unwrap().1);
    assert!(f[&b'M'].contains("invalid message length"), "{f:?}");
}

#[tokio::test]
async fn max_prepared_statements_set_to_0_applies_to_an_idle_clients_next_request() {
    let s = start("default_pool_size = 1\nadmin_users = trust_user");
    let mut c = raw_login(&s).await;
    c.send(&[parse("k", "SELECT 1"), sync()].concat()).await;
    assert_eq!(tags(&read_until(&mut c, b'Z').await), "1Z");
    let mut console = Console::connect(s.port, "trust_user", "").await.unwrap();
    console
        .query("SET max_prepared_statements = 0")
        .await
        .unwrap();
    // Names now pass through untouched: the server never heard of the client's "k".
    c.send(&[bind("k"), execute(), sync()].concat()).await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "EZ");
    let f = error_fields(&got[0].1);
    assert_eq!(f[&b'C'], "26000");
    assert!(f[&b'M'].contains("\"k\""), "{f:?}");
}

#[tokio::test]
async fn a_bind_naming_no_statement_in_bytes_that_are_not_utf8_is_refused() {
    let s = start("");
    let mut c = raw_login(&s).await;
    let bad = msg(b'B', &[b"\0", &[0xff, 0xfe], b"\0", &[0, 0, 0, 0, 0, 0]]);
    c.send(&[bad, execute(), sync()].concat()).await;
    let got = read_until(&mut c, b'Z').await;
    assert_eq!(tags(&got), "EZ");
    let f = error_fields(&got[0].1);
    assert_eq!(f[&b'C'], "26000");
    assert_eq!(
        f[&b'M'],
        "prepared statement \"\u{fffd}\u{fffd}\" does not exist"
    );
}

#[tokio::test]
async fn lru_eviction_closes_and_reprepares() {
    let s = start("default_pool_size = 1\nmax_prepared_statements = 2");
    let mut c = raw_login(&s).await;
    for i in 0..4 {
        c.send(&[parse(&format!("e{i}"), &format!("SELECT {i}")), sync()].concat())
            .await;
        assert_eq!(tags(&read_until(&mut c, b'Z').await), "1Z");
    }
    // e0 and e1 were evicted from the server; binding them re-prepares transparently.
    for i in 0..4 {
        c.send(&[bind(&format!("e{i}")), execute(), sync()].concat())
            .await;
        let got = read_until(&mut c, b'Z').await;
        assert_eq!(tags(&got), "2DCZ", "statement e{i}");
        assert_eq!(first_value(&got), i.to_string());
    }
    c.send(
        &[
            parse("", "SELECT count(*) FROM pg_prepared_statements"),
            bind(""),
            execute(),
            sync(),
        ]
        .concat(),
    )
    .await;
    let got = read_until(&mut c, b'Z').await;
    let n: i32 = first_value(&got).parse().unwrap();
    assert!(n <= 2, "server holds at most max_prepared_statements: {n}");
}

#[tokio::test]
async fn session_mode_passes_names_through_untouched() {
    let s = start("pool_mode = session");
    let mut c = raw_login(&s).await;
    c.send(&[parse("mine", "SELECT 5"), sync()].concat()).await;
    assert_eq!(tags(&read_until(&mut c, b'Z').await), "1Z");
    c.send(
        &[
            parse("", "SELECT name FROM pg_prepared_statements"),
            bind(""),
            execute(),
            sync(),
        ]
        .concat(),
    )
    .await;
    assert_eq!(first_value(&read_until(&mut c, b'Z').await), "mine");
}

#[tokio::test]
async fn parse_and_bind_counters_in_show_stats() {
    let s = start("default_pool_size = 1\nadmin_users = trust_user");
    let mut c = raw_login(&s).await;
    c.send(&[parse("k", "SELECT 1"), bind("k"), execute(), sync()].concat())
        .await;
    read_until(&mut c, b'Z').await;
    c.send(&[bind("k"), execute(), sync()].concat()).await;
    read_until(&mut c, b'Z').await;
    // Unnamed statements pass through uncounted, as in PgBouncer.
    c.send(&[parse("", "SELECT 2"), bind(""), execute(), sync()].concat())
        .await;
    read_until(&mut c, b'Z').await;
    let mut console = Console::connect(s.port, "trust_user", "").await.unwrap();
    let t = console.query("SHOW STATS_TOTALS").await.unwrap();
    let n = |col: &str| t.get("app", col).unwrap().parse::<i64>().unwrap();
    assert_eq!(n("client_parse_count"), 1);
    assert_eq!(n("server_parse_count"), 1);
    assert_eq!(n("bind_count"), 2);
    // SHOW CLIENTS: the client's names; SHOW SERVERS: what the server has prepared (one
    // statement for two names with the same text).
    c.send(&[parse("k2", "SELECT 1"), sync()].concat()).await;
    read_until(&mut c, b'Z').await;
    let prepared_of = |r: &sluice_e2e::ConsoleResult| {
        let db = r.col("database");
        r.find("prepared_statements", |row| {
            row[db].as_deref() == Some("app")
        })
        .unwrap()
    };
    let clients = console.query("SHOW CLIENTS").await.unwrap();
    assert_eq!(prepared_of(&clients), "2");
    let servers = console.query("SHOW SERVERS").await.unwrap();
    assert_eq!(prepared_of(&servers), "1");
}
