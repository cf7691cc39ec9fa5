//! Default policy table and the random-input robustness loop.

use super::super::policy::{action, Action, Feature};
use super::super::*;
use super::*;
use StatementKind as K;

// ---- policy ----

#[test]
fn policy_default_actions() {
    let all = |_| true;
    let none = |_| false;
    let cases: Vec<(&str, Action)> = vec![
        ("SELECT 1", Action::Forward),
        ("BEGIN", Action::Forward),
        ("SET x = 1", Action::Track),
        ("SET ROLE r", Action::Track),
        ("SET SESSION AUTHORIZATION u", Action::Track),
        ("RESET ALL", Action::Track),
        ("RESET x", Action::Track),
        ("SET LOCAL x = 1", Action::Forward),
        ("SET TRANSACTION READ ONLY", Action::Forward),
        ("SELECT pg_advisory_xact_lock(1)", Action::Forward),
        (
            "SELECT pg_advisory_lock(1)",
            Action::Pin(Feature::AdvisoryLock),
        ),
        ("LISTEN x", Action::Pin(Feature::Listen)),
        (
            "CREATE TEMP TABLE t (a int)",
            Action::Pin(Feature::TempObject),
        ),
        (
            "CREATE TEMP TABLE t (a int) ON COMMIT DROP",
            Action::Forward,
        ),
        (
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            Action::Pin(Feature::HoldCursor),
        ),
        ("DECLARE c CURSOR FOR SELECT 1", Action::Forward),
        ("PREPARE p AS SELECT 1", Action::Pin(Feature::SqlPrepare)),
        ("LOAD 'x'", Action::Pin(Feature::LoadModule)),
        (
            "SELECT set_config($1, $2, false)",
            Action::Pin(Feature::DynamicSet),
        ),
        ("SELECT set_config($1, $2, true)", Action::Forward),
        (
            "SELECT set_config('app.tenant', $1, false)",
            Action::Pin(Feature::DynamicSet),
        ),
        ("SELECT set_config('app.tenant', '7', false)", Action::Track),
        ("SELECT set_config('app.tenant', $1, true)", Action::Forward),
        ("SET search_path = \"$user\", public", Action::Track),
        ("SELECT pg_advisory_unlock(1)", Action::Release),
        ("UNLISTEN *", Action::Release),
        ("CLOSE ALL", Action::Release),
        ("DEALLOCATE ALL", Action::Release),
        ("DISCARD ALL", Action::Release),
        ("DISCARD TEMP", Action::Release),
        ("DISCARD PLANS", Action::Forward),
        ("DROP TABLE t", Action::Release),
        ("EXECUTE p", Action::Forward),
    ];
    for (sql, expected) in cases {
        assert_eq!(action(&one(sql), all), expected, "{sql}");
        let refused = match expected {
            Action::Pin(f) => Action::Refuse(f),
            other => other,
        };
        assert_eq!(action(&one(sql), none), refused, "{sql}");
    }
    for f in Feature::ALL {
        assert!(!f.describe().is_empty());
    }
}

// ---- robustness ----

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Random texts built from SQL-ish fragments and random bytes: never panics, always
/// terminates, and the fast path agrees with the full classification.
#[test]
fn random_input_never_panics_and_fast_path_agrees() {
    const PIECES: &[&str] = &[
        "SELECT ",
        "set ",
        "LOCAL ",
        "SESSION ",
        "listen ",
        "UNLISTEN ",
        "*",
        "x",
        "\"Q\"",
        "'",
        "''",
        "\"",
        "$$",
        "$t$",
        "$1",
        "E'\\'",
        "\\",
        ";",
        "(",
        ")",
        ",",
        ".",
        "--",
        "\n",
        "/*",
        "*/",
        "pg_advisory_lock",
        "pg_advisory_unlock_all",
        "set_config",
        "currval",
        "LastVal",
        "(",
        "'a'",
        "true",
        " TO ",
        "=",
        "CREATE ",
        "TEMP ",
        "TABLE ",
        "pg_temp",
        "INTO ",
        "DECLARE ",
        "CURSOR ",
        "WITH ",
        "HOLD ",
        "FOR ",
        "PREPARE ",
        "AS ",
        "EXECUTE ",
        "DEALLOCATE ",
        "ALL ",
        "DISCARD ",
        "RESET ",
        "ROLE ",
        "BEGIN ",
        "END ",
        "COMMIT ",
        "ROLLBACK ",
        "TO ",
        "SAVEPOINT ",
        "FUNCTION ",
        "ATOMIC ",
        "CASE ",
        "LOAD ",
        "ON ",
        "DROP ",
        "U&",
        "é",
        " ",
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..20_000 {
        let mut buf: Vec<u8> = Vec::new();
        let len = rng.next() % 24;
        for _ in 0..len {
            if round % 3 == 0 {
                buf.push(rng.next() as u8);
            } else {
                let p = PIECES[(rng.next() % PIECES.len() as u64) as usize];
                buf.extend_from_slice(p.as_bytes());
            }
        }
        for scs in [true, false] {
            let opts = LexOptions {
                standard_conforming_strings: scs,
            };
            let all: Vec<_> = classify_with(&buf, opts).collect();
            for s in &all {
                assert!(s.text.len() <= buf.len());
                let _ = s.kind.affects_session();
                let _ = action(&s.kind, |_| true);
            }
            let any = all.iter().any(|s| s.kind.affects_session());
            assert_eq!(might_affect_session_with(&buf, opts), any);
            let tracked = all.iter().any(|s| {
                s.kind.affects_session()
                    || s.kind.is_savepoint_control()
                    || s.kind.reads_sequence_state()
            });
            assert_eq!(might_matter_to_tracker_with(&buf, opts), tracked);
            // The same text with the fast path defeated (a leading statement) must agree.
            let mut slow = b"SELECT 0;".to_vec();
            slow.extend_from_slice(&buf);
            let slow_kinds: Vec<_> = classify_with(&slow, opts).skip(1).map(|s| s.kind).collect();
            let kinds: Vec<_> = all.iter().map(|s| s.kind.clone()).collect();
            assert_eq!(kinds, slow_kinds, "{:?}", String::from_utf8_lossy(&buf));
        }
    }
}

#[test]
fn pathological_nesting_is_linear_enough() {
    let deep = "(".repeat(100_000) + "pg_advisory_lock(1)" + &")".repeat(100_000);
    assert_eq!(kinds(&deep), vec![K::AdvisoryLock { session: true }]);
    let comments = "/*".repeat(50_000);
    assert!(kinds(&comments).is_empty());
    let many = "SELECT 1;".repeat(10_000);
    assert_eq!(classify(&many).count(), 10_000);
}

#[test]
fn replay_sql_for_tracked_kinds() {
    let replay =
        |sql: &str| -> Vec<Option<String>> { classify(sql).map(|s| s.replay_sql()).collect() };
    assert_eq!(
        replay("SET search_path TO a, \"B\" -- c\n; RESET x; RESET ALL"),
        vec![
            Some("SET search_path TO a, \"B\"".into()),
            Some("RESET x".into()),
            Some("RESET ALL".into())
        ]
    );
    assert_eq!(
        replay("SELECT pg_advisory_lock(1), set_config('it''s', 'v', false)"),
        vec![
            None,
            Some("SELECT pg_catalog.set_config('it''s', 'v', false)".into())
        ]
    );
    assert_eq!(replay("SELECT set_config('x', $1, false)"), vec![None]);
    assert_eq!(replay("SELECT set_config($1, 'v', false)"), vec![None]);
    assert_eq!(replay("SET LOCAL x = 1"), vec![None]);
    assert_eq!(replay("SELECT 1"), vec![None]);
}
