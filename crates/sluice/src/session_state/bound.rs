//! `set_config()` calls whose arguments are bind parameters: `SELECT set_config('app.tenant', $1,
//! false)`, the row-level-security tenant a request sets, as drivers send it. The text alone
//! cannot be replayed on another server, but the Bind that runs it carries the values: read
//! from there, the change is tracked like a SET (replayed on the client's next server) instead of
//! pinning the client to its server for the rest of its session.
//!
//! Only a statement that is nothing but such calls is read, `SELECT set_config(a, b, c)[, ...]`,
//! each argument a string literal, `NULL`, `true`/`false` or a lone `$n` (a `::text`, `::varchar`,
//! `::bool` or `::boolean` cast allowed), each call optionally named (`AS x`). Anything else, or
//! a Bind whose values cannot be read as the server reads them, keeps the pin.

use std::borrow::Cow;

use sluice_protocol::BindParams;

use super::classify::LexOptions;
use super::lexer::{Lexer, TokenKind};
use super::scan::{bool_text, string_literal};

/// More calls than this in one statement are not read (the client is pinned, as before).
const MAX_CALLS: usize = 16;

/// Parameter types (OIDs) whose binary form is the text itself: unspecified (the server infers
/// text for set_config's arguments), text, varchar, name, unknown.
const TEXT_LIKE_TYPES: [u32; 5] = [0, 25, 1043, 19, 705];
/// Unspecified or bool.
const BOOL_TYPES: [u32; 2] = [0, 16];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Arg {
    Text(String),
    Bool(bool),
    Null,
    /// `$n`, as an index from 0.
    Param(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    name: Arg,
    value: Arg,
    local: Arg,
}

/// The calls of a statement that is nothing but `set_config()` calls, at least one with a bind
/// parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSets {
    calls: Vec<Call>,
}

/// What one call does to the session once its values are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundChange {
    /// `set_config(name, value, false)`: `replay` re-creates it.
    Set { key: String, replay: String },
    /// `set_config(name, NULL, false)`: the parameter back to its default.
    Reset { key: String },
}

/// The statement a tracked parameter is replayed with: `E''` reads the same whatever
/// `standard_conforming_strings` the server has.
pub fn set_config_replay(name: &str, value: &str) -> String {
    format!(
        "SELECT pg_catalog.set_config('{}', E'{}', false)",
        name.replace('\'', "''"),
        value.replace('\\', "\\\\").replace('\'', "''")
    )
}

/// The calls of `sql` when it is nothing but `set_config()` calls with a bind parameter among
/// their arguments; None otherwise.
pub fn bound_set_configs(sql: &[u8], opts: LexOptions) -> Option<BoundSets> {
    let mut lx = Lexer::with_scs(sql, opts.standard_conforming_strings);
    if !lx.eat_kw("select") {
        return None;
    }
    let mut calls = Vec::new();
    loop {
        let mut f = lx.next()?;
        if f.is_name("pg_catalog") {
            if !lx.eat_op(b'.') {
                return None;
            }
            f = lx.next()?;
        }
        if !f.is_name("set_config") || !lx.eat_op(b'(') {
            return None;
        }
        let name = arg(&mut lx, opts)?;
        let value = lx.eat_op(b',').then(|| arg(&mut lx, opts)).flatten()?;
        let local = lx.eat_op(b',').then(|| arg(&mut lx, opts)).flatten()?;
        if !lx.eat_op(b')') || calls.len() == MAX_CALLS {
            return None;
        }
        calls.push(Call { name, value, local });
        // An alias, with or without AS: a word here that is not one (FROM, WHERE...) leaves
        // something after it that is neither a comma nor the end.
        let named = lx.eat_kw("as");
        if let Some(t) = lx.peek() {
            if matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent) {
                lx.next();
            } else if named {
                return None;
            }
        }
        match lx.next() {
            None => break,
            Some(t) if t.kind == TokenKind::Semicolon => {
                if lx.next().is_some() {
                    return None;
                }
                break;
            }
            Some(t) if t.is_op(b',') => {}
            Some(_) => return None,
        }
    }
    let bound = |a: &Arg| matches!(a, Arg::Param(_));
    calls
        .iter()
        .any(|c| bound(&c.name) || bound(&c.value) || bound(&c.local))
        .then_some(BoundSets { calls })
}

/// One argument and its optional cast.
fn arg(lx: &mut Lexer<'_>, opts: LexOptions) -> Option<Arg> {
    let t = lx.next()?;
    let a = match t.kind {
        TokenKind::Param => {
            let n: usize = std::str::from_utf8(&t.text[1..]).ok()?.parse().ok()?;
            Arg::Param(n.checked_sub(1)?)
        }
        // With standard_conforming_strings off a backslash escapes: not read here.
        TokenKind::String if !opts.standard_conforming_strings && t.text.contains(&b'\\') => {
            return None
        }
        TokenKind::String => Arg::Text(string_literal(t)?.into_owned()),
        TokenKind::Word if t.is_kw("null") => Arg::Null,
        TokenKind::Word if t.is_kw("true") => Arg::Bool(true),
        TokenKind::Word if t.is_kw("false") => Arg::Bool(false),
        _ => return None,
    };
    let mut cast = *lx;
    if cast.eat_op(b':') && cast.eat_op(b':') {
        let ty = cast.next()?;
        if !["text", "varchar", "bool", "boolean"]
            .iter()
            .any(|k| ty.is_kw(k))
        {
            return None;
        }
        *lx = cast;
    }
    Some(a)
}

impl BoundSets {
    /// What the calls do with the values of `bind` (`types`: the statement's declared parameter
    /// types, missing ones unspecified). None when a value cannot be read as the server reads
    /// it (a binary value of another type, text that is not UTF-8, a parameter missing).
    pub fn resolve(&self, bind: &BindParams<'_>, types: &[u32]) -> Option<Vec<BoundChange>> {
        let mut out = Vec::with_capacity(self.calls.len());
        for c in &self.calls {
            let local = match &c.local {
                Arg::Bool(b) => *b,
                // set_config reads a NULL is_local as false.
                Arg::Null => false,
                Arg::Text(t) => bool_text(t)?,
                Arg::Param(i) => param_bool(bind, types, *i)?,
            };
            // A NULL name fails the call, and the statement with it: nothing changes.
            let Some(name) = text(&c.name, bind, types)? else {
                return Some(Vec::new());
            };
            if local {
                continue;
            }
            let key = name.to_ascii_lowercase();
            out.push(match text(&c.value, bind, types)? {
                Some(value) => BoundChange::Set {
                    replay: set_config_replay(&name, &value),
                    key,
                },
                None => BoundChange::Reset { key },
            });
        }
        Some(out)
    }
}

/// A text argument: Some(None) for NULL.
fn text<'a>(arg: &'a Arg, bind: &BindParams<'a>, types: &[u32]) -> Option<Option<Cow<'a, str>>> {
    match arg {
        Arg::Text(t) => Some(Some(Cow::Borrowed(t))),
        Arg::Null => Some(None),
        Arg::Bool(_) => None,
        Arg::Param(i) => {
            let Some(bytes) = *bind.values.get(*i)? else {
                return Some(None);
            };
            if bind.is_binary(*i) && !TEXT_LIKE_TYPES.contains(&types.get(*i).copied().unwrap_or(0))
            {
                return None;
            }
            let s = std::str::from_utf8(bytes).ok()?;
            (!s.contains('\0')).then_some(Some(Cow::Borrowed(s)))
        }
    }
}

/// A boolean parameter: NULL reads as false.
fn param_bool(bind: &BindParams<'_>, types: &[u32], i: usize) -> Option<bool> {
    let Some(bytes) = *bind.values.get(i)? else {
        return Some(false);
    };
    if bind.is_binary(i) {
        if !BOOL_TYPES.contains(&types.get(i).copied().unwrap_or(0)) {
            return None;
        }
        match bytes {
            [b] => Some(*b != 0),
            _ => None,
        }
    } else {
        bool_text(std::str::from_utf8(bytes).ok()?)
    }
}
