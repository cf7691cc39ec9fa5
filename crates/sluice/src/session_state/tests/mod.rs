//! Unit tests of the session-state lexer, classifier and policy; helpers shared by the files.

mod bound;
mod do_block;
mod kinds;
mod lexer;
mod policy;
mod text;
mod tracker;

use std::borrow::Cow;

use super::*;
use StatementKind as K;

pub(super) fn kinds(sql: &str) -> Vec<StatementKind<'_>> {
    classify(sql).map(|s| s.kind).collect()
}

/// The single kind of a one-statement query.
pub(super) fn one(sql: &str) -> StatementKind<'_> {
    let k = kinds(sql);
    assert_eq!(k.len(), 1, "{sql:?} -> {k:?}");
    k.into_iter().next().unwrap()
}

pub(super) fn id(s: &str) -> Ident<'_> {
    Ident(s.as_bytes())
}

pub(super) fn param(s: &str) -> SetName<'_> {
    SetName::Param(Cow::Borrowed(s))
}

pub(super) fn set<'a>(name: SetName<'a>, value: &'a str, local: bool) -> StatementKind<'a> {
    K::Set {
        name,
        value_text: value.as_bytes(),
        local,
    }
}

pub(super) fn texts(sql: &str) -> Vec<&str> {
    classify(sql)
        .map(|s| std::str::from_utf8(s.text).unwrap())
        .collect()
}
