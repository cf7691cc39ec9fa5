//! Unit tests of bound set_config calls: which texts are read, and what their Binds set.

use crate::session_state::{bound_set_configs, BoundChange, LexOptions};
use sluice_protocol::decode_bind_params;

fn read(sql: &str) -> bool {
    bound_set_configs(sql.as_bytes(), LexOptions::default()).is_some()
}

#[test]
fn only_statements_of_bound_set_config_calls_are_read() {
    for sql in [
        "SELECT set_config('app.tenant', $1, false)",
        "select pg_catalog.set_config($1, $2::text, false);",
        "SELECT set_config('a.b', $1, false) AS a, set_config('role', $2, $3::boolean) b",
        "SELECT \"set_config\"('a.b', $1, 'f')",
    ] {
        assert!(read(sql), "{sql}");
    }
    for sql in [
        // No parameter: the text replays itself.
        "SELECT set_config('a.b', 'x', false)",
        // Something else runs too, or the call may run any number of times.
        "SELECT set_config('a.b', $1, false), now()",
        "SELECT set_config('a.b', $1, false) FROM t",
        "SELECT set_config('a.b', $1, false) WHERE $2",
        "SELECT set_config('a.b', $1, false); SELECT 1",
        "SELECT set_config('a.b', lower($1), false)",
        "SELECT set_config('a.b', $1::int, false)",
        "SELECT set_config('a.b', $1, false)::text",
        "SELECT set_config('a.b', $1)",
        "SELECT set_config('a.b', $0, false)",
        "SELECT pg_catalog.other('a.b', $1, false)",
        "INSERT INTO t SELECT set_config('a.b', $1, false)",
    ] {
        assert!(!read(sql), "{sql}");
    }
    // With standard_conforming_strings off, a backslash in a literal is not read here.
    let off = LexOptions {
        standard_conforming_strings: false,
    };
    assert!(bound_set_configs(br"SELECT set_config('a\'b', $1, false)", off).is_none());
}

/// A Bind body: format codes, then values (None = NULL).
fn bind(formats: &[i16], values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = vec![0, 0];
    b.extend((formats.len() as i16).to_be_bytes());
    for f in formats {
        b.extend(f.to_be_bytes());
    }
    b.extend((values.len() as i16).to_be_bytes());
    for v in values {
        match v {
            Some(v) => {
                b.extend((v.len() as i32).to_be_bytes());
                b.extend(*v);
            }
            None => b.extend((-1i32).to_be_bytes()),
        }
    }
    b.extend([0, 0]);
    b
}

fn resolve(sql: &str, body: &[u8], types: &[u32]) -> Option<Vec<BoundChange>> {
    let calls = bound_set_configs(sql.as_bytes(), LexOptions::default()).unwrap();
    calls.resolve(&decode_bind_params(body).unwrap(), types)
}

#[test]
fn values_are_read_as_the_server_reads_them() {
    let set = |key: &str, replay: &str| BoundChange::Set {
        key: key.into(),
        replay: replay.into(),
    };
    let sql = "SELECT set_config($1, $2, $3)";
    // Text and binary (text's binary form is the text; a bool is one byte).
    for body in [
        bind(&[], &[Some(b"Work_Mem"), Some(b"5MB"), Some(b"off")]),
        bind(&[1], &[Some(b"Work_Mem"), Some(b"5MB"), Some(&[0])]),
    ] {
        assert_eq!(
            resolve(sql, &body, &[]),
            Some(vec![set(
                "work_mem",
                "SELECT pg_catalog.set_config('Work_Mem', E'5MB', false)"
            )])
        );
    }
    // Transaction-local: nothing to track. NULL value: a reset; NULL is_local: session-wide.
    let local = bind(&[], &[Some(b"a.b"), Some(b"x"), Some(b"true")]);
    assert_eq!(resolve(sql, &local, &[]), Some(vec![]));
    let reset = bind(&[], &[Some(b"a.b"), None, None]);
    assert_eq!(
        resolve(sql, &reset, &[]),
        Some(vec![BoundChange::Reset { key: "a.b".into() }])
    );
    // A NULL name fails the call: nothing changes.
    let no_name = bind(&[], &[None, Some(b"x"), Some(b"f")]);
    assert_eq!(resolve(sql, &no_name, &[]), Some(vec![]));
    // Unreadable: binary of a declared non-text type, not UTF-8, a bool that is not one,
    // a parameter missing.
    let int_binary = bind(&[1], &[Some(b"a.b"), Some(b"\0\0\0\x05"), Some(&[0])]);
    assert_eq!(resolve(sql, &int_binary, &[25, 23, 16]), None);
    let latin1 = bind(&[], &[Some(b"a.b"), Some(b"\xe9"), Some(b"f")]);
    assert_eq!(resolve(sql, &latin1, &[]), None);
    let not_bool = bind(&[], &[Some(b"a.b"), Some(b"x"), Some(b"maybe")]);
    assert_eq!(resolve(sql, &not_bool, &[]), None);
    let short = bind(&[], &[Some(b"a.b"), Some(b"x")]);
    assert_eq!(resolve(sql, &short, &[]), None);
}
