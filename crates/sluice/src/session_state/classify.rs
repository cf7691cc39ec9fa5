//! Statement classification: splits a query into statements and says what each one does to
//! session state, looking at the first keyword only for the common case.

use std::borrow::Cow;

use super::do_block;
use super::fast::fast_plain;
use super::kind::{DiscardTarget, Ident, NameOrAll, SetName, Statement, StatementKind};
use super::lexer::{Lexer, Splitter, Token, TokenKind};
use super::scan::{CallScan, Scan};

/// How the server lexes the text; track it from the server's ParameterStatus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LexOptions {
    /// When off, a backslash escapes a quote inside `'...'`; reading such text with the default
    /// (on) could hide a statement inside what looks like a string.
    pub standard_conforming_strings: bool,
}

impl Default for LexOptions {
    fn default() -> Self {
        LexOptions {
            standard_conforming_strings: true,
        }
    }
}

/// Classify the statements of a simple Query or of a Parse, with `standard_conforming_strings`
/// on. Yields one [`Statement`] per statement (more when a statement makes several
/// session-affecting calls), nothing for an empty query.
pub fn classify<S: AsRef<[u8]> + ?Sized>(sql: &S) -> Statements<'_> {
    classify_with(sql, LexOptions::default())
}

pub fn classify_with<S: AsRef<[u8]> + ?Sized>(sql: &S, opts: LexOptions) -> Statements<'_> {
    classify_from(sql.as_ref(), opts, false)
}

/// Every statement classified, without the byte-scan shortcut (which calls a lone COMMIT or
/// ROLLBACK `Plain`): for the few places that need transaction control named.
pub fn classify_full<S: AsRef<[u8]> + ?Sized>(sql: &S, opts: LexOptions) -> Statements<'_> {
    classify_from(sql.as_ref(), opts, true)
}

/// The full classification without the byte-scan shortcut, for tests that check the shortcut.
#[cfg(test)]
pub(crate) fn classify_exact(sql: &str) -> Statements<'_> {
    classify_from(sql.as_bytes(), LexOptions::default(), true)
}

fn classify_from(src: &[u8], opts: LexOptions, skip_fast_path: bool) -> Statements<'_> {
    let lexer = Lexer::with_scs(src, opts.standard_conforming_strings);
    Statements {
        src,
        lexer,
        splitter: Splitter::new(lexer),
        index: 0,
        cur: None,
        started: skip_fast_path,
        done: false,
    }
}

/// True when some statement in `sql` creates, changes or clears session state
/// ([`StatementKind::affects_session`]). Plain statements with no `;`, comment, or look-alike
/// word in them return false after a single byte scan, without lexing past the first keyword.
pub fn might_affect_session<S: AsRef<[u8]> + ?Sized>(sql: &S) -> bool {
    might_affect_session_with(sql, LexOptions::default())
}

pub fn might_affect_session_with<S: AsRef<[u8]> + ?Sized>(sql: &S, opts: LexOptions) -> bool {
    any_statement(sql.as_ref(), opts, |k| k.affects_session())
}

/// `might_affect_session_with`, a savepoint statement in `sql` (SAVEPOINT, RELEASE, ROLLBACK
/// TO), or a read of the session's sequence values: what the session tracker reads (SETs made
/// after a savepoint go with a rollback to it; a sequence read may need the server's values
/// discarded first).
pub fn might_matter_to_tracker_with(sql: &[u8], opts: LexOptions) -> bool {
    any_statement(sql, opts, |k| {
        k.affects_session() || k.is_savepoint_control() || k.reads_sequence_state()
    })
}

fn any_statement(
    src: &[u8],
    opts: LexOptions,
    wanted: impl Fn(&StatementKind<'_>) -> bool,
) -> bool {
    // The common case straight away, without setting up the statement iterator.
    if fast_plain(src, Lexer::with_scs(src, opts.standard_conforming_strings)).is_some() {
        return false;
    }
    // The shortcut has just said no: the iterator need not try it again.
    classify_from(src, opts, true).any(|s| wanted(&s.kind))
}

/// How a statement text may end the transaction block it runs in: what a client is told when
/// the server running it is lost (`forward/lost.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxEnding {
    /// A statement ends the block (COMMIT, END, ROLLBACK, ABORT, PREPARE TRANSACTION).
    pub ends: bool,
    /// A statement may have made something durable: COMMIT, END, PREPARE TRANSACTION, COMMIT
    /// PREPARED, ROLLBACK PREPARED.
    pub may_commit: bool,
}

impl TxEnding {
    pub fn merge(&mut self, other: TxEnding) {
        self.ends |= other.ends;
        self.may_commit |= other.may_commit;
    }
}

/// [`TxEnding`] of a simple Query's or a Parse's text. A single plain statement costs the same
/// byte scan as [`might_affect_session_with`] and a look at its first word; only texts that it
/// cannot settle (several statements, comments) are classified.
pub fn transaction_ending_with<S: AsRef<[u8]> + ?Sized>(sql: &S, opts: LexOptions) -> TxEnding {
    let src = sql.as_ref();
    let lexer = Lexer::with_scs(src, opts.standard_conforming_strings);
    if let Some(text) = fast_plain(src, lexer) {
        let Some(first) = Lexer::with_scs(text, opts.standard_conforming_strings).next() else {
            return TxEnding::default();
        };
        let kw = |k: &str| first.kind == TokenKind::Word && first.is_kw(k);
        // Not special for `fast_plain`: COMMIT, END, ROLLBACK and ABORT arrive here whole.
        if !(kw("commit") || kw("end") || kw("rollback") || kw("abort")) {
            return TxEnding::default();
        }
    }
    let mut out = TxEnding::default();
    for s in classify_from(src, opts, true) {
        out.merge(match s.kind {
            StatementKind::Commit { .. } | StatementKind::PrepareTransaction => TxEnding {
                ends: true,
                may_commit: true,
            },
            StatementKind::Rollback { .. } => TxEnding {
                ends: true,
                may_commit: false,
            },
            StatementKind::CommitPrepared | StatementKind::RollbackPrepared => TxEnding {
                ends: false,
                may_commit: true,
            },
            _ => TxEnding::default(),
        });
    }
    out
}

/// Iterator over the classified statements of one query text.
#[derive(Clone, Debug)]
pub struct Statements<'a> {
    src: &'a [u8],
    lexer: Lexer<'a>,
    splitter: Splitter<'a>,
    index: usize,
    cur: Option<Current<'a>>,
    started: bool,
    done: bool,
}

#[derive(Clone, Debug)]
struct Current<'a> {
    index: usize,
    text: &'a [u8],
    head: Option<StatementKind<'a>>,
    scan: Option<Scan<'a>>,
    yielded: bool,
}

impl<'a> Iterator for Statements<'a> {
    type Item = Statement<'a>;

    fn next(&mut self) -> Option<Statement<'a>> {
        loop {
            if let Some(cur) = &mut self.cur {
                let found = match cur.head.take() {
                    Some(kind) => Some(kind),
                    None => cur.scan.as_mut().and_then(Scan::next_kind),
                };
                let (index, text) = (cur.index, cur.text);
                match found {
                    Some(kind) => {
                        cur.yielded = true;
                        return Some(Statement { index, text, kind });
                    }
                    None => {
                        let yielded = cur.yielded;
                        self.cur = None;
                        if !yielded {
                            return Some(Statement {
                                index,
                                text,
                                kind: StatementKind::Plain,
                            });
                        }
                    }
                }
            }
            if self.done {
                return None;
            }
            if !self.started {
                self.started = true;
                if let Some(text) = fast_plain(self.src, self.lexer) {
                    self.done = true;
                    self.index = 1;
                    return Some(Statement {
                        index: 0,
                        text,
                        kind: StatementKind::Plain,
                    });
                }
            }
            let Some(span) = self.splitter.next() else {
                self.done = true;
                return None;
            };
            let text = &self.src[span.start..span.end];
            let (head, scan) = head(text, self.lexer);
            self.cur = Some(Current {
                index: self.index,
                text,
                head,
                scan,
                yielded: false,
            });
            self.index += 1;
        }
    }
}

/// Whether `text` refers to a bind parameter (`$1`): such a value is only known at Bind.
pub fn references_params<S: AsRef<[u8]> + ?Sized>(text: &S) -> bool {
    Lexer::new(text.as_ref()).any(|t| t.kind == TokenKind::Param)
}

/// Classify one statement by its head; returns the head's kind and, for statements that can
/// run queries, a scan of the rest for calls (for a `DO` block, what its body does).
fn head<'a>(text: &'a [u8], template: Lexer<'a>) -> (Option<StatementKind<'a>>, Option<Scan<'a>>) {
    let mut lx = relex(template, text);
    let Some(first) = lx.next() else {
        return (None, None);
    };
    let scan_rest =
        |lx: Lexer<'a>, select_like| Some(Scan::Calls(CallScan::new(lx, text, select_like)));
    if first.kind != TokenKind::Word {
        return (None, scan_rest(lx, false));
    }
    let kw = |k: &str| first.is_kw(k);
    if kw("select") || kw("with") {
        (None, scan_rest(lx, true))
    } else if kw("begin") {
        (Some(StatementKind::Begin), None)
    } else if kw("start") {
        (
            lx.eat_kw("transaction").then_some(StatementKind::Begin),
            None,
        )
    } else if kw("commit") || kw("end") {
        eat_work(&mut lx);
        if kw("commit") && lx.eat_kw("prepared") {
            return (Some(StatementKind::CommitPrepared), None);
        }
        let chain = chain(&mut lx);
        (Some(StatementKind::Commit { chain }), None)
    } else if kw("rollback") || kw("abort") {
        (rollback(&mut lx, text, kw("rollback")), None)
    } else if kw("savepoint") {
        (
            name(&mut lx, text).map(|name| StatementKind::Savepoint { name }),
            None,
        )
    } else if kw("release") {
        lx.eat_kw("savepoint");
        let kind = name(&mut lx, text).map(|name| StatementKind::ReleaseSavepoint { name });
        (kind, None)
    } else if kw("set") {
        (set(&mut lx, text), None)
    } else if kw("reset") {
        (reset(&mut lx, text), None)
    } else if kw("discard") {
        (discard(&mut lx), None)
    } else if kw("listen") {
        (
            name(&mut lx, text).map(|channel| StatementKind::Listen { channel }),
            None,
        )
    } else if kw("unlisten") {
        let channel = name_or_all(&mut lx, text, |t| t.is_op(b'*'));
        (
            channel.map(|channel| StatementKind::Unlisten { channel }),
            None,
        )
    } else if kw("declare") {
        match declare(&mut lx, text) {
            Some(kind) => (Some(kind), scan_rest(lx, false)),
            None => (None, scan_rest(lx, false)),
        }
    } else if kw("close") {
        let name = name_or_all(&mut lx, text, |t| t.is_kw("all"));
        (name.map(|name| StatementKind::CloseCursor { name }), None)
    } else if kw("prepare") {
        (prepare(&mut lx, text), None)
    } else if kw("execute") {
        let kind = name(&mut lx, text).map(|name| StatementKind::Execute { name });
        (kind, scan_rest(lx, false))
    } else if kw("deallocate") {
        lx.eat_kw("prepare");
        let name = name_or_all(&mut lx, text, |t| t.is_kw("all"));
        (name.map(|name| StatementKind::Deallocate { name }), None)
    } else if kw("drop") {
        (Some(StatementKind::Drop), None)
    } else if kw("load") {
        let file = rest(&lx, text);
        (Some(StatementKind::LoadModule { file }), None)
    } else if kw("create") {
        let (kind, scan) = create(lx, text);
        (kind, scan.map(Scan::Calls))
    } else if kw("do") {
        let effects = do_block::effects(lx, head);
        (None, Some(Scan::Effects(effects.into_iter())))
    } else {
        (None, scan_rest(lx, false))
    }
}

/// A lexer over `text` with the same options as `template`.
fn relex<'a>(template: Lexer<'a>, text: &'a [u8]) -> Lexer<'a> {
    Lexer::with_scs(text, template.scs())
}

fn eat_work(lx: &mut Lexer<'_>) {
    let _ = lx.eat_kw("work") || lx.eat_kw("transaction");
}

/// `AND [NO] CHAIN`.
fn chain(lx: &mut Lexer<'_>) -> bool {
    lx.eat_kw("and") && !lx.eat_kw("no") && lx.eat_kw("chain")
}

fn rollback<'a>(
    lx: &mut Lexer<'a>,
    text: &'a [u8],
    is_rollback: bool,
) -> Option<StatementKind<'a>> {
    eat_work(lx);
    if is_rollback && lx.eat_kw("prepared") {
        return Some(StatementKind::RollbackPrepared);
    }
    if lx.eat_kw("to") {
        lx.eat_kw("savepoint");
        return name(lx, text).map(|name| StatementKind::RollbackToSavepoint { name });
    }
    Some(StatementKind::Rollback { chain: chain(lx) })
}

/// A possibly qualified name: `a`, `"A"`, `a.b`, `"a".b.c`.
fn name<'a>(lx: &mut Lexer<'a>, text: &'a [u8]) -> Option<Ident<'a>> {
    let first = lx.next().filter(is_name_token)?;
    let mut end = first.end();
    loop {
        let mut la = *lx;
        if !la.eat_op(b'.') {
            break;
        }
        match la.next().filter(is_name_token) {
            Some(part) => {
                end = part.end();
                *lx = la;
            }
            None => break,
        }
    }
    Some(Ident(&text[first.start..end]))
}

fn is_name_token(t: &Token<'_>) -> bool {
    matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent)
}

fn name_or_all<'a>(
    lx: &mut Lexer<'a>,
    text: &'a [u8],
    is_all: impl Fn(&Token<'a>) -> bool,
) -> Option<NameOrAll<'a>> {
    if lx.peek().is_some_and(|t| is_all(&t)) {
        lx.next();
        return Some(NameOrAll::All);
    }
    name(lx, text).map(NameOrAll::Name)
}

/// Source text from the next token to the end of the statement.
fn rest<'a>(lx: &Lexer<'a>, text: &'a [u8]) -> &'a [u8] {
    lx.peek().map(|t| &text[t.start..]).unwrap_or(b"")
}

fn set<'a>(lx: &mut Lexer<'a>, text: &'a [u8]) -> Option<StatementKind<'a>> {
    // Is the word after the next one `TO` or `=` (a generic `SET word TO value`)?
    let generic = |lx: &Lexer<'a>| {
        let mut la = *lx;
        la.next();
        la.peek().is_some_and(|t| t.is_kw("to") || t.is_op(b'='))
    };
    let mut local = false;
    if lx.eat_kw("local") {
        local = true;
    } else if lx.peek().is_some_and(|t| t.is_kw("session")) && !generic(lx) {
        let mut la = *lx;
        la.next();
        let next = la.peek();
        if !next.is_some_and(|t| t.is_kw("authorization") || t.is_kw("characteristics")) {
            *lx = la;
        }
    }
    let value = |lx: &Lexer<'a>| rest(lx, text);
    let make = |name, value_text, local| {
        Some(StatementKind::Set {
            name,
            value_text,
            local,
        })
    };
    if !generic(lx) {
        let t = lx.peek()?;
        let special = |lx: &mut Lexer<'a>, words: &[&str]| {
            let mut la = *lx;
            if words.iter().all(|w| la.eat_kw(w)) {
                *lx = la;
                true
            } else {
                false
            }
        };
        if t.kind == TokenKind::Word {
            let param = |name: &'static str| SetName::Param(Cow::Borrowed(name));
            let found = if special(lx, &["time", "zone"]) {
                Some((param("timezone"), local))
            } else if special(lx, &["role"]) {
                Some((SetName::Role, local))
            } else if special(lx, &["session", "authorization"]) {
                Some((SetName::SessionAuthorization, local))
            } else if special(lx, &["session", "characteristics", "as", "transaction"]) {
                Some((SetName::SessionCharacteristics, false))
            } else if special(lx, &["transaction"]) {
                Some((SetName::Transaction, true))
            } else if special(lx, &["constraints"]) {
                Some((SetName::Constraints, true))
            } else if special(lx, &["names"]) {
                Some((param("client_encoding"), local))
            } else if special(lx, &["schema"]) {
                Some((param("search_path"), local))
            } else if special(lx, &["xml", "option"]) {
                Some((param("xmloption"), local))
            } else {
                None
            };
            if let Some((name, local)) = found {
                return make(name, value(lx), local);
            }
        }
    }
    let ident = name(lx, text)?;
    let _ = lx.eat_kw("to") || lx.eat_op(b'=');
    make(SetName::param(ident.normalized()), value(lx), local)
}

fn reset<'a>(lx: &mut Lexer<'a>, text: &'a [u8]) -> Option<StatementKind<'a>> {
    let mut words = |words: &[&str]| {
        let mut la = *lx;
        let all = words.iter().all(|w| la.eat_kw(w));
        if all {
            *lx = la;
        }
        all
    };
    let name = if words(&["all"]) {
        return Some(StatementKind::ResetAll);
    } else if words(&["time", "zone"]) {
        SetName::Param(Cow::Borrowed("timezone"))
    } else if words(&["session", "authorization"]) {
        SetName::SessionAuthorization
    } else if words(&["transaction", "isolation", "level"]) {
        SetName::Param(Cow::Borrowed("transaction_isolation"))
    } else {
        SetName::param(name(lx, text)?.normalized())
    };
    Some(StatementKind::Reset { name })
}

fn discard<'a>(lx: &mut Lexer<'a>) -> Option<StatementKind<'a>> {
    let t = lx.next()?;
    let target = if t.is_kw("all") {
        DiscardTarget::All
    } else if t.is_kw("plans") {
        DiscardTarget::Plans
    } else if t.is_kw("sequences") {
        DiscardTarget::Sequences
    } else if t.is_kw("temp") || t.is_kw("temporary") {
        DiscardTarget::Temp
    } else {
        return None;
    };
    Some(StatementKind::Discard(target))
}

/// `DECLARE name [options] CURSOR [WITH|WITHOUT HOLD] FOR query`; leaves `lx` at the query.
fn declare<'a>(lx: &mut Lexer<'a>, text: &'a [u8]) -> Option<StatementKind<'a>> {
    let name = name(lx, text)?;
    let mut with_hold = false;
    while let Some(t) = lx.next() {
        if t.is_kw("for") {
            break;
        }
        if t.is_kw("with") && lx.eat_kw("hold") {
            with_hold = true;
        }
    }
    Some(StatementKind::DeclareCursor { name, with_hold })
}

/// `PREPARE TRANSACTION 'gid'` or `PREPARE name [(types)] AS body`.
fn prepare<'a>(lx: &mut Lexer<'a>, text: &'a [u8]) -> Option<StatementKind<'a>> {
    let mut la = *lx;
    if la.eat_kw("transaction") && la.peek().is_some_and(|t| t.kind == TokenKind::String) {
        return Some(StatementKind::PrepareTransaction);
    }
    let name = name(lx, text)?;
    let mut depth = 0usize;
    while let Some(t) = lx.next() {
        if t.is_op(b'(') {
            depth += 1;
        } else if t.is_op(b')') {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_kw("as") {
            return Some(StatementKind::Prepare {
                name,
                body: rest(lx, text),
            });
        }
    }
    None
}

/// CREATE statements: temporary objects, and a call scan for those that run a query now
/// (CREATE TABLE ... AS, CREATE MATERIALIZED VIEW) but not for definitions (views, functions).
fn create<'a>(
    mut lx: Lexer<'a>,
    text: &'a [u8],
) -> (Option<StatementKind<'a>>, Option<CallScan<'a>>) {
    if lx.eat_kw("or") {
        lx.eat_kw("replace");
    }
    let _ = lx.eat_kw("global") || lx.eat_kw("local");
    let mut temp = lx.eat_kw("temp") || lx.eat_kw("temporary");
    lx.eat_kw("unlogged");
    let runs_query = lx
        .peek()
        .is_some_and(|t| t.is_kw("table") || t.is_kw("materialized"));
    let mut on_commit_drop = false;
    let mut depth = 0usize;
    let mut la = lx;
    while let Some(t) = la.next() {
        if t.is_op(b'(') {
            depth += 1;
        } else if t.is_op(b')') {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_kw("on") {
            let mut on = la;
            if on.eat_kw("commit") && on.eat_kw("drop") {
                on_commit_drop = true;
            }
        } else if is_pg_temp(&t) && la.peek().is_some_and(|n| n.is_op(b'.')) {
            temp = true;
        }
    }
    let kind = temp.then_some(StatementKind::CreateTemp { on_commit_drop });
    let scan = runs_query.then(|| CallScan::new(lx, text, false));
    (kind, scan)
}

/// `pg_temp` or a backend's own `pg_temp_N`.
fn is_pg_temp(t: &Token<'_>) -> bool {
    let (body, fold) = match t.kind {
        TokenKind::Word => (t.text, true),
        TokenKind::QuotedIdent if t.text.len() >= 2 => (&t.text[1..t.text.len() - 1], false),
        _ => return false,
    };
    if body.len() < 7 {
        return false;
    }
    let (prefix, n) = body.split_at(7);
    let prefix_ok = if fold {
        prefix.eq_ignore_ascii_case(b"pg_temp")
    } else {
        prefix == b"pg_temp"
    };
    prefix_ok
        && (n.is_empty() || n.len() > 1 && n[0] == b'_' && n[1..].iter().all(u8::is_ascii_digit))
}

impl Statement<'_> {
    /// A statement that re-creates this parameter change on another server, for tracked kinds
    /// (`Set` outside a transaction's scope, `Reset`, `ResetAll`): SET/RESET statements replay
    /// their own text; `set_config()` calls become `SELECT pg_catalog.set_config(...)` alone,
    /// so that other calls in the original statement are not repeated. None when the change
    /// cannot be replayed from the text (unknown name, a bind parameter in the value).
    pub fn replay_sql(&self) -> Option<String> {
        let own_text = || Some(String::from_utf8_lossy(self.text).into_owned());
        match &self.kind {
            StatementKind::Reset { .. } | StatementKind::ResetAll => own_text(),
            StatementKind::Set {
                name,
                value_text,
                local: false,
            } => {
                if *name == SetName::Unknown || references_params(*value_text) {
                    return None;
                }
                let head_is_set = Lexer::new(self.text).next().is_some_and(|t| t.is_kw("set"));
                if head_is_set {
                    return own_text();
                }
                let name = match name {
                    SetName::Param(p) => p.as_ref(),
                    SetName::Role => "role",
                    SetName::SessionAuthorization => "session_authorization",
                    _ => return None,
                };
                Some(format!(
                    "SELECT pg_catalog.set_config('{}', {}, false)",
                    name.replace('\'', "''"),
                    String::from_utf8_lossy(value_text)
                ))
            }
            _ => None,
        }
    }
}
