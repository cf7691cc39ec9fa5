//! Session state in transaction pooling: SET is tracked and replayed, never leaks to another
//! client; advisory locks, LISTEN and temporary tables pin the client to its server until the
//! state is gone; with pinning disabled they fail with 0A000; a client leaving state behind
//! gets its server cleaned.

use std::time::Duration;

use sluice_e2e::{PgCluster, RawConn};

mod session_state_common;
use session_state_common::{start, value};

/// The backend, work_mem and app.tenant, space-separated: where a client runs and with what.
const BACKEND_AND_SETTINGS: &str = "SELECT pg_backend_pid() || ' ' || \
    current_setting('work_mem') || ' ' || current_setting('app.tenant')";

/// work_mem, app.tenant ('-' when unset) and statement_timeout, space-separated.
const THREE_SETTINGS: &str = "SELECT current_setting('work_mem') || ' ' || \
    coalesce(nullif(current_setting('app.tenant', true), ''), '-') || ' ' || \
    current_setting('statement_timeout')";

/// B runs a transaction on the only server first (so the server is reset and A gets its replay),
/// then A reads its settings: they must be `expected`.
async fn a_replayed(
    a: &tokio_postgres::Client,
    b: &tokio_postgres::Client,
    expected: &str,
    why: &str,
) {
    assert_eq!(value(b, "SHOW work_mem").await, "4MB", "B's own");
    assert_eq!(value(a, THREE_SETTINGS).await, expected, "{why}");
}

#[tokio::test]
async fn set_follows_its_client_and_never_leaks() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute("SET work_mem = '7MB'").await.unwrap();
    a.batch_execute("SET application_name = 'client_a'")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            value(&b, "SHOW work_mem").await,
            "4MB",
            "B never sees A's SET"
        );
        assert_eq!(
            value(&a, "SHOW work_mem").await,
            "7MB",
            "A keeps its SET on the shared server"
        );
    }
    assert_eq!(
        value(&a, "SELECT pg_backend_pid()").await,
        value(&b, "SELECT pg_backend_pid()").await
    );
    a.batch_execute("RESET work_mem").await.unwrap();
    assert_eq!(value(&a, "SHOW work_mem").await, "4MB");
}

/// A server that carried an older value of the client's parameters is brought up to date when
/// the client comes back to it: the client's later SET ran on another server meanwhile.
#[tokio::test]
async fn a_server_with_an_older_set_of_the_same_client_gets_the_newer_one() {
    let s = start("default_pool_size = 2");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute("SET work_mem = '5MB'; SET app.tenant = 'first'")
        .await
        .unwrap();
    let first = value(&a, "SELECT pg_backend_pid()").await;
    // B holds A's server in a transaction, so A's next SET runs on the other one.
    b.batch_execute("BEGIN").await.unwrap();
    let held = value(&b, "SELECT pg_backend_pid()").await;
    assert_eq!(held, first, "B took the server A used (its only idle one)");
    a.batch_execute("SET work_mem = '6MB'; SET app.tenant = 'second'")
        .await
        .unwrap();
    let second = value(&a, "SELECT pg_backend_pid()").await;
    assert_ne!(second, first);
    b.batch_execute("COMMIT").await.unwrap();
    // B and C take both servers; the one on A's first server lets it go, and A gets it back: it
    // carries A's older values.
    let c = s.connect("trust_user", "", "app").await.unwrap();
    b.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    let on_b = value(&b, "SELECT pg_backend_pid()").await;
    let on_c = value(&c, "SELECT pg_backend_pid()").await;
    let (frees, keeps) = if on_b == first { (&b, &c) } else { (&c, &b) };
    assert!(on_b == first || on_c == first);
    frees.batch_execute("COMMIT").await.unwrap();
    let row = value(&a, BACKEND_AND_SETTINGS).await;
    keeps.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        row,
        format!("{first} 6MB second"),
        "A back on its first server, with its newest values"
    );
}

/// The same without any other client: with server_round_robin each transaction takes the
/// server idle longest, so the client alternates between two servers that nobody else touches.
#[tokio::test]
async fn alternating_servers_each_get_the_clients_newest_values() {
    let s = start("default_pool_size = 2\nserver_round_robin = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    // Two servers, both idle.
    b.batch_execute("BEGIN").await.unwrap();
    let _ = value(&a, "SELECT 1").await;
    b.batch_execute("COMMIT").await.unwrap();
    let mut pids = std::collections::HashSet::new();
    for n in 0..6 {
        a.batch_execute(&format!(
            "SET work_mem = '{}MB'; SET app.tenant = 't{n}'",
            n + 5
        ))
        .await
        .unwrap();
        // Two reads: one on each server.
        for _ in 0..2 {
            let row = value(&a, BACKEND_AND_SETTINGS).await;
            let mut parts = row.split(' ');
            pids.insert(parts.next().unwrap().to_string());
            assert_eq!(
                parts.collect::<Vec<_>>(),
                [format!("{}MB", n + 5), format!("t{n}")],
                "round {n}: A's newest values on every server"
            );
        }
    }
    assert_eq!(pids.len(), 2, "A met both servers");
}

/// server_reset_query_always runs the reset query (DISCARD ALL) after every transaction: the
/// client's SETs are replayed on its next transaction, even on the same server.
#[tokio::test]
async fn a_reset_after_every_transaction_does_not_lose_the_clients_sets() {
    let s = start("default_pool_size = 1\nserver_reset_query_always = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute("SET work_mem = '7MB'; SET app.tenant = 'seven'")
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            value(
                &a,
                "SELECT current_setting('work_mem') || ' ' || current_setting('app.tenant')"
            )
            .await,
            "7MB seven",
            "A's SETs after the reset query ran on its server"
        );
        assert_eq!(value(&b, "SHOW work_mem").await, "4MB", "never B's");
    }
}

/// Savepoints: a SET rolled back to a savepoint is gone, one made before it stays, and a
/// transaction rescued from an error by ROLLBACK TO SAVEPOINT commits the SETs it kept (what
/// PostgreSQL does), on whichever server the client's next transaction runs.
#[tokio::test]
async fn sets_follow_savepoints_as_on_a_direct_connection() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    // B's transactions in between reset the server: what A sees is its replay.
    a.batch_execute(
        "BEGIN; SET work_mem = '5MB'; SAVEPOINT s1; SET app.tenant = 'gone'; \
         ROLLBACK TO SAVEPOINT s1; COMMIT",
    )
    .await
    .unwrap();
    a_replayed(&a, &b, "5MB - 0", "the SET before the savepoint stays").await;
    a.batch_execute(
        "BEGIN; SAVEPOINT s1; SET statement_timeout = '7s'; SAVEPOINT s2; \
         SET app.tenant = 'kept'; RELEASE SAVEPOINT s2; SAVEPOINT s3; \
         SET work_mem = '9MB'; ROLLBACK TO s3; COMMIT",
    )
    .await
    .unwrap();
    a_replayed(&a, &b, "5MB kept 7s", "released kept, rolled back gone").await;
    // An error rescued by ROLLBACK TO: the transaction commits what it kept.
    a.batch_execute("BEGIN; SET work_mem = '6MB'; SAVEPOINT s; SET app.tenant = 'lost'")
        .await
        .unwrap();
    assert!(a.batch_execute("SELECT 1/0").await.is_err());
    a.batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT")
        .await
        .unwrap();
    a_replayed(&a, &b, "6MB kept 7s", "a rescued transaction committed").await;
}

/// Pipelined requests (each with its own Sync, as tokio-postgres, pgx batches and psycopg's
/// pipeline mode send them): a SET belongs to its own request's transaction, not to the one
/// answered first. An error in the middle request loses neither SET around it.
#[tokio::test]
async fn pipelined_sets_commit_with_their_own_request() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    // An error first, then a SET: the SET is not the failed request's.
    let (failed, set) = tokio::join!(
        a.batch_execute("SELECT 1/0"),
        a.batch_execute("SET work_mem = '5MB'"),
    );
    assert!(failed.is_err() && set.is_ok());
    // A SET, then one that fails: the first commits, the failed one never happened.
    let (set, failed) = tokio::join!(
        a.batch_execute("SET app.tenant = 'kept'"),
        a.batch_execute("SET statement_timeout = 'not a duration'"),
    );
    assert!(set.is_ok() && failed.is_err());
    assert_eq!(value(&b, "SHOW work_mem").await, "4MB", "B in between");
    assert_eq!(
        value(
            &a,
            "SELECT current_setting('work_mem') || ' ' || current_setting('app.tenant') || ' ' \
             || current_setting('statement_timeout')"
        )
        .await,
        "5MB kept 0",
        "each SET with its own request's outcome"
    );
}

#[tokio::test]
async fn a_set_in_a_failed_or_rolled_back_transaction_is_not_kept() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    assert!(a
        .batch_execute("SET work_mem = '9MB'; SELECT 1/0")
        .await
        .is_err());
    a.batch_execute("BEGIN; SET work_mem = '11MB'; ROLLBACK")
        .await
        .unwrap();
    a.batch_execute("BEGIN; SET statement_timeout = '5s'; COMMIT")
        .await
        .unwrap();
    let _ = value(&b, "SELECT 1").await; // B takes the server in between
    assert_eq!(value(&a, "SHOW work_mem").await, "4MB");
    assert_eq!(
        value(&a, "SHOW statement_timeout").await,
        "5s",
        "committed SET is kept"
    );
    assert_eq!(value(&b, "SHOW statement_timeout").await, "0");
}

/// A SET commits with the transaction it ran in, as PostgreSQL commits it: a query string may
/// hold several transactions (a COMMIT in the middle, then an error or a ROLLBACK), and COMMIT
/// AND CHAIN commits without leaving the transaction block.
#[tokio::test]
async fn sets_commit_with_the_transaction_they_ran_in() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    // B's transactions in between reset the server: what A sees is its replay.
    a.batch_execute("BEGIN; SET work_mem = '5MB'; COMMIT; BEGIN; SET work_mem = '6MB'; ROLLBACK")
        .await
        .unwrap();
    a_replayed(&a, &b, "5MB - 0", "the first transaction committed").await;
    // An explicit COMMIT ends the implicit transaction; the error after it starts another.
    assert!(a
        .batch_execute("SET app.tenant = 'kept'; COMMIT; SET work_mem = '6MB'; SELECT 1/0")
        .await
        .is_err());
    a_replayed(&a, &b, "5MB kept 0", "committed before the error").await;
    // COMMIT AND CHAIN commits; the chained transaction's ROLLBACK drops only its own SETs.
    a.batch_execute(
        "BEGIN; SET statement_timeout = '7s'; COMMIT AND CHAIN; SET work_mem = '9MB'; ROLLBACK",
    )
    .await
    .unwrap();
    a_replayed(&a, &b, "5MB kept 7s", "committed by the chain").await;
    // The same in separate requests, the COMMIT AND CHAIN a prepared statement.
    a.batch_execute("BEGIN; SET work_mem = '3MB'")
        .await
        .unwrap();
    a.execute("COMMIT AND CHAIN", &[]).await.unwrap();
    a.batch_execute("SET app.tenant = 'gone'; ROLLBACK")
        .await
        .unwrap();
    a_replayed(&a, &b, "3MB kept 7s", "a prepared COMMIT AND CHAIN").await;
}

/// Messages up to and including ReadyForQuery.
async fn until_ready(c: &mut RawConn) -> Vec<(u8, Vec<u8>)> {
    let mut got = Vec::new();
    loop {
        let m = c
            .read_message(Duration::from_secs(5))
            .await
            .expect("a reply");
        let done = m.0 == b'Z';
        got.push(m);
        if done {
            return got;
        }
    }
}

/// `set_config()` with bind parameters, as drivers send a request's row-level-security tenant:
/// tracked from the Bind's values and replayed on the client's next server like a SET, without
/// pinning the client (which held the only server, so B waited and timed out). Named statements
/// with binary values (tokio-postgres) and the unnamed statement with text values.
#[tokio::test]
async fn bound_set_config_follows_its_client_without_pinning() {
    let port = sluice_e2e::free_port();
    let s = start(&format!(
        "default_pool_size = 1\n\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{port}"
    ));
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    let tenant = "SELECT set_config('app.tenant', $1, false)";
    a.query_one(tenant, &[&"it's one"]).await.unwrap();
    assert!(wait_unpinned(port).await, "A is not pinned");
    a_replayed(&a, &b, "4MB it's one 0", "replayed from the Bind").await;
    // Rolled back with its transaction; the last committed value holds.
    a.batch_execute("BEGIN").await.unwrap();
    a.query_one(tenant, &[&"dropped"]).await.unwrap();
    a.batch_execute("ROLLBACK").await.unwrap();
    let settings = "SELECT set_config($1, $2, $3), set_config('statement_timeout', $4, false)";
    a.query_one(settings, &[&"work_mem", &"6MB", &false, &"3s"])
        .await
        .unwrap();
    a_replayed(&a, &b, "6MB it's one 3s", "several calls, a bool bound").await;

    // The unnamed statement, text values (node-postgres, psycopg's unprepared queries).
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    until_ready(&mut c).await;
    let mut batch = RawConn::message(b'P', format!("\0{tenant}\0\0\0").as_bytes());
    batch.extend(RawConn::message(b'B', b"\0\0\0\0\0\x01\0\0\0\x03two\0\0"));
    batch.extend(RawConn::message(b'E', b"\0\0\0\0\0"));
    batch.extend(RawConn::message(b'S', b""));
    c.send(&batch).await;
    let replies = until_ready(&mut c).await;
    assert!(
        !replies.iter().any(|(t, _)| *t == b'E'),
        "no error: {replies:?}"
    );
    assert!(wait_unpinned(port).await, "C is not pinned");
    assert_eq!(value(&b, "SHOW work_mem").await, "4MB", "B in between");
    c.send(&RawConn::message(
        b'Q',
        b"SELECT current_setting('app.tenant')\0",
    ))
    .await;
    let replies = until_ready(&mut c).await;
    let row = replies.iter().find(|(t, _)| *t == b'D').expect("a row");
    assert!(row.1.ends_with(b"two"), "C's tenant replayed: {row:?}");
}

#[tokio::test]
async fn advisory_lock_pins_until_unlocked() {
    let s = start("default_pool_size = 2");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    let c = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute("SELECT pg_advisory_lock(424242)")
        .await
        .unwrap();
    let pinned = value(&a, "SELECT pg_backend_pid()").await;
    // Others keep running on the remaining server; A stays on its own.
    for _ in 0..3 {
        assert_eq!(
            value(&b, "SELECT pg_try_advisory_lock(424242)::text").await,
            "false"
        );
        assert_eq!(value(&c, "SELECT 1").await, "1");
        assert_eq!(value(&a, "SELECT pg_backend_pid()").await, pinned);
    }
    a.batch_execute("SELECT pg_advisory_unlock(424242)")
        .await
        .unwrap();
    // Unpinned: A's server goes back to the pool and B can take the lock.
    assert_eq!(
        value(&b, "SELECT pg_try_advisory_lock(424242)::text").await,
        "true"
    );
    b.batch_execute("SELECT pg_advisory_unlock_all()")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_client_leaving_with_a_lock_gets_its_server_cleaned() {
    let s = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute(
        "SELECT pg_advisory_lock(515151); LISTEN leftover; CREATE TEMP TABLE t_left(x int)",
    )
    .await
    .unwrap();
    let pid = value(&a, "SELECT pg_backend_pid()").await;
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = s.connect("trust_user", "", "app").await.unwrap();
    assert_eq!(
        value(&b, "SELECT pg_try_advisory_lock(515151)::text").await,
        "true"
    );
    assert_eq!(
        value(&b, "SELECT count(*) FROM pg_listening_channels()").await,
        "0"
    );
    assert_eq!(
        value(&b, "SELECT count(*) FROM pg_class WHERE relname = 't_left'").await,
        "0"
    );
    assert_eq!(
        value(&b, "SELECT pg_backend_pid()").await,
        pid,
        "the cleaned server was reused"
    );
}

#[tokio::test]
async fn temp_table_pins_and_is_invisible_to_others() {
    let port = sluice_e2e::free_port();
    let s = start(&format!(
        "default_pool_size = 2\n\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{port}"
    ));
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute("CREATE TEMP TABLE scratch(x int); INSERT INTO scratch VALUES (1), (2)")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(value(&a, "SELECT count(*) FROM scratch").await, "2");
        assert!(b
            .simple_query("SELECT count(*) FROM scratch")
            .await
            .is_err());
    }
    // Dropping the last temporary object lets the server go: checked after each DROP, as after
    // an unlock (an idle pinned client would otherwise hold its server, and a PAUSE, forever).
    a.batch_execute("CREATE TEMP VIEW scratch_v AS SELECT 1; CREATE TEMP SEQUENCE scratch_s")
        .await
        .unwrap();
    a.batch_execute("DROP TABLE scratch").await.unwrap();
    a.batch_execute("drop view scratch_v").await.unwrap();
    assert!(
        !wait_unpinned(port).await,
        "still pinned: its temporary sequence is left"
    );
    a.simple_query("DROP SEQUENCE IF EXISTS pg_temp.scratch_s")
        .await
        .unwrap();
    assert!(
        wait_unpinned(port).await,
        "unpinned once its last temporary object was dropped"
    );
}

#[tokio::test]
async fn listen_keeps_receiving_notifications_between_transactions() {
    let s = start("default_pool_size = 1");
    let mut a = RawConn::connect(s.port).await;
    a.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    until_ready(&mut a).await;
    a.send(&RawConn::message(b'Q', b"LISTEN jobs\0")).await;
    until_ready(&mut a).await;
    // Another client (through a second pool slot? no: pool_size=1 and A is pinned) notifies directly.
    PgCluster::get().psql("app", "NOTIFY jobs, 'hello'");
    let (tag, body) = a
        .read_message(Duration::from_secs(5))
        .await
        .expect("a notification while idle");
    assert_eq!(tag, b'A', "NotificationResponse");
    assert!(body.windows(5).any(|w| w == b"hello"));
}

#[tokio::test]
async fn with_pinning_disabled_session_state_is_refused() {
    let s = start("default_pool_size = 1\n\n[sluice]\npin_session_state = 0");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    for sql in [
        "LISTEN x",
        "SELECT pg_advisory_lock(1)",
        "CREATE TEMP TABLE t(x int)",
    ] {
        let err = a.batch_execute(sql).await.expect_err(sql);
        let db = err.as_db_error().expect("a server-style error");
        assert_eq!(db.code().code(), "0A000", "{sql}");
        assert!(
            db.message()
                .contains("not supported in transaction pooling mode"),
            "{}",
            db.message()
        );
    }
    // The session goes on, and nothing was executed.
    assert_eq!(
        value(&a, "SELECT count(*) FROM pg_listening_channels()").await,
        "0"
    );
    a.batch_execute("SET work_mem = '5MB'").await.unwrap();
    assert_eq!(value(&a, "SHOW work_mem").await, "5MB");
}

#[tokio::test]
async fn max_pinned_clients_limits_pins_and_metrics_count_them() {
    let port = sluice_e2e::free_port();
    let s = start(&format!(
        "default_pool_size = 3\n\n[sluice]\nmax_pinned_clients = 1\nmetrics_listen_addr = 127.0.0.1:{port}"
    ));
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute("SELECT pg_advisory_lock(616161)")
        .await
        .unwrap();
    let err = b
        .batch_execute("LISTEN over_limit")
        .await
        .expect_err("second pin refused");
    assert_eq!(err.as_db_error().unwrap().code().code(), "0A000");
    assert!(sluice_e2e::metrics(port)
        .await
        .contains("sluice_pool_pinned_clients{database=\"app\",user=\"trust_user\"} 1"));
    a.batch_execute("SELECT pg_advisory_unlock(616161)")
        .await
        .unwrap();
    // The pin is re-checked right after the unlock's reply reached the client.
    assert!(wait_unpinned(port).await, "A unpinned after its unlock");
    b.batch_execute("LISTEN over_limit")
        .await
        .expect("room again after A unpinned");
    b.batch_execute("UNLISTEN *").await.unwrap();
    assert!(
        wait_unpinned(port).await,
        "no client pinned after UNLISTEN *"
    );
}

/// A pin the check query cannot see (a set_config the Bind alone cannot replay, LOAD) lasts as
/// long as its client, and counts: in the gauge, and against max_pinned_clients.
#[tokio::test]
async fn a_pin_for_the_clients_lifetime_is_counted() {
    let port = sluice_e2e::free_port();
    let s = start(&format!(
        "default_pool_size = 2\n\n[sluice]\nmax_pinned_clients = 1\nmetrics_listen_addr = 127.0.0.1:{port}"
    ));
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.query_one("SELECT set_config('app.tenant', lower($1), false)", &[&"T"])
        .await
        .unwrap();
    let mut counted = false;
    for _ in 0..40 {
        counted = sluice_e2e::metrics(port)
            .await
            .contains("sluice_pool_pinned_clients{database=\"app\",user=\"trust_user\"} 1");
        if counted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(counted, "A's pin is counted");
    let err = b
        .batch_execute("LISTEN over_limit")
        .await
        .expect_err("a second pin is past max_pinned_clients");
    assert_eq!(err.as_db_error().unwrap().code().code(), "0A000");
    assert_eq!(value(&a, "SELECT current_setting('app.tenant')").await, "t");
}

async fn wait_unpinned(port: u16) -> bool {
    for _ in 0..40 {
        if sluice_e2e::metrics(port)
            .await
            .contains("sluice_pool_pinned_clients{database=\"app\",user=\"trust_user\"} 0")
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn hold_cursors_and_sql_prepare_stay_with_their_client() {
    let s = start("default_pool_size = 2");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute(
        "BEGIN; DECLARE held CURSOR WITH HOLD FOR SELECT g FROM generate_series(1, 3) g; COMMIT",
    )
    .await
    .unwrap();
    a.batch_execute("PREPARE answer AS SELECT 42")
        .await
        .unwrap();
    for expected in ["1", "2"] {
        assert_eq!(value(&a, "FETCH held").await, expected);
        assert_eq!(value(&a, "EXECUTE answer").await, "42");
        assert!(
            b.simple_query("FETCH held").await.is_err(),
            "B has no such cursor"
        );
        assert!(
            b.simple_query("EXECUTE answer").await.is_err(),
            "B has no such statement"
        );
    }
    a.batch_execute("CLOSE held; DEALLOCATE answer")
        .await
        .unwrap();
}

#[tokio::test]
async fn state_a_do_block_leaves_stays_with_its_client() {
    // A DO block's set_config() or SET is the session's as much as one sent on its own. It cannot
    // be replayed (a body may set it conditionally), so the client keeps its server; a session
    // lock taken in a block pins until a block releases it.
    let port = sluice_e2e::free_port();
    let s = start(&format!(
        "default_pool_size = 2\n\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{port}"
    ));
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute(
        "DO $$ BEGIN PERFORM set_config('app.tenant', 'acme', false); \
         IF true THEN SET work_mem = '7MB'; END IF; END $$",
    )
    .await
    .unwrap();
    for _ in 0..4 {
        assert_eq!(
            value(&a, "SELECT current_setting('app.tenant')").await,
            "acme",
            "A keeps what its block set"
        );
        assert_eq!(value(&a, "SHOW work_mem").await, "7MB");
        assert_eq!(
            value(
                &b,
                "SELECT coalesce(current_setting('app.tenant', true), '')"
            )
            .await,
            "",
            "B never sees A's tenant"
        );
        assert_ne!(value(&b, "SHOW work_mem").await, "7MB");
    }
    assert!(
        sluice_e2e::metrics(port)
            .await
            .contains("sluice_pool_pinned_clients{database=\"app\",user=\"trust_user\"} 1"),
        "A's pin is counted"
    );
    drop(a);
    assert!(wait_unpinned(port).await, "A's pin ends with A");
    // A lock taken and released by blocks: pinned in between, free after.
    let c = s.connect("trust_user", "", "app").await.unwrap();
    c.batch_execute("DO $$ BEGIN PERFORM pg_advisory_lock(515151); END $$")
        .await
        .unwrap();
    let pinned = value(&c, "SELECT pg_backend_pid()").await;
    for _ in 0..3 {
        assert_eq!(
            value(&b, "SELECT pg_try_advisory_lock(515151)::text").await,
            "false"
        );
        assert_eq!(value(&c, "SELECT pg_backend_pid()").await, pinned);
    }
    c.batch_execute("DO $$ BEGIN PERFORM pg_advisory_unlock(515151); END $$")
        .await
        .unwrap();
    assert!(
        wait_unpinned(port).await,
        "the unlock in a block ends C's pin"
    );
    // A block that leaves nothing behind pins nothing.
    c.batch_execute("DO $$ BEGIN SET LOCAL work_mem = '6MB'; PERFORM 1; END $$")
        .await
        .unwrap();
    assert!(wait_unpinned(port).await);
    // The same through the extended protocol (the unnamed statement's Parse): pinned too.
    c.execute(
        "DO $$ BEGIN EXECUTE format('SET %I = %L', 'app.tenant', 'beta'); END $$",
        &[],
    )
    .await
    .unwrap();
    for _ in 0..3 {
        assert_eq!(
            value(&c, "SELECT current_setting('app.tenant')").await,
            "beta"
        );
        assert_eq!(
            value(
                &b,
                "SELECT coalesce(current_setting('app.tenant', true), '')"
            )
            .await,
            ""
        );
    }
}

#[tokio::test]
async fn with_pinning_disabled_a_do_block_that_sets_is_refused() {
    let s = start("default_pool_size = 1\n\n[sluice]\npin_session_state = 0");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let err = a
        .batch_execute("DO $$ BEGIN PERFORM set_config('app.tenant', 'acme', false); END $$")
        .await
        .expect_err("the block would leave its setting on a shared server");
    assert_eq!(err.as_db_error().unwrap().code().code(), "0A000");
    assert_eq!(
        value(
            &a,
            "SELECT coalesce(current_setting('app.tenant', true), '')"
        )
        .await,
        "",
        "the block never ran"
    );
    // Blocks that change nothing of the session still run.
    a.batch_execute("DO $$ BEGIN PERFORM set_config('app.tenant', 'x', true); END $$")
        .await
        .unwrap();
}
