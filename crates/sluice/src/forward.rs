//! The hot path: relay bytes between a client and its linked server by message header, looking
//! only at what pooling needs (ReadyForQuery, ParameterStatus, Query/Sync/Terminate and the
//! extended-protocol tags), without re-encoding or per-message allocation.
//!
//! Both directions run in one poll loop so that neither side can deadlock the other: a server
//! blocked writing a large result never stops us from reading it while the client keeps sending.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use bytes::{Buf, BytesMut};
use sluice_config::PoolMode;
use sluice_protocol::{
    backend_tag, decode_parameter_status, decode_ready_for_query, frontend_tag, peek_header,
    TransactionStatus,
};
use tokio::io::AsyncWrite;
use tokio::time::Sleep;
use tokio_util::io::poll_read_buf;

use crate::client::ClientConn;
use crate::error::{sqlstate, ClientNotice};
use crate::server::params::{ParamMap, TrackedSet};
use crate::server::ServerConn;
use crate::stats::PoolStats;

/// Stop reading a side once this many bytes wait to be written to the other.
const READ_CAP: usize = 64 * 1024;
/// Largest server message we buffer whole to inspect (ReadyForQuery, ParameterStatus).
const INSPECT_MAX: usize = 32 * 1024;
const READ_CHUNK: usize = 16 * 1024;

/// Why a relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// Transaction/statement mode: the server is idle with nothing pending and may go back to the pool.
    Released,
    /// The client closed or sent Terminate. `clean` = the server is idle with nothing pending.
    ClientGone { clean: bool },
    /// The server connection failed; the client gets `notice`.
    ServerGone(ClientNotice),
    /// The client broke the protocol or hit a limit; `server_clean` says if the server may be reused.
    Fatal {
        notice: ClientNotice,
        server_clean: bool,
    },
}

/// Timeouts that apply while linked.
#[derive(Debug, Clone, Copy, Default)]
pub struct RelayTimeouts {
    pub query_timeout: Option<Duration>,
    pub idle_transaction_timeout: Option<Duration>,
    pub transaction_timeout: Option<Duration>,
    /// Only while idle between transactions in session mode (in other modes the client is unlinked then).
    pub client_idle_timeout: Option<Duration>,
}

/// Per-direction scan position: `ready` bytes at the front of the buffer are inspected and may be
/// written; `remaining` bytes of a message being streamed through have not arrived yet.
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    ready: usize,
    remaining: usize,
}

pub struct Relay<'a> {
    client: &'a mut ClientConn,
    server: &'a mut ServerConn,
    client_params: &'a mut ParamMap,
    tracked: &'a TrackedSet,
    stats: &'a PoolStats,
    mode: PoolMode,
    max_packet: usize,
    timeouts: RelayTimeouts,
    c: Scan,
    s: Scan,
    /// ReadyForQuery messages the server still owes (one per Query, Sync, FunctionCall).
    pending_rfq: u32,
    /// Extended-protocol messages sent since the last Sync.
    unsynced: bool,
    client_done: bool,
    query_started: Option<Instant>,
    xact_started: Option<Instant>,
    last_activity: Instant,
    deadline: Option<Instant>,
    sleep: Pin<Box<Sleep>>,
}

impl<'a> Relay<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: &'a mut ClientConn,
        server: &'a mut ServerConn,
        client_params: &'a mut ParamMap,
        tracked: &'a TrackedSet,
        stats: &'a PoolStats,
        mode: PoolMode,
        max_packet: usize,
        timeouts: RelayTimeouts,
    ) -> Self {
        let now = Instant::now();
        let status = server.status;
        Relay {
            client,
            server,
            client_params,
            tracked,
            stats,
            mode,
            max_packet,
            timeouts,
            c: Scan::default(),
            s: Scan::default(),
            pending_rfq: 0,
            unsynced: false,
            client_done: false,
            query_started: None,
            xact_started: (status != TransactionStatus::Idle).then_some(now),
            last_activity: now,
            deadline: None,
            sleep: Box::pin(tokio::time::sleep_until(
                tokio::time::Instant::now() + Duration::from_secs(86400),
            )),
        }
    }

    /// Relay until the server can be released or either side ends. The client's buffer must hold
    /// the start of at least one message (what made the session take a server).
    pub async fn run(mut self) -> RelayEnd {
        if let Err(end) = self.scan_client() {
            return end;
        }
        poll_fn(|cx| self.poll_relay(cx)).await
    }

    /// Nothing owed by the server and nothing half-sent either way.
    fn quiescent(&self) -> bool {
        self.pending_rfq == 0
            && !self.unsynced
            && self.c.ready == 0
            && self.c.remaining == 0
            && self.s.ready == 0
            && self.s.remaining == 0
            && self.server.rbuf.is_empty()
    }

    fn server_clean(&self) -> bool {
        self.quiescent() && self.server.status == TransactionStatus::Idle
    }

    fn poll_relay(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        loop {
            let mut progress = false;

            // 1. client -> server bytes
            if self.c.ready > 0 {
                match Pin::new(&mut self.server.stream)
                    .poll_write(cx, &self.client.rbuf[..self.c.ready])
                {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(self.server_gone())
                    }
                    Poll::Ready(Ok(n)) => {
                        self.client.rbuf.advance(n);
                        self.c.ready -= n;
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }
            // 2. server -> client bytes
            if self.s.ready > 0 {
                match Pin::new(&mut self.client.stream)
                    .poll_write(cx, &self.server.rbuf[..self.s.ready])
                {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(RelayEnd::ClientGone { clean: false })
                    }
                    Poll::Ready(Ok(n)) => {
                        self.server.rbuf.advance(n);
                        self.s.ready -= n;
                        PoolStats::add(&self.stats.bytes_sent, n as u64);
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }

            if self.client_done && self.c.ready == 0 {
                return Poll::Ready(RelayEnd::ClientGone {
                    clean: self.server_clean(),
                });
            }
            let releasable = self.mode != PoolMode::Session && self.server_clean();
            if releasable {
                return Poll::Ready(RelayEnd::Released);
            }

            // 3. read from the client (not once the server may be released: the next query may go elsewhere)
            if !self.client_done && self.client.rbuf.len() < READ_CAP {
                reserve(&mut self.client.rbuf);
                match poll_read_buf(Pin::new(&mut self.client.stream), cx, &mut self.client.rbuf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(RelayEnd::ClientGone {
                            clean: self.server_clean() && self.c.ready == 0,
                        })
                    }
                    Poll::Ready(Ok(n)) => {
                        PoolStats::add(&self.stats.bytes_received, n as u64);
                        self.last_activity = Instant::now();
                        if let Err(end) = self.scan_client() {
                            return Poll::Ready(end);
                        }
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }

            // 4. read from the server
            if self.server.rbuf.len() < READ_CAP {
                reserve(&mut self.server.rbuf);
                match poll_read_buf(Pin::new(&mut self.server.stream), cx, &mut self.server.rbuf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        return Poll::Ready(self.server_gone())
                    }
                    Poll::Ready(Ok(_)) => {
                        if let Err(end) = self.scan_server() {
                            return Poll::Ready(end);
                        }
                        progress = true;
                    }
                    Poll::Pending => {}
                }
            }

            if !progress {
                return self.poll_deadline(cx);
            }
        }
    }

    fn server_gone(&self) -> RelayEnd {
        RelayEnd::ServerGone(ClientNotice::new(
            sqlstate::CONNECTION_FAILURE,
            "server conn crashed?",
        ))
    }

    /// Inspect newly read client bytes: count requests that the server answers with ReadyForQuery,
    /// note unsynced extended messages, and stop at Terminate (never forwarded: the server stays).
    fn scan_client(&mut self) -> Result<(), RelayEnd> {
        while self.c.ready < self.client.rbuf.len() && !self.client_done {
            let len = self.client.rbuf.len();
            if self.c.remaining > 0 {
                let take = self.c.remaining.min(len - self.c.ready);
                self.c.ready += take;
                self.c.remaining -= take;
                continue;
            }
            let header = match peek_header(&self.client.rbuf[self.c.ready..], self.max_packet) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => {
                    return Err(RelayEnd::Fatal {
                        notice: ClientNotice::new(
                            sqlstate::PROTOCOL_VIOLATION,
                            format!("bad packet header: {e}"),
                        ),
                        server_clean: false,
                    })
                }
            };
            match header.tag {
                frontend_tag::TERMINATE => {
                    self.client_done = true;
                    break;
                }
                frontend_tag::QUERY | frontend_tag::FUNCTION_CALL => self.request_sent(false),
                frontend_tag::SYNC => self.request_sent(true),
                frontend_tag::PARSE
                | frontend_tag::BIND
                | frontend_tag::DESCRIBE
                | frontend_tag::EXECUTE
                | frontend_tag::CLOSE => {
                    self.unsynced = true;
                    self.mark_query_start();
                }
                _ => {}
            }
            let total = header.total_len();
            let avail = len - self.c.ready;
            let take = total.min(avail);
            self.c.ready += take;
            self.c.remaining = total - take;
        }
        Ok(())
    }

    fn mark_query_start(&mut self) {
        let now = Instant::now();
        if self.query_started.is_none() {
            self.query_started = Some(now);
        }
        if self.xact_started.is_none() {
            self.xact_started = Some(now);
        }
    }

    fn request_sent(&mut self, sync: bool) {
        self.pending_rfq += 1;
        if sync {
            self.unsynced = false;
        }
        self.mark_query_start();
    }

    /// Inspect newly read server bytes: ReadyForQuery ends a request (and maybe the transaction),
    /// ParameterStatus updates both the server's and the client's parameter cache.
    fn scan_server(&mut self) -> Result<(), RelayEnd> {
        loop {
            let len = self.server.rbuf.len();
            if self.s.ready >= len {
                return Ok(());
            }
            if self.s.remaining > 0 {
                let take = self.s.remaining.min(len - self.s.ready);
                self.s.ready += take;
                self.s.remaining -= take;
                continue;
            }
            let header = match peek_header(&self.server.rbuf[self.s.ready..], self.max_packet) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(()),
                Err(_) => return Err(self.server_gone()),
            };
            let total = header.total_len();
            let inspect = matches!(
                header.tag,
                backend_tag::READY_FOR_QUERY | backend_tag::PARAMETER_STATUS
            );
            if inspect {
                if total > INSPECT_MAX {
                    return Err(self.server_gone());
                }
                if len - self.s.ready < total {
                    return Ok(());
                }
                let body = &self.server.rbuf[self.s.ready + 5..self.s.ready + total];
                if header.tag == backend_tag::READY_FOR_QUERY {
                    let status = decode_ready_for_query(body).map_err(|_| self.server_gone())?;
                    self.s.ready += total;
                    self.ready_for_query(status)?;
                    continue;
                }
                if let Ok((k, v)) = decode_parameter_status(body) {
                    self.server.params.set(k, v);
                    if let Some(name) = self.tracked.canonical(k) {
                        self.client_params.set(name, v);
                    }
                }
            }
            let take = total.min(len - self.s.ready);
            self.s.ready += take;
            self.s.remaining = total - take;
        }
    }

    fn ready_for_query(&mut self, status: TransactionStatus) -> Result<(), RelayEnd> {
        let now = Instant::now();
        self.server.status = status;
        self.pending_rfq = self.pending_rfq.saturating_sub(1);
        self.last_activity = now;
        if self.pending_rfq == 0 {
            if let Some(t) = self.query_started.take() {
                PoolStats::add(&self.stats.query_count, 1);
                PoolStats::add(&self.stats.query_time_us, (now - t).as_micros() as u64);
            }
        }
        if status == TransactionStatus::Idle {
            if let Some(t) = self.xact_started.take() {
                PoolStats::add(&self.stats.xact_count, 1);
                PoolStats::add(&self.stats.xact_time_us, (now - t).as_micros() as u64);
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
    fn current_deadline(&self) -> Option<(Instant, &'static str)> {
        let t = &self.timeouts;
        if self.pending_rfq > 0 || self.unsynced {
            if let (Some(q), Some(start)) = (t.query_timeout, self.query_started) {
                return Some((start + q, "query timeout"));
            }
        } else if self.server.status != TransactionStatus::Idle {
            let idle = t
                .idle_transaction_timeout
                .map(|d| (self.last_activity + d, "idle transaction timeout"));
            let xact = match (t.transaction_timeout, self.xact_started) {
                (Some(d), Some(s)) => Some((s + d, "transaction timeout")),
                _ => None,
            };
            return match (idle, xact) {
                (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                (a, b) => a.or(b),
            };
        } else if self.mode == PoolMode::Session {
            return t
                .client_idle_timeout
                .map(|d| (self.last_activity + d, "client_idle_timeout"));
        }
        None
    }

    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let Some((at, reason)) = self.current_deadline() else {
            return Poll::Pending;
        };
        if self.deadline != Some(at) {
            self.deadline = Some(at);
            self.sleep.as_mut().reset(at);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let server_clean = reason == "client_idle_timeout" && self.server_clean();
                let code = if reason == "idle transaction timeout" {
                    sqlstate::IDLE_IN_TRANSACTION_TIMEOUT
                } else if reason == "query timeout" {
                    sqlstate::QUERY_CANCELED
                } else {
                    sqlstate::PROTOCOL_VIOLATION
                };
                Poll::Ready(RelayEnd::Fatal {
                    notice: ClientNotice::new(code, reason),
                    server_clean,
                })
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

fn reserve(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(READ_CHUNK);
    }
}
