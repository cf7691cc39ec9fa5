//! The session_state lexer and classifier (SQL of every Query and Parse in transaction mode) and
//! the tracker that acts on its verdicts. Statement texts must be slices of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::session_state::tracker::SessionTracker;
use sluice_fuzz::session_state::{
    bound_set_configs, classify_with, might_affect_session_with, LexOptions,
};
use sluice_protocol::decode_bind_params;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, sql)) = data.split_first() else {
        return;
    };
    let opts = LexOptions {
        standard_conforming_strings: flags & 1 == 0,
    };
    let range = sql.as_ptr_range();
    let mut any = false;
    for s in classify_with(sql, opts).take(10_000) {
        let r = s.text.as_ptr_range();
        assert!(range.start <= r.start && r.end <= range.end);
        let _ = format!("{:?}", s.kind);
        any |= s.kind.affects_session();
    }
    assert_eq!(any, might_affect_session_with(sql, opts));
    let mut t = SessionTracker::default();
    let _ = t.observe_in(sql, opts, flags & 2 == 0, 0);
    let _ = t.observe_in(sql, opts, flags & 2 == 0, 1);
    // Replies in any order and of any kind (the input's first bytes pick them): the tracker
    // must not panic, and an idle ReadyForQuery ending every request leaves nothing pending.
    const TAGS: [&[u8]; 8] = [
        b"SAVEPOINT",
        b"RELEASE",
        b"ROLLBACK",
        b"COMMIT",
        b"PREPARE TRANSACTION",
        b"SET",
        b"ERROR",
        b"READY",
    ];
    let mut answered = 0;
    for &b in sql.iter().take(32) {
        match TAGS[usize::from(b & 7)] {
            b"ERROR" => t.on_error(),
            b"READY" => {
                answered += 1;
                t.on_ready_through(b & 8 == 0, answered);
            }
            tag => t.on_command_complete_in(tag, u64::from(b >> 7)),
        }
    }
    t.on_ready(true);
    assert!(!t.has_pending());
    let _ = t.replay_sql();
    // Bound set_config calls: the text read as a template, the input read as a Bind of it.
    if let Some(calls) = bound_set_configs(sql, opts) {
        if let Ok(bind) = decode_bind_params(sql) {
            let _ = calls.resolve(&bind, &[0, 16, 25]);
        }
    }
    if let Ok(bind) = decode_bind_params(sql) {
        t.observe_unnamed(b"SELECT set_config($1, $2, $3)", opts, true, 0, Some(b"\0"));
        t.bind_unnamed(Some(&bind), 0);
        t.on_ready(true);
        let _ = t.replay_sql();
    }
});
