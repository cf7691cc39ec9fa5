//! What a `DO` block does to session state, read from its body.
//!
//! A `DO` block runs its body at once, so a `SET`, a `set_config()`, an advisory lock, a `LISTEN`
//! or a temporary table made inside it outlives the transaction as if the client had sent the
//! statement itself. Read as one opaque string, such a block left the state on the server for the
//! next client of that server, and the client that made it lost it on its next transaction.
//!
//! The body is PL/pgSQL, not SQL, so it is read the way PL/pgSQL splits it: statements end at
//! `;`, and a statement may open after a block keyword (`BEGIN`, `THEN`, `ELSE`, `LOOP`,
//! `DECLARE`, `EXCEPTION`). Each statement's head is classified as SQL, the calls anywhere in it
//! are scanned, and `EXECUTE` reads its first string literal as SQL (`EXECUTE 'SET ...'`,
//! `EXECUTE format('SET %I ...', ...)`). Nested `DO` blocks and `EXECUTE` strings are read
//! [`MAX_NESTING`] levels deep.
//!
//! What a body does is not replayable (it may depend on a condition, a loop, a variable), so a
//! `SET` or `RESET` inside one pins the client for its lifetime like a `set_config()` whose
//! arguments are not literals ([`SetName::Unknown`]); locks, `LISTEN` and temporary objects pin
//! as they do outside. Bodies in languages other than PL/pgSQL, and `E'...'` bodies with
//! backslash escapes, are not read.

use super::kind::{Ident, NameOrAll, SetName, StatementKind};
use super::lexer::{Lexer, Splitter, TokenKind};
use super::scan::{string_literal, CallScan, Scan};

/// The classifier's reading of one statement by its head (`classify.rs`'s `head`), passed in so
/// that this file, which that classifier calls, does not import it.
pub(super) type Head =
    for<'a> fn(&'a [u8], Lexer<'a>) -> (Option<StatementKind<'a>>, Option<Scan<'a>>);

/// What one reading carries down: the statement grammar and how deep it is.
#[derive(Clone, Copy)]
struct Reader {
    head: Head,
    depth: usize,
}

/// How many levels of `DO` blocks and `EXECUTE` strings inside one another are read: each level
/// re-reads a part of the text, so the work stays linear in it.
const MAX_NESTING: usize = 4;

/// The session effects of the `DO` block whose lexer stands after `DO`.
pub(super) fn effects(lx: Lexer<'_>, head: Head) -> Vec<StatementKind<'static>> {
    let mut out = Vec::new();
    block(lx, Reader { head, depth: 0 }, &mut out);
    out
}

impl Reader {
    fn deeper(self) -> Reader {
        Reader {
            depth: self.depth + 1,
            ..self
        }
    }
}

/// `[LANGUAGE name] body [LANGUAGE name]`: reads the body when the language is PL/pgSQL.
fn block(mut lx: Lexer<'_>, r: Reader, out: &mut Vec<StatementKind<'static>>) {
    if r.depth > MAX_NESTING {
        return;
    }
    let scs = lx.scs();
    let mut body = None;
    let mut plpgsql = true;
    while let Some(t) = lx.next() {
        if t.is_kw("language") {
            plpgsql = lx.next().is_some_and(|name| {
                name.is_name("plpgsql")
                    || string_literal(name).is_some_and(|s| s.eq_ignore_ascii_case("plpgsql"))
            });
        } else if t.kind == TokenKind::String && body.is_none() {
            body = Some(t);
        }
    }
    if !plpgsql {
        return;
    }
    if let Some(text) = body.and_then(string_literal) {
        plpgsql_body(text.as_bytes(), scs, r, out);
    }
}

/// Each statement of a PL/pgSQL body.
fn plpgsql_body(body: &[u8], scs: bool, r: Reader, out: &mut Vec<StatementKind<'static>>) {
    for span in Splitter::new(Lexer::with_scs(body, scs)) {
        let stmt = &body[span.start..span.end];
        let own = &stmt[statement_start(stmt, scs)..];
        let mut lx = Lexer::with_scs(own, scs);
        match lx.next() {
            Some(t) if t.is_kw("execute") => execute(lx, r, out),
            Some(t) if t.is_kw("do") => block(lx, r.deeper(), out),
            Some(_) => out.extend((r.head)(own, Lexer::with_scs(own, scs)).0.and_then(effect)),
            None => {}
        }
        // Calls anywhere in the statement, block keywords and all (`IF f() THEN ...`). PL/pgSQL's
        // `SELECT ... INTO var` assigns a variable: no `INTO TEMP` reading here.
        let mut calls = CallScan::new(Lexer::with_scs(stmt, scs), stmt, false);
        while let Some(kind) = calls.next_kind() {
            out.extend(effect(kind));
        }
    }
}

/// Where the statement proper begins in one `;`-separated piece of a PL/pgSQL body: after the
/// last block keyword outside parentheses (`BEGIN SET ...`, `IF x THEN SET ...`, `LOOP ...`).
fn statement_start(stmt: &[u8], scs: bool) -> usize {
    let (mut start, mut parens) = (0, 0usize);
    for t in Lexer::with_scs(stmt, scs) {
        if t.is_op(b'(') {
            parens += 1;
        } else if t.is_op(b')') {
            parens = parens.saturating_sub(1);
        } else if parens == 0
            && ["begin", "then", "else", "loop", "declare", "exception"]
                .iter()
                .any(|k| t.is_kw(k))
        {
            start = t.end();
        }
    }
    start
}

/// PL/pgSQL `EXECUTE expr`: the first string literal of the expression, read as SQL.
fn execute(mut lx: Lexer<'_>, r: Reader, out: &mut Vec<StatementKind<'static>>) {
    if r.depth >= MAX_NESTING {
        return;
    }
    let scs = lx.scs();
    let Some(text) = std::iter::from_fn(|| lx.next())
        .find(|t| t.kind == TokenKind::String)
        .and_then(string_literal)
    else {
        return;
    };
    let sql = text.as_bytes();
    for span in Splitter::new(Lexer::with_scs(sql, scs)) {
        let stmt = &sql[span.start..span.end];
        let mut lx = Lexer::with_scs(stmt, scs);
        if lx.next().is_some_and(|t| t.is_kw("do")) {
            block(lx, r.deeper(), out);
            continue;
        }
        let (kind, scan) = (r.head)(stmt, Lexer::with_scs(stmt, scs));
        out.extend(kind.or_else(|| unfinished(stmt, scs)).and_then(effect));
        if let Some(mut scan) = scan {
            while let Some(kind) = scan.next_kind() {
                out.extend(effect(kind));
            }
        }
    }
}

/// A statement the head left unread because the string holds only its start, the rest being
/// computed (`EXECUTE 'LISTEN ' || quote_ident(c)`, `format('SET %I = %L', ...)`): its first
/// words say what it does.
fn unfinished(stmt: &[u8], scs: bool) -> Option<StatementKind<'static>> {
    let mut lx = Lexer::with_scs(stmt, scs);
    let first = lx.next()?;
    let second = lx.next();
    let local = second.is_some_and(|t| {
        ["local", "transaction", "constraints"]
            .iter()
            .any(|k| t.is_kw(k))
    });
    if (first.is_kw("set") || first.is_kw("reset")) && !local {
        Some(StatementKind::ResetAll)
    } else if first.is_kw("listen") {
        Some(StatementKind::Listen {
            channel: Ident(b""),
        })
    } else if first.is_kw("prepare") && !second.is_some_and(|t| t.is_kw("transaction")) {
        Some(StatementKind::Prepare {
            name: Ident(b""),
            body: b"",
        })
    } else {
        None
    }
}

/// What a statement found inside a body means for its client, without the names it borrowed.
/// A SET or RESET there cannot be replayed (it may have run conditionally, with a computed
/// value): it is an unreplayable setting, which pins. The rest keeps its kind: a lock, LISTEN,
/// temporary object, cursor WITH HOLD or SQL PREPARE pins as outside; an unlock, UNLISTEN,
/// DROP, CLOSE or DEALLOCATE has the pin checked again.
fn effect(kind: StatementKind<'_>) -> Option<StatementKind<'static>> {
    use StatementKind::*;
    let none = Ident(b"");
    Some(match kind {
        Set { local: false, .. } | Reset { .. } | ResetAll => Set {
            name: SetName::Unknown,
            value_text: b"",
            local: false,
        },
        AdvisoryLock { session: true } => AdvisoryLock { session: true },
        AdvisoryUnlock { all } => AdvisoryUnlock { all },
        Listen { .. } => Listen { channel: none },
        Unlisten { .. } => Unlisten {
            channel: NameOrAll::All,
        },
        CreateTemp {
            on_commit_drop: false,
        } => CreateTemp {
            on_commit_drop: false,
        },
        DeclareCursor {
            with_hold: true, ..
        } => DeclareCursor {
            name: none,
            with_hold: true,
        },
        Prepare { .. } => Prepare {
            name: none,
            body: b"",
        },
        LoadModule { .. } => LoadModule { file: b"" },
        CloseCursor { .. } => CloseCursor {
            name: NameOrAll::All,
        },
        Deallocate { .. } => Deallocate {
            name: NameOrAll::All,
        },
        Drop => Drop,
        SequenceRead => SequenceRead,
        _ => return None,
    })
}
