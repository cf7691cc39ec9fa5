//! The read-routing classifier (`sluice::route`) against a real PostgreSQL: every statement it
//! proves to be a read runs inside a READ ONLY transaction (the read-only rule a hot standby
//! applies to every transaction) without SQLSTATE 25006, and what it finds inside reads
//! (data-modifying CTEs, locking clauses, SELECT INTO, nextval/setval) is refused there with
//! 25006. A write hidden in a function passes as a read and is refused with 25006: the error the
//! pool is to replay on the primary.

use sluice::route::{classify, PrimaryWhy, Verdict};
use sluice_e2e::PgCluster;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

const SETUP: &str = "
DROP TABLE IF EXISTS route_t, route_log;
DROP SEQUENCE IF EXISTS route_s;
CREATE TABLE route_t (id int PRIMARY KEY, a int);
INSERT INTO route_t SELECT g, g % 3 FROM generate_series(1, 5) g;
CREATE TABLE route_log (msg text);
CREATE SEQUENCE route_s;
CREATE OR REPLACE FUNCTION route_reader() RETURNS bigint LANGUAGE sql STABLE
  AS 'SELECT count(*) FROM route_t';
CREATE OR REPLACE FUNCTION route_writer() RETURNS int LANGUAGE plpgsql
  AS $$ BEGIN INSERT INTO route_log VALUES ('hidden'); RETURN 1; END $$;
";

/// The tables and functions, made once per test process (the tests run side by side).
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        PgCluster::get().psql("app", SETUP);
    });
}

async fn client() -> tokio_postgres::Client {
    setup();
    let pg = PgCluster::get();
    let (client, conn) = tokio_postgres::connect(&pg.direct_conn_str("postgres", "", "app"), NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Run `sql` in a READ ONLY transaction; the SQLSTATE of its error, if any.
async fn read_only(c: &tokio_postgres::Client, sql: &str) -> Option<SqlState> {
    c.batch_execute("BEGIN READ ONLY").await.unwrap();
    let result = c.simple_query(sql).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    result
        .err()
        .map(|e| e.code().cloned().unwrap_or(SqlState::INTERNAL_ERROR))
}

#[tokio::test]
async fn proven_reads_run_in_a_read_only_transaction() {
    let c = client().await;
    let reads = [
        "SELECT * FROM route_t WHERE id = 1",
        "select count(*), max(a) FROM route_t GROUP BY a % 2",
        "WITH x AS (SELECT id FROM route_t) SELECT * FROM x",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r",
        "WITH m AS MATERIALIZED (SELECT a FROM route_t) SELECT sum(a) FROM m",
        "VALUES (1), (2)",
        "TABLE route_t",
        "SHOW search_path",
        "EXPLAIN SELECT * FROM route_t",
        "EXPLAIN ANALYZE SELECT * FROM route_t WHERE a = 1",
        "(SELECT 1) UNION (SELECT 2)",
        "SELECT 'INSERT INTO route_t VALUES (9)', $$ DELETE FROM route_t $$ -- FOR UPDATE",
        "SELECT \"id\" /* INTO route_copy */ FROM route_t",
        "SELECT E'it\\'s INTO x', $q$ nextval('route_s') $q$",
        "SELECT * FROM generate_series(1, 3) AS g(i)",
        "SELECT now(), lower('X'), coalesce(NULL, 1), to_char(now(), 'YYYY')",
        "SELECT route_reader()",
        "SELECT 1; SELECT 2; TABLE route_t",
    ];
    for sql in reads {
        let verdict = classify(sql.as_bytes()).verdict;
        assert!(
            matches!(
                verdict,
                Verdict::ProvenRead { .. } | Verdict::FollowsSession
            ),
            "{sql}: {verdict:?}"
        );
        assert_eq!(read_only(&c, sql).await, None, "{sql} failed read only");
    }
    for sql in [
        "BEGIN READ ONLY; SELECT * FROM route_t; COMMIT",
        "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; TABLE route_t; COMMIT",
        "START TRANSACTION READ ONLY; SELECT 1; COMMIT",
        "BEGIN; SET TRANSACTION READ ONLY; SELECT 1; COMMIT",
    ] {
        let verdict = classify(sql.as_bytes()).verdict;
        assert!(
            matches!(verdict, Verdict::DeclaredReadOnly(_)),
            "{sql}: {verdict:?}"
        );
        c.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test]
async fn writes_found_inside_reads_are_refused_read_only() {
    let c = client().await;
    let writes = [
        (
            "WITH d AS (DELETE FROM route_t WHERE id = 1 RETURNING *) SELECT * FROM d",
            PrimaryWhy::DataModifying,
        ),
        (
            "WITH i AS (INSERT INTO route_t VALUES (100, 1) RETURNING id) SELECT id FROM i",
            PrimaryWhy::DataModifying,
        ),
        (
            "WITH u AS (UPDATE route_t SET a = 0 RETURNING id) SELECT count(*) FROM u",
            PrimaryWhy::DataModifying,
        ),
        (
            "SELECT * FROM route_t FOR UPDATE",
            PrimaryWhy::LockingClause,
        ),
        (
            "SELECT * FROM route_t FOR NO KEY UPDATE",
            PrimaryWhy::LockingClause,
        ),
        ("SELECT * FROM route_t FOR SHARE", PrimaryWhy::LockingClause),
        (
            "SELECT * FROM route_t FOR KEY SHARE",
            PrimaryWhy::LockingClause,
        ),
        (
            "SELECT * INTO route_copy FROM route_t",
            PrimaryWhy::SelectInto,
        ),
    ];
    for (sql, why) in writes {
        assert_eq!(
            classify(sql.as_bytes()).verdict,
            Verdict::Primary(why),
            "{sql}"
        );
        assert_eq!(
            read_only(&c, sql).await,
            Some(SqlState::READ_ONLY_SQL_TRANSACTION),
            "{sql}"
        );
    }
    for sql in ["SELECT nextval('route_s')", "SELECT setval('route_s', 5)"] {
        assert!(
            matches!(
                classify(sql.as_bytes()).verdict,
                Verdict::Primary(PrimaryWhy::Name(..))
            ),
            "{sql}"
        );
        assert_eq!(
            read_only(&c, sql).await,
            Some(SqlState::READ_ONLY_SQL_TRANSACTION),
            "{sql}"
        );
    }
}

#[tokio::test]
async fn a_write_hidden_in_a_function_passes_as_a_read_and_fails_with_25006() {
    let c = client().await;
    let sql = "SELECT route_writer()";
    assert_eq!(
        classify(sql.as_bytes()).verdict,
        Verdict::ProvenRead {
            kind: sluice::route::ReadKind::Select,
            unknown_calls: true
        }
    );
    assert_eq!(
        read_only(&c, sql).await,
        Some(SqlState::READ_ONLY_SQL_TRANSACTION)
    );
    let rows = c
        .query_one("SELECT count(*) FROM route_log", &[])
        .await
        .unwrap();
    assert_eq!(rows.get::<_, i64>(0), 0, "nothing was written");
}
