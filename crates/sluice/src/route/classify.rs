//! Read-routing classification of the text that opens a transaction (a simple Query, or the
//! statement of a Parse): whether it declares itself read only, is a single read proven unable
//! to write, follows the session's default access mode, or must run on the primary, and why.
//!
//! Uses the session-state lexer (comments, quoted names, `'...'`, `E'...'`, dollar quoting,
//! `standard_conforming_strings`), so a keyword inside a string or comment never counts.

use crate::session_state::lexer::{Lexer, Span, Splitter, Token, TokenKind};
use crate::session_state::LexOptions;

use super::names::{self, NeedsPrimary};

/// What to do with a read that calls a function the classifier does not know (a user-defined
/// or extension function, whose body it cannot see).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UnknownFunctions {
    /// Let it go to a standby. A write inside fails there with SQLSTATE 25006 (read-only
    /// transaction) and the pool replays the statement on the primary, which is safe while no row
    /// has reached the client. The rule of issue 33, and the default.
    #[default]
    Standby,
    /// Keep it on the primary.
    Primary,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClassifyOptions {
    pub lex: LexOptions,
    pub unknown_functions: UnknownFunctions,
}

/// How a transaction declared itself read only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Declared {
    /// `BEGIN [WORK|TRANSACTION] ... READ ONLY` or `START TRANSACTION ... READ ONLY`.
    Begin,
    /// `BEGIN` followed by `SET TRANSACTION ... READ ONLY` (or `SET transaction_read_only = on`).
    SetTransaction,
}

/// The shape of a statement proven unable to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadKind {
    Select,
    With,
    Values,
    Table,
    Show,
    Explain,
}

/// Why a transaction stays on the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrimaryWhy {
    /// Nothing to run (empty query).
    Empty,
    /// `BEGIN READ WRITE`, `SET TRANSACTION READ WRITE`, `SET transaction_read_only = off`.
    DeclaredReadWrite,
    /// A `BEGIN` with nothing after it in this text: its access mode may still change.
    ModeNotFixed,
    /// The text ends a transaction and starts another (`...; COMMIT; ...`).
    SeveralTransactions,
    /// Not a read: the first keyword of the statement (`INSERT`, `SET`, `COPY`, ...).
    NotARead(&'static str),
    /// `FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE`, `FOR KEY SHARE`.
    LockingClause,
    /// `SELECT ... INTO`.
    SelectInto,
    /// INSERT/UPDATE/DELETE/MERGE inside a read (a data-modifying CTE).
    DataModifying,
    /// A name (function, view, setting) from the list in `names.rs`.
    Name(&'static str, NeedsPrimary),
    /// A call the classifier does not know, with [`UnknownFunctions::Primary`].
    UnknownFunction,
}

/// What the text alone says; [`super::policy::wants_standby`] adds the mode and the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The transaction declares itself read only: any `route_reads` but off may use a standby.
    DeclaredReadOnly(Declared),
    /// One statement proven unable to write (`route_reads = auto`). `unknown_calls`: it calls a
    /// function the classifier does not know (see [`UnknownFunctions`]).
    ProvenRead {
        kind: ReadKind,
        unknown_calls: bool,
    },
    /// Read only exactly when the session's `default_transaction_read_only` is on: several reads
    /// in one text, or `BEGIN` followed by statements that fix its access mode.
    FollowsSession,
    Primary(PrimaryWhy),
}

/// A change of the session's default access mode made by the text, for servers that do not
/// report `default_transaction_read_only` (before PostgreSQL 14); newer ones say it in a
/// ParameterStatus, which is the source to trust.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionMode {
    ReadOnly,
    ReadWrite,
    /// `RESET`, `SET ... TO DEFAULT`, `RESET ALL`, `DISCARD ALL`: back to the server's default.
    Reset,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Classification {
    pub verdict: Verdict,
    /// The last change of the session default in the text, if any.
    pub session: Option<SessionMode>,
}

/// Access mode named by a transaction characteristic list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    ReadOnly,
    ReadWrite,
}

/// What one statement is, for routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stmt {
    Begin(Option<Mode>),
    /// `SET TRANSACTION ...` / `SET [LOCAL|SESSION] transaction_read_only ...` (this transaction).
    SetTransaction(Option<Mode>),
    /// Changes the session default (kept in [`Classification::session`]).
    SetSession(SessionMode),
    /// COMMIT / END / ROLLBACK / ABORT (not `ROLLBACK TO`, not `... PREPARED`).
    End,
    Read(ReadKind),
    Other(&'static str),
}

/// Classify with `standard_conforming_strings` on and unknown functions allowed on a standby.
pub fn classify(sql: &[u8]) -> Classification {
    classify_with(sql, ClassifyOptions::default())
}

pub fn classify_with(sql: &[u8], opts: ClassifyOptions) -> Classification {
    let scs = opts.lex.standard_conforming_strings;
    let lexer = Lexer::with_scs(sql, scs);
    let text = |s: Span| Lexer::with_scs(&sql[s.start..s.end], scs);
    let mut spans = Splitter::new(lexer);
    let Some(first) = spans.next() else {
        return Classification {
            verdict: Verdict::Primary(PrimaryWhy::Empty),
            session: None,
        };
    };
    let second = spans.next();
    let head = statement(text(first));
    let session = match second {
        None => match head {
            Stmt::SetSession(m) => Some(m),
            _ => None,
        },
        Some(_) => Splitter::new(lexer)
            .filter_map(|s| match statement(text(s)) {
                Stmt::SetSession(m) => Some(m),
                _ => None,
            })
            .last(),
    };
    let rest = second
        .into_iter()
        .chain(spans)
        .map(|s| (s, statement(text(s))));
    let verdict = match head {
        Stmt::Begin(mode) => {
            // Names that need the primary count in a read-only transaction too (advisory locks,
            // server-local views), in whichever statement they are.
            let named = Splitter::new(lexer).find_map(|s| match statement(text(s)) {
                // `SET transaction_read_only` declares; it does not ask the server's role.
                Stmt::SetTransaction(_) | Stmt::SetSession(_) => None,
                _ => scan_names(text(s)),
            });
            match named {
                Some(why) => Verdict::Primary(why),
                None => block(mode, rest.map(|(_, st)| st)),
            }
        }
        Stmt::Read(kind) => {
            let mut verdict = proven_read(kind, text(first), opts);
            if second.is_some() {
                // Several statements: each must be a proven read; then the text is read only
                // exactly when the session is (a failure after rows went out cannot be replayed).
                for (s, st) in rest {
                    if !matches!(verdict, Verdict::ProvenRead { .. }) {
                        break;
                    }
                    verdict = match st {
                        Stmt::Read(k) => proven_read(k, text(s), opts),
                        other => Verdict::Primary(not_a_read(other)),
                    };
                }
                if let Verdict::ProvenRead { .. } = verdict {
                    verdict = Verdict::FollowsSession;
                }
            }
            verdict
        }
        other => Verdict::Primary(not_a_read(other)),
    };
    Classification { verdict, session }
}

/// A text that opens with `BEGIN`/`START TRANSACTION` (access mode `mode`, if named) followed
/// by the statements `rest`.
fn block(mode: Option<Mode>, rest: impl Iterator<Item = Stmt>) -> Verdict {
    let declared_at_begin = mode == Some(Mode::ReadOnly);
    let mut mode = mode;
    // A statement other than SET TRANSACTION fixes the access mode (PostgreSQL refuses to change
    // it after the first query).
    let mut fixed = false;
    let mut ended = false;
    for st in rest {
        if ended {
            return Verdict::Primary(PrimaryWhy::SeveralTransactions);
        }
        match st {
            Stmt::SetTransaction(m) if !fixed => mode = m.or(mode),
            Stmt::End => ended = true,
            _ => fixed = true,
        }
    }
    match mode {
        Some(Mode::ReadWrite) => Verdict::Primary(PrimaryWhy::DeclaredReadWrite),
        Some(Mode::ReadOnly) if declared_at_begin => Verdict::DeclaredReadOnly(Declared::Begin),
        Some(Mode::ReadOnly) => Verdict::DeclaredReadOnly(Declared::SetTransaction),
        None if fixed || ended => Verdict::FollowsSession,
        None => Verdict::Primary(PrimaryWhy::ModeNotFixed),
    }
}

/// Why a statement that is not a read keeps the text on the primary.
fn not_a_read(st: Stmt) -> PrimaryWhy {
    match st {
        Stmt::SetTransaction(Some(Mode::ReadWrite)) => PrimaryWhy::DeclaredReadWrite,
        Stmt::SetTransaction(_) | Stmt::SetSession(_) => PrimaryWhy::NotARead("SET"),
        Stmt::End => PrimaryWhy::NotARead("COMMIT"),
        Stmt::Begin(_) => PrimaryWhy::SeveralTransactions,
        Stmt::Read(_) => PrimaryWhy::NotARead("SELECT"),
        Stmt::Other(kw) => PrimaryWhy::NotARead(kw),
    }
}

/// A name anywhere in the statement that keeps it on the primary.
fn scan_names(lexer: Lexer<'_>) -> Option<PrimaryWhy> {
    lexer.into_iter().find_map(|t| name_needing_primary(&t))
}

fn name_needing_primary(t: &Token<'_>) -> Option<PrimaryWhy> {
    match t.kind {
        TokenKind::Word | TokenKind::QuotedIdent => {
            names::needs_primary(t).map(|(name, what)| PrimaryWhy::Name(name, what))
        }
        TokenKind::String if names::names_role_setting(t) => Some(PrimaryWhy::Name(
            "transaction_read_only",
            NeedsPrimary::Role,
        )),
        _ => None,
    }
}

/// The checks of a read statement (its first keyword already says SELECT/WITH/...): names that
/// need the primary, locking clauses, INTO, data-modifying words, and calls to functions the
/// classifier does not know. One pass over the tokens.
fn proven_read(kind: ReadKind, mut lx: Lexer<'_>, opts: ClassifyOptions) -> Verdict {
    let mut prev: Option<Token<'_>> = None;
    let mut unknown_calls = false;
    while let Some(t) = lx.next() {
        if let Some(why) = name_needing_primary(&t) {
            return Verdict::Primary(why);
        }
        if t.kind == TokenKind::Word {
            if t.is_kw("for") {
                let mut la = lx;
                if la.eat_kw("update") || la.eat_kw("share") || la.eat_kw("no") || la.eat_kw("key")
                {
                    return Verdict::Primary(PrimaryWhy::LockingClause);
                }
            } else if t.is_kw("into") {
                return Verdict::Primary(PrimaryWhy::SelectInto);
            } else if ["insert", "update", "delete", "merge"]
                .iter()
                .any(|kw| t.is_kw(kw))
            {
                return Verdict::Primary(PrimaryWhy::DataModifying);
            }
        }
        if t.is_op(b'(') {
            if let Some(p) = prev {
                let name_like = matches!(p.kind, TokenKind::Word | TokenKind::QuotedIdent);
                if name_like && !names::known_read_call(&p) {
                    unknown_calls = true;
                }
            }
        }
        prev = Some(t);
    }
    if unknown_calls && opts.unknown_functions == UnknownFunctions::Primary {
        return Verdict::Primary(PrimaryWhy::UnknownFunction);
    }
    Verdict::ProvenRead {
        kind,
        unknown_calls,
    }
}

/// What one statement is, from its first keywords.
fn statement(mut lx: Lexer<'_>) -> Stmt {
    let Some(t) = lx.next() else {
        return Stmt::Other("?");
    };
    // `(SELECT ...) UNION (SELECT ...)`
    let parenthesized = t.is_op(b'(');
    let mut t = t;
    while t.is_op(b'(') {
        match lx.next() {
            Some(n) => t = n,
            None => return Stmt::Other("("),
        }
    }
    if let Some(kind) = read_head(&t) {
        return Stmt::Read(kind);
    }
    if parenthesized {
        return Stmt::Other("(");
    }
    if t.is_kw("begin") {
        let _ = lx.eat_kw("work") || lx.eat_kw("transaction");
        return Stmt::Begin(modes(lx));
    }
    if t.is_kw("start") {
        return if lx.eat_kw("transaction") {
            Stmt::Begin(modes(lx))
        } else {
            Stmt::Other("START")
        };
    }
    if ["commit", "end", "rollback", "abort"]
        .iter()
        .any(|kw| t.is_kw(kw))
    {
        let mut la = lx;
        let _ = la.eat_kw("work") || la.eat_kw("transaction");
        return match la.next() {
            Some(n) if n.is_kw("to") || n.is_kw("prepared") => Stmt::Other("ROLLBACK"),
            Some(n) if n.is_kw("and") => Stmt::Other("COMMIT"),
            _ => Stmt::End,
        };
    }
    if t.is_kw("set") {
        return set_statement(lx);
    }
    if t.is_kw("reset") {
        return match lx.next() {
            Some(n) if n.is_name("default_transaction_read_only") || n.is_kw("all") => {
                Stmt::SetSession(SessionMode::Reset)
            }
            _ => Stmt::Other("RESET"),
        };
    }
    if t.is_kw("discard") && lx.eat_kw("all") {
        return Stmt::SetSession(SessionMode::Reset);
    }
    if t.is_kw("explain") {
        return explain(lx);
    }
    Stmt::Other(keyword_name(&t))
}

fn read_head(t: &Token<'_>) -> Option<ReadKind> {
    Some(if t.is_kw("select") {
        ReadKind::Select
    } else if t.is_kw("with") {
        ReadKind::With
    } else if t.is_kw("values") {
        ReadKind::Values
    } else if t.is_kw("table") {
        ReadKind::Table
    } else if t.is_kw("show") {
        ReadKind::Show
    } else {
        return None;
    })
}

/// `EXPLAIN [ANALYZE] [VERBOSE] stmt` or `EXPLAIN (options) stmt`: a read when `stmt` is one
/// (ANALYZE runs it, and a read stays a read).
fn explain(mut lx: Lexer<'_>) -> Stmt {
    if lx.eat_op(b'(') {
        let mut depth = 1usize;
        while depth > 0 {
            match lx.next() {
                Some(t) if t.is_op(b'(') => depth += 1,
                Some(t) if t.is_op(b')') => depth -= 1,
                Some(_) => {}
                None => return Stmt::Other("EXPLAIN"),
            }
        }
    } else {
        let _ = lx.eat_kw("analyze") || lx.eat_kw("analyse");
        let _ = lx.eat_kw("verbose");
    }
    match statement(lx) {
        Stmt::Read(ReadKind::Show) | Stmt::Read(ReadKind::Explain) => Stmt::Other("EXPLAIN"),
        Stmt::Read(_) => Stmt::Read(ReadKind::Explain),
        _ => Stmt::Other("EXPLAIN"),
    }
}

/// `SET TRANSACTION ...`, `SET SESSION CHARACTERISTICS AS TRANSACTION ...`,
/// `SET [SESSION|LOCAL] transaction_read_only|default_transaction_read_only {TO|=} value`.
fn set_statement(mut lx: Lexer<'_>) -> Stmt {
    if lx.eat_kw("transaction") {
        return Stmt::SetTransaction(modes(lx));
    }
    let local = lx.eat_kw("local");
    let session = !local && lx.eat_kw("session");
    if session && lx.eat_kw("characteristics") {
        if lx.eat_kw("as") && lx.eat_kw("transaction") {
            return match modes(lx) {
                Some(Mode::ReadOnly) => Stmt::SetSession(SessionMode::ReadOnly),
                Some(Mode::ReadWrite) => Stmt::SetSession(SessionMode::ReadWrite),
                None => Stmt::Other("SET"),
            };
        }
        return Stmt::Other("SET");
    }
    let Some(name) = lx.next() else {
        return Stmt::Other("SET");
    };
    let tx = name.is_name("transaction_read_only");
    if !(tx || name.is_name("default_transaction_read_only")) {
        return Stmt::Other("SET");
    }
    if !(lx.eat_kw("to") || lx.eat_op(b'=')) {
        return Stmt::Other("SET");
    }
    let value = match lx.next() {
        Some(v) if v.is_kw("default") => None,
        Some(v) => bool_value(&v),
        None => return Stmt::Other("SET"),
    };
    match (tx, local, value) {
        (true, _, Some(true)) => Stmt::SetTransaction(Some(Mode::ReadOnly)),
        (true, _, Some(false)) => Stmt::SetTransaction(Some(Mode::ReadWrite)),
        // `SET transaction_read_only TO DEFAULT` or a value we cannot read: not a declaration.
        (true, _, None) => Stmt::SetTransaction(Some(Mode::ReadWrite)),
        (false, true, _) => Stmt::Other("SET"),
        (false, false, Some(true)) => Stmt::SetSession(SessionMode::ReadOnly),
        (false, false, Some(false)) => Stmt::SetSession(SessionMode::ReadWrite),
        (false, false, None) => Stmt::SetSession(SessionMode::Reset),
    }
}

/// A boolean as PostgreSQL reads it (on/off, true/false, yes/no, 1/0, and unique prefixes), bare
/// or in simple quotes.
fn bool_value(t: &Token<'_>) -> Option<bool> {
    let raw = match t.kind {
        TokenKind::Word | TokenKind::Number => t.text,
        TokenKind::String if t.text.len() >= 2 && t.text[0] == b'\'' => {
            &t.text[1..t.text.len() - 1]
        }
        _ => return None,
    };
    let mut buf = [0u8; 8];
    let v = buf.get_mut(..raw.len())?;
    v.copy_from_slice(raw);
    v.make_ascii_lowercase();
    let is_prefix = |word: &[u8]| !v.is_empty() && word.starts_with(v);
    match &*v {
        b"1" => Some(true),
        b"0" => Some(false),
        b"on" => Some(true),
        b"of" | b"off" => Some(false),
        _ if is_prefix(b"true") || is_prefix(b"yes") => Some(true),
        _ if is_prefix(b"false") || is_prefix(b"no") => Some(false),
        _ => None,
    }
}

/// The access mode in a transaction characteristic list (`ISOLATION LEVEL ...`, `READ ONLY`,
/// `READ WRITE`, `[NOT] DEFERRABLE`, commas optional); the last one named wins.
fn modes(lx: Lexer<'_>) -> Option<Mode> {
    let mut mode = None;
    let mut prev_read = false;
    for t in lx {
        if prev_read && t.is_kw("only") {
            mode = Some(Mode::ReadOnly);
        } else if prev_read && t.is_kw("write") {
            mode = Some(Mode::ReadWrite);
        }
        prev_read = t.is_kw("read");
    }
    mode
}

/// A static name for the first keyword of a statement that is not a read (for logs and SHOW).
fn keyword_name(t: &Token<'_>) -> &'static str {
    const KEYWORDS: &[&str] = &[
        "INSERT",
        "UPDATE",
        "DELETE",
        "MERGE",
        "COPY",
        "CREATE",
        "ALTER",
        "DROP",
        "TRUNCATE",
        "GRANT",
        "REVOKE",
        "CALL",
        "DO",
        "LOCK",
        "VACUUM",
        "ANALYZE",
        "CLUSTER",
        "REINDEX",
        "REFRESH",
        "DECLARE",
        "FETCH",
        "MOVE",
        "CLOSE",
        "PREPARE",
        "EXECUTE",
        "DEALLOCATE",
        "LISTEN",
        "NOTIFY",
        "UNLISTEN",
        "LOAD",
        "DISCARD",
        "RESET",
        "SAVEPOINT",
        "RELEASE",
        "CHECKPOINT",
        "COMMENT",
        "SECURITY",
        "IMPORT",
        "REASSIGN",
    ];
    KEYWORDS
        .iter()
        .find(|kw| t.kind == TokenKind::Word && t.text.eq_ignore_ascii_case(kw.as_bytes()))
        .copied()
        .unwrap_or("other")
}
