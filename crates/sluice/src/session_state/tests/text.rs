//! Classification over whole texts: look-alikes, case, whitespace, multi-statement queries.

use super::super::classify::classify_exact;
use super::super::*;
use super::*;
use StatementKind as K;

// ---- look-alikes in comments, strings and names ----

/// The byte-scan shortcut may send a plain text to the full classification, never the reverse:
/// whatever the full classification finds, `might_affect_session` reports.
#[test]
fn shortcut_agrees_with_the_full_classification() {
    for sql in [
        "SELECT abalance FROM pgbench_accounts WHERE aid = 42;",
        "SELECT PG_ADVISORY_LOCK(1)",
        "select Pg_Try_Advisory_Lock(1)",
        "SELECT pg_catalog.pg_advisory_xact_lock(1)",
        "SELECT \"pg_advisory_lock\"(1)",
        "SELECT SET_CONFIG('a.b', 'c', false)",
        "SELECT pg_catalog.set_config('a.b', 'c', false) FROM t",
        "SELECT * INTO TEMP t FROM x",
        "select * into temporary t from x",
        "SELECT * INTO LOCAL TEMP t FROM x",
        "WITH x AS (SELECT 1) SELECT * INTO TEMP t FROM x",
        "SELECT * INTO t FROM x",
        "SELECT 1 /* x */",
        "SELECT 1 -- x",
        "SELECT 1; LISTEN x",
        "SELECT a_b, b_c, pg_x FROM t_config_x WHERE y = '_advisory'",
        "UPDATE t SET x = 1 WHERE id IN (SELECT id INTO TEMP q FROM u)",
        "SELECT 'it''s' FROM pgbench_tellers",
    ] {
        let exact = classify_exact(sql).any(|s| s.kind.affects_session());
        assert!(
            !exact || might_affect_session(sql),
            "{sql}: the shortcut missed what the full classification finds"
        );
        assert_eq!(
            classify(sql).any(|s| s.kind.affects_session()),
            exact,
            "{sql}"
        );
    }
    for sql in [
        "SELECT PG_ADVISORY_LOCK(1)",
        "SELECT SET_CONFIG('a.b', 'c', false)",
        "select * into temporary t from x",
    ] {
        assert!(might_affect_session(sql), "{sql}");
    }
    assert!(!might_affect_session(
        "SELECT abalance FROM pgbench_accounts WHERE aid = 42;"
    ));
}

/// The shortcut's byte scan goes eight bytes at a time: what it must stop at is found wherever it
/// falls relative to those blocks, and in the tail after the last whole block.
#[test]
fn shortcut_stops_at_every_offset() {
    for pad in 0..24 {
        let c = "c".repeat(pad + 1);
        for sql in [
            format!("SELECT {c}, pg_advisory_lock(1)"),
            format!("SELECT {c}, set_config('a.b', 'c', false)"),
            format!("SELECT {c} INTO TEMP t FROM x"),
            format!("SELECT {c}; LISTEN x"),
            format!("SELECT {c} /* ; */; LISTEN x"),
        ] {
            assert!(might_affect_session(&sql), "{sql}");
            assert!(
                classify(&sql).any(|s| s.kind.affects_session()),
                "{sql}: the shortcut passed it as plain"
            );
        }
        let plain = format!("SELECT {c} FROM pgbench_accounts WHERE aid = 1;");
        assert!(!might_affect_session(&plain), "{plain}");
    }
    // The scan itself: one byte of interest at every place of texts of every length around the
    // block size, in whole blocks and in the tail.
    use super::super::fast::next_interesting;
    for len in 0..40 {
        let mut text = vec![b'x'; len];
        assert_eq!(next_interesting(&text), None, "len {len}");
        for at in 0..len {
            for b in *b";-/_iI" {
                text[at] = b;
                assert_eq!(next_interesting(&text), Some(at), "len {len} at {at}");
                text[at] = b'x';
            }
        }
    }
}

#[test]
fn look_alikes_are_not_statements() {
    for sql in [
        "SELECT 'SET x=1'",
        "SELECT 'pg_advisory_lock(1)'",
        "/* LISTEN x */ SELECT 1",
        "SELECT $$ pg_advisory_lock(1) $$",
        "SELECT $tag$ ; LISTEN x; $tag$",
        "SELECT 1 -- ; LISTEN x",
        "SELECT \"pg_advisory_lock(1)\" FROM t",
        "SELECT \"a;LISTEN x\" FROM t",
        "SELECT E'\\'; LISTEN x; --'",
        "SELECT 'it''s; LISTEN x'",
        "SELECT pg_advisory_lock_count(1)",
        "SELECT set_config_x('a', 'b', false)",
        "INSERT INTO t (set_config) VALUES (1)",
        "SELECT x.pg_advisory_lock FROM x",
        "SELECT 1 /* nested /* LISTEN */ ; LISTEN y */",
    ] {
        assert_eq!(kinds(sql), vec![K::Plain], "{sql}");
        assert!(!might_affect_session(sql), "{sql}");
    }
}

#[test]
fn keywords_inside_strings_after_special_heads() {
    assert_eq!(one("SET application_name = 'LISTEN; x'"), {
        set(param("application_name"), "'LISTEN; x'", false)
    });
    assert_eq!(
        one("SET search_path = \"a;b\""),
        set(param("search_path"), "\"a;b\"", false)
    );
}

#[test]
fn case_and_whitespace_variations() {
    for sql in [
        "listen x",
        "LISTEN x",
        "LiStEn x",
        "\n\t  LISTEN\n\tx\n",
        "/* c */LISTEN/* c */x--c",
        "LISTEN x;",
        "LISTEN x ;;",
    ] {
        assert_eq!(kinds(sql), vec![K::Listen { channel: id("x") }], "{sql:?}");
    }
    assert_eq!(
        one("SeLeCt Pg_Advisory_Lock(1)"),
        K::AdvisoryLock { session: true }
    );
    assert_eq!(one("set\nlocal\nx\n=\n1"), set(param("x"), "1", true));
}

// ---- multi-statement queries ----

#[test]
fn multi_statement_queries() {
    let sql = "BEGIN; SET LOCAL x = 1; SELECT 'a;b'; SELECT pg_advisory_lock(1); COMMIT";
    let all: Vec<_> = classify(sql).collect();
    assert_eq!(
        all.iter().map(|s| s.kind.clone()).collect::<Vec<_>>(),
        vec![
            K::Begin,
            set(param("x"), "1", true),
            K::Plain,
            K::AdvisoryLock { session: true },
            K::Commit { chain: false },
        ]
    );
    assert_eq!(
        all.iter().map(|s| s.index).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        texts(sql),
        vec![
            "BEGIN",
            "SET LOCAL x = 1",
            "SELECT 'a;b'",
            "SELECT pg_advisory_lock(1)",
            "COMMIT"
        ]
    );
    assert!(might_affect_session(sql));
    assert!(!might_affect_session("SELECT 1; SELECT 2;"));
    assert!(might_affect_session("SELECT 1; LISTEN x"));
    assert_eq!(
        kinds("select 1;listen a;unlisten *"),
        vec![
            K::Plain,
            K::Listen { channel: id("a") },
            K::Unlisten {
                channel: NameOrAll::All
            }
        ]
    );
}

#[test]
fn statement_text_excludes_comments_and_semicolons() {
    assert_eq!(
        texts("SET x = 1 -- why\n; /* c */ SET y TO 2 ;"),
        vec!["SET x = 1", "SET y TO 2"]
    );
}

// ---- identifiers ----

#[test]
fn ident_normalization() {
    assert_eq!(id("abc").normalized(), "abc");
    assert!(matches!(id("abc").normalized(), Cow::Borrowed(_)));
    assert_eq!(id("AbC").normalized(), "abc");
    assert_eq!(id("\"AbC\"").normalized(), "AbC");
    assert_eq!(id("\"a\"\"b\"").normalized(), "a\"b");
    assert_eq!(id("Sch.\"Tab\"").normalized(), "sch.Tab");
    assert_eq!(
        one("LISTEN \"My Channel\""),
        K::Listen {
            channel: id("\"My Channel\"")
        }
    );
    assert_eq!(
        one("SET \"my.Setting\" = 1"),
        set(param("my.setting"), "1", false)
    );
}

// ---- standard_conforming_strings ----

#[test]
fn backslash_escapes_follow_standard_conforming_strings() {
    let sql = "SELECT '\\''; LISTEN y; --'";
    let off = LexOptions {
        standard_conforming_strings: false,
    };
    // The server with scs off sees a LISTEN here; with scs on it sees strings only.
    assert_eq!(kinds(sql), vec![K::Plain]);
    let k: Vec<_> = classify_with(sql, off).map(|s| s.kind).collect();
    assert_eq!(k, vec![K::Plain, K::Listen { channel: id("y") }]);
    assert!(might_affect_session_with(sql, off));
}

#[test]
fn trailing_semicolon_keeps_one_statement() {
    for sql in ["SELECT 1;", "SELECT 1 ; \n", "select 'a;' ;"] {
        let all: Vec<_> = classify(sql).collect();
        assert_eq!(all.len(), 1, "{sql:?}");
        assert_eq!(all[0].kind, K::Plain);
        assert!(!all[0].text.ends_with(b";") || all[0].text.ends_with(b"';"));
    }
    assert_eq!(texts("SELECT 1 ;\n"), vec!["SELECT 1"]);
    assert_eq!(
        kinds("SELECT 1; LISTEN x;"),
        vec![K::Plain, K::Listen { channel: id("x") }]
    );
}

#[test]
fn bind_parameters_are_detected() {
    assert!(references_params("$1"));
    assert!(references_params("lower($2)"));
    assert!(!references_params("'$1'"));
    assert!(!references_params("$$x$$"));
    assert!(!references_params("a$1"));
}
