//! The relay's protocol state, without IO: the bytes read from each side go into its buffer, the
//! scanners (`client_scan.rs`, `server_scan.rs`) decide what may be written and what the server
//! still owes, and the IO shell (`Relay` in mod.rs) writes `to_server`/`to_client`, reports what
//! it wrote, reads more, and asks `outcome` whether the relay is over. Unit-tested over recorded
//! message streams (`core_tests.rs`) and fuzzed (`fuzz/fuzz_targets/relay.rs`) with no socket.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use sluice_config::PoolMode;
use sluice_protocol::{encode_query, CancelKey, TransactionStatus};
use tokio::time::Instant;

use super::protocol_state::{is_command, Batch, Command, CommandEvent, CopyState};
use super::{Prepared, RelayEnd, RelayScratch};
use crate::cancel::CancelSlot;
use crate::client::registry::ClientEntry;
use crate::error::{sqlstate, ClientNotice};
use crate::pool::RelayTimeouts;
use crate::prepared::ServerStatements;
use crate::server::params::{ParamMap, TrackedSet};
use crate::server::{ServerAddr, ServerConn};
use crate::session_state::tracker::SessionTracker;
use crate::session_state::TxEnding;
use crate::stats::PoolStats;

/// Largest server message buffered whole to inspect (ReadyForQuery, ParameterStatus, CommandComplete).
pub(super) const INSPECT_MAX: usize = 32 * 1024;

/// The client's side as the protocol state sees it: the bytes read from it.
pub struct ClientSide<'a> {
    pub rbuf: &'a mut BytesMut,
}

/// The server's side as the protocol state sees it: the bytes read from it and what the relay
/// keeps up to date on the connection (its transaction status, reported parameters, prepared
/// statements) or needs to link a cancel to it.
pub struct ServerSide<'a> {
    pub rbuf: &'a mut BytesMut,
    pub status: &'a mut TransactionStatus,
    pub params: &'a mut ParamMap,
    pub prepared: &'a mut ServerStatements,
    pub addr: &'a Arc<ServerAddr>,
    pub backend_key: CancelKey,
}

impl<'a> ServerSide<'a> {
    /// The protocol fields of a server connection (its stream stays with the caller).
    pub fn of(server: &'a mut ServerConn) -> (Self, &'a mut crate::net::Stream) {
        let ServerConn {
            stream,
            rbuf,
            params,
            backend_key,
            addr,
            status,
            prepared,
            ..
        } = server;
        (
            ServerSide {
                rbuf,
                status,
                params,
                prepared,
                addr,
                backend_key: *backend_key,
            },
            stream,
        )
    }
}

/// The session's parts a relay reads and updates.
pub struct SessionParts<'a> {
    /// The client's parameters (tracked ParameterStatus values are copied here).
    pub client_params: &'a mut ParamMap,
    pub tracked: &'a TrackedSet,
    pub stats: &'a PoolStats,
    /// Prepared-statement rewriting (transaction/statement mode with max_prepared_statements).
    pub prepared: Option<Prepared<'a>>,
    /// Session-state tracking (transaction/statement mode) and whether it may pin the client.
    pub tracking: Option<(&'a mut SessionTracker, bool)>,
    /// Buffers kept between relays (see `RelayScratch`).
    pub scratch: &'a mut RelayScratch,
    /// The client's SHOW CLIENTS entry, told when its queries start and are answered
    /// (`ClientEntry::query_sent`), and whether the relay's first query is the request whose
    /// arrival the entry already stamped.
    pub shown: Option<(&'a ClientEntry, bool)>,
}

/// What a relay reads from its pool's settings.
#[derive(Clone, Copy)]
pub struct RelayRules<'a> {
    pub mode: PoolMode,
    pub max_packet: usize,
    /// The pool's (its settings outlive the relay): a reference keeps the relay, which is
    /// written afresh per transaction, a cache line smaller.
    pub timeouts: &'a RelayTimeouts,
    /// disable_pqexec: a simple Query ends the client, never forwarded.
    pub refuse_simple_query: bool,
    /// tcp_socket_buffer (0: not set): the most bytes one write to a TCP socket carries
    /// (`Stream::poll_write_pair_capped`); the IO shell's, not the core's.
    pub write_cap: u32,
}

/// Per-direction scan position: `ready` bytes at the front of the buffer are inspected and may be
/// written; `remaining` bytes of a message being streamed through have not arrived yet; `need` is
/// how many bytes the scanner waits for to inspect a message whole (lifts the read cap).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Scan {
    pub ready: usize,
    pub remaining: usize,
    pub need: usize,
}

/// `n` bytes of `inject` and then of the ready prefix of `rbuf` (`scan`) were written.
fn wrote(n: usize, inject: &mut BytesMut, rbuf: &mut BytesMut, scan: &mut Scan) {
    let injected = n.min(inject.len());
    inject.advance(injected);
    let rest = n - injected;
    if rest > 0 {
        rbuf.advance(rest);
        scan.ready -= rest;
        scan.need = scan.need.saturating_sub(rest);
    }
}

/// The relay's timeouts, each with the SQLSTATE and text (PgBouncer's) the client is closed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    Query,
    IdleTransaction,
    Transaction,
    ClientIdle,
}

impl Timeout {
    /// 08P01 for each, as PgBouncer 1.25 (`tests/tests/parity/error_texts.rs`).
    pub fn sqlstate(self) -> &'static str {
        sqlstate::PROTOCOL_VIOLATION
    }

    /// The timeout whose `text` ends a transaction (`Query`, `IdleTransaction`, `Transaction`)
    /// that is `message`: a server closed for one is logged with its words, as PgBouncer does.
    pub fn of_text(message: &str) -> Option<Timeout> {
        [
            Timeout::Query,
            Timeout::IdleTransaction,
            Timeout::Transaction,
        ]
        .into_iter()
        .find(|t| t.text() == message)
    }

    pub fn text(self) -> &'static str {
        match self {
            Timeout::Query => "query timeout",
            Timeout::IdleTransaction => "idle transaction timeout",
            Timeout::Transaction => "transaction timeout",
            Timeout::ClientIdle => "client_idle_timeout",
        }
    }
}

/// The protocol state of one relay (one transaction in transaction mode).
pub struct RelayCore<'a> {
    pub(super) client: ClientSide<'a>,
    pub(super) server: ServerSide<'a>,
    pub(super) client_params: &'a mut ParamMap,
    pub(super) tracked: &'a TrackedSet,
    pub(super) stats: &'a PoolStats,
    pub(super) prepared: Option<Prepared<'a>>,
    /// Session-state tracking (transaction/statement mode).
    pub(super) tracker: Option<&'a mut SessionTracker>,
    /// Whether the policy lets session state pin a client (else such statements are refused).
    pub(super) may_pin: bool,
    /// The current client message was already shown to the tracker (scans may pause and resume).
    pub(super) c_observed: bool,
    pub(super) mode: PoolMode,
    pub(super) max_packet: usize,
    /// disable_pqexec (`RelayRules::refuse_simple_query`).
    pub(super) refuse_simple_query: bool,
    timeouts: &'a RelayTimeouts,
    pub(super) c: Scan,
    pub(super) s: Scan,
    /// ReadyForQuery messages the server still owes (one per Query, Sync, FunctionCall, and one
    /// for a query sent ahead: `RelayScratch::send_ahead`).
    pub(super) pending_rfq: u32,
    /// ReadyForQuery messages received (and Syncs a COPY IN swallowed): with `pending_rfq`, the
    /// number of requests sent, which numbers the request a tracked statement goes in
    /// (`SessionTracker::observe_in`).
    pub(super) answered: u64,
    /// What the requests still unanswered may have done to the transaction (transaction and
    /// statement mode): a command sent outside a transaction block may have committed; inside
    /// one, its text says (`session_state::transaction_ending_with`). Read only when the server
    /// is lost (`lost.rs`); cleared once nothing is owed.
    pub(super) outstanding: TxEnding,
    /// The protocol's phases, each a small state machine (`protocol_state.rs`): the extended
    /// batch (open until Sync, skipped by the server after an error), COPY FROM STDIN (the
    /// Syncs a client sends into one are ignored), and the commands in flight (with messages
    /// pipelined behind a COPY, the ReadyForQuery count is not trusted).
    pub(super) batch: Batch,
    pub(super) copy: CopyState,
    pub(super) command: Command,
    pub(super) client_done: bool,
    /// This wake-up's clock reading, taken at its first use and forgotten when the relay waits
    /// again (`forget_clock`): query start, ReadyForQuery statistics, activity and the release
    /// that follows share one read (a clock read is ~17 ns on the bench's VM; a transaction had
    /// nine). The first wake-up's is the caller's: when the server was linked.
    clock: Option<Instant>,
    query_started: Option<Instant>,
    xact_started: Option<Instant>,
    last_activity: Instant,
    /// An idle timeout applies, so reads must note when the client was last active.
    track_activity: bool,
    /// Where the reusable buffers go back when the relay ends.
    pub(super) scratch: &'a mut RelayScratch,
    /// The client's cancel slot, to link to the server once the replies to a query sent ahead
    /// are in (`link_cancel_after_lead`).
    pub(super) cancel_after_lead: Option<&'a CancelSlot>,
    /// See `SessionParts::shown`.
    pub(super) shown: Option<(&'a ClientEntry, bool)>,
}

/// What `discard_sequences_ahead` sends.
const DISCARD_SEQUENCES: &str = "DISCARD SEQUENCES";

impl Drop for RelayCore<'_> {
    fn drop(&mut self) {
        // Whatever is left unsent is discarded with the relay (the server is then not clean).
        self.scratch.c_inject.clear();
        self.scratch.s_inject.clear();
        self.scratch.expect.clear();
        self.scratch.leads = 0;
        self.scratch.foreign_sequences = false;
        self.scratch.last_clock = self.clock;
        if let (Some((entry, _)), Some(_)) = (self.shown, self.query_started) {
            entry.query_answered();
        }
    }
}

impl<'a> RelayCore<'a> {
    pub fn new(
        client: ClientSide<'a>,
        server: ServerSide<'a>,
        parts: SessionParts<'a>,
        rules: RelayRules<'a>,
        now: Instant,
    ) -> Self {
        let (tracker, may_pin) = match parts.tracking {
            Some((t, p)) => {
                t.relay_started();
                (Some(t), p)
            }
            None => (None, true),
        };
        let status = *server.status;
        let timeouts = rules.timeouts;
        // A relay starts with the client's stream at a message boundary (the last one ended
        // there, or the reply to a lost server completed it).
        parts.scratch.s_msg_left = 0;
        parts.scratch.s_inject_cut = false;
        RelayCore {
            client,
            server,
            client_params: parts.client_params,
            tracked: parts.tracked,
            stats: parts.stats,
            prepared: parts.prepared,
            tracker,
            may_pin,
            c_observed: false,
            mode: rules.mode,
            max_packet: rules.max_packet,
            refuse_simple_query: rules.refuse_simple_query,
            timeouts,
            c: Scan::default(),
            s: Scan::default(),
            pending_rfq: parts.scratch.leads,
            answered: 0,
            outstanding: TxEnding::default(),
            batch: Batch::Synced,
            copy: CopyState::START,
            command: Command::Idle,
            client_done: false,
            clock: Some(now),
            query_started: None,
            xact_started: (status != TransactionStatus::Idle).then_some(now),
            last_activity: now,
            track_activity: timeouts.idle_transaction_timeout.is_some()
                || timeouts.client_idle_timeout.is_some(),
            scratch: parts.scratch,
            cancel_after_lead: None,
            shown: parts.shown,
        }
    }

    /// The number of the request the client message being scanned goes in (0 = the relay's first,
    /// a query sent ahead included).
    pub(super) fn request_number(&self) -> u64 {
        self.answered + u64::from(self.pending_rfq)
    }

    /// See `Relay::link_cancel_after_lead`.
    pub fn link_cancel_after_lead(&mut self, slot: &'a CancelSlot) {
        self.cancel_after_lead = Some(slot);
    }

    /// The first look at what is already buffered: the client's request (what made the session
    /// take a server) and whatever a pooler-run query read past its own reply (a notification).
    pub fn start(&mut self) -> Result<(), RelayEnd> {
        self.scan_client()?;
        self.scan_server()?;
        self.drain_fakes();
        Ok(())
    }

    /// The current wake-up's time (see `clock`).
    pub(super) fn now(&mut self) -> Instant {
        *self.clock.get_or_insert_with(Instant::now)
    }

    /// The relay waits for IO: the next wake-up reads the clock afresh.
    pub fn forget_clock(&mut self) {
        self.clock = None;
    }

    /// Bytes for the server: rewritten or injected ones first, then the ready prefix of the
    /// client's (one write).
    pub fn to_server(&self) -> (&[u8], &[u8]) {
        (&self.scratch.c_inject, &self.client.rbuf[..self.c.ready])
    }

    /// Bytes for the client: synthesized ones first, then the ready prefix of the server's.
    pub fn to_client(&self) -> (&[u8], &[u8]) {
        (&self.scratch.s_inject, &self.server.rbuf[..self.s.ready])
    }

    /// `n` bytes of `to_server` were written.
    pub fn wrote_to_server(&mut self, n: usize) {
        // The server has this relay's first bytes: too late to discard its sequence values.
        self.scratch.foreign_sequences = false;
        wrote(n, &mut self.scratch.c_inject, self.client.rbuf, &mut self.c);
    }

    /// A request reads the session's sequence values (`Verdict::SequenceRead`). When they are
    /// another client's (`RelayScratch::sequences_foreign`) and nothing of this relay has reached
    /// the server yet, `DISCARD SEQUENCES` goes ahead of everything the relay has taken: the
    /// read then answers as on a session of the client's own, with its own `nextval()` earlier
    /// in the request, or with PostgreSQL's 55000 ("not yet defined in this session"), never
    /// with another client's value. Rare (once per relay at most): the buffer is rebuilt.
    pub(super) fn discard_sequences_ahead(&mut self) {
        if !std::mem::take(&mut self.scratch.foreign_sequences) {
            return;
        }
        let mut ahead = BytesMut::with_capacity(32 + self.scratch.c_inject.len());
        encode_query(DISCARD_SEQUENCES, &mut ahead);
        ahead.extend_from_slice(&self.scratch.c_inject);
        self.scratch.c_inject = ahead;
        self.scratch.leads += 1;
        self.pending_rfq += 1;
        if let Some(t) = self.tracker.as_deref_mut() {
            t.requests_pushed_back();
        }
        PoolStats::add(&self.stats.sequence_discards, 1);
    }

    /// `n` bytes of `to_client` were written.
    pub fn wrote_to_client(&mut self, n: usize) {
        PoolStats::add(&self.stats.bytes_sent, n as u64);
        // Where the client's stream now stands (`RelayScratch::client_mid_message`). The common
        // write takes all the ready bytes: its end is the last message's, less what has not
        // arrived of it; a shorter one finds its place from the message starts.
        let inject = self.scratch.s_inject.len();
        if n > inject {
            let rest = n - inject;
            self.scratch.s_msg_left = if rest == self.s.ready {
                self.s.remaining
            } else {
                super::next_start(&self.server.rbuf[..], self.scratch.s_msg_left, rest)
            };
            self.scratch.s_inject_cut = false;
        } else if n > 0 {
            self.scratch.s_inject_cut = n < inject;
        }
        wrote(n, &mut self.scratch.s_inject, self.server.rbuf, &mut self.s);
    }

    /// Scan again after writes made room (scans pause where a rewrite or a dropped reply needs
    /// the output drained first).
    pub fn after_writes(&mut self) -> Result<(), RelayEnd> {
        self.scan_client()?;
        self.scan_server()?;
        self.drain_fakes();
        Ok(())
    }

    /// Whether to read from the client now, and the buffer to read into (`read_cap`: stop
    /// reading a side once this many bytes wait, unless a message must be inspected whole).
    pub fn client_wants(&mut self, read_cap: usize) -> Option<&mut BytesMut> {
        (!self.client_done && self.client.rbuf.len() < read_cap.max(self.c.need))
            .then_some(&mut *self.client.rbuf)
    }

    /// Whether to read from the server now, and the buffer to read into.
    pub fn server_wants(&mut self, read_cap: usize) -> Option<&mut BytesMut> {
        (self.server.rbuf.len() < read_cap.max(self.s.need)).then_some(&mut *self.server.rbuf)
    }

    /// `n` bytes were read from the client into its buffer.
    pub fn read_from_client(&mut self, n: usize) -> Result<(), RelayEnd> {
        PoolStats::add(&self.stats.bytes_received, n as u64);
        if self.track_activity {
            self.last_activity = self.now();
        }
        self.scan_client()?;
        self.drain_fakes();
        Ok(())
    }

    /// Bytes were read from the server into its buffer.
    pub fn read_from_server(&mut self) -> Result<(), RelayEnd> {
        self.scan_server()?;
        self.drain_fakes();
        Ok(())
    }

    /// The relay is over when the client is done and all it sent went out, or (transaction and
    /// statement mode) when the server may go back to the pool, or a pinned client's pin may
    /// have been released (checked by the session).
    pub fn outcome(&mut self) -> Option<RelayEnd> {
        if self.client_done && self.c.ready == 0 && self.scratch.c_inject.is_empty() {
            return Some(RelayEnd::ClientGone {
                clean: self.server_clean(),
                eof: false,
            });
        }
        // (server_clean includes `c.need == 0`: a message the scanner must see whole keeps the
        // server until it has arrived.)
        if self.mode != PoolMode::Session && self.server_clean() {
            match self.tracker.as_deref_mut() {
                Some(t) if t.pinned().is_some() => {
                    if t.take_release_check() {
                        return Some(RelayEnd::PinCheck);
                    }
                }
                _ => return Some(RelayEnd::Released),
            }
        }
        None
    }

    /// Nothing owed by the server and nothing half-sent either way (nor a client message whose
    /// rest the scanner is waiting for: releasing then would relink without reading it, forever),
    /// and no COPY FROM STDIN open: a COPY started by Execute with its Sync already sent owes no
    /// ReadyForQuery until the client ends the copy and syncs again.
    pub(super) fn quiescent(&self) -> bool {
        self.owes_nothing()
            && self.scratch.expect.is_empty()
            && self.c.need == 0
            && self.nothing_half_sent()
    }

    /// The protocol state owes nothing: no ReadyForQuery, no open batch, no COPY IN, and a
    /// count that can be trusted.
    pub(super) fn owes_nothing(&self) -> bool {
        self.pending_rfq == 0
            && !self.batch.open()
            && !self.copy.is_in()
            && self.command != Command::Uncertain
    }

    /// No byte read waits to be written, nor is a message half-way, either way (the client's
    /// unscanned bytes aside).
    fn nothing_half_sent(&self) -> bool {
        self.c.ready == 0
            && self.c.remaining == 0
            && self.scratch.c_inject.is_empty()
            && self.s.ready == 0
            && self.s.remaining == 0
            && self.scratch.s_inject.is_empty()
            && self.server.rbuf.is_empty()
    }

    /// Nothing read waits to be written and no message is half-way through: SUSPEND may stop here.
    pub fn flushed(&self) -> bool {
        self.nothing_half_sent() && self.client.rbuf.is_empty()
    }

    /// The server is idle, its ReadyForQuery seen, nothing owed or unread: it may serve another
    /// client.
    pub fn server_clean(&self) -> bool {
        self.quiescent() && *self.server.status == TransactionStatus::Idle
    }

    pub(super) fn server_gone(&self) -> RelayEnd {
        RelayEnd::ServerGone(ClientNotice::new(
            sqlstate::CONNECTION_FAILURE,
            "server conn crashed?",
        ))
    }

    pub(super) fn mark_query_start(&mut self) {
        if self.query_started.is_some() && self.xact_started.is_some() {
            return;
        }
        let now = self.now();
        if self.query_started.is_none() {
            self.query_started = Some(now);
            if let Some((entry, stamped)) = self.shown.as_mut() {
                entry.query_sent(now.into_std(), std::mem::take(stamped));
            }
        }
        self.xact_started.get_or_insert(now);
    }

    pub(super) fn ready_for_query(&mut self, status: TransactionStatus) -> Result<(), RelayEnd> {
        let now = self.now();
        *self.server.status = status;
        self.pending_rfq = self.pending_rfq.saturating_sub(1);
        self.answered += 1;
        self.last_activity = now;
        if self.pending_rfq == 0 && !self.batch.open() {
            self.command = self.command.next(CommandEvent::Answered);
            self.outstanding = TxEnding::default();
        }
        // A single-query transaction started with its query: one subtraction serves both times.
        let mut query_time = None;
        if self.pending_rfq == 0 {
            if let Some(t) = self.query_started.take() {
                if let Some((entry, _)) = self.shown {
                    entry.query_answered();
                }
                let us = (now - t).as_micros() as u64;
                PoolStats::add(&self.stats.query_count, 1);
                PoolStats::add(&self.stats.query_time_us, us);
                query_time = Some((t, us));
            }
        }
        if status == TransactionStatus::Idle {
            if let Some(t) = self.xact_started.take() {
                let us = match query_time {
                    Some((q, us)) if q == t => us,
                    _ => (now - t).as_micros() as u64,
                };
                PoolStats::add(&self.stats.xact_count, 1);
                PoolStats::add(&self.stats.xact_time_us, us);
            }
        } else if self.mode == PoolMode::Statement && self.pending_rfq == 0 {
            // PgBouncer's FATAL 08P01 (drivers read the 08 class as a lost connection, which
            // this is: the client is closed).
            return Err(RelayEnd::Fatal {
                notice: ClientNotice::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    "transaction blocks not allowed in statement pooling mode",
                ),
                server_clean: false,
            });
        }
        Ok(())
    }

    /// Note a client message going to the server (unchanged or rewritten): the commands in
    /// flight (`Command`), and what an unanswered one may do to the transaction.
    pub(super) fn note_sent(&mut self, tag: u8) {
        self.command = self.command.next(CommandEvent::Sent(tag));
        // Outside a transaction block a command commits by itself (autocommit, or the implicit
        // transaction of a simple Query or of a batch up to its Sync).
        if is_command(tag) && *self.server.status == TransactionStatus::Idle {
            self.outstanding.may_commit = true;
        }
    }

    /// The earliest timeout that applies in the current state.
    pub fn current_deadline(&self) -> Option<(Instant, Timeout)> {
        let t = self.timeouts;
        if self.pending_rfq > 0 || self.batch.open() {
            if let (Some(q), Some(start)) = (t.query_timeout, self.query_started) {
                return Some((start + q, Timeout::Query));
            }
        } else if *self.server.status != TransactionStatus::Idle {
            let idle = t
                .idle_transaction_timeout
                .map(|d| (self.last_activity + d, Timeout::IdleTransaction));
            let xact = match (t.transaction_timeout, self.xact_started) {
                (Some(d), Some(s)) => Some((s + d, Timeout::Transaction)),
                _ => None,
            };
            return match (idle, xact) {
                (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                (a, b) => a.or(b),
            };
        } else if self.mode == PoolMode::Session {
            return t
                .client_idle_timeout
                .map(|d| (self.last_activity + d, Timeout::ClientIdle));
        }
        None
    }

    /// How the relay ends when `which` ran out.
    pub fn timed_out(&self, which: Timeout) -> RelayEnd {
        RelayEnd::Fatal {
            notice: ClientNotice::new(which.sqlstate(), which.text()),
            // Only an idle session client's timeout can leave its server reusable.
            server_clean: which == Timeout::ClientIdle && self.server_clean(),
        }
    }
}

/// A fatal protocol error caused by the client.
pub(super) fn client_violation(sqlstate: &str, message: String) -> RelayEnd {
    RelayEnd::Fatal {
        notice: ClientNotice::new(sqlstate, message),
        server_clean: false,
    }
}
