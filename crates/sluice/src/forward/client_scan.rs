//! Client -> server scanning: count the requests the server will answer, stop at Terminate, and
//! (when rewriting) turn named prepared statements into the pooler's server-side statements.

use bytes::{Buf, BufMut};
use sluice_config::PoolMode;
use sluice_protocol::{
    decode_bind_params, decode_describe_or_close, decode_parse, encode_close, encode_describe,
    encode_error, encode_ready_for_query, frontend_tag, peek_header, Severity, TransactionStatus,
};

use super::core::{client_violation, RelayCore};
use super::expect::{Action, Expect};
use super::protocol_state::{BatchEvent, CopyEvent};
use super::refuse::{missing, BadName, Refusal, INVALID_SQL_STATEMENT_NAME};
use super::RelayEnd;
use crate::error::sqlstate;
use crate::prepared::Statement;
use crate::session_state::policy::FEATURE_NOT_SUPPORTED;
use crate::session_state::tracker::Verdict;
use crate::session_state::LexOptions;
use crate::stats::PoolStats;
use std::sync::Arc;

/// A Bind of bound set_config calls is read whole up to this size; a larger one pins the client.
const BOUND_BIND_MAX: usize = 64 * 1024;

/// What happened to one client message.
#[derive(PartialEq, Eq)]
enum Step {
    /// Forward it unchanged.
    PassThrough,
    /// It was consumed from the buffer (rewritten into the injection buffer, or absorbed).
    Consumed,
    /// More bytes, or an empty output, are needed first.
    Wait,
}

impl RelayCore<'_> {
    /// How the server will read the client's SQL: with the client's standard_conforming_strings,
    /// which the server has by the time the SQL runs (its SET may be on the way ahead of the
    /// request: `RelayScratch::send_ahead`), or the server's when the client has none.
    fn lex_options(&self) -> LexOptions {
        const SCS: &str = "standard_conforming_strings";
        let scs = self
            .client_params
            .get(SCS)
            .or_else(|| self.server.params.get(SCS));
        LexOptions {
            standard_conforming_strings: scs != Some("off"),
        }
    }

    /// Whether the protocol defines `tag` in the current phase: while the server is in COPY FROM
    /// STDIN only the COPY messages, Flush and Sync; otherwise every post-login message.
    fn defined_here(&self, tag: u8) -> bool {
        if self.copy.is_in() {
            frontend_tag::is_defined_in_copy_in(tag)
        } else {
            frontend_tag::is_defined_after_login(tag)
        }
    }

    pub(super) fn scan_client(&mut self) -> Result<(), RelayEnd> {
        loop {
            let len = self.client.rbuf.len();
            if self.c.remaining > 0 {
                if self.c.ready >= len {
                    return Ok(());
                }
                let take = self.c.remaining.min(len - self.c.ready);
                self.c.ready += take;
                self.c.remaining -= take;
                continue;
            }
            if self.client_done || self.c.ready >= len {
                return Ok(());
            }
            let header = match peek_header(&self.client.rbuf[self.c.ready..], self.max_packet) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(()),
                Err(e) => {
                    return Err(client_violation(
                        sqlstate::PROTOCOL_VIOLATION,
                        format!("bad packet header: {e}"),
                    ))
                }
            };
            let tag = header.tag;
            let total = header.total_len();
            let avail = len - self.c.ready;
            if tag == frontend_tag::TERMINATE {
                self.client_done = true;
                return Ok(());
            }
            if tag == frontend_tag::QUERY && self.refuse_simple_query {
                // disable_pqexec: PgBouncer's words; never forwarded.
                return Err(RelayEnd::Fatal {
                    notice: crate::error::ClientNotice::new(
                        sqlstate::PROTOCOL_VIOLATION,
                        "PQexec disallowed",
                    ),
                    server_clean: self.server_clean(),
                });
            }
            if !self.defined_here(tag) {
                // Never forwarded: the server stays clean if nothing else is owed or half-sent.
                return Err(RelayEnd::Fatal {
                    notice: crate::error::ClientNotice::new(
                        sqlstate::PROTOCOL_VIOLATION,
                        frontend_tag::undefined_message(tag),
                    ),
                    server_clean: self.server_clean(),
                });
            }
            if header.len > super::request_len_limit(tag, self.prepared.is_some()) {
                // PostgreSQL would hang up without a word, holding the client until it gives up.
                return Err(RelayEnd::Fatal {
                    notice: crate::error::ClientNotice::new(
                        sqlstate::PROTOCOL_VIOLATION,
                        frontend_tag::oversized_message(tag, header.len),
                    ),
                    server_clean: self.server_clean(),
                });
            }
            if self.tracker.is_some()
                && !self.c_observed
                && matches!(tag, frontend_tag::QUERY | frontend_tag::PARSE)
            {
                match self.observe_session_state(tag, total, avail)? {
                    Step::Wait => return Ok(()),
                    Step::Consumed => {
                        self.c.need = 0;
                        continue;
                    }
                    Step::PassThrough => {}
                }
            }
            if tag == frontend_tag::BIND
                && !self.c_observed
                && self.tracker.as_ref().is_some_and(|t| t.binds_unnamed())
                && self.observe_unnamed_bind(total, avail) == Step::Wait
            {
                return Ok(());
            }
            let rewrite = self.prepared.is_some()
                && matches!(
                    tag,
                    frontend_tag::PARSE
                        | frontend_tag::BIND
                        | frontend_tag::DESCRIBE
                        | frontend_tag::CLOSE
                );
            if rewrite {
                match self.rewrite(tag, total, avail)? {
                    Step::Wait => return Ok(()),
                    Step::Consumed => {
                        self.note_sent(tag);
                        self.c.need = 0;
                        self.c_observed = false;
                        continue;
                    }
                    Step::PassThrough => {}
                }
            }
            self.track_request(tag);
            let take = total.min(avail);
            self.c.ready += take;
            self.c.remaining = total - take;
            self.c.need = 0;
            self.c_observed = false;
        }
    }

    /// A Bind while the unnamed statement is bound set_config calls: the tracker reads the
    /// values of a Bind to it (`SessionTracker::bind_unnamed`). Waits for the whole message,
    /// unless it is larger than anything such a call needs (the client is then pinned).
    fn observe_unnamed_bind(&mut self, total: usize, avail: usize) -> Step {
        let start = self.c.ready;
        if avail < total && total <= BOUND_BIND_MAX {
            self.c.need = start + total;
            return Step::Wait;
        }
        let request = self.request_number();
        let bind = (avail >= total)
            .then(|| decode_bind_params(&self.client.rbuf[start + 5..start + total]).ok())
            .flatten();
        if let Some(t) = self.tracker.as_deref_mut() {
            match &bind {
                Some(b) if !b.statement.is_empty() => {} // a named statement: read at `rewrite_bind`
                Some(b) => t.bind_unnamed(Some(b), request),
                // Too large to read, or malformed (the server refuses that one).
                None if avail < total => t.bind_unnamed(None, request),
                None => {}
            }
        }
        self.c_observed = true;
        Step::PassThrough
    }

    /// Show a Query's or Parse's SQL to the session tracker; a refused Query is answered here
    /// with 0A000 and never reaches the server.
    fn observe_session_state(
        &mut self,
        tag: u8,
        total: usize,
        avail: usize,
    ) -> Result<Step, RelayEnd> {
        let start = self.c.ready;
        if avail < total {
            self.c.need = start + total;
            return Ok(Step::Wait);
        }
        let body = &self.client.rbuf[start + 5..start + total];
        if tag == frontend_tag::PARSE && self.prepared.is_some() && body.first() != Some(&0) {
            // A named statement acts when it runs: the tracker sees it at each Bind.
            return Ok(Step::PassThrough);
        }
        // The text ends at its NUL (`memchr`: a byte-by-byte split cost ~4 instructions a byte).
        let until_nul = |s: &'_ [u8]| -> usize { memchr::memchr(0, s).unwrap_or(s.len()) };
        let sql = if tag == frontend_tag::QUERY {
            &body[..until_nul(body)]
        } else {
            // Parse: the statement name, its NUL, then the text.
            let after_name = (until_nul(body) + 1).min(body.len());
            let rest = &body[after_name..];
            &rest[..until_nul(rest)]
        };
        let opts = self.lex_options();
        // A Parse runs later (at Execute) and cannot be refused cleanly here: it pins instead.
        let may_pin = self.may_pin || tag == frontend_tag::PARSE;
        let request = self.request_number();
        let Some(tracker) = self.tracker.as_deref_mut() else {
            return Ok(Step::PassThrough);
        };
        let verdict = if tag == frontend_tag::QUERY || body.first() == Some(&0) {
            // A Query or an unnamed Parse replaces the unnamed statement.
            let parse = (tag == frontend_tag::PARSE).then_some(body);
            tracker.observe_unnamed(sql, opts, may_pin, request, parse)
        } else {
            tracker.observe_in(sql, opts, may_pin, request)
        };
        self.c_observed = true;
        if *self.server.status != TransactionStatus::Idle && !matches!(verdict, Verdict::Refuse(_))
        {
            // Inside a transaction block: whether this text ends it (read if the server is lost).
            self.outstanding
                .merge(crate::session_state::transaction_ending_with(sql, opts));
        }
        if verdict == Verdict::SequenceRead {
            self.discard_sequences_ahead();
        }
        let Verdict::Refuse(feature) = verdict else {
            return Ok(Step::PassThrough);
        };
        self.c_observed = false;
        // The error must come after every reply still owed: wait until nothing is in flight.
        if start > 0
            || self.pending_rfq > 0
            || !self.scratch.expect.is_empty()
            || self.s.ready > 0
            || self.s.remaining > 0
        {
            return Ok(Step::Wait);
        }
        self.client.rbuf.advance(total);
        encode_error(
            Severity::Error,
            FEATURE_NOT_SUPPORTED,
            &format!(
                "{} is not supported in {} pooling mode",
                feature.describe(),
                if self.mode == PoolMode::Statement {
                    "statement"
                } else {
                    "transaction"
                }
            ),
            None,
            Some(
                "Use a session-mode pool for this client, or let session state pin clients: \
                 pin_session_state = 1 and max_pinned_clients in [sluice].",
            ),
            &mut self.scratch.s_inject,
        );
        encode_ready_for_query(*self.server.status, &mut self.scratch.s_inject);
        Ok(Step::Consumed)
    }

    /// Account for a request that goes to the server unchanged.
    fn track_request(&mut self, tag: u8) {
        self.note_sent(tag);
        let expect = match tag {
            frontend_tag::QUERY | frontend_tag::FUNCTION_CALL => {
                self.scratch.ran = true;
                self.pending_rfq += 1;
                self.copy = self.copy.next(CopyEvent::Command { extended: false }).0;
                Expect::UntilReady
            }
            frontend_tag::SYNC if self.copy.is_in() => return, // ignored by the server in COPY IN
            frontend_tag::SYNC => {
                self.pending_rfq += 1;
                self.batch = self.batch.next(BatchEvent::Sync);
                self.copy = self.copy.next(CopyEvent::Sync).0;
                Expect::Sync
            }
            frontend_tag::COPY_DONE | frontend_tag::COPY_FAIL => {
                self.copy = self.copy.next(CopyEvent::ClientEnded).0;
                return;
            }
            frontend_tag::EXECUTE => {
                self.scratch.ran = true;
                self.copy = self.copy.next(CopyEvent::Command { extended: true }).0;
                Expect::Execute
            }
            // Unnamed statements, and every statement when the pooler does not rewrite them,
            // are not counted: SHOW STATS' parse and bind counts are those of the statements the
            // pooler manages (`rewrite`), as PgBouncer's are.
            frontend_tag::PARSE => Expect::Parse {
                action: Action::Forward,
                client_name: None,
                cached: None,
            },
            frontend_tag::BIND => Expect::Bind,
            frontend_tag::DESCRIBE => Expect::Describe,
            frontend_tag::CLOSE => Expect::Close {
                action: Action::Forward,
            },
            _ => return,
        };
        if expect.is_extended() {
            self.batch = self.batch.next(BatchEvent::Extended);
        }
        self.mark_query_start();
        self.push(expect);
    }

    /// Queue the reply a request will get. After an error the server ignores extended messages
    /// until Sync, so those get no entry.
    pub(super) fn push(&mut self, e: Expect) {
        if self.prepared.is_none() {
            return;
        }
        // (A Sync ended the skipping before its entry comes here: `BatchEvent::Sync`.)
        if self.batch.skipping() && e.is_extended() {
            return;
        }
        self.scratch.expect.push_back(e);
    }

    /// Parse/Bind/Describe/Close while rewriting prepared statements.
    fn rewrite(&mut self, tag: u8, total: usize, avail: usize) -> Result<Step, RelayEnd> {
        let start = self.c.ready;
        if tag == frontend_tag::BIND {
            return self.rewrite_bind(total, avail);
        }
        // Unnamed statements pass through without decoding: Parse starts with the statement name,
        // Describe/Close with the kind byte then the name, so an empty name is visible up front.
        let name_at = if tag == frontend_tag::PARSE { 5 } else { 6 };
        let head = &self.client.rbuf[start..start + avail.min(total)];
        if tag != frontend_tag::PARSE && head.get(5).is_some_and(|k| *k == b'P') {
            return self.pass_through_unchanged(tag, total);
        }
        if head.get(name_at) == Some(&0) {
            return self.pass_through_unchanged(tag, total);
        }
        // Named: Parse, Describe and Close are inspected whole.
        if avail < total {
            self.c.need = start + total;
            return Ok(Step::Wait);
        }
        let body = &self.client.rbuf[start + 5..start + total];
        let malformed = |what: &str| {
            client_violation(
                sqlstate::PROTOCOL_VIOLATION,
                format!("malformed {what} message"),
            )
        };
        match tag {
            frontend_tag::PARSE => {
                let view = decode_parse(body).map_err(|_| malformed("Parse"))?;
                if view.name.is_empty() {
                    return Ok(Step::PassThrough);
                }
                if start > 0 {
                    return Ok(Step::Wait);
                }
                let Some(prep) = self.prepared.as_mut() else {
                    return Ok(Step::PassThrough);
                };
                if prep.client.contains(view.name) {
                    let bad = BadName::InUse(view.name.to_string());
                    return Ok(self.refuse_in_batch(total, avail, bad).into());
                }
                let name = view.name.to_string();
                let stmt = prep.registry.intern(view.query, &view.param_types);
                PoolStats::add(&self.stats.client_parse_count, 1);
                self.client.rbuf.advance(total);
                self.batch = self.batch.next(BatchEvent::Extended);
                self.mark_query_start();
                let Some(prep) = self.prepared.as_mut() else {
                    return Ok(Step::Consumed);
                };
                if self.batch.skipping() {
                    // The server would skip this Parse: the statement is not created.
                    return Ok(Step::Consumed);
                }
                prep.client.insert(&name, stmt.clone());
                if self.server.prepared.touch(stmt.id) {
                    self.push(Expect::Parse {
                        action: Action::Fake,
                        client_name: Some(name),
                        cached: None,
                    });
                } else {
                    self.send_prepare(&stmt, Some(name));
                }
                Ok(Step::Consumed)
            }
            frontend_tag::DESCRIBE | frontend_tag::CLOSE => {
                let (kind, name) =
                    decode_describe_or_close(body).map_err(|_| malformed("Describe/Close"))?;
                if kind != b'S' || name.is_empty() {
                    return self.pass_through_unchanged(tag, total);
                }
                if start > 0 {
                    return Ok(Step::Wait);
                }
                let name = name.to_string();
                if tag == frontend_tag::DESCRIBE && !self.has_client_statement(&name) {
                    let bad = BadName::Missing(name);
                    return Ok(self.refuse_in_batch(total, avail, bad).into());
                }
                self.client.rbuf.advance(total);
                self.batch = self.batch.next(BatchEvent::Extended);
                self.mark_query_start();
                let Some(prep) = self.prepared.as_mut() else {
                    return Ok(Step::Consumed);
                };
                if tag == frontend_tag::CLOSE {
                    // The server copy stays cached for other clients; the client forgets its name.
                    prep.client.remove(&name);
                    self.push(Expect::Close {
                        action: Action::Fake,
                    });
                    return Ok(Step::Consumed);
                }
                let stmt = self.client_statement(&name)?;
                self.ensure_prepared(&stmt);
                encode_describe(b'S', &stmt.server_name, &mut self.scratch.c_inject);
                self.push(Expect::Describe);
                Ok(Step::Consumed)
            }
            _ => Ok(Step::PassThrough),
        }
    }

    /// A Parse/Describe/Close that goes to the server as the client sent it: held to PostgreSQL's
    /// length limit, which `request_len_limit` relaxed for the Describe/Close the pooler rewrites.
    fn pass_through_unchanged(&self, tag: u8, total: usize) -> Result<Step, RelayEnd> {
        let len = u32::try_from(total - 1).unwrap_or(u32::MAX);
        if len > frontend_tag::max_len(tag) {
            return Err(RelayEnd::Fatal {
                notice: crate::error::ClientNotice::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    frontend_tag::oversized_message(tag, len),
                ),
                server_clean: self.server_clean(),
            });
        }
        Ok(Step::PassThrough)
    }

    /// Bind names its statement near the start; only that head is rewritten, the parameters stream.
    fn rewrite_bind(&mut self, total: usize, avail: usize) -> Result<Step, RelayEnd> {
        let start = self.c.ready;
        let visible = &self.client.rbuf[start + 5.min(avail)..start + total.min(avail)];
        let mut nuls = visible
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == 0)
            .map(|(i, _)| i);
        let (Some(portal_end), Some(stmt_end)) = (nuls.next(), nuls.next()) else {
            if avail < total {
                self.c.need = start + total.min(avail + 4096);
                return Ok(Step::Wait);
            }
            return Err(client_violation(
                sqlstate::PROTOCOL_VIOLATION,
                "malformed Bind message".into(),
            ));
        };
        if stmt_end == portal_end + 1 {
            return Ok(Step::PassThrough); // unnamed statement
        }
        if start > 0 {
            return Ok(Step::Wait);
        }
        // The name is looked up where it lies and the portal copied from there below: no
        // allocation per Bind.
        let name_bytes = &visible[portal_end + 1..stmt_end];
        let name_len = name_bytes.len();
        let found = std::str::from_utf8(name_bytes)
            .ok()
            .and_then(|name| self.prepared.as_ref()?.client.get(name).cloned());
        let Some(stmt) = found else {
            let bad = BadName::Missing(String::from_utf8_lossy(name_bytes).into_owned());
            return Ok(self.refuse_in_batch(total, avail, bad).into());
        };
        let ends = stmt.ends_transaction.ends;
        if (stmt.affects_session || ends) && self.tracker.is_some() {
            if stmt.bound_sets.is_some() && avail < total && total <= BOUND_BIND_MAX {
                // Its values say what it sets: the whole message first.
                self.c.need = start + total;
                return Ok(Step::Wait);
            }
            let opts = self.lex_options();
            let request = self.request_number();
            let bind = match &stmt.bound_sets {
                Some(_) if avail >= total => {
                    decode_bind_params(&self.client.rbuf[start + 5..start + total]).ok()
                }
                _ => None,
            };
            let mut reads_sequences = false;
            if let Some(t) = self.tracker.as_deref_mut() {
                // A COMMIT or ROLLBACK matters only to changes pending (it settles them).
                if stmt.affects_session || t.has_pending() {
                    // Refusing mid-batch is not possible here: session state from a named
                    // statement pins.
                    let verdict = t.observe_bind(
                        stmt.query().as_bytes(),
                        stmt.bound_sets.as_ref(),
                        bind.as_ref(),
                        stmt.param_types(),
                        opts,
                        request,
                    );
                    reads_sequences = verdict == Verdict::SequenceRead;
                }
            }
            if reads_sequences {
                self.discard_sequences_ahead();
            }
        }
        if *self.server.status != TransactionStatus::Idle {
            self.outstanding.merge(stmt.ends_transaction);
        }
        self.ensure_prepared(&stmt);
        let head_len = 5 + stmt_end + 1;
        let new_len = total - 1 - name_len + stmt.server_name.len();
        let portal = &self.client.rbuf[start + 5..start + 5 + portal_end];
        let out = &mut self.scratch.c_inject;
        out.put_u8(frontend_tag::BIND);
        out.put_u32(new_len as u32);
        out.put_slice(portal);
        out.put_u8(0);
        out.put_slice(stmt.server_name.as_bytes());
        out.put_u8(0);
        self.client.rbuf.advance(head_len);
        self.c.remaining = total - head_len;
        self.batch = self.batch.next(BatchEvent::Extended);
        self.mark_query_start();
        PoolStats::add(&self.stats.bind_count, 1);
        self.push(Expect::Bind);
        Ok(Step::Consumed)
    }

    fn has_client_statement(&self, name: &str) -> bool {
        self.prepared
            .as_ref()
            .is_some_and(|p| p.client.get(name).is_some())
    }

    fn client_statement(&self, name: &str) -> Result<Arc<Statement>, RelayEnd> {
        self.prepared
            .as_ref()
            .and_then(|p| p.client.get(name).cloned())
            .ok_or_else(|| no_such_statement(name))
    }

    /// Make sure the linked server has `stmt` prepared, injecting a Parse whose reply is dropped.
    fn ensure_prepared(&mut self, stmt: &Arc<Statement>) {
        if !self.server.prepared.touch(stmt.id) {
            self.send_prepare(stmt, None);
        }
    }

    /// Send the statement's Parse (for the client, or injected), closing what the LRU evicts.
    fn send_prepare(&mut self, stmt: &Arc<Statement>, client_name: Option<String>) {
        if self.batch.skipping() {
            return;
        }
        let max = self.prepared.as_ref().map_or(1, |p| p.max_per_server);
        let evicted = self.server.prepared.insert(stmt.clone(), max);
        if !evicted.is_empty() {
            // The worker's own copy of the pool's counters: no shared cache line.
            PoolStats::add(&self.stats.prepared_evictions, evicted.len() as u64);
        }
        for old in evicted {
            encode_close(b'S', &old.server_name, &mut self.scratch.c_inject);
            self.push(Expect::Close {
                action: Action::Skip,
            });
        }
        self.scratch.c_inject.extend_from_slice(&stmt.parse_message);
        PoolStats::add(&self.stats.server_parse_count, 1);
        let action = if client_name.is_some() {
            Action::Forward
        } else {
            Action::Skip
        };
        self.push(Expect::Parse {
            action,
            client_name,
            cached: Some(stmt.id),
        });
    }
}

fn no_such_statement(name: &str) -> RelayEnd {
    client_violation(INVALID_SQL_STATEMENT_NAME, missing(name))
}

impl From<Refusal> for Step {
    fn from(r: Refusal) -> Step {
        match r {
            Refusal::Wait => Step::Wait,
            Refusal::Consumed => Step::Consumed,
        }
    }
}
