//! The byte scan that settles the common case without lexing: a single statement opening with an
//! ordinary keyword and holding nothing the full classification (`classify.rs`) would act on.

use super::lexer::{Lexer, TokenKind};

/// Keywords whose statements have a grammar of their own here; every other statement is
/// Plain unless a call or `INTO TEMP` is found in it.
const SPECIAL_HEADS: &[&str] = &[
    "set",
    "reset",
    "discard",
    "listen",
    "unlisten",
    "declare",
    "close",
    "prepare",
    "execute",
    "deallocate",
    "load",
    "create",
    "begin",
    "start",
    "commit",
    "end",
    "rollback",
    "abort",
    "savepoint",
    "release",
    "drop",
    "do",
];

/// What the first word of a statement says about the byte scan of `fast_plain`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Head {
    /// SELECT or WITH (whose `INTO TEMP` creates a table).
    SelectLike,
    /// One of `SPECIAL_HEADS`: the full classification reads it.
    Special,
    Other,
}

/// The first word, lower-cased once; SELECT is answered before the keyword list is searched.
fn head_of(word: &[u8]) -> Head {
    let mut buf = [0u8; 16]; // longer than the longest head, "deallocate"
    if word.len() > buf.len() {
        return Head::Other;
    }
    let lower = &mut buf[..word.len()];
    lower.copy_from_slice(word);
    lower.make_ascii_lowercase();
    if lower == b"select" || lower == b"with" {
        Head::SelectLike
    } else if SPECIAL_HEADS.iter().any(|k| k.as_bytes() == &*lower) {
        Head::Special
    } else {
        Head::Other
    }
}

/// Bytes at which `fast_plain` has to look closer: `;`, comment starts, the underscore of the
/// call names, the `v` of `currval` and `lastval`, and the `i` of `INTO` (1; 0 for the rest).
static FAST_SCAN_BYTES: [u8; 256] = {
    let mut t = [0; 256];
    let interesting = b";-/_vViI";
    let mut i = 0;
    while i < interesting.len() {
        t[interesting[i] as usize] = 1;
        i += 1;
    }
    t
};

/// The index of the first byte in `s` that `fast_plain` has to look at. Eight bytes at a time:
/// their table entries OR-ed together (no branch per byte), the exact place searched only in
/// the block that has one. A byte-by-byte loop cost ~8 instructions per byte of every query text
/// (callgrind, pgbench -S); this ~3.
pub(super) fn next_interesting(s: &[u8]) -> Option<usize> {
    let hit = |b: &u8| FAST_SCAN_BYTES[*b as usize] != 0;
    let (blocks, tail) = s.as_chunks::<8>();
    for (n, block) in blocks.iter().enumerate() {
        if block
            .iter()
            .fold(0, |m, b| m | FAST_SCAN_BYTES[*b as usize])
            != 0
        {
            return block.iter().position(hit).map(|p| n * 8 + p);
        }
    }
    tail.iter().position(hit).map(|p| blocks.len() * 8 + p)
}

/// The common case without lexing: a single statement opening with an ordinary keyword and
/// holding no semicolon, no comment and nothing the call scan could match. Returns its text.
///
/// This runs over every query text in transaction mode, so it stops only at the few bytes that
/// can start something of interest: every name the call scan knows has an underscore followed
/// by `advisory`, `try_advisory` or `config` (`pg_advisory_lock`, `pg_try_advisory_xact_lock`,
/// `set_config`, ...) but two, `currval` and `lastval`, which are looked for around each `v`
/// (rarer in query texts than a parenthesis: a check at each `(` cost ~55 instructions per call
/// in a query, callgrind); `INTO TEMP` needs an `into`. (The letters of the names themselves would stop it in most
/// table and column names.) Anything that might be one of them, even
/// inside a string or a quoted name, sends the text to the full classification, which is exact.
/// A table lookup per byte, eight at a time (`next_interesting`): `memchr` was no faster on texts
/// this short (its set-up per call outweighs the SIMD; callgrind, pgbench -S).
pub(super) fn fast_plain<'a>(src: &'a [u8], mut lexer: Lexer<'a>) -> Option<&'a [u8]> {
    let first = lexer.next()?;
    if first.kind != TokenKind::Word {
        return None;
    }
    let head = head_of(first.text);
    if head == Head::Special {
        return None;
    }
    let select_like = head == Head::SelectLike;
    let rest = &src[first.end()..];
    let starts_with = |at: usize, needle: &[u8]| {
        rest.get(at..at + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    };
    let mut from = 0;
    while let Some(skip) = next_interesting(&rest[from..]) {
        let i = from + skip;
        from = i + 1;
        let b = rest[i];
        let hit = match b {
            // A last `;` ends the only statement (or sits in something left open): no split.
            b';' => !rest[i + 1..].iter().all(|b| is_space(*b)),
            b'-' => rest.get(i + 1) == Some(&b'-'),
            b'/' => rest.get(i + 1) == Some(&b'*'),
            b'_' => {
                starts_with(i + 1, b"advisory")
                    || starts_with(i + 1, b"try_advisory")
                    || starts_with(i + 1, b"config")
            }
            b'v' | b'V' => names_sequence_read(rest, i),
            _ => select_like && starts_with(i, b"into"),
        };
        if hit {
            return None;
        }
    }
    let mut text = trim_end(&src[first.start..]);
    if let Some(t) = text.strip_suffix(b";") {
        text = trim_end(t);
    }
    Some(text)
}

/// The `v` at `at` is that of `currval` or `lastval` (any case): maybe a sequence read, for the
/// full classification to settle. ASCII letters lower-cased by setting bit 5, which maps no other
/// byte onto a lower-case letter.
fn names_sequence_read(text: &[u8], at: usize) -> bool {
    let Some(word) = at.checked_sub(4).and_then(|from| text.get(from..from + 7)) else {
        return false;
    };
    let mut lower = [0u8; 7];
    for (l, b) in lower.iter_mut().zip(word) {
        *l = b | 0x20;
    }
    &lower == b"currval" || &lower == b"lastval"
}

fn trim_end(s: &[u8]) -> &[u8] {
    &s[..s.len() - s.iter().rev().take_while(|b| is_space(**b)).count()]
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}
