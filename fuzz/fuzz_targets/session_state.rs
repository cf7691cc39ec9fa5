//! The session_state lexer and classifier (SQL of every Query and Parse in transaction mode) and
//! the tracker that acts on its verdicts. Statement texts must be slices of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::session_state::tracker::SessionTracker;
use sluice_fuzz::session_state::{classify_with, might_affect_session_with, LexOptions};

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
    let _ = t.observe(sql, opts, flags & 2 == 0);
    t.on_ready(true);
    let _ = t.replay_sql();
});
