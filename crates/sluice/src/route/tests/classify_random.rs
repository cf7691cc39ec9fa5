//! The classifier over seeded random texts built from SQL fragments (quotes, comments, dollar
//! quotes, keywords, names), the same properties as the `route_classify` fuzz target: no panic,
//! and the unknown-function option only turns reads that call unknown functions into primary.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::route::*;
use crate::session_state::LexOptions;

const FRAGMENTS: &[&str] = &[
    "SELECT",
    "WITH",
    "VALUES",
    "TABLE",
    "SHOW",
    "EXPLAIN",
    "ANALYZE",
    "(",
    ")",
    "'",
    "\"",
    "$$",
    "$a$",
    "--",
    "/*",
    "*/",
    "\n",
    ";",
    "E'",
    "\\",
    "FOR",
    "UPDATE",
    "SHARE",
    "NO",
    "KEY",
    "INTO",
    "nextval",
    "my_f",
    "count",
    "BEGIN",
    "START",
    "TRANSACTION",
    "READ",
    "ONLY",
    "WRITE",
    "SET",
    "SESSION",
    "CHARACTERISTICS",
    "AS",
    "default_transaction_read_only",
    "transaction_read_only",
    "=",
    "on",
    "off",
    "COMMIT",
    "INSERT",
    "DELETE",
    "x",
    "1",
    ",",
    " ",
    "U&\"",
    "pg_",
    "lo_",
];

#[test]
fn random_texts() {
    let mut rng = StdRng::seed_from_u64(33);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20_000 {
        let n = rng.gen_range(0..24);
        // Some texts start like a transaction that declares itself, so that every verdict comes up.
        let head = [
            "",
            "",
            "",
            "BEGIN READ ONLY",
            "BEGIN; SET TRANSACTION READ ONLY",
        ][rng.gen_range(0..5)];
        let body: String = (0..n)
            .map(|_| {
                let f = FRAGMENTS[rng.gen_range(0..FRAGMENTS.len())];
                if rng.gen_range(0..3) == 0 {
                    format!("{f} ")
                } else {
                    f.to_string()
                }
            })
            .collect();
        let text = format!("{head}{body}");
        let lex = LexOptions {
            standard_conforming_strings: rng.gen_range(0..2) == 0,
        };
        let a = classify_with(
            text.as_bytes(),
            ClassifyOptions {
                lex,
                unknown_functions: UnknownFunctions::Standby,
            },
        );
        let b = classify_with(
            text.as_bytes(),
            ClassifyOptions {
                lex,
                unknown_functions: UnknownFunctions::Primary,
            },
        );
        // Both on the primary: only the reason may differ (a text of several statements stops at
        // the first one that needs the primary, which the option can make an earlier one).
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
            assert!(unknown_read, "{text:?}");
            assert_eq!(
                b.verdict,
                Verdict::Primary(PrimaryWhy::UnknownFunction),
                "{text:?}"
            );
        }
        assert_eq!(a.session, b.session, "{text:?}");
        seen.insert(std::mem::discriminant(&a.verdict));
    }
    // Every kind of verdict came up.
    assert_eq!(seen.len(), 4);
}

/// Found by the `route_classify` fuzz target (crash-5b9432b5...): a text of several statements
/// whose first calls an unknown function and whose second is no read goes to the primary either
/// way; only the reason differs with the unknown-function option.
#[test]
fn fuzz_found_several_statements_go_to_the_primary_with_either_option() {
    let text = b"WITH d AS NIN\0\0\0\0\0\0\0\0\0IS=O~D ONd\xf5aLYG *) SELECT ne\x83\x8b\x89\x9el('s'),\x07\x01\0\0\0\0EATABLED;;;;;;;;;ATAG A";
    for unknown_functions in [UnknownFunctions::Standby, UnknownFunctions::Primary] {
        let c = classify_with(
            text,
            ClassifyOptions {
                lex: LexOptions {
                    standard_conforming_strings: true,
                },
                unknown_functions,
            },
        );
        assert!(matches!(c.verdict, Verdict::Primary(_)), "{c:?}");
    }
}
