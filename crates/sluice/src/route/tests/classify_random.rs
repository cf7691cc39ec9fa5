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
        if a.verdict != b.verdict {
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
