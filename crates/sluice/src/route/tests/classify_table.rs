//! The classifier over a table of statements: tricky quoting, comments, CTEs, functions, and
//! every name on the needs-the-primary list.

use crate::route::classify::*;
use crate::route::NeedsPrimary;
use crate::session_state::LexOptions;

use PrimaryWhy::*;
use ReadKind::*;

fn read(kind: ReadKind) -> Verdict {
    Verdict::ProvenRead {
        kind,
        unknown_calls: false,
    }
}

fn read_calling(kind: ReadKind) -> Verdict {
    Verdict::ProvenRead {
        kind,
        unknown_calls: true,
    }
}

fn primary(why: PrimaryWhy) -> Verdict {
    Verdict::Primary(why)
}

fn name(n: &'static str, what: NeedsPrimary) -> Verdict {
    Verdict::Primary(Name(n, what))
}

#[test]
fn statements() {
    use NeedsPrimary::{Role, ServerLocal, Writes};
    let table: &[(&str, Verdict)] = &[
        // Plain reads.
        ("SELECT 1", read(Select)),
        ("select * from t where id = $1", read(Select)),
        ("  SELECT 1;  ", read(Select)),
        ("SELECT 1;;", read(Select)),
        ("VALUES (1), (2)", read(Values)),
        ("TABLE accounts", read(Table)),
        ("SHOW search_path", read(Show)),
        ("SHOW ALL", read(Show)),
        ("(SELECT 1) UNION (SELECT 2)", read(Select)),
        ("((VALUES (1)))", read(Values)),
        ("WITH a AS (SELECT 1) SELECT * FROM a", read(With)),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n < 5) SELECT n FROM r", read_calling(With)),
        ("WITH m AS MATERIALIZED (SELECT 1) SELECT * FROM m", read(With)),
        ("SELECT count(*), max(x), coalesce(y, 0) FROM t GROUP BY z", read(Select)),
        ("SELECT * FROM t WHERE a IN (1,2) AND EXISTS (SELECT 1)", read(Select)),
        ("SELECT x::numeric(10,2), CAST(y AS varchar(5)) FROM t", read(Select)),
        ("SELECT row_number() OVER (PARTITION BY a ORDER BY b) FROM t", read(Select)),
        ("SELECT * FROM t1 JOIN t2 ON (t1.id = t2.id)", read(Select)),
        ("EXPLAIN SELECT 1", read(Explain)),
        ("EXPLAIN ANALYZE VERBOSE SELECT * FROM t", read(Explain)),
        ("EXPLAIN (ANALYZE, BUFFERS) WITH a AS (SELECT 1) SELECT * FROM a", read(Explain)),
        // Keywords hidden in strings, comments and quoted names do not count.
        ("SELECT 'INSERT INTO t VALUES (1)'", read(Select)),
        ("SELECT 'nextval(''s'')', 'FOR UPDATE'", read(Select)),
        ("SELECT $$ DELETE FROM t $$", read(Select)),
        ("SELECT $tag$ it's $$ UPDATE $$ inside $tag$", read(Select)),
        ("SELECT E'\\' INTO x'", read(Select)),
        ("SELECT 1 -- FOR UPDATE\n", read(Select)),
        ("SELECT /* INTO /* nested */ still comment */ 1", read(Select)),
        ("/* leading */ -- and\n SELECT 1", read(Select)),
        ("SELECT \"insert\", \"for\" FROM \"update\"", read(Select)),
        ("SELECT \"NextVal\"('x')", read_calling(Select)),
        // Reads that are not provably reads.
        ("SELECT * FROM t FOR UPDATE", primary(LockingClause)),
        ("SELECT * FROM t FOR NO KEY UPDATE OF t NOWAIT", primary(LockingClause)),
        ("SELECT * FROM t FOR SHARE SKIP LOCKED", primary(LockingClause)),
        ("select * from t for key share", primary(LockingClause)),
        ("SELECT * FROM (SELECT * FROM t FOR UPDATE) s", primary(LockingClause)),
        ("SELECT * INTO new_t FROM t", primary(SelectInto)),
        ("SELECT 1 INTO TEMP x", primary(SelectInto)),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", primary(DataModifying)),
        ("WITH i AS (INSERT INTO t VALUES (1) RETURNING id) SELECT id FROM i", primary(DataModifying)),
        ("WITH u AS (UPDATE t SET a = 1 RETURNING *) SELECT 1", primary(DataModifying)),
        ("WITH m AS (MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE RETURNING *) SELECT 1", primary(DataModifying)),
        ("EXPLAIN ANALYZE DELETE FROM t", primary(NotARead("EXPLAIN"))),
        ("EXPLAIN (ANALYZE) INSERT INTO t VALUES (1)", primary(NotARead("EXPLAIN"))),
        // Unknown functions: a read that may call anything (UnknownFunctions::Standby).
        ("SELECT my_func(1)", read_calling(Select)),
        ("SELECT app.compute_total(o.id) FROM orders o", read_calling(Select)),
        ("SELECT * FROM generate_series(1, 3) AS g(i)", read_calling(Select)),
        // Names that need the primary (all of the issue's list, and more).
        ("SELECT nextval('s')", name("nextval", Writes)),
        ("SELECT pg_catalog.NEXTVAL('s')", name("nextval", Writes)),
        ("SELECT \"nextval\"('s')", name("nextval", Writes)),
        ("SELECT setval('s', 10)", name("setval", Writes)),
        ("SELECT currval('s')", name("currval", ServerLocal)),
        ("SELECT lastval()", name("lastval", ServerLocal)),
        ("VALUES (nextval('s'))", name("nextval", Writes)),
        ("SELECT pg_advisory_lock(1)", name("pg_advisory_", ServerLocal)),
        ("SELECT pg_advisory_xact_lock_shared(1)", name("pg_advisory_", ServerLocal)),
        ("SELECT pg_try_advisory_lock(1)", name("pg_try_advisory_", ServerLocal)),
        ("SELECT pg_advisory_unlock_all()", name("pg_advisory_", ServerLocal)),
        ("SELECT pg_notify('c', 'x')", name("pg_notify", Writes)),
        ("SELECT txid_current()", name("txid_", Writes)),
        ("SELECT pg_current_xact_id()", name("pg_current_", Writes)),
        ("SELECT set_config('a.b', 'c', false)", name("set_config", ServerLocal)),
        ("SELECT lo_create(0)", name("lo_", Writes)),
        ("SELECT lo_unlink(42)", name("lo_", Writes)),
        ("SELECT lowrite(0, 'x')", name("lowrite", Writes)),
        ("SELECT * FROM dblink('db', 'delete from t') AS x(a int)", name("dblink", Writes)),
        ("SELECT dblink_exec('db', 'delete from t')", name("dblink", Writes)),
        ("SELECT pg_cancel_backend(123)", name("pg_cancel_backend", ServerLocal)),
        ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity", name("pg_terminate_backend", ServerLocal)),
        ("SELECT pg_reload_conf()", name("pg_reload_conf", ServerLocal)),
        ("SELECT pg_switch_wal()", name("pg_switch_wal", Writes)),
        ("SELECT pg_create_logical_replication_slot('s', 'pgoutput')", name("pg_create_", Writes)),
        ("SELECT pg_create_physical_replication_slot('s')", name("pg_create_", Writes)),
        ("SELECT pg_drop_replication_slot('s')", name("pg_drop_", Writes)),
        ("SELECT * FROM pg_logical_slot_get_changes('s', NULL, NULL)", name("pg_logical_", Writes)),
        ("SELECT pg_is_in_recovery()", name("pg_is_in_recovery", Role)),
        ("SELECT pg_current_wal_lsn()", name("pg_current_", Writes)),
        ("SELECT pg_last_wal_replay_lsn()", name("pg_last_", Role)),
        ("SHOW transaction_read_only", name("transaction_read_only", Role)),
        ("SHOW in_hot_standby", name("in_hot_standby", Role)),
        ("SELECT current_setting('transaction_read_only')", name("transaction_read_only", Role)),
        ("SELECT setting FROM pg_settings WHERE name = 'in_hot_standby'", name("pg_settings", ServerLocal)),
        ("SELECT * FROM pg_stat_activity", name("pg_stat_", ServerLocal)),
        ("SELECT * FROM pg_locks", name("pg_locks", ServerLocal)),
        ("SELECT pg_backend_pid()", name("pg_backend_pid", ServerLocal)),
        ("WITH x AS (SELECT nextval('s')) SELECT * FROM x", name("nextval", Writes)),
        // A listed name in any statement of the text, and in a read-only transaction too.
        ("BEGIN READ ONLY; SELECT pg_advisory_lock(1)", name("pg_advisory_", ServerLocal)),
        // Writes and everything else.
        ("INSERT INTO t VALUES (1)", primary(NotARead("INSERT"))),
        ("update t set a = 1", primary(NotARead("UPDATE"))),
        ("DELETE FROM t", primary(NotARead("DELETE"))),
        ("MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE", primary(NotARead("MERGE"))),
        ("COPY t TO STDOUT", primary(NotARead("COPY"))),
        ("CREATE TABLE x AS SELECT 1", primary(NotARead("CREATE"))),
        ("CALL proc()", primary(NotARead("CALL"))),
        ("DO $$ BEGIN PERFORM 1; END $$", primary(NotARead("DO"))),
        ("LOCK TABLE t IN ACCESS SHARE MODE", primary(NotARead("LOCK"))),
        ("LISTEN chan", primary(NotARead("LISTEN"))),
        ("DECLARE c CURSOR FOR SELECT 1", primary(NotARead("DECLARE"))),
        ("FETCH 10 FROM c", primary(NotARead("FETCH"))),
        ("PREPARE p AS SELECT 1", primary(NotARead("PREPARE"))),
        ("EXECUTE p", primary(NotARead("EXECUTE"))),
        ("SET search_path = a", primary(NotARead("SET"))),
        ("VACUUM t", primary(NotARead("VACUUM"))),
        ("frobnicate", primary(NotARead("other"))),
        ("(INSERT INTO t VALUES (1))", primary(NotARead("("))),
        ("", primary(Empty)),
        ("  ;  -- nothing\n", primary(Empty)),
        ("/* unterminated comment SELECT 1", primary(Empty)),
        ("COMMIT", primary(NotARead("COMMIT"))),
        ("ROLLBACK TO SAVEPOINT a", primary(NotARead("ROLLBACK"))),
        ("SAVEPOINT a", primary(NotARead("SAVEPOINT"))),
        // Several statements: reads only follow the session's default mode.
        ("SELECT 1; SELECT 2", Verdict::FollowsSession),
        ("SELECT 1; VALUES (2); SHOW x", Verdict::FollowsSession),
        ("SELECT 1; INSERT INTO t VALUES (1)", primary(NotARead("INSERT"))),
        ("SELECT 1; SELECT * FROM t FOR UPDATE", primary(LockingClause)),
        ("SELECT 1; COMMIT", primary(NotARead("COMMIT"))),
        ("SELECT ';'; SELECT 2", Verdict::FollowsSession),
        ("SELECT 'a;b'", read(Select)),
        // Transactions that declare themselves.
        ("BEGIN READ ONLY", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("begin transaction read only", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("BEGIN WORK READ ONLY", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("START TRANSACTION READ ONLY", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("START TRANSACTION ISOLATION LEVEL READ COMMITTED, READ ONLY", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("BEGIN READ ONLY; SELECT * FROM t; COMMIT", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("BEGIN READ ONLY; INSERT INTO t VALUES (1)", Verdict::DeclaredReadOnly(Declared::Begin)),
        ("BEGIN; SET TRANSACTION READ ONLY", Verdict::DeclaredReadOnly(Declared::SetTransaction)),
        ("BEGIN; SET TRANSACTION ISOLATION LEVEL SERIALIZABLE; SET TRANSACTION READ ONLY; SELECT 1", Verdict::DeclaredReadOnly(Declared::SetTransaction)),
        ("BEGIN; SET transaction_read_only = on", Verdict::DeclaredReadOnly(Declared::SetTransaction)),
        ("BEGIN; SET LOCAL transaction_read_only TO 'true'", Verdict::DeclaredReadOnly(Declared::SetTransaction)),
        ("BEGIN ISOLATION LEVEL READ COMMITTED", primary(ModeNotFixed)),
        ("BEGIN", primary(ModeNotFixed)),
        ("START TRANSACTION", primary(ModeNotFixed)),
        ("BEGIN READ WRITE", primary(DeclaredReadWrite)),
        ("BEGIN READ ONLY, READ WRITE", primary(DeclaredReadWrite)),
        ("BEGIN; SET TRANSACTION READ WRITE; INSERT INTO t VALUES (1)", primary(DeclaredReadWrite)),
        ("BEGIN; SET transaction_read_only = off", primary(DeclaredReadWrite)),
        ("BEGIN READ ONLY; SET TRANSACTION READ WRITE", primary(DeclaredReadWrite)),
        // The mode is fixed by a query: it follows the session default from there.
        ("BEGIN; SELECT 1", Verdict::FollowsSession),
        ("BEGIN; SELECT 1; SET TRANSACTION READ ONLY", Verdict::FollowsSession),
        ("BEGIN; INSERT INTO t VALUES (1); COMMIT", Verdict::FollowsSession),
        ("BEGIN; COMMIT", Verdict::FollowsSession),
        ("BEGIN READ ONLY; SELECT 1; COMMIT; INSERT INTO t VALUES (1)", primary(SeveralTransactions)),
        ("BEGIN READ ONLY; COMMIT; BEGIN READ ONLY", primary(SeveralTransactions)),
        ("SET TRANSACTION READ ONLY", primary(NotARead("SET"))),
        ("SET TRANSACTION READ WRITE", primary(DeclaredReadWrite)),
        ("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", primary(NotARead("SET"))),
    ];
    assert!(table.len() >= 60, "{}", table.len());
    let mut failures = Vec::new();
    for (sql, want) in table {
        let got = classify(sql.as_bytes()).verdict;
        if got != *want {
            failures.push(format!("{sql:?}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn session_mode_changes() {
    use SessionMode::*;
    let table: &[(&str, Option<SessionMode>)] = &[
        ("SELECT 1", None),
        ("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", Some(ReadOnly)),
        ("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE", Some(ReadWrite)),
        ("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE", None),
        ("SET default_transaction_read_only = on", Some(ReadOnly)),
        ("set session default_transaction_read_only to 'yes'", Some(ReadOnly)),
        ("SET default_transaction_read_only = 0", Some(ReadWrite)),
        ("SET default_transaction_read_only TO of", Some(ReadWrite)),
        ("SET default_transaction_read_only = t", Some(ReadOnly)),
        ("SET default_transaction_read_only TO DEFAULT", Some(Reset)),
        ("SET default_transaction_read_only = maybe", Some(Reset)),
        ("SET \"default_transaction_read_only\" = on", Some(ReadOnly)),
        ("SET LOCAL default_transaction_read_only = on", None),
        ("RESET default_transaction_read_only", Some(Reset)),
        ("RESET ALL", Some(Reset)),
        ("DISCARD ALL", Some(Reset)),
        ("RESET search_path", None),
        ("SET default_transaction_read_only = on; SELECT 1; SET default_transaction_read_only = off", Some(ReadWrite)),
        ("BEGIN; SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY; COMMIT", Some(ReadOnly)),
        ("SET default_transaction_read_only = on; SELECT nextval('s')", Some(ReadOnly)),
        ("SELECT 'SET default_transaction_read_only = on'", None),
    ];
    for (sql, want) in table {
        assert_eq!(classify(sql.as_bytes()).session, *want, "{sql}");
    }
}

#[test]
fn unknown_functions_may_be_kept_on_the_primary() {
    let opts = ClassifyOptions {
        unknown_functions: UnknownFunctions::Primary,
        ..ClassifyOptions::default()
    };
    let c = |sql: &str| classify_with(sql.as_bytes(), opts).verdict;
    assert_eq!(c("SELECT my_func(1)"), primary(UnknownFunction));
    assert_eq!(c("SELECT count(*) FROM t"), read(Select));
    assert_eq!(c("SELECT now(), lower(name) FROM t"), read(Select));
}

#[test]
fn backslash_strings_follow_standard_conforming_strings() {
    // With standard_conforming_strings off, a backslash escapes the quote, so the INTO below is
    // inside the string; with it on (the default), the string ends at the backslash-quote.
    let off = ClassifyOptions {
        lex: LexOptions {
            standard_conforming_strings: false,
        },
        ..ClassifyOptions::default()
    };
    let sql = b"SELECT 'a\\' INTO t FROM x -- '";
    assert_eq!(classify_with(sql, off).verdict, read(Select));
    assert_eq!(classify(sql).verdict, primary(SelectInto));
    let sql = b"SELECT 'it\\'s INTO', 1";
    assert_eq!(classify_with(sql, off).verdict, read(Select));
    assert_eq!(classify(sql).verdict, primary(SelectInto));
}

#[test]
fn e_strings_always_take_backslash_escapes() {
    assert_eq!(
        classify(b"SELECT E'it\\'s FOR UPDATE'").verdict,
        read(Select)
    );
}

#[test]
fn a_parse_statement_is_classified_the_same_way() {
    // Extended protocol: Parse carries one statement, with $n parameters.
    assert_eq!(
        classify(b"SELECT * FROM t WHERE id = $1").verdict,
        read(Select)
    );
    assert_eq!(
        classify(b"SELECT nextval($1)").verdict,
        name("nextval", NeedsPrimary::Writes)
    );
    assert_eq!(
        classify(b"INSERT INTO t VALUES ($1)").verdict,
        primary(NotARead("INSERT"))
    );
}

/// Not a timing assertion: prints the cost of classify() per statement.
/// `cargo test -p sluice --lib route::tests::classify_table::bench -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_classify() {
    let statements: &[&str] = &[
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
        "SELECT * FROM orders o JOIN customers c ON (o.cid = c.id) WHERE o.created > now() - interval '1 day' ORDER BY o.id LIMIT 50",
        "WITH r AS (SELECT id, row_number() OVER (PARTITION BY g ORDER BY t) FROM e) SELECT * FROM r WHERE row_number = 1",
        "BEGIN READ ONLY",
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
        "SELECT my_func($1), 'a string; with -- stuff', $$dollar$$ FROM t /* comment */",
    ];
    let rounds = 100_000u32;
    for sql in statements {
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(classify(std::hint::black_box(sql.as_bytes())));
        }
        let per = start.elapsed() / rounds;
        // The session-state classifier, which the relay already runs on every query in
        // transaction mode, for scale.
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            let s = crate::session_state::classify(std::hint::black_box(sql.as_bytes()));
            std::hint::black_box(s.count());
        }
        let session = start.elapsed() / rounds;
        println!("{per:>10?} (session_state::classify {session:>10?})  {sql}");
    }
}
