//! Read routing (`route_reads`) against a real primary and a streaming standby
//! (`sluice_e2e::ReplicaSet`): explicit mode sends transactions declared read only to the standby
//! and the rest to the primary; auto mode also sends single reads there and keeps what writes or
//! locks (nextval, data-modifying CTEs, FOR UPDATE) on the primary, and replays on the primary a
//! read the standby refused with 25006 before any row went out; a client reads its own writes
//! while the standby's replay is paused (its reads go to the primary) while a client that wrote
//! nothing reads from the standby; route_reads = off sends everything to the primary.

use sluice_e2e::{
    free_port, host_list, metrics, sample, start_over_replicas, Console, PgNode, ReplicaSet, Sluice,
};
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
