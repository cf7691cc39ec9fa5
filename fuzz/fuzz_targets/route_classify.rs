//! The read-routing classifier (the text that opens a transaction, Query or Parse, when
//! `route_reads` is on) and the `route_reads` policy over its verdicts. First byte = flags.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::route::{
    classify_with, wants_standby, ClassifyOptions, PrimaryWhy, UnknownFunctions, Verdict,
};
use sluice::session_state::LexOptions;
use sluice_config::RouteReads;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, sql)) = data.split_first() else {
        return;
    };
    let lex = LexOptions {
        standard_conforming_strings: flags & 1 == 0,
    };
    let standby = ClassifyOptions {
        lex,
        unknown_functions: UnknownFunctions::Standby,
    };
    let primary = ClassifyOptions {
        lex,
        unknown_functions: UnknownFunctions::Primary,
    };
    let a = classify_with(sql, standby);
    let b = classify_with(sql, primary);
    let _ = format!("{a:?}");
    // The unknown-function rule changes only reads that call unknown functions (where both are on
    // the primary, only the reason may differ: a text of several statements stops at the first
    // one that needs the primary, which the option can make an earlier one).
    let both_primary = matches!(
        (&a.verdict, &b.verdict),
        (Verdict::Primary(_), Verdict::Primary(_))
    );
    if a.verdict != b.verdict && !both_primary {
        let unknown_read = matches!(
            a.verdict,
            Verdict::ProvenRead {
                unknown_calls: true,
                ..
            } | Verdict::FollowsSession
        );
        assert!(unknown_read);
        assert_eq!(b.verdict, Verdict::Primary(PrimaryWhy::UnknownFunction));
    }
    assert_eq!(a.session, b.session);
    for mode in [RouteReads::Off, RouteReads::Explicit, RouteReads::Auto] {
        let want = wants_standby(mode, &a, flags & 2 == 0);
        assert!(mode != RouteReads::Off || want.is_err());
        if let Err(why) = want {
            let _ = why.to_string();
        }
    }
});
