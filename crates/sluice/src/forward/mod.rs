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
//!
//! The protocol state is `core::RelayCore`, which does no IO (unit-tested over recorded message
//! streams in `core_tests.rs`); this file is the IO shell around it: the poll loop that writes
//! what the core says may go, reads into the core's buffers, and runs the timers.

pub mod after_loss;
mod client_scan;
pub mod core;
#[cfg(test)]
mod core_tests;
#[cfg(test)]
mod core_tests_lost;
pub mod expect;
pub mod lost;
mod protocol_state;
mod read_guard;
mod refuse;
mod server_scan;
#[cfg(any(test, feature = "fuzzing"))]
pub mod sim;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::BytesMut;
use sluice_protocol::encode_query;
use tokio::time::{Instant, Sleep};

use crate::cancel::CancelSlot;
use crate::conn::{ClientConn, Label, CLIENT_READ_CHUNK};
use crate::error::{sqlstate, ClientNotice};
use crate::lifecycle::suspend::SuspendGate;
use crate::net::Stream;
use crate::prepared::{ClientStatements, StatementRegistry};
use crate::server::ServerConn;
pub use core::{ClientSide, RelayCore, RelayRules, ServerSide, SessionParts, Timeout};
use expect::ExpectQueue;

/// Stop reading a side once this many bytes wait to be written to the other (unless a message
/// that must be inspected whole is longer).
const READ_CAP: usize = 64 * 1024;
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
    /// The client closed or sent Terminate. `clean` = the server is idle with nothing pending;
    /// `eof` = the client's socket closed or failed without a Terminate.
    ClientGone { clean: bool, eof: bool },
    /// The server connection failed; the client is closed with `notice` (session mode, or a
    /// reply cut mid-message).
    ServerGone(ClientNotice),
    /// The server connection failed (transaction/statement mode): the client goes on, told
    /// what PostgreSQL would tell it after such an error (`lost.rs`).
    ServerLost(Box<lost::ServerLost>),
    /// The client is pinned, idle, and ran something that may have released the pin: the session
    /// checks the server and relays again (still pinned) or releases it.
    PinCheck,
    /// The client broke the protocol or hit a limit; `server_clean` says if the server may be reused.
    Fatal {
        notice: ClientNotice,
        server_clean: bool,
    },
}

/// Write `inject` and then `ready` to `stream` in one call, at most `cap` bytes when
/// tcp_socket_buffer set one (0: none). The capped path is out of line; the common case writes as
/// a relay always did.
#[inline(always)]
fn write_out(
    stream: &mut Stream,
    cx: &mut Context<'_>,
    inject: &[u8],
    ready: &[u8],
    cap: u32,
) -> Poll<std::io::Result<usize>> {
    if cap == 0 {
        stream.poll_write_pair(cx, inject, ready)
    } else {
        stream.poll_write_pair_capped(cx, inject, ready, cap as usize)
    }
}

/// The longest length word the pooler accepts for a client message with `tag`: PostgreSQL's
/// limit (`frontend_tag::max_len`), except that a Describe or Close may be as long as a Parse
/// when the pooler rewrites statement names: the name the client chose (as long as it likes, as
/// in a Parse or Bind) is replaced by a short one, so the server never sees the long message.
/// A Describe/Close that passes through unchanged (a portal, the unnamed statement) is held to
/// PostgreSQL's limit by the relay (`RelayCore::rewrite`).
pub fn request_len_limit(tag: u8, rewrites_names: bool) -> u32 {
    use sluice_protocol::frontend_tag::{CLOSE, DESCRIBE, LARGE_MESSAGE_LIMIT};
    if rewrites_names && matches!(tag, DESCRIBE | CLOSE) {
        LARGE_MESSAGE_LIMIT
    } else {
        sluice_protocol::frontend_tag::max_len(tag)
    }
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
    /// Pooler queries that went into `c_inject` ahead of the client's requests (`send_ahead`,
    /// `RelayCore::discard_sequences_ahead`): the server's replies through that many
    /// ReadyForQuery messages are the pooler's.
    leads: u32,
    /// Log lines the client's requests caused (refused statement names), written by the shell
    /// with the client's label as soon as the core returns, before the client sees its reply.
    log_notes: Vec<String>,
    /// Read routing: hold the replies back until they show the standby did not refuse the
    /// read with 25006 (`read_guard.rs`).
    read_guard: bool,
    /// The standby refused the guarded read: nothing reached the client.
    read_refused: bool,
    /// The next relay's server holds sequence values that are not this client's
    /// (`sequences_foreign`); cleared once anything of the relay is written to the server.
    foreign_sequences: bool,
    /// A Query, Execute or FunctionCall of the client went to the server (`take_ran`).
    ran: bool,
    /// Where the client's stream stands: bytes from the front of the server's buffer to the next
    /// message start (0: the bytes written so far end at a message boundary), and whether a
    /// synthesized message was written in part. Kept here, not in the relay, so that it is still
    /// known when a relay is dropped mid-write (a KILL).
    pub(super) s_msg_left: usize,
    pub(super) s_inject_cut: bool,
}

impl RelayScratch {
    /// Whether the client's stream stops in the middle of a message, once `unreported` more bytes
    /// of the relay's pending output (`s_inject`, then `rbuf`, the server's buffer) reach it:
    /// bytes a TLS layer took without reporting them (`Stream::unreported`). Nothing may be
    /// written after such a cut: the client would read it as the rest of the message (a row with
    /// wrong contents, for a driver that hands rows over as they come) and then as garbage.
    pub fn client_mid_message(&self, rbuf: &[u8], unreported: usize) -> bool {
        let inject = self.s_inject.len();
        if unreported == 0 {
            return self.s_inject_cut || self.s_msg_left > 0;
        }
        if unreported < inject {
            return true;
        }
        next_start(rbuf, self.s_msg_left, unreported - inject) > 0
    }

    /// Read routing: the next relay runs a request proven a read (a simple Query, or an
    /// extended-protocol batch executing one statement) on a standby; a 25006 before anything
    /// reached the client ends it (`take_read_refused`).
    pub fn guard_read(&mut self) {
        self.read_guard = true;
    }

    /// The next relay runs on a server that another client used since this client's last
    /// transaction, or that this client did not use last: `currval()` and `lastval()` there
    /// would read values another client's `nextval()` left. A request that reads them before
    /// anything of the relay reached the server has them discarded first
    /// (`RelayCore::discard_sequences_ahead`).
    pub fn sequences_foreign(&mut self) {
        self.foreign_sequences = true;
    }

    /// Whether a Query, Execute or FunctionCall of the client went to the server since the last
    /// call: work that may have called `nextval()` there (a Parse and Describe alone cannot).
    pub fn take_ran(&mut self) -> bool {
        std::mem::take(&mut self.ran)
    }

    /// Whether the last relay ended because the standby refused its guarded read (the guard
    /// is lifted either way).
    pub fn take_read_refused(&mut self) -> bool {
        self.read_guard = false;
        std::mem::take(&mut self.read_refused)
    }

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
        self.leads += 1;
    }

    /// A query sent ahead waits for its replies (the next relay starts with them).
    pub fn ahead_pending(&self) -> bool {
        self.leads > 0
    }
}

/// The IO shell of a relay: the two sockets, SUSPEND's gate, the timer, and the protocol state.
pub struct Relay<'a> {
    client_stream: &'a mut Stream,
    server_stream: &'a mut Stream,
    suspend: &'a SuspendGate,
    client_id: crate::ids::ClientId,
    /// The client as log lines name it (`log_notes`).
    label: Label<'a>,
    core: RelayCore<'a>,
    deadline: Option<Instant>,
    /// Created the first time a deadline applies: most relays (no timeouts set, or a transaction
    /// that finishes at once) never need a timer.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Session mode: set by the janitor (server_fast_close) when the linked server is due to
    /// close; the relay then ends if the session is idle (`close_when_idle`).
    close_flag: Option<&'a AtomicBool>,
    /// `RelayRules::write_cap`.
    write_cap: u32,
}

impl<'a> Relay<'a> {
    /// A relay between `client` and its linked `server` from `now` (when the server was linked).
    pub fn new(
        client: &'a mut ClientConn,
        server: &'a mut ServerConn,
        parts: SessionParts<'a>,
        rules: RelayRules<'a>,
        now: Instant,
    ) -> Self {
        let ClientConn {
            stream: client_stream,
            rbuf,
            suspend,
            id,
            peer,
            names,
            ..
        } = client;
        let label = Label {
            peer,
            names: names.as_ref(),
        };
        let (server_side, server_stream) = ServerSide::of(server);
        let write_cap = rules.write_cap;
        Relay {
            client_stream,
            server_stream,
            suspend,
            client_id: *id,
            label,
            core: RelayCore::new(ClientSide { rbuf }, server_side, parts, rules, now),
            deadline: None,
            sleep: None,
            close_flag: None,
            write_cap,
        }
    }

    /// server_fast_close: when `flag` is found set (by the janitor, which then wakes the client's
    /// task), an idle session ends with `08P01 database configuration changed` and its server
    /// closes; in a transaction it goes on (the janitor sets the flag again on its next pass).
    pub fn close_when_idle(&mut self, flag: &'a AtomicBool) {
        self.close_flag = Some(flag);
    }

    /// Link the client's cancel requests to the server only once the replies to the query sent
    /// ahead of its request are in: a cancel must stop the client's request, not the session's
    /// SETs in front of it (whose failure would end the client while its request runs on). One
    /// that comes sooner finds the client unlinked and is dropped, as when those SETs ran in a
    /// round trip of their own.
    pub fn link_cancel_after_lead(&mut self, slot: &'a CancelSlot) {
        self.core.link_cancel_after_lead(slot);
    }

    /// Relay until the server can be released or either side ends. The client's buffer must hold
    /// the start of at least one message (what made the session take a server).
    ///
    /// Takes the relay by reference: the caller's frame holds it, and the future does not copy
    /// its ~250 bytes again (per transaction, into memory that is cold at many clients).
    pub async fn run(&mut self) -> RelayEnd {
        let started = self.core.start();
        self.write_log_notes();
        if let Err(end) = started {
            return end;
        }
        poll_fn(|cx| {
            let p = self.poll_relay(cx);
            if p.is_pending() {
                self.core.forget_clock();
            }
            p
        })
        .await
    }

    fn poll_relay(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        if let Some(flag) = self.close_flag {
            if flag.load(Ordering::Relaxed) {
                flag.store(false, Ordering::Relaxed);
                if self.core.server_clean() && self.core.flushed() {
                    return Poll::Ready(RelayEnd::Fatal {
                        notice: ClientNotice::new(
                            sqlstate::PROTOCOL_VIOLATION,
                            "database configuration changed",
                        ),
                        server_clean: false,
                    });
                }
            }
        }
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
                let scanned = self.core.after_writes();
                self.write_log_notes();
                if let Err(end) = scanned {
                    return Poll::Ready(end);
                }
            }
            if let Some(end) = self.core.outcome() {
                return Poll::Ready(end);
            }

            // SUSPEND: once everything read is written out and no message is half-way, stop reading
            // both sides (and timing out) until RESUME wakes us. Hot path cost: one relaxed load.
            if self.suspend.is_suspended()
                && self.core.flushed()
                && self.suspend.park(self.client_id, cx)
            {
                return Poll::Pending;
            }

            // 3. read from the client
            if !client_blocked {
                if let Some(rbuf) = self.core.client_wants(READ_CAP) {
                    reserve(rbuf, CLIENT_READ_CHUNK);
                    match self.client_stream.poll_read_into(cx, rbuf) {
                        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                            return Poll::Ready(RelayEnd::ClientGone {
                                clean: self.core.server_clean(),
                                eof: true,
                            })
                        }
                        Poll::Ready(Ok(n)) => {
                            let scanned = self.core.read_from_client(n);
                            self.write_log_notes();
                            if let Err(end) = scanned {
                                return Poll::Ready(end);
                            }
                            progress = true;
                        }
                        Poll::Pending => client_blocked = true,
                    }
                }
            }

            // 4. read from the server
            if !server_blocked {
                if let Some(rbuf) = self.core.server_wants(READ_CAP) {
                    reserve(rbuf, READ_CHUNK);
                    match self.server_stream.poll_read_into(cx, rbuf) {
                        Poll::Ready(Ok(0)) => {
                            return Poll::Ready(
                                self.core.server_lost("the server closed the connection"),
                            )
                        }
                        Poll::Ready(Err(e)) => {
                            return Poll::Ready(self.core.server_lost(&e.to_string()))
                        }
                        Poll::Ready(Ok(_)) => {
                            if let Err(end) = self.core.read_from_server() {
                                return Poll::Ready(end);
                            }
                            progress = true;
                        }
                        Poll::Pending => server_blocked = true,
                    }
                }
            }

            if !progress {
                return self.poll_deadline(cx);
            }
        }
    }

    /// Write the log lines the core noted (one length check when there are none).
    fn write_log_notes(&mut self) {
        for line in self.core.scratch.log_notes.drain(..) {
            tracing::error!("C-{}: {} {line}", self.client_id, self.label);
        }
    }

    fn poll_write_server(&mut self, cx: &mut Context<'_>) -> Result<bool, RelayEnd> {
        let (inject, ready) = self.core.to_server();
        if inject.is_empty() && ready.is_empty() {
            return Ok(false);
        }
        // Rewritten bytes and the ready prefix after them go out in one write.
        match write_out(self.server_stream, cx, inject, ready, self.write_cap) {
            Poll::Ready(Ok(0)) => Err(self.core.server_lost("the server closed the connection")),
            Poll::Ready(Err(e)) => Err(self.core.server_lost(&e.to_string())),
            Poll::Ready(Ok(n)) => {
                self.core.wrote_to_server(n);
                Ok(true)
            }
            Poll::Pending => Ok(false),
        }
    }

    fn poll_write_client(&mut self, cx: &mut Context<'_>) -> Result<bool, RelayEnd> {
        let (inject, ready) = self.core.to_client();
        if inject.is_empty() && ready.is_empty() {
            return Ok(false);
        }
        // Synthesized replies and the server's ready prefix after them go out in one write.
        match write_out(self.client_stream, cx, inject, ready, self.write_cap) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Err(RelayEnd::ClientGone {
                clean: false,
                eof: true,
            }),
            Poll::Ready(Ok(n)) => {
                self.core.wrote_to_client(n);
                Ok(true)
            }
            Poll::Pending => Ok(false),
        }
    }

    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let Some((at, which)) = self.core.current_deadline() else {
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
            Poll::Ready(()) => Poll::Ready(self.core.timed_out(which)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Bytes from offset `written` of `buf` (server messages from its front) to the next message
/// start at or after it, given that one starts at `at`.
pub(super) fn next_start(buf: &[u8], mut at: usize, written: usize) -> usize {
    while at < written {
        match buf.get(at + 1..at + 5) {
            Some(h) => at += 1 + u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize,
            // (Scanned bytes hold their headers whole; unknown is not a boundary.)
            None => return 1,
        }
    }
    at - written
}

fn reserve(buf: &mut BytesMut, chunk: usize) {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(chunk);
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
