//! Unit tests of the session tracker: what commits, what is dropped, what pins.

use crate::session_state::policy::Feature;
use crate::session_state::tracker::{SessionTracker, Verdict};
use crate::session_state::LexOptions;

fn observe(t: &mut SessionTracker, sql: &str) -> Verdict {
    t.observe(sql.as_bytes(), LexOptions::default(), true)
}

#[test]
fn startup_values_replay_until_the_client_sets_its_own() {
    let mut t =
        SessionTracker::with_startup_values(vec![("search_path".into(), r"it's a\b".into())]);
    assert_eq!(
        t.replay_sql().as_deref(),
        Some(r"SELECT pg_catalog.set_config('search_path', E'it''s a\\b', false);")
    );
    observe(&mut t, "SET search_path TO app");
    t.on_ready(true);
    assert_eq!(t.replay_sql().as_deref(), Some("SET search_path TO app;"));
}

#[test]
fn sets_commit_with_their_transaction() {
    let mut t = SessionTracker::default();
    observe(&mut t, "SET search_path TO app, public");
    t.on_ready(true);
    assert_eq!(
        t.replay_sql().as_deref(),
        Some("SET search_path TO app, public;")
    );
    observe(&mut t, "SET work_mem = '8MB'; SELECT 1/0");
    t.on_error();
    t.on_ready(true);
    assert_eq!(
        t.replay_sql().as_deref(),
        Some("SET search_path TO app, public;"),
        "failed implicit transaction"
    );
    observe(&mut t, "BEGIN");
    observe(&mut t, "SET work_mem = '8MB'");
    t.on_ready(false);
    t.on_command_complete(b"ROLLBACK");
    t.on_ready(true);
    assert!(!t.replay_sql().unwrap().contains("work_mem"), "rolled back");
    observe(&mut t, "SET search_path = x");
    t.on_ready(true);
    assert_eq!(
        t.replay_sql().as_deref(),
        Some("SET search_path = x;"),
        "one entry per key"
    );
}

#[test]
fn reset_and_discard_drop_entries() {
    let mut t = SessionTracker::default();
    observe(&mut t, "SET a.b = 1; SET ROLE r; SET c.d = 2");
    t.on_ready(true);
    observe(&mut t, "RESET a.b");
    t.on_ready(true);
    assert_eq!(t.replay_sql().as_deref(), Some("SET ROLE r;SET c.d = 2;"));
    observe(&mut t, "RESET ALL");
    t.on_ready(true);
    assert_eq!(
        t.replay_sql().as_deref(),
        Some("SET ROLE r;"),
        "RESET ALL keeps the role"
    );
    observe(&mut t, "DISCARD ALL");
    t.on_ready(true);
    assert_eq!(t.replay_sql(), None);
    assert!(t.take_touched());
}

#[test]
fn local_sets_are_not_tracked() {
    let mut t = SessionTracker::default();
    observe(&mut t, "SET LOCAL work_mem = '1MB'");
    t.on_ready(true);
    assert_eq!(t.replay_sql(), None);
    assert!(!t.take_touched());
}

#[test]
fn pins_and_release_checks() {
    let mut t = SessionTracker::default();
    assert_eq!(
        observe(&mut t, "SELECT pg_advisory_lock(1)"),
        Verdict::Forward
    );
    assert_eq!(t.pinned(), Some(Feature::AdvisoryLock));
    assert!(
        t.take_release_check(),
        "checked once the lock call ran (it may have failed)"
    );
    assert!(!t.take_release_check());
    observe(&mut t, "SELECT pg_advisory_unlock(1)");
    assert!(t.take_release_check());
    assert!(!t.take_release_check(), "taken once");
    t.unpin();
    assert_eq!(t.pinned(), None);
    observe(&mut t, "CREATE TEMP TABLE t (a int)");
    assert!(t.take_release_check());
    observe(&mut t, "DROP TABLE t");
    assert!(
        t.take_release_check(),
        "a DROP may remove the last temp object"
    );
    t.unpin();
    observe(&mut t, "LOAD 'auto_explain'");
    t.unpin();
    assert_eq!(t.pinned(), Some(Feature::LoadModule), "LOAD stays");
}

#[test]
fn each_committed_change_is_a_new_version() {
    let mut t = SessionTracker::default();
    let v0 = t.version();
    observe(&mut t, "SELECT 1");
    t.on_ready(true);
    assert_eq!(t.version(), v0, "nothing changed");
    observe(&mut t, "SET work_mem = '5MB'");
    t.on_ready(true);
    let v1 = t.version();
    assert_ne!(v1, v0);
    observe(&mut t, "SET work_mem = '6MB'");
    t.on_error();
    t.on_ready(true);
    assert_eq!(t.version(), v1, "a failed transaction's SET never happened");
    observe(&mut t, "SET work_mem = '6MB'");
    t.on_ready(true);
    assert_ne!(t.version(), v1, "the same key again: another version");
}

fn keys(t: &SessionTracker) -> Vec<&str> {
    t.tracked_sets().iter().map(|(k, _)| k.as_str()).collect()
}

/// The CommandComplete tags PostgreSQL answers a request's statements with, in order.
fn answer(t: &mut SessionTracker, tags: &[&str]) {
    for tag in tags {
        t.on_command_complete(tag.as_bytes());
    }
}

#[test]
fn savepoints_keep_and_drop_what_postgresql_does() {
    let mut t = SessionTracker::default();
    observe(&mut t, "BEGIN; SET a = 1; SAVEPOINT s1; SET b = 2");
    answer(&mut t, &["BEGIN", "SET", "SAVEPOINT", "SET"]);
    t.on_ready(false);
    observe(
        &mut t,
        "SAVEPOINT \"S2\"; SET c = 3; ROLLBACK TO \"S2\"; SET d = 4",
    );
    answer(&mut t, &["SAVEPOINT", "SET", "ROLLBACK", "SET"]);
    t.on_ready(false);
    observe(
        &mut t,
        "RELEASE s1; SAVEPOINT s3; SET e = 5; ROLLBACK TO SAVEPOINT s3",
    );
    answer(&mut t, &["RELEASE", "SAVEPOINT", "SET", "ROLLBACK"]);
    t.on_ready(false);
    // The savepoint stays after a rollback to it.
    observe(&mut t, "SET f = 6; ROLLBACK TO s3; COMMIT");
    answer(&mut t, &["SET", "ROLLBACK", "COMMIT"]);
    t.on_ready(true);
    assert_eq!(keys(&t), ["a", "b", "d"]);
}

#[test]
fn a_transaction_rescued_by_rollback_to_commits() {
    let mut t = SessionTracker::default();
    observe(&mut t, "BEGIN; SET a = 1; SAVEPOINT s; SET b = 2");
    answer(&mut t, &["BEGIN", "SET", "SAVEPOINT", "SET"]);
    t.on_ready(false);
    observe(&mut t, "SELECT 1/0");
    t.on_error();
    t.on_ready(false);
    observe(&mut t, "ROLLBACK TO s; COMMIT");
    answer(&mut t, &["ROLLBACK", "COMMIT"]);
    t.on_ready(true);
    assert_eq!(keys(&t), ["a"]);
    // Not rescued: COMMIT of a failed transaction answers ROLLBACK.
    observe(&mut t, "BEGIN; SET c = 3");
    answer(&mut t, &["BEGIN", "SET"]);
    t.on_ready(false);
    observe(&mut t, "SELECT 1/0");
    t.on_error();
    t.on_ready(false);
    observe(&mut t, "COMMIT");
    answer(&mut t, &["ROLLBACK"]);
    t.on_ready(true);
    assert_eq!(keys(&t), ["a"]);
}

#[test]
fn each_transaction_of_a_request_settles_its_own_changes() {
    let mut t = SessionTracker::default();
    // Two transactions in one query string: the first commits, the second rolls back.
    observe(
        &mut t,
        "BEGIN; SET a = 1; COMMIT; BEGIN; SET b = 2; ROLLBACK",
    );
    answer(
        &mut t,
        &["BEGIN", "SET", "COMMIT", "BEGIN", "SET", "ROLLBACK"],
    );
    t.on_ready(true);
    assert_eq!(keys(&t), ["a"]);
    // An explicit COMMIT ends the implicit transaction; an error after it fails the next.
    observe(&mut t, "SET c = 3; COMMIT; SET d = 4; SELECT 1/0");
    answer(&mut t, &["SET", "COMMIT", "SET"]);
    t.on_error();
    t.on_ready(true);
    assert_eq!(keys(&t), ["a", "c"]);
    // COMMIT AND CHAIN commits and stays in a block, whose ROLLBACK drops only its own.
    observe(&mut t, "BEGIN; SET e = 5; COMMIT AND CHAIN; SET f = 6");
    answer(&mut t, &["BEGIN", "SET", "COMMIT", "SET"]);
    t.on_ready(false);
    assert_eq!(keys(&t), ["a", "c", "e"], "committed before the block ends");
    observe(&mut t, "ROLLBACK");
    answer(&mut t, &["ROLLBACK"]);
    t.on_ready(true);
    assert_eq!(keys(&t), ["a", "c", "e"]);
}

#[test]
fn control_statements_an_error_skipped_never_ran() {
    let mut t = SessionTracker::default();
    // The COMMIT after the error never ran: the block is failed, and so is its SET.
    observe(&mut t, "BEGIN; SET a = 1; SELECT 1/0; COMMIT");
    answer(&mut t, &["BEGIN", "SET"]);
    t.on_error();
    t.on_ready(false);
    observe(&mut t, "ROLLBACK");
    answer(&mut t, &["ROLLBACK"]);
    t.on_ready(true);
    assert!(keys(&t).is_empty());
    // A savepoint an error skipped is not the one a later ROLLBACK TO goes back to.
    observe(
        &mut t,
        "BEGIN; SAVEPOINT s; SET b = 2; SELECT 1/0; SAVEPOINT s; SET c = 3",
    );
    answer(&mut t, &["BEGIN", "SAVEPOINT", "SET"]);
    t.on_error();
    t.on_ready(false);
    observe(&mut t, "ROLLBACK TO s; SET d = 4; COMMIT");
    answer(&mut t, &["ROLLBACK", "SET", "COMMIT"]);
    t.on_ready(true);
    assert_eq!(keys(&t), ["d"]);
    // A tag no observed statement awaits (a prepared COMMIT seen only at its Parse) still
    // ends the transaction.
    observe(&mut t, "BEGIN; SET e = 5");
    answer(&mut t, &["BEGIN", "SET"]);
    t.on_ready(false);
    answer(&mut t, &["ROLLBACK"]);
    t.on_ready(true);
    assert_eq!(keys(&t), ["d"]);
}

#[test]
fn pipelined_requests_commit_with_their_own_transaction() {
    let opts = LexOptions::default();
    let mut t = SessionTracker::default();
    // Request 0 fails, request 1 sets: seen together, answered one after the other.
    t.observe_in(b"SELECT 1/0", opts, true, 0);
    t.observe_in(b"SET a = 1", opts, true, 1);
    t.on_error();
    t.on_ready_through(true, 1);
    assert!(keys(&t).is_empty(), "not yet: request 1 is still running");
    t.on_ready_through(true, 2);
    assert_eq!(keys(&t), ["a"], "request 1's own transaction committed");
    // Request 0 sets, request 1's SET fails: only the first is kept.
    t.observe_in(b"SET b = 2", opts, true, 0);
    t.observe_in(b"SET c = 'bad'", opts, true, 1);
    t.on_ready_through(true, 1);
    assert_eq!(keys(&t), ["a", "b"]);
    t.on_error();
    t.on_ready_through(true, 2);
    assert_eq!(keys(&t), ["a", "b"]);
    // A lost server drops whatever was pending.
    t.observe_in(b"SET d = 4", opts, true, 0);
    t.on_lost();
    t.on_ready_through(true, 1);
    assert_eq!(keys(&t), ["a", "b"]);
}

#[test]
fn refusal_changes_nothing() {
    let mut t = SessionTracker::default();
    let v = t.observe(b"SET x.y = 1; LISTEN jobs", LexOptions::default(), false);
    assert_eq!(v, Verdict::Refuse(Feature::Listen));
    t.on_ready(true);
    assert_eq!(t.replay_sql(), None);
    assert_eq!(t.pinned(), None);
}

#[test]
fn dynamic_set_config_pins() {
    let mut t = SessionTracker::default();
    observe(&mut t, "SELECT set_config('app.tenant', $1, false)");
    assert_eq!(t.pinned(), Some(Feature::DynamicSet));
    assert!(t.take_release_check(), "a new pin is looked at (counted)");
    observe(&mut t, "LISTEN x; UNLISTEN x");
    assert!(
        !t.pin_checkable(),
        "the check query cannot see a dynamic SET"
    );
    t.unpin();
    assert_eq!(t.pinned(), Some(Feature::DynamicSet));
}

/// A Bind body (`decode_bind_params`) of the unnamed statement with text values.
fn bind_body(values: &[Option<&str>]) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.map(str::as_bytes)).collect();
    sluice_protocol::encode_bind_text("", "", &values, &mut out);
    out[5..].to_vec()
}

fn parse_body(sql: &str) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    sluice_protocol::encode_parse("", sql, &[], &mut out);
    out[5..].to_vec()
}

#[test]
fn bound_set_config_is_tracked_from_the_binds_values() {
    let opts = LexOptions::default();
    let mut t = SessionTracker::default();
    let sql = "SELECT set_config('App.Tenant', $1, false)";
    let parse = parse_body(sql);
    t.observe_unnamed(sql.as_bytes(), opts, true, 0, Some(&parse));
    assert!(
        t.binds_unnamed() && t.pinned().is_none(),
        "waits for its Binds"
    );
    let body = bind_body(&[Some("it's \\ t1")]);
    let bind = sluice_protocol::decode_bind_params(&body).unwrap();
    t.bind_unnamed(Some(&bind), 0);
    t.on_ready(true);
    assert_eq!(
        t.replay_sql().as_deref(),
        Some(r"SELECT pg_catalog.set_config('App.Tenant', E'it''s \\ t1', false);")
    );
    assert_eq!(keys(&t), ["app.tenant"]);
    assert!(t.take_touched());
    // Bound again with NULL: back to the default, nothing to replay.
    let body = bind_body(&[None]);
    t.bind_unnamed(
        Some(&sluice_protocol::decode_bind_params(&body).unwrap()),
        0,
    );
    t.on_ready(true);
    assert_eq!(t.replay_sql(), None);
    // A simple Query replaces the unnamed statement: its Binds are not read any more.
    observe(&mut t, "SELECT 1");
    assert!(t.binds_unnamed(), "a Query seen only through observe_in");
    t.observe_unnamed(b"SELECT 1", opts, true, 0, None);
    assert!(!t.binds_unnamed());
}

#[test]
fn bound_set_config_that_cannot_be_read_pins() {
    let opts = LexOptions::default();
    let mut t = SessionTracker::default();
    let sql = "SELECT set_config($1, $2, $3)";
    t.observe_unnamed(sql.as_bytes(), opts, true, 0, Some(&parse_body(sql)));
    // is_local true: nothing to track; then a Bind too large to read: pinned.
    let body = bind_body(&[Some("work_mem"), Some("5MB"), Some("on")]);
    t.bind_unnamed(
        Some(&sluice_protocol::decode_bind_params(&body).unwrap()),
        0,
    );
    t.on_ready(true);
    assert_eq!(t.replay_sql(), None);
    assert_eq!(t.pinned(), None);
    t.bind_unnamed(None, 0);
    assert_eq!(t.pinned(), Some(Feature::DynamicSet));
}

#[test]
fn sequence_reads_are_reported_and_change_nothing() {
    let mut t = SessionTracker::default();
    assert_eq!(observe(&mut t, "SELECT lastval()"), Verdict::SequenceRead);
    assert_eq!(
        observe(
            &mut t,
            "INSERT INTO o DEFAULT VALUES; SELECT currval('o_id_seq')"
        ),
        Verdict::SequenceRead
    );
    assert_eq!(
        observe(&mut t, "SELECT nextval('o_id_seq')"),
        Verdict::Forward
    );
    t.on_ready(true);
    assert!(t.pinned().is_none());
    assert!(t.replay_sql().is_none());
    // A refusal still wins over the read.
    let v = t.observe(
        b"SELECT lastval(); LISTEN jobs",
        LexOptions::default(),
        false,
    );
    assert_eq!(v, Verdict::Refuse(Feature::Listen));
}

#[test]
fn a_query_sent_ahead_later_pushes_the_requests_back() {
    let opts = LexOptions::default();
    let mut t = SessionTracker::default();
    // Requests 0 and 1 were read; then the relay put a query of its own in front of both.
    t.observe_in(b"SET a = 1", opts, true, 0);
    t.observe_in(b"SET b = 2; SELECT lastval()", opts, true, 1);
    t.requests_pushed_back();
    t.on_ready_through(true, 1);
    assert!(
        keys(&t).is_empty(),
        "the first ReadyForQuery was the pooler's"
    );
    t.on_ready_through(true, 2);
    assert_eq!(keys(&t), ["a"]);
    t.on_ready_through(true, 3);
    assert_eq!(keys(&t), ["a", "b"]);
}
