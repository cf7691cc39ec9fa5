//! The hot path: relay bytes between a client and its linked server by message header, looking
//! only at what pooling needs (ReadyForQuery, ParameterStatus, Query/Sync/Terminate and the
//! extended-protocol tags), without re-encoding what passes through.
//!
//! Both directions run in one poll loop so that neither side can deadlock the other: a server
//! blocked writing a large result never stops us from reading it while the client keeps sending.
//!
//! In transaction and statement mode, named prepared statements are rewritten (`prepared`): the
//! relay then keeps a queue of the replies the server owes (`expect`) so that replies to requests
//! it injected are dropped and replies to requests it absorbed are synthesized in order.
//!
//! A relay may start with a pooler query ahead of the client's request (the session's SETs,
//! `RelayScratch::send_ahead`): the server's replies through its ReadyForQuery are dropped first.

mod client_scan;
pub mod expect;
mod server_scan;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use sluice_config::PoolMode;
use sluice_protocol::{encode_query, TransactionStatus};
use tokio::time::{Instant, Sleep};

use crate::cancel::CancelSlot;
use crate::conn::{ClientConn, CLIENT_READ_CHUNK};
use crate::error::{sqlstate, ClientNotice};
use crate::pool::RelayTimeouts;
use crate::prepared::{ClientStatements, StatementRegistry};
use crate::server::params::{ParamMap, TrackedSet};
use crate::server::ServerConn;
use crate::session_state::tracker::SessionTracker;
use crate::stats::PoolStats;
use expect::ExpectQueue;

/// Stop reading a side once this many bytes wait to be written to the other (unless a message
/// that must be inspected whole is longer).
const READ_CAP: usize = 64 * 1024;
/// Largest server message buffered whole to inspect (ReadyForQuery, ParameterStatus, CommandComplete).
const INSPECT_MAX: usize = 32 * 1024;
/// Read buffer growth: servers send result sets, clients mostly short requests (PgBouncer's pkt_buf
/// is 4 KiB: `conn::CLIENT_READ_CHUNK`). An idle client with nothing buffered holds no buffer (`Stream::read_when_ready`).
const READ_CHUNK: usize = 16 * 1024;
/// Passes that moved bytes before the relay yields to the worker's other tasks. Its reads and
/// writes go straight to the sockets (`Stream::poll_read_into`), past tokio's cooperative
/// budget, so a relay that always has bytes to move (a long COPY) must give way by itself.
/// A transaction takes two or three passes.
const RELAY_ROUNDS: u32 = 64;

/// The passes of one `poll_relay` call, against `RELAY_ROUNDS`.
#[derive(Default)]
struct Rounds(u32);

impl Rounds {
    /// Count a pass; true when the budget is spent, after asking to be polled again.
    fn spent(&mut self, cx: &mut Context<'_>) -> bool {
        self.0 += 1;
        if self.0 > RELAY_ROUNDS {
            cx.waker().wake_by_ref();
            return true;
        }
        false
    }
}

/// Why a relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// Transaction/statement mode: the server is idle with nothing pending and may go back to the pool.
    Released,
    /// The client closed or sent Terminate. `clean` = the server is idle with nothing pending.
    ClientGone { clean: bool },
    /// The server connection failed; the client gets `notice`.
    ServerGone(ClientNotice),
    /// The client is pinned, idle, and ran something that may have released the pin: the session
    /// checks the server and relays again (still pinned) or releases it.
    PinCheck,
    /// The client broke the protocol or hit a limit; `server_clean` says if the server may be reused.
    Fatal {
        notice: ClientNotice,
        server_clean: bool,
    },
}

/// Prepared-statement rewriting context (transaction/statement mode with max_prepared_statements > 0).
pub struct Prepared<'a> {
    pub registry: &'a StatementRegistry,
    pub client: &'a mut ClientStatements,
    pub max_per_server: usize,
}

/// Buffers a relay needs only sometimes, kept by the client session between relays so that a
/// transaction does not allocate them afresh (the relay runs once per transaction). The relay
/// uses them in place: moving them in and out per transaction wrote ~200 bytes of cold memory
/// per client (callgrind's cache model at 1,000 clients).
#[derive(Default)]
pub struct RelayScratch {
    /// Rewritten or injected client->server bytes, written before `client.rbuf[..c.ready]`.
    c_inject: BytesMut,
    /// Synthesized server->client bytes, written before `server.rbuf[..s.ready]`.
    s_inject: BytesMut,
    /// Replies owed by the server (only kept while rewriting prepared statements).
    expect: ExpectQueue,
    /// The relay's last clock reading (see `Relay::clock`), for the release that follows.
    last_clock: Option<Instant>,
    /// A pooler query went into `c_inject` ahead of the client's request (`send_ahead`): the
    /// server's replies through its first ReadyForQuery are the pooler's.
    lead_skip: bool,
}

impl RelayScratch {
    /// The time the last relay read when it ended (normally at the server's last ReadyForQuery).
    pub fn take_last_clock(&mut self) -> Option<Instant> {
        self.last_clock.take()
    }

    /// Send `sql` (a simple query) to the server ahead of the client's request, in the same
    /// write, and drop its replies: the next relay skips everything the server sends through the
    /// query's ReadyForQuery and ends the client if the query fails. For statements known to
    /// succeed (the session's parameter SETs once a server accepted the values): saves the round
    /// trip a query run on its own would cost before the request could go.
    pub fn send_ahead(&mut self, sql: &str) {
        encode_query(sql, &mut self.c_inject);
        self.lead_skip = true;
    }

    /// A query sent ahead waits for its replies (the next relay starts with them).
    pub fn ahead_pending(&self) -> bool {
        self.lead_skip
    }
}

/// Per-direction scan position: `ready` bytes at the front of the buffer are inspected and may be
/// written; `remaining` bytes of a message being streamed through have not arrived yet; `need` is
/// how many bytes the scanner waits for to inspect a message whole (lifts the read cap).
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    ready: usize,
    remaining: usize,
    need: usize,
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

pub struct Relay<'a> {
    client: &'a mut ClientConn,
    server: &'a mut ServerConn,
    client_params: &'a mut ParamMap,
    tracked: &'a TrackedSet,
    stats: &'a PoolStats,
    prepared: Option<Prepared<'a>>,
    /// Session-state tracking (transaction/statement mode).
    tracker: Option<&'a mut SessionTracker>,
    /// Whether the policy lets session state pin a client (else such statements are refused).
    may_pin: bool,
    /// The current client message was already shown to the tracker (scans may pause and resume).
    c_observed: bool,
    mode: PoolMode,
    max_packet: usize,
    /// The pool's (its settings outlive the relay): a reference keeps the relay, which is
    /// written afresh per transaction, a cache line smaller.
    timeouts: &'a RelayTimeouts,
    c: Scan,
    s: Scan,
    /// The server reported an error in an extended-protocol batch: it ignores everything until Sync.
    discard_until_sync: bool,
    /// ReadyForQuery messages the server still owes (one per Query, Sync, FunctionCall, and one
    /// for a query sent ahead: `RelayScratch::send_ahead`).
    pending_rfq: u32,
    /// Extended-protocol messages sent since the last Sync.
    unsynced: bool,
    /// Syncs the client sent after its last Execute/Query and before a CopyDone/CopyFail: if that
    /// command turns out to be COPY FROM STDIN, the server ignores them (no ReadyForQuery).
    syncs_in_copy_window: u32,
    copy_done_in_window: bool,
    /// The server is in COPY IN and the client has not ended it yet: its Syncs are ignored.
    copy_in_open: bool,
    client_done: bool,
    /// This wake-up's clock reading, taken at its first use and forgotten when the relay waits
    /// again: query start, ReadyForQuery statistics, activity and the release that follows share
    /// one read (a clock read is ~17 ns on the bench's VM; a transaction had nine). The first
    /// wake-up's is the caller's: when the server was linked.
    clock: Option<Instant>,
    query_started: Option<Instant>,
    xact_started: Option<Instant>,
    last_activity: Instant,
    deadline: Option<Instant>,
    /// Created the first time a deadline applies: most relays (no timeouts set, or a transaction
    /// that finishes at once) never need a timer.
    sleep: Option<Pin<Box<Sleep>>>,
    /// An idle timeout applies, so reads must note when the client was last active.
    track_activity: bool,
    /// Where the reusable buffers go back when the relay ends.
    scratch: &'a mut RelayScratch,
    /// The client's cancel slot, to link to the server once the replies to a query sent ahead
    /// are in (`link_cancel_after_lead`).
    cancel_after_lead: Option<&'a CancelSlot>,
}

impl Drop for Relay<'_> {
    fn drop(&mut self) {
        // Whatever is left unsent is discarded with the relay (the server is then not clean).
        self.scratch.c_inject.clear();
        self.scratch.s_inject.clear();
        self.scratch.expect.clear();
        self.scratch.lead_skip = false;
        self.scratch.last_clock = self.clock;
    }
}

impl<'a> Relay<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: &'a mut ClientConn,
        server: &'a mut ServerConn,
        client_params: &'a mut ParamMap,
        tracked: &'a TrackedSet,
        stats: &'a PoolStats,
        prepared: Option<Prepared<'a>>,
        tracking: Option<(&'a mut SessionTracker, bool)>,
        mode: PoolMode,
        max_packet: usize,
        timeouts: &'a RelayTimeouts,
        scratch: &'a mut RelayScratch,
        now: Instant,
    ) -> Self {
        let (tracker, may_pin) = match tracking {
            Some((t, p)) => (Some(t), p),
            None => (None, true),
        };
        let status = server.status;
        Relay {
            client,
            server,
            client_params,
            tracked,
            stats,
            prepared,
            tracker,
            may_pin,
            c_observed: false,
            mode,
            max_packet,
            timeouts,
            c: Scan::default(),
            s: Scan::default(),
            discard_until_sync: false,
            pending_rfq: u32::from(scratch.lead_skip),
            unsynced: false,
            syncs_in_copy_window: 0,
            copy_done_in_window: false,
            copy_in_open: false,
            client_done: false,
            clock: Some(now),
            query_started: None,
            xact_started: (status != TransactionStatus::Idle).then_some(now),
            last_activity: now,
            deadline: None,
            sleep: None,
            track_activity: timeouts.idle_transaction_timeout.is_some()
                || timeouts.client_idle_timeout.is_some(),
            scratch,
            cancel_after_lead: None,
        }
    }

    /// Link the client's cancel requests to the server only once the replies to the query sent
    /// ahead of its request are in: a cancel must stop the client's request, not the session's
    /// SETs in front of it (whose failure would end the client while its request runs on). One
    /// that comes sooner finds the client unlinked and is dropped, as when those SETs ran in a
    /// round trip of their own.
    pub fn link_cancel_after_lead(&mut self, slot: &'a CancelSlot) {
        self.cancel_after_lead = Some(slot);
    }

    /// Relay until the server can be released or either side ends. The client's buffer must hold
    /// the start of at least one message (what made the session take a server).
    ///
    /// Takes the relay by reference: the caller's frame holds it, and the future does not copy
    /// its ~250 bytes again (per transaction, into memory that is cold at many clients).
    pub async fn run(&mut self) -> RelayEnd {
        if let Err(end) = self.scan_client() {
            return end;
        }
        // A pooler-run query (parameter SETs, the pin check) may have read past its own reply:
        // a notification that arrived meanwhile waits in the buffer.
        if let Err(end) = self.scan_server() {
            return end;
        }
        self.drain_fakes();
        poll_fn(|cx| {
            let p = self.poll_relay(cx);
            if p.is_pending() {
                self.clock = None;
            }
            p
        })
        .await
    }

    /// The current wake-up's time (see `clock`).
    fn now(&mut self) -> Instant {
        *self.clock.get_or_insert_with(Instant::now)
    }

    /// Nothing owed by the server and nothing half-sent either way (nor a client message whose
    /// rest the scanner is waiting for: releasing then would relink without reading it, forever).
    fn quiescent(&self) -> bool {
        self.pending_rfq == 0
            && !self.unsynced
            && self.scratch.expect.is_empty()
            && self.c.ready == 0
            && self.c.remaining == 0
            && self.c.need == 0
            && self.scratch.c_inject.is_empty()
            && self.s.ready == 0
            && self.s.remaining == 0
            && self.scratch.s_inject.is_empty()
            && self.server.rbuf.is_empty()
    }

    /// Nothing read waits to be written and no message is half-way through: SUSPEND may stop here.
    fn flushed(&self) -> bool {
        self.c.ready == 0
            && self.c.remaining == 0
            && self.scratch.c_inject.is_empty()
            && self.client.rbuf.is_empty()
            && self.s.ready == 0
            && self.s.remaining == 0
            && self.scratch.s_inject.is_empty()
            && self.server.rbuf.is_empty()
    }

    fn server_clean(&self) -> bool {
        self.quiescent() && self.server.status == TransactionStatus::Idle
    }

    fn poll_relay(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        // A read that returned Pending stays Pending for the rest of this call: tokio's readiness
        // only changes when this worker's IO driver runs, which is not while this task is being
        // polled, and the waker is registered. So a later pass (after a write made progress)
        // skips it instead of asking again (~150 instructions per poll, two per transaction).
        let (mut client_blocked, mut server_blocked) = (false, false);
        let mut rounds = Rounds::default();
        loop {
            let mut progress = false;
            if rounds.spent(cx) {
                return Poll::Pending;
            }

            // 1. client -> server bytes: injected/rewritten first, then the ready prefix.
            match self.poll_write_server(cx) {
                Ok(p) => progress |= p,
                Err(end) => return Poll::Ready(end),
            }
            // 2. server -> client bytes: synthesized first, then the ready prefix.
            match self.poll_write_client(cx) {
                Ok(p) => progress |= p,
                Err(end) => return Poll::Ready(end),
            }
            if progress {
                // Scans pause where a rewrite or a dropped reply needs the output drained first.
                if let Err(end) = self.scan_client() {
                    return Poll::Ready(end);
                }
                if let Err(end) = self.scan_server() {
                    return Poll::Ready(end);
                }
                self.drain_fakes();
            }

            if self.client_done && self.c.ready == 0 && self.scratch.c_inject.is_empty() {
                return Poll::Ready(RelayEnd::ClientGone {
                    clean: self.server_clean(),
                });
            }
            // (server_clean includes `c.need == 0`: a message the scanner must see whole keeps
            // the server until it has arrived.)
            if self.mode != PoolMode::Session && self.server_clean() {
                match self.tracker.as_deref_mut() {
                    Some(t) if t.pinned().is_some() => {
                        if t.take_release_check() {
                            return Poll::Ready(RelayEnd::PinCheck);
                        }
                    }
                    _ => return Poll::Ready(RelayEnd::Released),
                }
            }

            // SUSPEND: once everything read is written out and no message is half-way, stop reading
            // both sides (and timing out) until RESUME wakes us. Hot path cost: one relaxed load.
            if self.client.suspend.is_suspended()
                && self.flushed()
                && self.client.suspend.park(self.client.id, cx)
            {
                return Poll::Pending;
            }

            // 3. read from the client
            if !self.client_done
                && !client_blocked
                && self.client.rbuf.len() < READ_CAP.max(self.c.need)
            {
                reserve(&mut self.client.rbuf, CLIENT_READ_CHUNK);
                match self.client.stream.poll_read_into(cx, &mut self.client.rbuf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(RelayEnd::ClientGone {
                            clean: self.server_clean(),
                        })
                    }
                    Poll::Ready(Ok(n)) => {
                        PoolStats::add(&self.stats.bytes_received, n as u64);
                        if self.track_activity {
                            self.last_activity = self.now();
                        }
                        if let Err(end) = self.scan_client() {
                            return Poll::Ready(end);
                        }
                        self.drain_fakes();
                        progress = true;
                    }
                    Poll::Pending => client_blocked = true,
                }
            }

            // 4. read from the server
            if !server_blocked && self.server.rbuf.len() < READ_CAP.max(self.s.need) {
                reserve(&mut self.server.rbuf, READ_CHUNK);
                match self.server.stream.poll_read_into(cx, &mut self.server.rbuf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(self.server_gone())
                    }
                    Poll::Ready(Ok(_)) => {
                        if let Err(end) = self.scan_server() {
                            return Poll::Ready(end);
                        }
                        self.drain_fakes();
                        progress = true;
                    }
                    Poll::Pending => server_blocked = true,
                }
            }

            if !progress {
                return self.poll_deadline(cx);
            }
        }
    }

    fn poll_write_server(&mut self, cx: &mut Context<'_>) -> Result<bool, RelayEnd> {
        let (inject, ready) = (
            &self.scratch.c_inject[..],
            &self.client.rbuf[..self.c.ready],
        );
        if inject.is_empty() && ready.is_empty() {
            return Ok(false);
        }
        // Rewritten bytes and the ready prefix after them go out in one write.
        match self.server.stream.poll_write_pair(cx, inject, ready) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Err(self.server_gone()),
            Poll::Ready(Ok(n)) => {
                wrote(
                    n,
                    &mut self.scratch.c_inject,
                    &mut self.client.rbuf,
                    &mut self.c,
                );
                Ok(true)
            }
            Poll::Pending => Ok(false),
        }
    }

    fn poll_write_client(&mut self, cx: &mut Context<'_>) -> Result<bool, RelayEnd> {
        let (inject, ready) = (
            &self.scratch.s_inject[..],
            &self.server.rbuf[..self.s.ready],
        );
        if inject.is_empty() && ready.is_empty() {
            return Ok(false);
        }
        // Synthesized replies and the server's ready prefix after them go out in one write.
        match self.client.stream.poll_write_pair(cx, inject, ready) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Err(RelayEnd::ClientGone { clean: false }),
            Poll::Ready(Ok(n)) => {
                PoolStats::add(&self.stats.bytes_sent, n as u64);
                wrote(
                    n,
                    &mut self.scratch.s_inject,
                    &mut self.server.rbuf,
                    &mut self.s,
                );
                Ok(true)
            }
            Poll::Pending => Ok(false),
        }
    }

    fn server_gone(&self) -> RelayEnd {
        RelayEnd::ServerGone(ClientNotice::new(
            sqlstate::CONNECTION_FAILURE,
            "server conn crashed?",
        ))
    }

    fn mark_query_start(&mut self) {
        if self.query_started.is_some() && self.xact_started.is_some() {
            return;
        }
        let now = self.now();
        self.query_started.get_or_insert(now);
        self.xact_started.get_or_insert(now);
    }

    fn ready_for_query(&mut self, status: TransactionStatus) -> Result<(), RelayEnd> {
        let now = self.now();
        self.server.status = status;
        self.pending_rfq = self.pending_rfq.saturating_sub(1);
        self.last_activity = now;
        // A single-query transaction started with its query: one subtraction serves both times.
        let mut query_time = None;
        if self.pending_rfq == 0 {
            if let Some(t) = self.query_started.take() {
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
            return Err(RelayEnd::Fatal {
                notice: ClientNotice::new(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "transaction blocks not allowed in statement pooling mode",
                ),
                server_clean: false,
            });
        }
        Ok(())
    }

    /// The earliest timeout that applies in the current state.
    fn current_deadline(&self) -> Option<(Instant, Timeout)> {
        let t = self.timeouts;
        if self.pending_rfq > 0 || self.unsynced {
            if let (Some(q), Some(start)) = (t.query_timeout, self.query_started) {
                return Some((start + q, Timeout::Query));
            }
        } else if self.server.status != TransactionStatus::Idle {
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

    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let Some((at, which)) = self.current_deadline() else {
            return Poll::Pending;
        };
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if self.deadline != Some(at) {
            self.deadline = Some(at);
            sleep.as_mut().reset(at);
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(RelayEnd::Fatal {
                notice: ClientNotice::new(which.sqlstate(), which.text()),
                // Only an idle session client's timeout can leave its server reusable.
                server_clean: which == Timeout::ClientIdle && self.server_clean(),
            }),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The relay's timeouts, each with the SQLSTATE and text (PgBouncer's) the client is closed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timeout {
    Query,
    IdleTransaction,
    Transaction,
    ClientIdle,
}

impl Timeout {
    fn sqlstate(self) -> &'static str {
        match self {
            Timeout::Query => sqlstate::QUERY_CANCELED,
            Timeout::IdleTransaction => sqlstate::IDLE_IN_TRANSACTION_TIMEOUT,
            Timeout::Transaction | Timeout::ClientIdle => sqlstate::PROTOCOL_VIOLATION,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Timeout::Query => "query timeout",
            Timeout::IdleTransaction => "idle transaction timeout",
            Timeout::Transaction => "transaction timeout",
            Timeout::ClientIdle => "client_idle_timeout",
        }
    }
}

fn reserve(buf: &mut BytesMut, chunk: usize) {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(chunk);
    }
}

/// A fatal protocol error caused by the client.
fn client_violation(sqlstate: &str, message: String) -> RelayEnd {
    RelayEnd::Fatal {
        notice: ClientNotice::new(sqlstate, message),
        server_clean: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct CountWakes(AtomicUsize);
    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_relay_gives_way_after_its_rounds_and_asks_to_come_back() {
        let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut rounds = Rounds::default();
        for _ in 0..RELAY_ROUNDS {
            assert!(!rounds.spent(&mut cx));
        }
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0);
        assert!(rounds.spent(&mut cx));
        // Pending without a registered socket would hang: the task is woken to run again.
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
    }
}
