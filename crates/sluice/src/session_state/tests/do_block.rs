//! What a DO block's body does to session state (`do_block.rs`).

use super::*;
use crate::session_state::policy::{action, Action, Feature};

/// The actions of every statement the classifier yields for `sql`, pinning allowed.
fn actions(sql: &str) -> Vec<Action> {
    classify(sql).map(|s| action(&s.kind, |_| true)).collect()
}

const UNREPLAYABLE: Action = Action::Pin(Feature::DynamicSet);

#[test]
fn a_session_set_in_a_body_pins_for_good() {
    for sql in [
        "DO $$ BEGIN SET search_path = app; END $$",
        "do $$begin set work_mem = '8MB'; end$$",
        "DO $body$ BEGIN PERFORM set_config('app.tenant', 'acme', false); END $body$",
        "DO $$ DECLARE t text := 'x'; BEGIN PERFORM pg_catalog.set_config('app.tenant', t, false); END $$",
        "DO $$ BEGIN IF true THEN SET app.tenant = 'a'; ELSE RESET app.tenant; END IF; END $$",
        "DO $$ BEGIN FOR i IN 1..2 LOOP SET statement_timeout = 5; END LOOP; END $$",
        "DO $$ BEGIN EXECUTE 'SET search_path TO ' || quote_ident('app'); END $$",
        "DO $$ BEGIN EXECUTE format('SET %I = %L', 'work_mem', '8MB'); END $$",
        "DO $$ BEGIN RESET ALL; END $$",
        "DO $$ BEGIN EXECUTE 'SET ' || quote_ident('work_mem') || ' = 1'; END $$",
        "DO $$ DECLARE v text; BEGIN v := set_config('a.b', 'c', false); END $$",
        "DO 'BEGIN SET search_path = ''app''; END'",
        "DO LANGUAGE plpgsql $$ BEGIN SET a.b = 1; END $$",
        "DO $$ BEGIN SET a.b = 1; END $$ LANGUAGE 'plpgsql'",
        "DO $$ BEGIN EXECUTE 'DO $i$ BEGIN SET a.b = 1; END $i$'; END $$",
        "DO $$ BEGIN <<inner>> BEGIN SET a.b = 1; END; END $$",
        "DO $$ BEGIN PERFORM 1; EXCEPTION WHEN others THEN SET a.b = 1; END $$",
    ] {
        let got = actions(sql);
        assert!(
            !got.is_empty() && got.iter().all(|a| *a == UNREPLAYABLE),
            "{sql}: {got:?}"
        );
    }
}

#[test]
fn other_session_state_in_a_body_pins_as_outside() {
    let cases: &[(&str, Feature)] = &[
        (
            "DO $$ BEGIN PERFORM pg_advisory_lock(42); END $$",
            Feature::AdvisoryLock,
        ),
        ("DO $$ BEGIN LISTEN jobs; END $$", Feature::Listen),
        (
            "DO $$ BEGIN EXECUTE 'LISTEN ' || quote_ident('jobs'); END $$",
            Feature::Listen,
        ),
        (
            "DO $$ BEGIN EXECUTE 'PREPARE ' || 'q AS SELECT 1'; END $$",
            Feature::SqlPrepare,
        ),
        (
            "DO $$ BEGIN CREATE TEMP TABLE t (a int); END $$",
            Feature::TempObject,
        ),
        (
            "DO $$ BEGIN LOAD 'auto_explain'; END $$",
            Feature::LoadModule,
        ),
        (
            "DO $$ BEGIN EXECUTE 'PREPARE q AS SELECT 1'; END $$",
            Feature::SqlPrepare,
        ),
        (
            "DO $$ BEGIN IF pg_try_advisory_lock(1) THEN RAISE NOTICE 'got it'; END IF; END $$",
            Feature::AdvisoryLock,
        ),
    ];
    for (sql, feature) in cases {
        assert_eq!(actions(sql), [Action::Pin(*feature)], "{sql}");
    }
    // A lock and its unlock: the pin is checked again after the block.
    assert_eq!(
        actions("DO $$ BEGIN PERFORM pg_advisory_lock(1); PERFORM pg_advisory_unlock(1); END $$"),
        [Action::Pin(Feature::AdvisoryLock), Action::Release]
    );
}

#[test]
fn bodies_that_leave_nothing_behind_stay_plain() {
    for sql in [
        "DO $$ BEGIN UPDATE t SET a = 1; END $$",
        "DO $$ BEGIN SET LOCAL work_mem = '8MB'; PERFORM 1; END $$",
        "DO $$ BEGIN PERFORM set_config('app.tenant', 'x', true); END $$",
        "DO $$ BEGIN PERFORM pg_advisory_xact_lock(1); END $$",
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_type WHERE typname = 'mood') THEN \
         CREATE TYPE mood AS ENUM ('ok'); END IF; END $$",
        "DO $$ BEGIN ALTER TABLE t ALTER COLUMN a SET DEFAULT 0; END $$",
        "DO $$ BEGIN INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2; END $$",
        "DO $$ BEGIN CREATE TEMP TABLE t (a int) ON COMMIT DROP; END $$",
        "DO $$ BEGIN RAISE NOTICE 'SET search_path = x'; END $$",
        "DO $$ BEGIN EXECUTE 'UPDATE t SET a = 1'; COMMIT; END $$",
        "DO $$ BEGIN EXECUTE 'SET LOCAL ' || 'work_mem = 1'; END $$",
        "DO $$ BEGIN EXECUTE 'PREPARE TRANSACTION ' || quote_literal('g'); END $$",
        "DO $$ BEGIN END $$",
        "DO",
        // Other languages are not read.
        "DO LANGUAGE plpython3u $$ plpy.execute('SET search_path = x') $$",
        // Nor is a body with backslash escapes.
        "DO E'BEGIN SET search_path = \\'x\\'; END'",
    ] {
        assert_eq!(actions(sql), [Action::Forward], "{sql}");
        assert!(!might_affect_session(sql), "{sql}");
    }
}

#[test]
fn the_block_is_one_statement_among_others() {
    let sql = "SELECT 1; DO $$ BEGIN SET a.b = 1; LISTEN c; END $$; SELECT 2";
    let got: Vec<(usize, Action)> = classify(sql)
        .map(|s| (s.index, action(&s.kind, |_| true)))
        .collect();
    assert_eq!(
        got,
        [
            (0, Action::Forward),
            (1, UNREPLAYABLE),
            (1, Action::Pin(Feature::Listen)),
            (2, Action::Forward)
        ]
    );
    assert!(might_affect_session(sql));
    // With pinning refused, the block is refused.
    let refused: Vec<Action> = classify("DO $$ BEGIN SET a.b = 1; END $$")
        .map(|s| action(&s.kind, |_| false))
        .collect();
    assert_eq!(refused, [Action::Refuse(Feature::DynamicSet)]);
}

#[test]
fn nesting_is_read_a_few_levels_deep_only() {
    // Each level an EXECUTE of a DO block holding the next; the innermost SETs.
    let mut sql = String::from("SET a.b = 1");
    for level in 0..8 {
        let tag = format!("$l{level}$");
        sql = format!(
            "DO {tag} BEGIN EXECUTE {tag2}{sql}{tag2}; END {tag}",
            tag2 = format!("$e{level}$")
        );
    }
    // Deeper than MAX_NESTING: not read (and no stack or time blow-up).
    assert_eq!(actions(&sql), [Action::Forward]);
    let shallow = "DO $a$ BEGIN EXECUTE $b$ DO $c$ BEGIN SET a.b = 1; END $c$ $b$; END $a$";
    assert_eq!(actions(shallow), [UNREPLAYABLE]);
}
