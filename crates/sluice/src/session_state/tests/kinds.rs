//! One test per statement kind: every accepted spelling and the near misses.

use super::super::*;
use super::*;
use StatementKind as K;

// ---- plain statements and the fast path ----

#[test]
fn plain_statements() {
    for sql in [
        "SELECT 1",
        "select * from t where a = 'x'",
        "INSERT INTO t VALUES (1)",
        "UPDATE t SET a = 1",
        "DELETE FROM t",
        "WITH a AS (SELECT 1) SELECT * FROM a",
        "VALUES (1)",
        "TABLE t",
        "SHOW search_path",
        "COPY t FROM STDIN",
        "FETCH 10 FROM c",
        "NOTIFY ch, 'x'",
        "ALTER ROLE r SET search_path = a",
        "CREATE UNLOGGED TABLE t (a int)",
        "CREATE TABLE t (a int)",
        "CREATE TABLE template (temperature int)",
        "SELECT temp FROM temps",
        "DO $$ BEGIN UPDATE t SET a = 1; PERFORM pg_advisory_xact_lock(1); END $$",
        "(SELECT 1)",
        "SELECT pg_advisory_lock",
        "SELECT my_pg_advisory_lock(1)",
        "START something",
    ] {
        assert_eq!(one(sql), K::Plain, "{sql}");
        assert!(!might_affect_session(sql), "{sql}");
    }
}

#[test]
fn empty_queries_yield_nothing() {
    for sql in [
        "",
        "   ",
        ";",
        " ; ;\n",
        "-- only a comment",
        "/* x */ ; /* y */",
    ] {
        assert!(kinds(sql).is_empty(), "{sql:?}");
        assert!(!might_affect_session(sql));
    }
}

#[test]
fn fast_path_text_and_index() {
    let s: Vec<_> = classify("  \n SELECT 1 \n\t").collect();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].index, 0);
    assert_eq!(s[0].text, b"SELECT 1");
    assert_eq!(texts("SELECT 1 -- trailing"), vec!["SELECT 1"]);
    assert_eq!(texts("/* lead */ SELECT 1 /* trail */"), vec!["SELECT 1"]);
}

// ---- transaction control ----

#[test]
fn transaction_control() {
    assert_eq!(one("BEGIN"), K::Begin);
    assert_eq!(one("begin work"), K::Begin);
    assert_eq!(
        one("BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        K::Begin
    );
    assert_eq!(one("START TRANSACTION READ ONLY"), K::Begin);
    assert_eq!(one("COMMIT"), K::Commit { chain: false });
    assert_eq!(one("commit work"), K::Commit { chain: false });
    assert_eq!(one("END TRANSACTION"), K::Commit { chain: false });
    assert_eq!(one("COMMIT AND CHAIN"), K::Commit { chain: true });
    assert_eq!(one("COMMIT AND NO CHAIN"), K::Commit { chain: false });
    assert_eq!(one("ROLLBACK"), K::Rollback { chain: false });
    assert_eq!(one("ABORT"), K::Rollback { chain: false });
    assert_eq!(
        one("rollback transaction and chain"),
        K::Rollback { chain: true }
    );
    assert_eq!(
        one("ROLLBACK TO SAVEPOINT s1"),
        K::RollbackToSavepoint { name: id("s1") }
    );
    assert_eq!(
        one("ROLLBACK WORK TO s1"),
        K::RollbackToSavepoint { name: id("s1") }
    );
    assert_eq!(one("SAVEPOINT \"S\""), K::Savepoint { name: id("\"S\"") });
    assert_eq!(
        one("RELEASE SAVEPOINT s"),
        K::ReleaseSavepoint { name: id("s") }
    );
    assert_eq!(one("RELEASE s"), K::ReleaseSavepoint { name: id("s") });
    assert_eq!(one("PREPARE TRANSACTION 'gid'"), K::PrepareTransaction);
    assert_eq!(one("COMMIT PREPARED 'gid'"), K::CommitPrepared);
    assert_eq!(one("ROLLBACK PREPARED 'gid'"), K::RollbackPrepared);
    for sql in ["BEGIN", "COMMIT", "ROLLBACK TO s", "COMMIT PREPARED 'x'"] {
        let k = one(sql);
        assert!(k.is_transaction_control() && !k.affects_session(), "{sql}");
    }
    assert!(!K::Plain.is_transaction_control());
}

// ---- SET / RESET ----

#[test]
fn set_forms() {
    assert_eq!(
        one("SET search_path TO a, b"),
        set(param("search_path"), "a, b", false)
    );
    assert_eq!(
        one("set Search_Path = 'x'"),
        set(param("search_path"), "'x'", false)
    );
    assert_eq!(
        one("SET SESSION work_mem = '64MB'"),
        set(param("work_mem"), "'64MB'", false)
    );
    assert_eq!(
        one("SET LOCAL work_mem TO 1"),
        set(param("work_mem"), "1", true)
    );
    assert_eq!(
        one("SET \"DateStyle\" TO ISO"),
        set(param("datestyle"), "ISO", false)
    );
    assert_eq!(
        one("SET myapp.user_id = 42"),
        set(param("myapp.user_id"), "42", false)
    );
    assert_eq!(one("SET x TO DEFAULT"), set(param("x"), "DEFAULT", false));
    assert_eq!(
        one("SET TIME ZONE 'UTC'"),
        set(param("timezone"), "'UTC'", false)
    );
    assert_eq!(
        one("SET LOCAL TIME ZONE LOCAL"),
        set(param("timezone"), "LOCAL", true)
    );
    assert_eq!(
        one("SET timezone = 'UTC'"),
        set(param("timezone"), "'UTC'", false)
    );
    assert_eq!(
        one("SET NAMES 'UTF8'"),
        set(param("client_encoding"), "'UTF8'", false)
    );
    assert_eq!(
        one("SET SCHEMA 'app'"),
        set(param("search_path"), "'app'", false)
    );
    assert_eq!(
        one("SET XML OPTION DOCUMENT"),
        set(param("xmloption"), "DOCUMENT", false)
    );
    assert_eq!(
        one("SET x FROM CURRENT"),
        set(param("x"), "FROM CURRENT", false)
    );
}

#[test]
fn set_role_and_authorization() {
    assert_eq!(one("SET ROLE admin"), set(SetName::Role, "admin", false));
    assert_eq!(one("SET LOCAL ROLE NONE"), set(SetName::Role, "NONE", true));
    assert_eq!(one("SET role = 'x'"), set(SetName::Role, "'x'", false));
    assert_eq!(one("SET SESSION ROLE x"), set(SetName::Role, "x", false));
    assert_eq!(
        one("SET SESSION AUTHORIZATION alice"),
        set(SetName::SessionAuthorization, "alice", false)
    );
    assert_eq!(
        one("SET SESSION SESSION AUTHORIZATION DEFAULT"),
        set(SetName::SessionAuthorization, "DEFAULT", false)
    );
    assert_eq!(
        one("set session_authorization to bob"),
        set(SetName::SessionAuthorization, "bob", false)
    );
}

#[test]
fn set_transaction_forms() {
    assert_eq!(
        one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        set(SetName::Transaction, "ISOLATION LEVEL SERIALIZABLE", true)
    );
    assert_eq!(
        one("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"),
        set(SetName::SessionCharacteristics, "READ ONLY", false)
    );
    assert_eq!(
        one("SET CONSTRAINTS ALL DEFERRED"),
        set(SetName::Constraints, "ALL DEFERRED", true)
    );
    assert!(!one("SET TRANSACTION READ ONLY").affects_session());
    assert!(one("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY").affects_session());
    assert!(!one("SET LOCAL x = 1").affects_session());
    assert!(one("SET x = 1").affects_session());
}

#[test]
fn reset_forms() {
    assert_eq!(one("RESET ALL"), K::ResetAll);
    assert_eq!(
        one("reset Search_Path"),
        K::Reset {
            name: param("search_path")
        }
    );
    assert_eq!(
        one("RESET TIME ZONE"),
        K::Reset {
            name: param("timezone")
        }
    );
    assert_eq!(
        one("RESET ROLE"),
        K::Reset {
            name: SetName::Role
        }
    );
    assert_eq!(
        one("RESET SESSION AUTHORIZATION"),
        K::Reset {
            name: SetName::SessionAuthorization
        }
    );
    assert_eq!(
        one("RESET TRANSACTION ISOLATION LEVEL"),
        K::Reset {
            name: param("transaction_isolation")
        }
    );
    assert_eq!(one("RESET"), K::Plain);
}

#[test]
fn set_config_calls() {
    assert_eq!(
        one("SELECT set_config('search_path', 'a,b', false)"),
        set(param("search_path"), "'a,b'", false)
    );
    assert_eq!(
        one("select pg_catalog.set_config('Work_Mem', '1MB', true)"),
        set(param("work_mem"), "'1MB'", true)
    );
    assert_eq!(
        one("SELECT set_config('role', 'x', 'off'::bool)"),
        set(SetName::Role, "'x'", false)
    );
    assert_eq!(
        one("SELECT set_config('a.b', 'it''s', 't')"),
        set(param("a.b"), "'it''s'", true)
    );
    assert_eq!(
        one("SELECT set_config($1, $2, $3)"),
        set(SetName::Unknown, "$2", false)
    );
    assert_eq!(
        one("SELECT set_config('x', lower('Y'), false)"),
        set(param("x"), "lower('Y')", false)
    );
    assert_eq!(
        one("SELECT set_config($$x$$, 'y', 1)"),
        set(param("x"), "'y'", true)
    );
    assert_eq!(one("SELECT set_config('x'"), set(param("x"), "", false));
    assert_eq!(one("SELECT set_config"), K::Plain);
}

/// Found while looking into the session_state fuzz target's low speed, with large crafted
/// inputs: each unclosed `set_config(` scanned to the end of the statement, so nested calls took quadratic time (4,000 of them: 15 s). The argument
/// scan is bounded now; a call whose arguments run past the bound is an unknown setting.
#[test]
fn nested_unclosed_set_config_calls_take_linear_time() {
    let sql = "SELECT set_config(".repeat(20_000);
    let t0 = std::time::Instant::now();
    let found = classify(&sql).count();
    let might = might_affect_session(&sql);
    let elapsed = t0.elapsed();
    assert_eq!(found, 20_000);
    assert!(might);
    assert!(
        elapsed < std::time::Duration::from_secs(10),
        "took {elapsed:?}"
    );
    let long_value = format!("SELECT set_config('x', {}1, false)", "1 + ".repeat(40));
    assert_eq!(one(&long_value), set(SetName::Unknown, "", false));
    let short_value = format!("SELECT set_config('x', {}1, false)", "1 + ".repeat(10));
    assert!(matches!(one(&short_value), K::Set { name, .. } if name == param("x")));
}

// ---- other kinds ----

#[test]
fn discard_forms() {
    assert_eq!(one("DISCARD ALL"), K::Discard(DiscardTarget::All));
    assert_eq!(one("discard plans"), K::Discard(DiscardTarget::Plans));
    assert_eq!(
        one("DISCARD SEQUENCES"),
        K::Discard(DiscardTarget::Sequences)
    );
    assert_eq!(one("DISCARD TEMP"), K::Discard(DiscardTarget::Temp));
    assert_eq!(one("DISCARD TEMPORARY"), K::Discard(DiscardTarget::Temp));
    assert_eq!(one("DISCARD everything"), K::Plain);
}

#[test]
fn advisory_locks() {
    let session = K::AdvisoryLock { session: true };
    let xact = K::AdvisoryLock { session: false };
    for sql in [
        "SELECT pg_advisory_lock(1)",
        "select pg_try_advisory_lock($1)",
        "SELECT PG_ADVISORY_LOCK_SHARED(1, 2)",
        "SELECT pg_try_advisory_lock_shared(1)",
        "SELECT pg_catalog.pg_advisory_lock(1)",
        "SELECT \"pg_advisory_lock\"(1)",
        "SELECT pg_advisory_lock (1)",
        "SELECT x FROM t WHERE pg_try_advisory_lock(id)",
        "WITH l AS (SELECT pg_advisory_lock(1)) SELECT * FROM l",
        "UPDATE t SET a = 1 WHERE pg_try_advisory_lock(t.id)",
        "EXPLAIN ANALYZE SELECT pg_advisory_lock(1)",
        "COPY (SELECT pg_advisory_lock(1)) TO STDOUT",
    ] {
        assert_eq!(one(sql), session, "{sql}");
        assert!(might_affect_session(sql), "{sql}");
    }
    for sql in [
        "SELECT pg_advisory_xact_lock(1)",
        "SELECT pg_try_advisory_xact_lock(1)",
        "SELECT pg_advisory_xact_lock_shared(1)",
        "SELECT pg_try_advisory_xact_lock_shared(1)",
    ] {
        assert_eq!(one(sql), xact, "{sql}");
        assert!(!might_affect_session(sql), "{sql}");
    }
    assert_eq!(
        one("SELECT pg_advisory_unlock(1)"),
        K::AdvisoryUnlock { all: false }
    );
    assert_eq!(
        one("SELECT pg_advisory_unlock_shared(1)"),
        K::AdvisoryUnlock { all: false }
    );
    assert_eq!(
        one("SELECT pg_advisory_unlock_all()"),
        K::AdvisoryUnlock { all: true }
    );
    // A quoted name is case-sensitive: this is not the built-in function.
    assert_eq!(one("SELECT \"PG_ADVISORY_LOCK\"(1)"), K::Plain);
}

#[test]
fn several_calls_in_one_statement() {
    let s: Vec<_> = classify(
        "SELECT pg_advisory_unlock_all(), pg_advisory_lock(2), set_config('a', 'b', false)",
    )
    .collect();
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|s| s.index == 0));
    assert_eq!(s[0].kind, K::AdvisoryUnlock { all: true });
    assert_eq!(s[1].kind, K::AdvisoryLock { session: true });
    assert_eq!(s[2].kind, set(param("a"), "'b'", false));
    // Nested: a lock inside set_config's arguments is seen too.
    assert_eq!(
        kinds("SELECT set_config('a', pg_advisory_lock(1)::text, false)"),
        vec![
            set(param("a"), "pg_advisory_lock(1)::text", false),
            K::AdvisoryLock { session: true }
        ]
    );
}

#[test]
fn listen_unlisten() {
    assert_eq!(
        one("LISTEN jobs"),
        K::Listen {
            channel: id("jobs")
        }
    );
    assert_eq!(
        one("listen \"Jobs\""),
        K::Listen {
            channel: id("\"Jobs\"")
        }
    );
    assert_eq!(
        one("UNLISTEN jobs"),
        K::Unlisten {
            channel: NameOrAll::Name(id("jobs"))
        }
    );
    assert_eq!(
        one("UNLISTEN *"),
        K::Unlisten {
            channel: NameOrAll::All
        }
    );
    assert_eq!(one("LISTEN"), K::Plain);
}

#[test]
fn temporary_objects() {
    let temp = K::CreateTemp {
        on_commit_drop: false,
    };
    for sql in [
        "CREATE TEMP TABLE t (a int)",
        "create temporary table t as select 1",
        "CREATE LOCAL TEMP TABLE t (a int)",
        "CREATE GLOBAL TEMPORARY TABLE t (a int)",
        "CREATE TEMP VIEW v AS SELECT 1",
        "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
        "CREATE TEMP SEQUENCE s",
        "CREATE TEMP TABLE t (a int) ON COMMIT PRESERVE ROWS",
        "CREATE TEMP TABLE t (a int) ON COMMIT DELETE ROWS",
        "CREATE TABLE pg_temp.t (a int)",
        "CREATE FUNCTION pg_temp.f() RETURNS int AS 'select 1' LANGUAGE sql",
        "CREATE VIEW v AS SELECT * FROM PG_TEMP.t",
        "CREATE TABLE \"pg_temp\".t (a int)",
        "CREATE TABLE pg_temp_3.t (a int)",
        "SELECT * INTO TEMP t FROM x",
        "SELECT 1 AS a INTO TEMPORARY TABLE t",
        "select 1 into local temp t",
        "WITH a AS (SELECT 1) SELECT * INTO TEMP t FROM a",
    ] {
        assert_eq!(one(sql), temp, "{sql}");
        assert!(might_affect_session(sql), "{sql}");
    }
    let dropped = K::CreateTemp {
        on_commit_drop: true,
    };
    assert_eq!(one("CREATE TEMP TABLE t (a int) ON COMMIT DROP"), dropped);
    assert_eq!(
        one("CREATE TEMP TABLE t ON COMMIT DROP AS SELECT 1"),
        dropped
    );
    assert!(!might_affect_session(
        "CREATE TEMP TABLE t (a int) ON COMMIT DROP"
    ));
    for sql in [
        "CREATE UNLOGGED TABLE t (a int)",
        "CREATE TABLE pg_temporary.t (a int)",
        "CREATE TABLE \"PG_TEMP\".t (a int)",
        "SELECT * INTO t FROM x",
        "INSERT INTO temp VALUES (1)",
        "WITH x AS (INSERT INTO temp VALUES (1) RETURNING *) SELECT * FROM x",
        "SELECT * FROM t WHERE a IN (SELECT b INTO TEMP FROM c)",
    ] {
        assert_eq!(one(sql), K::Plain, "{sql}");
    }
}

#[test]
fn create_scans_queries_it_runs_but_not_definitions() {
    assert_eq!(
        kinds("CREATE TEMP TABLE t AS SELECT pg_advisory_lock(1)"),
        vec![
            K::CreateTemp {
                on_commit_drop: false
            },
            K::AdvisoryLock { session: true }
        ]
    );
    assert_eq!(
        one("CREATE MATERIALIZED VIEW m AS SELECT pg_advisory_lock(1)"),
        K::AdvisoryLock { session: true }
    );
    assert_eq!(one("CREATE VIEW v AS SELECT pg_advisory_lock(1)"), K::Plain);
    assert_eq!(
        one("CREATE FUNCTION f() RETURNS void LANGUAGE sql BEGIN ATOMIC SELECT pg_advisory_lock(1); END"),
        K::Plain
    );
}

#[test]
fn cursors() {
    assert_eq!(
        one("DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
        K::DeclareCursor {
            name: id("c"),
            with_hold: true
        }
    );
    assert_eq!(
        one("declare \"C\" binary insensitive no scroll cursor without hold for select 1"),
        K::DeclareCursor {
            name: id("\"C\""),
            with_hold: false
        }
    );
    assert_eq!(
        one("DECLARE c SCROLL CURSOR FOR SELECT 1"),
        K::DeclareCursor {
            name: id("c"),
            with_hold: false
        }
    );
    // The query after FOR runs: calls in it count, and WITH in it is not WITH HOLD.
    assert_eq!(
        kinds("DECLARE c CURSOR FOR WITH hold AS (SELECT pg_advisory_lock(1)) SELECT * FROM hold"),
        vec![
            K::DeclareCursor {
                name: id("c"),
                with_hold: false
            },
            K::AdvisoryLock { session: true }
        ]
    );
    assert!(!one("DECLARE c CURSOR FOR SELECT 1").affects_session());
    assert_eq!(
        one("CLOSE c"),
        K::CloseCursor {
            name: NameOrAll::Name(id("c"))
        }
    );
    assert_eq!(
        one("CLOSE ALL"),
        K::CloseCursor {
            name: NameOrAll::All
        }
    );
}

#[test]
fn sql_prepared_statements() {
    assert_eq!(
        one("PREPARE q (int, text) AS SELECT $1, $2"),
        K::Prepare {
            name: id("q"),
            body: b"SELECT $1, $2"
        }
    );
    // The body runs at EXECUTE: it is returned for the caller to classify, not scanned now.
    let k = one("PREPARE l AS SELECT pg_advisory_lock($1)");
    let K::Prepare { body, .. } = k else {
        panic!("{k:?}")
    };
    assert_eq!(
        one(std::str::from_utf8(body).unwrap()),
        K::AdvisoryLock { session: true }
    );
    assert_eq!(
        one("PREPARE transaction AS SELECT 1"),
        K::Prepare {
            name: id("transaction"),
            body: b"SELECT 1"
        }
    );
    assert_eq!(one("EXECUTE q(1, 'a')"), K::Execute { name: id("q") });
    assert_eq!(
        one("DEALLOCATE q"),
        K::Deallocate {
            name: NameOrAll::Name(id("q"))
        }
    );
    assert_eq!(
        one("DEALLOCATE PREPARE q"),
        K::Deallocate {
            name: NameOrAll::Name(id("q"))
        }
    );
    assert_eq!(
        one("DEALLOCATE ALL"),
        K::Deallocate {
            name: NameOrAll::All
        }
    );
    assert_eq!(one("PREPARE q"), K::Plain);
}

#[test]
fn drop_of_any_object() {
    for sql in [
        "DROP TABLE t",
        "drop view if exists pg_temp.v",
        "DROP SEQUENCE s CASCADE",
        "  Drop Function pg_temp.f()",
    ] {
        assert_eq!(one(sql), K::Drop, "{sql}");
    }
    assert!(might_affect_session("DROP TABLE t"));
    assert_eq!(one("SELECT 'drop table t'"), K::Plain);
}

#[test]
fn load_module() {
    assert_eq!(
        one("LOAD 'auto_explain'"),
        K::LoadModule {
            file: b"'auto_explain'"
        }
    );
}

// ---- sequence reads ----

#[test]
fn sequence_reads() {
    for sql in [
        "SELECT lastval()",
        "select CURRVAL('orders_id_seq')",
        "SELECT pg_catalog.lastval()",
        "SELECT \"currval\"('s')",
        "SELECT lastval ()",
        "SELECT currval\n('s'::regclass)",
        "INSERT INTO items (order_id) VALUES (currval('orders_id_seq'))",
        "UPDATE t SET a = lastval() WHERE id = 1",
        "WITH x AS (SELECT 1) SELECT currval('s') FROM x",
        "SELECT nextval('s'), currval('s')",
    ] {
        assert_eq!(one(sql), K::SequenceRead, "{sql}");
        assert!(!might_affect_session(sql), "{sql}: reads, changes nothing");
        assert!(
            might_matter_to_tracker_with(sql.as_bytes(), LexOptions::default()),
            "{sql}"
        );
    }
    for sql in [
        "SELECT lastval FROM t",
        "SELECT 'lastval()'",
        "SELECT my_lastval(1)",
        "SELECT lastval_of(1)",
        "SELECT nextval('s')",
        "SELECT setval('s', 1)",
        // A quoted name is case-sensitive: not the built-in function.
        "SELECT \"LASTVAL\"()",
        "SELECT x -- currval(\n FROM t",
    ] {
        assert_eq!(kinds(sql), vec![K::Plain], "{sql}");
        assert!(
            !might_matter_to_tracker_with(sql.as_bytes(), LexOptions::default()),
            "{sql}"
        );
    }
    // With other statements, and inside a DO block (its body runs in the session).
    assert_eq!(
        kinds("INSERT INTO o DEFAULT VALUES; SELECT lastval()"),
        vec![K::Plain, K::SequenceRead]
    );
    assert_eq!(
        kinds("DO $$ BEGIN INSERT INTO log VALUES (currval('s')); END $$"),
        vec![K::SequenceRead]
    );
}
