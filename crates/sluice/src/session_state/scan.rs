//! Scan of a statement's tokens for calls that touch session state (advisory locks,
//! set_config, the sequence reads currval and lastval) and for `SELECT ... INTO TEMP`, anywhere
//! in the statement.

use std::borrow::Cow;

use super::kind::{SetName, StatementKind};
use super::lexer::{Lexer, Token, TokenKind};

/// What is left to read of one statement after its head.
#[derive(Clone, Debug)]
pub(crate) enum Scan<'a> {
    /// Calls anywhere in the statement (and `INTO TEMP`), read as the iterator asks.
    Calls(CallScan<'a>),
    /// What a `DO` block's body does, read whole with its head (rare: `do_block.rs`).
    Effects(std::vec::IntoIter<StatementKind<'static>>),
}

impl<'a> Scan<'a> {
    pub(crate) fn next_kind(&mut self) -> Option<StatementKind<'a>> {
        match self {
            Scan::Calls(calls) => calls.next_kind(),
            Scan::Effects(effects) => effects.next(),
        }
    }
}

/// Resumable: each `next` returns the next finding, so a statement with several calls yields
/// several kinds without collecting them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallScan<'a> {
    lx: Lexer<'a>,
    src: &'a [u8],
    prev: Option<Token<'a>>,
    depth: usize,
    /// SELECT / WITH statements, where `INTO TEMP` creates a table.
    select_like: bool,
}

impl<'a> CallScan<'a> {
    pub(crate) fn new(lx: Lexer<'a>, src: &'a [u8], select_like: bool) -> Self {
        CallScan {
            lx,
            src,
            prev: None,
            depth: 0,
            select_like,
        }
    }

    pub(crate) fn next_kind(&mut self) -> Option<StatementKind<'a>> {
        while let Some(t) = self.lx.next() {
            let prev = self.prev.replace(t);
            match t.kind {
                TokenKind::Op if t.text == b"(" => {
                    self.depth += 1;
                    if let Some(kind) = prev.and_then(|p| self.call(p)) {
                        return Some(kind);
                    }
                }
                TokenKind::Op if t.text == b")" => self.depth = self.depth.saturating_sub(1),
                TokenKind::Word if self.select_like && self.depth == 0 && t.is_kw("into") => {
                    let mut la = self.lx;
                    let _ = la.eat_kw("local") || la.eat_kw("global");
                    if la.eat_kw("temp") || la.eat_kw("temporary") {
                        self.lx = la;
                        return Some(StatementKind::CreateTemp {
                            on_commit_drop: false,
                        });
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// `name(` has just been read; the lexer is after the parenthesis.
    fn call(&self, name: Token<'a>) -> Option<StatementKind<'a>> {
        if !matches!(name.kind, TokenKind::Word | TokenKind::QuotedIdent) {
            return None;
        }
        const SESSION: &[&str] = &[
            "pg_advisory_lock",
            "pg_advisory_lock_shared",
            "pg_try_advisory_lock",
            "pg_try_advisory_lock_shared",
        ];
        const XACT: &[&str] = &[
            "pg_advisory_xact_lock",
            "pg_advisory_xact_lock_shared",
            "pg_try_advisory_xact_lock",
            "pg_try_advisory_xact_lock_shared",
        ];
        if SESSION.iter().any(|n| name.is_name(n)) {
            Some(StatementKind::AdvisoryLock { session: true })
        } else if XACT.iter().any(|n| name.is_name(n)) {
            Some(StatementKind::AdvisoryLock { session: false })
        } else if name.is_name("pg_advisory_unlock") || name.is_name("pg_advisory_unlock_shared") {
            Some(StatementKind::AdvisoryUnlock { all: false })
        } else if name.is_name("pg_advisory_unlock_all") {
            Some(StatementKind::AdvisoryUnlock { all: true })
        } else if name.is_name("set_config") {
            Some(set_config(self.lx, self.src))
        } else if name.is_name("currval") || name.is_name("lastval") {
            Some(StatementKind::SequenceRead)
        } else {
            None
        }
    }
}

/// One argument of a call: its first token, its source span, and whether it is a lone literal
/// (optionally followed by a `::type` cast).
#[derive(Clone, Copy)]
struct Arg<'a> {
    first: Token<'a>,
    text: &'a [u8],
    literal: bool,
}

/// Tokens read looking for the end of a `set_config(` argument list. Without a bound, every
/// unclosed `set_config(` in `SELECT set_config(set_config(set_config(...` scanned to the end of
/// the statement: quadratic time, a stalled worker for a query of a few hundred KB.
const MAX_SET_CONFIG_TOKENS: usize = 64;

/// `set_config(name, value, is_local)` from its literal arguments; whatever is not a literal
/// is unknown, and an unknown `is_local` counts as session-wide (the safe reading). An argument
/// list longer than [`MAX_SET_CONFIG_TOKENS`] is not read: the call counts as an unknown
/// session-wide setting (the client is pinned, or the query refused).
fn set_config<'a>(lx: Lexer<'a>, src: &'a [u8]) -> StatementKind<'a> {
    let mut args: [Option<Arg<'a>>; 3] = [None; 3];
    let mut n = 0usize;
    let mut depth = 0usize;
    let mut cur: Option<(Token<'a>, usize, usize)> = None; // first, end, token count
    let mut push = |cur: Option<(Token<'a>, usize, usize)>, n: &mut usize| {
        if let Some((first, end, count)) = cur {
            if *n < 3 {
                args[*n] = Some(Arg {
                    first,
                    text: &src[first.start..end],
                    literal: count == 1 || ends_in_cast(&src[first.end()..end]),
                });
            }
        }
        *n += 1;
    };
    let mut closed = false;
    for (i, t) in lx.enumerate() {
        if i == MAX_SET_CONFIG_TOKENS {
            return StatementKind::Set {
                name: SetName::Unknown,
                value_text: b"",
                local: false,
            };
        }
        if depth == 0 && (t.is_op(b')') || t.is_op(b',')) {
            push(cur.take(), &mut n);
            if t.is_op(b')') {
                closed = true;
                break;
            }
            continue;
        }
        if t.is_op(b'(') {
            depth += 1;
        } else if t.is_op(b')') {
            depth -= 1;
        }
        cur = match cur {
            None => Some((t, t.end(), 1)),
            Some((first, _, count)) => Some((first, t.end(), count + 1)),
        };
    }
    if !closed {
        push(cur.take(), &mut n);
    }
    let name = args[0]
        .filter(|a| a.literal)
        .and_then(|a| string_literal(a.first))
        .map(SetName::param)
        .unwrap_or(SetName::Unknown);
    let value_text = args[1].map(|a| a.text).unwrap_or(b"");
    let local = args[2].filter(|a| a.literal).and_then(|a| boolean(a.first)) == Some(true);
    StatementKind::Set {
        name,
        value_text,
        local,
    }
}

/// The rest of an argument after its first token is `::type` (a cast of a literal).
fn ends_in_cast(rest: &[u8]) -> bool {
    let mut lx = Lexer::new(rest);
    lx.eat_op(b':') && lx.eat_op(b':')
}

/// Contents of a string literal, when it can be read without decoding escapes.
pub(crate) fn string_literal(t: Token<'_>) -> Option<Cow<'_, str>> {
    if t.kind != TokenKind::String {
        return None;
    }
    let s = t.text;
    match s.first()? {
        b'\'' if s.len() >= 2 => quoted(s),
        b'e' | b'E' if !s.contains(&b'\\') && s.len() >= 3 => quoted(&s[1..]),
        b'$' => {
            let tag_end = s[1..].iter().position(|b| *b == b'$')? + 2;
            let tag = &s[..tag_end];
            let inner = s.get(tag_end..)?.strip_suffix(tag)?;
            Some(String::from_utf8_lossy(inner))
        }
        _ => None,
    }
}

/// Contents of `'...'` with `''` unescaped.
fn quoted(body: &[u8]) -> Option<Cow<'_, str>> {
    let inner = body.strip_prefix(b"'")?.strip_suffix(b"'")?;
    if inner.windows(2).any(|w| w == b"''") {
        let unq = String::from_utf8_lossy(inner).replace("''", "'");
        Some(Cow::Owned(unq))
    } else {
        Some(String::from_utf8_lossy(inner))
    }
}

/// A boolean literal as the server reads `bool` input.
fn boolean(t: Token<'_>) -> Option<bool> {
    let text: Cow<'_, str> = match t.kind {
        TokenKind::Word => String::from_utf8_lossy(t.text),
        TokenKind::String => string_literal(t)?,
        TokenKind::Number => String::from_utf8_lossy(t.text),
        _ => return None,
    };
    bool_text(&text)
}

/// Text as the server reads `bool` input (`t`, `yes`, `on`, `1`, their prefixes...).
pub(crate) fn bool_text(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "tr" | "tru" | "yes" | "y" | "ye" | "on" | "1" => Some(true),
        "false" | "f" | "fa" | "fal" | "fals" | "no" | "n" | "off" | "of" | "0" => Some(false),
        _ => None,
    }
}
