//! Read routing (`route_reads`) against a real primary and a streaming standby
//! (`sluice_e2e::ReplicaSet`): explicit mode sends transactions declared read only to the standby
//! and the rest to the primary; auto mode also sends single reads there and keeps what writes or
//! locks (nextval, data-modifying CTEs, FOR UPDATE) on the primary, and replays on the primary a
//! read the standby refused with 25006 before any row went out; a client reads its own writes
//! while the standby's replay is paused (its reads go to the primary) while a client that wrote
//! nothing reads from the standby; route_reads = off sends everything to the primary.
//! Statements prepared in one batch and bound in later ones (tokio-postgres' prepare, as JDBC and
//! asyncpg do) are routed as the same texts sent as simple queries, and the 25006 replay covers
//! extended-protocol batches too.

use std::time::Duration;

use sluice_e2e::{
    free_port, host_list, metrics, sample, start_over_replicas, Console, PgNode, RawConn,
    ReplicaSet, Sluice,
};
use tokio_postgres::types::Type;
use tokio_postgres::SimpleQueryMessage;

fn hosts(nodes: &[&PgNode]) -> String {
    format!("{} target_session_attrs=read-write", host_list(nodes))
}

fn start(databases: &str) -> Sluice {
    start_over_replicas(databases, "")
}

async fn client(s: &Sluice, db: &str) -> tokio_postgres::Client {
    s.connect("postgres", "", db)
        .await
        .unwrap_or_else(|e| panic!("connect to {db}: {e}; log:\n{}", s.log()))
}

/// The first column of the first row of a simple query (its last statement's rows).
async fn one(c: &tokio_postgres::Client, sql: &str) -> Result<String, tokio_postgres::Error> {
    let msgs = c.simple_query(sql).await?;
    Ok(msgs
        .iter()
        .rev()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("").to_string()),
            _ => None,
        })
        .unwrap_or_default())
}

/// SHOW STATS' total_xact_count of a database.
async fn xacts(s: &Sluice, db: &str) -> u64 {
    let mut con = Console::connect(s.port, "postgres", "").await.unwrap();
    let r = con.query("SHOW STATS").await.unwrap();
    let (d, x) = (r.col("database"), r.col("total_xact_count"));
    r.rows
        .iter()
        .find(|row| row[d].as_deref() == Some(db))
        .and_then(|row| row[x].as_deref()?.parse().ok())
        .unwrap_or(0)
}

const PORT: &str = "SELECT current_setting('port')";

fn make_table(primary: &PgNode) {
    primary.psql(
        "postgres",
        "CREATE TABLE t(id bigserial PRIMARY KEY, v int)",
    );
}

/// Wait until the standby has replayed the primary's current position.
fn caught_up(primary: &PgNode, standby: &PgNode) {
    let target = primary.psql("postgres", "SELECT pg_current_wal_lsn()");
    for _ in 0..200 {
        let done = standby.psql(
            "postgres",
            &format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"),
        );
        if done == "t" {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("standby did not replay up to {target}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_routes_declared_read_only_transactions_and_off_routes_nothing() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    caught_up(p, sb);
    let dbs = format!(
        "ex = {h} route_reads=explicit\noff = {h} route_reads=off\n",
        h = hosts(&[p, sb])
    );
    let s = start(&dbs);
    let (pp, sp) = (p.port.to_string(), sb.port.to_string());

    let c = client(&s, "ex").await;
    c.simple_query("BEGIN READ ONLY").await.unwrap();
    assert_eq!(one(&c, PORT).await.unwrap(), sp, "{}", s.log());
    assert_eq!(one(&c, "SELECT pg_is_in_recovery()").await.unwrap(), "t");
    c.simple_query("COMMIT").await.unwrap();
    // Not declared: the primary, reads and writes alike.
    assert_eq!(one(&c, PORT).await.unwrap(), pp);
    assert_eq!(
        one(&c, "INSERT INTO t(v) VALUES (1) RETURNING v")
            .await
            .unwrap(),
        "1"
    );
    c.simple_query("BEGIN").await.unwrap();
    assert_eq!(one(&c, "SELECT pg_is_in_recovery()").await.unwrap(), "f");
    c.simple_query("COMMIT").await.unwrap();
    // A client that wrote nothing reads from the standby in a transaction declared read only
    // (START TRANSACTION form, in one text with its statements).
    let fresh = client(&s, "ex").await;
    assert_eq!(
        one(
            &fresh,
            "START TRANSACTION READ ONLY; SELECT current_setting('port'); COMMIT"
        )
        .await
        .unwrap(),
        sp
    );

    // default_transaction_read_only on for the session: its plain reads may go to a standby
    // (once a poll after its SET has shown the standby caught up).
    let ro = client(&s, "ex").await;
    ro.simple_query("SET default_transaction_read_only = on")
        .await
        .unwrap();
    let mut on_standby = false;
    for _ in 0..30 {
        if one(&ro, PORT).await.unwrap() == sp {
            on_standby = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(on_standby, "{}", s.log());
    // A write fails there as it would on the primary (the session asked for read only).
    let err = ro
        .simple_query("INSERT INTO t(v) VALUES (3)")
        .await
        .expect_err("read-only session");
    assert_eq!(err.code().map(|c| c.code()), Some("25006"));

    // SHOW POOLS: one row for the database, its servers on both hosts counted there.
    let mut con = Console::connect(s.port, "postgres", "").await.unwrap();
    let r = con.query("SHOW POOLS").await.unwrap();
    let (db, active, idle) = (r.col("database"), r.col("sv_active"), r.col("sv_idle"));
    let rows: Vec<_> = r
        .rows
        .iter()
        .filter(|row| row[db].as_deref() == Some("ex"))
        .collect();
    assert_eq!(rows.len(), 1, "{:?}", r.rows);
    let n = |i: usize| {
        rows[0][i]
            .as_deref()
            .unwrap_or("0")
            .parse::<usize>()
            .unwrap()
    };
    assert!(n(active) + n(idle) >= 2, "{:?}", rows[0]);

    let off = client(&s, "off").await;
    off.simple_query("BEGIN READ ONLY").await.unwrap();
    assert_eq!(one(&off, PORT).await.unwrap(), pp);
    off.simple_query("COMMIT").await.unwrap();
    assert_eq!(one(&off, PORT).await.unwrap(), pp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_routes_proven_reads_and_keeps_writes_and_locks_on_the_primary() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    caught_up(p, sb);
    let dbs = format!("au = {} route_reads=auto\n", hosts(&[p, sb]));
    let mport = free_port();
    let s = start_over_replicas(&dbs, &format!("metrics_listen_addr = 127.0.0.1:{mport}"));
    let sp = sb.port.to_string();
    let counter = |text: &str, name: &str| {
        sample(
            text,
            &format!("{name}{{host=\"127.0.0.1\",port=\"{}\"}}", sb.port),
        )
    };

    let reader = client(&s, "au").await;
    assert_eq!(one(&reader, PORT).await.unwrap(), sp, "{}", s.log());
    // Routed transactions count in the database's SHOW STATS row.
    let before = xacts(&s, "au").await;
    for _ in 0..3 {
        assert_eq!(one(&reader, PORT).await.unwrap(), sp);
    }
    assert!(xacts(&s, "au").await >= before + 3);
    // Each of these fails with 25006 on a standby: success says the primary ran it.
    let writer = client(&s, "au").await;
    for sql in [
        "SELECT nextval('t_id_seq')",
        "WITH x AS (INSERT INTO t(v) VALUES (2) RETURNING v) SELECT v FROM x",
        "SELECT v FROM t FOR UPDATE",
        "SELECT pg_is_in_recovery()",
    ] {
        writer
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}; log:\n{}", s.log()));
    }
    assert_eq!(
        one(&writer, "SELECT pg_is_in_recovery()").await.unwrap(),
        "f"
    );

    // A write hidden in a function passes as a read: the standby refuses it with 25006 before
    // any row went out, and the pool runs it on the primary; the client sees success.
    p.psql(
        "postgres",
        "CREATE FUNCTION hidden_write(x int) RETURNS int LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO t(v) VALUES (x); RETURN x; END $$",
    );
    caught_up(p, sb);
    let hidden = client(&s, "au").await;
    assert_eq!(
        one(&hidden, "SELECT hidden_write(77)")
            .await
            .unwrap_or_else(|e| panic!("{e}; log:\n{}", s.log())),
        "77"
    );
    assert_eq!(
        p.psql("postgres", "SELECT count(*) FROM t WHERE v = 77"),
        "1"
    );
    let m = metrics(mport).await;
    assert_eq!(counter(&m, "sluice_host_reads_replayed_total"), 1.0, "{m}");
    assert_eq!(counter(&m, "sluice_host_routed_reads_total"), 5.0, "{m}");
    // Rows went to the client before the write failed: the error is the client's.
    let late = client(&s, "au").await;
    let err = late
        .simple_query(
            "SELECT CASE WHEN i < 3 THEN i ELSE hidden_write(88) END FROM generate_series(1, 5) i",
        )
        .await
        .expect_err("the standby refuses the write after two rows");
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("25006"),
        "{err}; log:\n{}",
        s.log()
    );
    assert_eq!(
        p.psql("postgres", "SELECT count(*) FROM t WHERE v = 88"),
        "0"
    );
    // The refused client carries on.
    assert_eq!(one(&late, "SELECT 1").await.unwrap(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_its_own_writes_while_the_standby_lags() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    caught_up(p, sb);
    let dbs = format!("au = {} route_reads=auto\n", hosts(&[p, sb]));
    let s = start(&dbs);
    let (pp, sp) = (p.port.to_string(), sb.port.to_string());
    sb.psql("postgres", "SELECT pg_wal_replay_pause()");

    let writer = client(&s, "au").await;
    let other = client(&s, "au").await;
    for i in 0..10 {
        let id = one(
            &writer,
            &format!("INSERT INTO t(v) VALUES ({i}) RETURNING id"),
        )
        .await
        .unwrap();
        let seen = one(
            &writer,
            &format!("SELECT current_setting('port') || ':' || count(*) FROM t WHERE id = {id}"),
        )
        .await
        .unwrap();
        assert_eq!(seen, format!("{pp}:1"), "read {i} after its write");
        if i == 5 {
            // Later reads come after the checker's polls of the paused standby: still the primary.
            tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        }
    }
    // A client with no writes may read from the standby (it has seen nothing newer).
    assert_eq!(one(&other, PORT).await.unwrap(), sp, "{}", s.log());
    sb.psql("postgres", "SELECT pg_wal_replay_resume()");
}

/// The text of the first column of a prepared statement's single row.
async fn bound(
    s: &Sluice,
    c: &tokio_postgres::Client,
    stmt: &tokio_postgres::Statement,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> String {
    c.query_one(stmt, params)
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", s.log()))
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_prepared_in_one_batch_and_bound_later_are_routed() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    caught_up(p, sb);
    let dbs = format!("au = {} route_reads=auto\n", hosts(&[p, sb]));
    let mport = free_port();
    let s = start_over_replicas(&dbs, &format!("metrics_listen_addr = 127.0.0.1:{mport}"));
    let (pp, sp) = (p.port.to_string(), sb.port.to_string());
    let routed = |text: &str| {
        sample(
            text,
            &format!(
                "sluice_host_routed_reads_total{{host=\"127.0.0.1\",port=\"{}\"}}",
                sb.port
            ),
        )
    };

    // tokio-postgres prepares a statement in a batch of its own (Parse, Describe, Sync: nothing
    // runs; a proven read's prepare goes where the read would) and binds it in later ones (Bind,
    // Execute, Sync): a proven read runs on the standby, re-prepared there by the pooler when the
    // server at hand lacks it.
    let c = client(&s, "au").await;
    let port = c.prepare(PORT).await.unwrap();
    let count = c
        .prepare("SELECT current_setting('port') || ':' || count(*) FROM t WHERE v = $1")
        .await
        .unwrap();
    let before = routed(&metrics(mport).await);
    for _ in 0..3 {
        assert_eq!(bound(&s, &c, &port, &[]).await, sp, "{}", s.log());
    }
    assert_eq!(bound(&s, &c, &count, &[&5i32]).await, format!("{sp}:0"));
    assert_eq!(routed(&metrics(mport).await), before + 4.0);
    // One Parse/Bind/Describe/Execute/Sync batch of an unnamed statement (query_typed): the same.
    let typed = c.query_typed(PORT, &[]).await.unwrap();
    assert_eq!(typed[0].get::<_, String>(0), sp);

    // A write and a read that needs the primary, prepared the same way, run on the primary (on
    // the standby they would fail with 25006).
    let write = c
        .prepare("INSERT INTO t(v) VALUES ($1) RETURNING current_setting('port')")
        .await
        .unwrap();
    let next = c
        .prepare("SELECT current_setting('port') || ':' || nextval('t_id_seq')")
        .await
        .unwrap();
    let locked = c
        .prepare("SELECT current_setting('port') FROM t WHERE v = $1 FOR UPDATE")
        .await
        .unwrap();
    assert_eq!(bound(&s, &c, &write, &[&5i32]).await, pp);
    assert!(bound(&s, &c, &next, &[])
        .await
        .starts_with(&format!("{pp}:")));
    assert_eq!(bound(&s, &c, &locked, &[&5i32]).await, pp);

    // Read-your-writes holds for bound statements: with the standby's replay paused, a client's
    // reads after its writes run on the primary and see them; a client that wrote nothing still
    // reads from the standby.
    sb.psql("postgres", "SELECT pg_wal_replay_pause()");
    for i in 0..5 {
        assert_eq!(bound(&s, &c, &write, &[&(100 + i)]).await, pp);
        assert_eq!(
            bound(&s, &c, &count, &[&(100 + i)]).await,
            format!("{pp}:1"),
            "read {i} after its write; log:\n{}",
            s.log()
        );
    }
    let other = client(&s, "au").await;
    let theirs = other.prepare(PORT).await.unwrap();
    assert_eq!(bound(&s, &other, &theirs, &[]).await, sp);
    sb.psql("postgres", "SELECT pg_wal_replay_resume()");
}

/// Log in over a raw connection (trust) to database `db` of `s`.
async fn raw_login(s: &Sluice, db: &str) -> RawConn {
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "postgres"),
        ("database", db),
    ]))
    .await;
    until_ready(&mut c).await;
    c
}

/// Every message up to and including ReadyForQuery.
async fn until_ready(c: &mut RawConn) -> Vec<(u8, Vec<u8>)> {
    let mut msgs = Vec::new();
    loop {
        let m = c
            .read_message(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("no ReadyForQuery (hang or close) after {msgs:?}"));
        let done = m.0 == b'Z';
        msgs.push(m);
        if done {
            return msgs;
        }
    }
}

/// Parse (when `parse` is given, under `name`), Bind of `name` (with one text parameter when
/// `param` is given), Execute, Sync: one write.
fn batch(name: &str, parse: Option<&str>, param: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(text) = parse {
        let body = [name.as_bytes(), b"\0", text.as_bytes(), b"\0\0\0"].concat();
        out.extend(RawConn::message(b'P', &body));
    }
    let mut bind = [b"\0", name.as_bytes(), b"\0\0\0"].concat();
    match param {
        Some(v) => {
            bind.extend_from_slice(&1u16.to_be_bytes());
            bind.extend_from_slice(&(v.len() as u32).to_be_bytes());
            bind.extend_from_slice(v.as_bytes());
        }
        None => bind.extend_from_slice(&0u16.to_be_bytes()),
    }
    bind.extend_from_slice(&0u16.to_be_bytes());
    out.extend(RawConn::message(b'B', &bind));
    out.extend(RawConn::message(b'E', b"\0\0\0\0\0"));
    out.extend(RawConn::message(b'S', b""));
    out
}

/// The tags of `msgs`.
fn tags(msgs: &[(u8, Vec<u8>)]) -> Vec<u8> {
    msgs.iter().map(|m| m.0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_read_the_standby_refuses_runs_on_the_primary() {
    let set = ReplicaSet::new(1);
    let (p, sb) = (&set.nodes[0], &set.nodes[1]);
    make_table(p);
    p.psql(
        "postgres",
        "CREATE FUNCTION hidden_write(x int) RETURNS int LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO t(v) VALUES (x); RETURN x; END $$",
    );
    caught_up(p, sb);
    let dbs = format!("au = {} route_reads=auto pool_size=1\n", hosts(&[p, sb]));
    let mport = free_port();
    let s = start_over_replicas(&dbs, &format!("metrics_listen_addr = 127.0.0.1:{mport}"));
    let replayed = |text: &str| {
        sample(
            text,
            &format!(
                "sluice_host_reads_replayed_total{{host=\"127.0.0.1\",port=\"{}\"}}",
                sb.port
            ),
        )
    };
    let on_primary = |v: i32| p.psql("postgres", &format!("SELECT count(*) FROM t WHERE v = {v}"));

    // Prepared in one batch, bound in the next: the standby refuses the hidden write with 25006
    // before any row, and the batch runs again on the primary; the client sees its row.
    let c = client(&s, "au").await;
    let hidden = c.prepare("SELECT hidden_write($1)").await.unwrap();
    let got: i32 = c
        .query_one(&hidden, &[&78i32])
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", s.log()))
        .get(0);
    assert_eq!(got, 78);
    assert_eq!(on_primary(78), "1");
    assert_eq!(replayed(&metrics(mport).await), 1.0, "{}", s.log());
    // An unnamed statement parsed, bound and executed in one batch (a client's first
    // transaction: the standby): the same.
    let typed = client(&s, "au").await;
    let rows = typed
        .query_typed("SELECT hidden_write($1)", &[(&79i32, Type::INT4)])
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", s.log()));
    assert_eq!(rows[0].get::<_, i32>(0), 79);
    assert_eq!(on_primary(79), "1");
    assert_eq!(replayed(&metrics(mport).await), 2.0);
    // Rows reached the client before the write failed: the error is the client's, and it
    // carries on.
    let c = client(&s, "au").await;
    let late = c
        .prepare(
            "SELECT CASE WHEN i < 3 THEN i ELSE hidden_write(88) END FROM generate_series(1, 5) i",
        )
        .await
        .unwrap();
    let err = c
        .query(&late, &[])
        .await
        .expect_err("refused after two rows");
    assert_eq!(err.code().map(|c| c.code()), Some("25006"), "{err}");
    assert_eq!(on_primary(88), "0");
    assert_eq!(replayed(&metrics(mport).await), 2.0);
    assert_eq!(one(&c, "SELECT 1").await.unwrap(), "1");

    // A batch that parses a named statement (JDBC's first run of a statement it keeps): the
    // refused batch runs again on the primary, the name parsed again there; the client sees
    // each reply once.
    let mut raw = raw_login(&s, "au").await;
    raw.send(&batch("q1", Some("SELECT hidden_write(99)"), None))
        .await;
    let msgs = until_ready(&mut raw).await;
    assert_eq!(tags(&msgs), b"12DCZ", "{msgs:?}; log:\n{}", s.log());
    assert_eq!(on_primary(99), "1");
    assert_eq!(replayed(&metrics(mport).await), 3.0);
    // A statement the standby's server has already: the pooler answers the client's Parse
    // itself, and holds that ParseComplete back with the rest until the standby took the read
    // (pool_size = 1: the second client gets the first one's standby server).
    const MAYBE: &str = "SELECT CASE WHEN $1 THEN hidden_write(100) ELSE 0 END";
    let mut a = raw_login(&s, "au").await;
    a.send(&batch("qa", Some(MAYBE), Some("f"))).await;
    let msgs = until_ready(&mut a).await;
    assert_eq!(tags(&msgs), b"12DCZ", "{msgs:?}");
    assert_eq!(
        replayed(&metrics(mport).await),
        3.0,
        "it ran on the standby"
    );
    let mut b = raw_login(&s, "au").await;
    b.send(&batch("qb", Some(MAYBE), Some("t"))).await;
    let msgs = until_ready(&mut b).await;
    assert_eq!(tags(&msgs), b"12DCZ", "{msgs:?}; log:\n{}", s.log());
    assert_eq!(on_primary(100), "1");
    assert_eq!(replayed(&metrics(mport).await), 4.0);
    // A read with a write pipelined behind it in the same write: both run on the primary (on
    // the read's standby the write would fail with 25006).
    let mut piped = raw_login(&s, "au").await;
    let two = [
        RawConn::message(b'Q', b"SELECT 1\0"),
        RawConn::message(b'Q', b"INSERT INTO t(v) VALUES (101)\0"),
    ]
    .concat();
    piped.send(&two).await;
    let first = until_ready(&mut piped).await;
    let second = until_ready(&mut piped).await;
    assert_eq!(tags(&first), b"TDCZ", "{first:?}");
    assert_eq!(tags(&second), b"CZ", "{second:?}; log:\n{}", s.log());
    assert_eq!(on_primary(101), "1");
    // The replayed statements are the clients' as any other: bound again, they run.
    raw.send(&batch("q1", None, None)).await;
    let msgs = until_ready(&mut raw).await;
    assert_eq!(tags(&msgs), b"2DCZ", "{msgs:?}; log:\n{}", s.log());
    assert_eq!(on_primary(99), "2");
}
