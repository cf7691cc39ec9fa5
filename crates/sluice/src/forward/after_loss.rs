//! Answering a client, with no server, after the server it was using was lost (`lost.rs`), the
//! way PostgreSQL answers after an error: inside a transaction block every statement gets 25P02
//! until ROLLBACK (COMMIT, END and PREPARE TRANSACTION end the failed block too, with the
//! command tag ROLLBACK), which is answered here, so that nothing the client meant for that
//! transaction runs outside it on another server; in the extended protocol, after an error
//! every message up to Sync is dropped; a COPY FROM STDIN's data is dropped up to its
//! CopyDone/CopyFail. Once none of that holds, the client's next message goes to a server as
//! usual (`Step::HandOff`). Pure: the session reads and writes (`client/session.rs`).

use bytes::{BufMut, BytesMut};
use sluice_protocol::{
    decode_describe_or_close, decode_parse, encode_command_complete, encode_empty_query_response,
    encode_error, encode_ready_for_query, frontend_tag as t, Severity, TransactionStatus,
};

use super::Prepared;
use crate::error::ClientNotice;
use crate::session_state::{classify_full, LexOptions, StatementKind};

/// 25P02, PostgreSQL's words.
pub fn aborted_notice() -> ClientNotice {
    ClientNotice::new(
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

/// What a statement's text does in a failed transaction block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// No statement at all (PostgreSQL answers EmptyQueryResponse).
    Empty,
    /// ROLLBACK / ABORT: ends the block.
    Rollback,
    /// COMMIT / END / PREPARE TRANSACTION: end the failed block as a rollback.
    Commit,
    /// ROLLBACK TO SAVEPOINT: the savepoint lived on the lost server.
    RollbackTo,
    /// ... AND CHAIN: would start a new block at once, which needs a server.
    Chain,
    /// Anything else: 25P02.
    Other,
}

impl Exit {
    fn of(sql: &[u8]) -> Exit {
        let mut stmts = classify_full(sql, LexOptions::default());
        let Some(first) = stmts.next() else {
            return Exit::Empty;
        };
        if stmts.next().is_some() {
            return Exit::Other;
        }
        match first.kind {
            StatementKind::Rollback { chain: false } => Exit::Rollback,
            StatementKind::Commit { chain: false } | StatementKind::PrepareTransaction => {
                Exit::Commit
            }
            StatementKind::Rollback { chain: true } | StatementKind::Commit { chain: true } => {
                Exit::Chain
            }
            StatementKind::RollbackToSavepoint { .. } => Exit::RollbackTo,
            _ => Exit::Other,
        }
    }

    /// PostgreSQL lets Parse and Bind of these through in a failed block.
    fn allowed(self) -> bool {
        self != Exit::Other
    }
}

/// What the session does with one client message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Not this state's: the message stays unread and goes to a server as usual.
    HandOff,
    /// Read the whole message and call again with its body.
    NeedBody,
    /// Answered or dropped: its bytes are consumed.
    Consumed,
}

/// The client's protocol state after its server was lost.
#[derive(Debug, Default)]
pub struct AfterLoss {
    /// In a failed transaction block.
    failed_tx: bool,
    /// The loss itself, not told yet (nothing was running): the next statement gets it instead
    /// of 25P02, and a COMMIT gets it instead of the tag ROLLBACK.
    error_due: Option<ClientNotice>,
    /// An error in an extended batch: everything up to Sync is dropped.
    skipping: bool,
    /// Extended messages were answered since the last Sync: the Sync is answered here too.
    in_batch: bool,
    /// COPY FROM STDIN was running: the client's copy messages are dropped until it ends it.
    copy_drain: bool,
    /// Statements parsed here (name, "" unnamed) and portals bound here, with what they do.
    statements: Vec<(String, Exit)>,
    portals: Vec<(String, Exit)>,
}

impl AfterLoss {
    pub fn new(failed_tx: bool) -> Self {
        AfterLoss {
            failed_tx,
            ..Default::default()
        }
    }

    /// An error was sent in an extended batch: drop everything up to Sync, answer the Sync.
    pub fn skip_to_sync(&mut self) {
        self.skipping = true;
        self.in_batch = true;
    }

    /// Tell `notice` at the next statement (nothing was running when the server was lost).
    pub fn tell_next(&mut self, notice: ClientNotice) {
        self.error_due = Some(notice);
    }

    /// A COPY FROM STDIN was running: drop its data up to CopyDone/CopyFail.
    pub fn drain_copy(&mut self) {
        self.copy_drain = true;
    }

    /// Nothing of the loss is left: the client's next message goes to a server.
    pub fn is_done(&self) -> bool {
        !self.failed_tx && !self.skipping && !self.in_batch && !self.copy_drain
    }

    /// In a failed transaction block (ReadyForQuery 'E').
    pub fn in_failed_tx(&self) -> bool {
        self.failed_tx
    }

    fn status(&self) -> TransactionStatus {
        if self.failed_tx {
            TransactionStatus::Failed
        } else {
            TransactionStatus::Idle
        }
    }

    /// Handle one client message with tag `tag` (`body`: its bytes after the length word, once
    /// `Step::NeedBody` asked for them), appending what the client is answered to `out`.
    /// `named`: the client's prepared statements when the pooler manages them.
    pub fn on_message(
        &mut self,
        tag: u8,
        body: Option<&[u8]>,
        named: Option<&mut Prepared<'_>>,
        out: &mut BytesMut,
    ) -> Step {
        let ends_batch = self.in_batch && tag == t::SYNC;
        if (self.is_done() && !ends_batch) || tag == t::TERMINATE {
            return Step::HandOff;
        }
        match tag {
            t::SYNC => {
                self.skipping = false;
                self.in_batch = false;
                self.copy_drain = false;
                encode_ready_for_query(self.status(), out);
                return Step::Consumed;
            }
            // PostgreSQL ignores these outside COPY (a COPY that failed, its data still coming).
            t::COPY_DATA | t::FLUSH => return Step::Consumed,
            t::COPY_DONE | t::COPY_FAIL => {
                self.copy_drain = false;
                return Step::Consumed;
            }
            _ if self.skipping => return Step::Consumed,
            _ if !self.failed_tx => {
                // The block ended mid-batch (ROLLBACK executed), or a COPY's data stopped: the
                // rest goes to a server, as PostgreSQL would run it.
                self.copy_drain = false;
                self.in_batch = false;
                return Step::HandOff;
            }
            t::QUERY
            | t::FUNCTION_CALL
            | t::PARSE
            | t::BIND
            | t::DESCRIBE
            | t::EXECUTE
            | t::CLOSE => {}
            _ => return Step::HandOff,
        }
        let Some(body) = body else {
            return Step::NeedBody;
        };
        match tag {
            t::QUERY => self.query(cstr(body).0, out),
            t::FUNCTION_CALL => {
                self.fail(out, false);
                encode_ready_for_query(self.status(), out);
            }
            t::PARSE => self.parse(body, named, out),
            t::BIND => self.bind(body, named, out),
            t::DESCRIBE => self.describe(body, out),
            t::EXECUTE => self.execute(cstr(body).0, out),
            _ => self.close(body, named, out),
        }
        Step::Consumed
    }

    /// The error for a statement in the failed block (the loss itself if not told yet);
    /// `extended`: the rest of the batch is dropped.
    fn fail(&mut self, out: &mut BytesMut, extended: bool) {
        let notice = self.error_due.take().unwrap_or_else(aborted_notice);
        self.fail_with(&notice, out, extended);
    }

    fn fail_with(&mut self, notice: &ClientNotice, out: &mut BytesMut, extended: bool) {
        encode_notice_error(notice, out);
        if extended {
            self.skipping = true;
        }
    }

    /// The failed block ends (ROLLBACK, or COMMIT answered as PostgreSQL does); a COMMIT whose
    /// transaction was lost while nothing ran gets the loss instead of a quiet ROLLBACK tag.
    fn end_block(&mut self, exit: Exit, out: &mut BytesMut, extended: bool) {
        self.failed_tx = false;
        match (exit, self.error_due.take()) {
            (Exit::Commit, Some(notice)) => self.fail_with(&notice, out, extended),
            _ => encode_command_complete("ROLLBACK", out),
        }
    }

    /// Not an ending this state can answer: ROLLBACK TO a savepoint of the lost server, a
    /// chained ending that would need a server for its new block.
    fn cannot_end(&mut self, exit: Exit, out: &mut BytesMut, extended: bool) {
        let notice = match exit {
            Exit::RollbackTo => ClientNotice::new(
                "3B001",
                "savepoint does not exist: it was on the server connection that was lost",
            )
            .with_hint("End the transaction with ROLLBACK."),
            _ => ClientNotice::new(
                "0A000",
                "AND CHAIN cannot end a transaction whose server connection was lost",
            )
            .with_hint("End the transaction with ROLLBACK."),
        };
        self.error_due = None;
        self.fail_with(&notice, out, extended);
    }

    fn query(&mut self, sql: &[u8], out: &mut BytesMut) {
        match Exit::of(sql) {
            Exit::Empty => encode_empty_query_response(out),
            e @ (Exit::Rollback | Exit::Commit) => self.end_block(e, out, false),
            e @ (Exit::RollbackTo | Exit::Chain) => self.cannot_end(e, out, false),
            Exit::Other => self.fail(out, false),
        }
        encode_ready_for_query(self.status(), out);
    }

    fn parse(&mut self, body: &[u8], named: Option<&mut Prepared<'_>>, out: &mut BytesMut) {
        self.in_batch = true;
        let Ok(view) = decode_parse(body) else {
            return self.fail(out, true);
        };
        let exit = Exit::of(view.query.as_bytes());
        if !exit.allowed() {
            return self.fail(out, true);
        }
        if let (false, Some(p)) = (view.name.is_empty(), named) {
            if p.client.contains(view.name) {
                let notice = ClientNotice::new(
                    "42P05",
                    format!("prepared statement \"{}\" already exists", view.name),
                );
                return self.fail_with(&notice, out, true);
            }
            // Kept as the relay would: the next server gets it when the client binds it.
            let stmt = p.registry.intern(view.query, &view.param_types);
            p.client.insert(view.name, stmt);
        }
        remember(&mut self.statements, view.name, exit);
        out.put_slice(&[b'1', 0, 0, 0, 4]); // ParseComplete
    }

    fn bind(&mut self, body: &[u8], named: Option<&mut Prepared<'_>>, out: &mut BytesMut) {
        self.in_batch = true;
        let (portal, rest) = cstr(body);
        let (stmt, _) = cstr(rest);
        let exit = self.statement_exit(stmt, named.as_deref());
        match exit {
            Some(e) if e.allowed() => {
                remember(&mut self.portals, &String::from_utf8_lossy(portal), e);
                out.put_slice(&[b'2', 0, 0, 0, 4]); // BindComplete
            }
            _ => self.fail(out, true),
        }
    }

    fn statement_exit(&self, name: &[u8], named: Option<&Prepared<'_>>) -> Option<Exit> {
        let name = std::str::from_utf8(name).ok()?;
        if let Some((_, e)) = self.statements.iter().find(|(n, _)| n == name) {
            return Some(*e);
        }
        let stmt = named?.client.get(name)?;
        Some(Exit::of(stmt.query().as_bytes()))
    }

    fn describe(&mut self, body: &[u8], out: &mut BytesMut) {
        self.in_batch = true;
        let Ok((kind, name)) = decode_describe_or_close(body) else {
            return self.fail(out, true);
        };
        let known = match kind {
            b'S' => self.statements.iter().any(|(n, _)| n == name),
            _ => self.portals.iter().any(|(n, _)| n == name),
        };
        if !known {
            return self.fail(out, true);
        }
        if kind == b'S' {
            out.put_slice(&[b't', 0, 0, 0, 6, 0, 0]); // ParameterDescription: none
        }
        out.put_slice(&[b'n', 0, 0, 0, 4]); // NoData
    }

    fn execute(&mut self, portal: &[u8], out: &mut BytesMut) {
        self.in_batch = true;
        let portal = String::from_utf8_lossy(portal);
        match self
            .portals
            .iter()
            .find(|(n, _)| *n == portal)
            .map(|(_, e)| *e)
        {
            Some(Exit::Empty) => encode_empty_query_response(out),
            Some(e @ (Exit::Rollback | Exit::Commit)) => self.end_block(e, out, true),
            Some(e @ (Exit::RollbackTo | Exit::Chain)) => self.cannot_end(e, out, true),
            Some(Exit::Other) | None => self.fail(out, true),
        }
    }

    fn close(&mut self, body: &[u8], named: Option<&mut Prepared<'_>>, out: &mut BytesMut) {
        self.in_batch = true;
        let Ok((kind, name)) = decode_describe_or_close(body) else {
            return self.fail(out, true);
        };
        if kind == b'S' {
            self.statements.retain(|(n, _)| n != name);
            if let Some(p) = named {
                p.client.remove(name);
            }
        } else {
            self.portals.retain(|(n, _)| n != name);
        }
        out.put_slice(&[b'3', 0, 0, 0, 4]); // CloseComplete
    }
}

fn remember(list: &mut Vec<(String, Exit)>, name: &str, exit: Exit) {
    list.retain(|(n, _)| n != name);
    list.push((name.to_string(), exit));
}

/// A NUL-terminated string at the start of `b` and what follows its NUL.
fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(0, b) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &[]),
    }
}

/// Append an ErrorResponse for `notice` (ERROR: the client keeps its connection).
pub(crate) fn encode_notice_error(notice: &ClientNotice, out: &mut BytesMut) {
    encode_error(
        Severity::Error,
        &notice.sqlstate,
        &notice.message,
        notice.detail.as_deref(),
        notice.hint.as_deref(),
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::{encode_bind_text, encode_execute, encode_parse, encode_query};

    /// Client messages as (tag, body), from their wire bytes.
    fn messages(wire: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut b = wire;
        while !b.is_empty() {
            let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            out.push((b[0], b[5..1 + len].to_vec()));
            b = &b[1 + len..];
        }
        out
    }

    /// Feed `wire` as the session would; the answer's message tags (with each ReadyForQuery's
    /// status and each error's SQLSTATE spelled out) and the step of the last message.
    fn feed(state: &mut AfterLoss, wire: &[u8]) -> (String, Step) {
        let mut out = BytesMut::new();
        let mut last = Step::Consumed;
        for (tag, body) in messages(wire) {
            last = state.on_message(tag, None, None, &mut out);
            if last == Step::NeedBody {
                last = state.on_message(tag, Some(&body), None, &mut out);
                assert_eq!(last, Step::Consumed);
            }
            if last == Step::HandOff {
                break;
            }
        }
        (describe(&out), last)
    }

    fn describe(mut b: &[u8]) -> String {
        let mut s = String::new();
        while !b.is_empty() {
            let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            let body = &b[5..1 + len];
            s.push(b[0] as char);
            match b[0] {
                b'Z' => s.push_str(&format!("({})", body[0] as char)),
                b'E' => {
                    let code = body
                        .split(|c| *c == 0)
                        .find_map(|f| f.strip_prefix(b"C"))
                        .unwrap();
                    s.push_str(&format!("({})", String::from_utf8_lossy(code)));
                }
                b'C' => s.push_str(&format!("({})", String::from_utf8_lossy(&body[..len - 5]))),
                _ => {}
            }
            s.push(' ');
            b = &b[1 + len..];
        }
        s.trim_end().to_string()
    }

    fn q(sql: &str) -> Vec<u8> {
        let mut b = BytesMut::new();
        encode_query(sql, &mut b);
        b.to_vec()
    }

    fn ext(sql: &str, sync: bool) -> Vec<u8> {
        let mut b = BytesMut::new();
        encode_parse("", sql, &[], &mut b);
        encode_bind_text("", "", &[], &mut b);
        encode_execute("", 0, &mut b);
        if sync {
            b.extend_from_slice(&[b'S', 0, 0, 0, 4]);
        }
        b.to_vec()
    }

    const SYNC: &[u8] = &[b'S', 0, 0, 0, 4];

    #[test]
    fn a_failed_block_answers_like_postgresql_until_it_ends() {
        // (statement, answer, still in the failed block)
        let table: &[(&str, &str, bool)] = &[
            ("SELECT 1", "E(25P02) Z(E)", true),
            ("SAVEPOINT a; SELECT 1", "E(25P02) Z(E)", true),
            ("", "I Z(E)", true),
            ("ROLLBACK TO SAVEPOINT a", "E(3B001) Z(E)", true),
            ("COMMIT AND CHAIN", "E(0A000) Z(E)", true),
            ("ROLLBACK; SELECT 1", "E(25P02) Z(E)", true),
            ("rollback", "C(ROLLBACK) Z(I)", false),
            ("ABORT", "C(ROLLBACK) Z(I)", false),
            ("COMMIT", "C(ROLLBACK) Z(I)", false),
            ("END WORK;", "C(ROLLBACK) Z(I)", false),
            ("PREPARE TRANSACTION 'x'", "C(ROLLBACK) Z(I)", false),
        ];
        for (sql, want, failed) in table {
            let mut st = AfterLoss::new(true);
            let (got, step) = feed(&mut st, &q(sql));
            assert_eq!((got.as_str(), step), (*want, Step::Consumed), "{sql:?}");
            assert_eq!(st.in_failed_tx(), *failed, "{sql:?}");
            assert_eq!(st.is_done(), !failed, "{sql:?}");
        }
    }

    #[test]
    fn the_loss_itself_is_told_at_the_next_statement_when_nothing_ran() {
        let lost = ClientNotice::new("08006", "lost");
        let mut st = AfterLoss::new(true);
        st.tell_next(lost.clone());
        assert_eq!(feed(&mut st, &q("SELECT 1")).0, "E(08006) Z(E)");
        assert_eq!(feed(&mut st, &q("SELECT 1")).0, "E(25P02) Z(E)");
        // A COMMIT is not told a quiet ROLLBACK tag for a transaction it never heard was lost.
        let mut st = AfterLoss::new(true);
        st.tell_next(lost.clone());
        assert_eq!(feed(&mut st, &q("COMMIT")).0, "E(08006) Z(I)");
        assert!(st.is_done());
        // ROLLBACK is what happened anyway.
        let mut st = AfterLoss::new(true);
        st.tell_next(lost);
        assert_eq!(feed(&mut st, &q("ROLLBACK")).0, "C(ROLLBACK) Z(I)");
    }

    #[test]
    fn extended_batches_fail_to_their_sync_and_rollback_runs_through() {
        let mut st = AfterLoss::new(true);
        assert_eq!(feed(&mut st, &ext("SELECT 1", true)).0, "E(25P02) Z(E)");
        let (got, _) = feed(&mut st, &ext("ROLLBACK", true));
        assert_eq!(got, "1 2 C(ROLLBACK) Z(I)");
        assert!(st.is_done());
        // COMMIT by the extended protocol, then more in the same batch: those go to a server.
        let mut st = AfterLoss::new(true);
        let wire = [ext("COMMIT", false), ext("SELECT 2", true)].concat();
        let (got, step) = feed(&mut st, &wire);
        assert_eq!((got.as_str(), step), ("1 2 C(ROLLBACK)", Step::HandOff));
        assert!(st.is_done());
        // The error of a batch that was running when the server was lost: skip to its Sync.
        let mut st = AfterLoss::new(false);
        st.skip_to_sync();
        assert!(!st.is_done());
        assert_eq!(feed(&mut st, &ext("SELECT 3", false)).0, "");
        assert_eq!(feed(&mut st, SYNC).0, "Z(I)");
        assert!(st.is_done());
        assert_eq!(feed(&mut st, &q("SELECT 4")).1, Step::HandOff);
    }

    #[test]
    fn copy_data_is_dropped_until_the_copy_ends() {
        let mut st = AfterLoss::new(false);
        st.drain_copy();
        let data = [b'd', 0, 0, 0, 6, b'1', b'\n'];
        assert_eq!(
            feed(&mut st, &[data, data].concat()),
            (String::new(), Step::Consumed)
        );
        assert!(!st.is_done());
        assert_eq!(feed(&mut st, &[b'c', 0, 0, 0, 4]).0, "");
        assert!(st.is_done());
    }

    #[test]
    fn named_statements_parsed_in_the_failed_block_are_kept_for_the_next_server() {
        use crate::prepared::{ClientStatements, StatementRegistry};
        let registry = StatementRegistry::default();
        let mut client = ClientStatements::default();
        let mut named = Prepared {
            registry: &registry,
            client: &mut client,
            max_per_server: 10,
        };
        let mut st = AfterLoss::new(true);
        let mut wire = BytesMut::new();
        encode_parse("rb", "ROLLBACK", &[], &mut wire);
        encode_bind_text("", "rb", &[], &mut wire);
        encode_execute("", 0, &mut wire);
        wire.extend_from_slice(SYNC);
        let mut out = BytesMut::new();
        for (tag, body) in messages(&wire) {
            if st.on_message(tag, None, Some(&mut named), &mut out) == Step::NeedBody {
                st.on_message(tag, Some(&body), Some(&mut named), &mut out);
            }
        }
        assert_eq!(describe(&out), "1 2 C(ROLLBACK) Z(I)");
        assert!(client.contains("rb"));
    }
}
