//! A stateful check of the relay's protocol core (`RelayCore`), for the fuzzer
//! (`fuzz/fuzz_targets/relay.rs`) and a seeded unit test: the input bytes script a client (well-
//! formed messages from a menu, and raw ones), the chunks in which bytes cross each way, and when
//! a small model of PostgreSQL (`Backend`) answers what reached it. Whenever the relay says the
//! server may be reused (released, or a client gone or refused with `clean`), the model must agree:
//! idle, not in COPY, not skipping to a Sync, every request answered and every reply read. And the
//! model fails the run when the relay forwards a message type undefined where the server is.
//! The script may also lose the server mid-relay (`lost.rs`): the client's reply must then be whole
//! messages, its errors ERRORs (not FATALs), and what the client sends next is answered without a
//! server (`after_loss.rs`) until it hands over, with whole messages too.
//!
//! Compiled for tests and with the crate's `fuzzing` feature only.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use sluice_config::PoolMode;
use sluice_protocol::{frontend_tag, CancelKey, TransactionStatus};
use tokio::time::Instant;

use super::core::{ClientSide, RelayCore, RelayRules, ServerSide, SessionParts};
use super::{Prepared, RelayEnd, RelayScratch};
use crate::pool::RelayTimeouts;
use crate::prepared::{ClientStatements, ServerStatements, StatementRegistry};
use crate::server::params::{ParamMap, TrackedSet};
use crate::server::ServerAddr;
use crate::session_state::tracker::SessionTracker;
use crate::stats::PoolStats;

/// The input, read a byte at a time (0 once it runs out).
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

fn frame(tag: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
}

fn cstr(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

const QUERIES: [&str; 11] = [
    "select 1",
    "begin",
    "commit",
    "copy t from stdin",
    "syntax error",
    "set application_name = 'x'",
    "select 1; select 2",
    "rollback",
    // Read with the values of its Binds (session_state/bound.rs).
    "select set_config('a.b', $1, false)",
    "commit and chain",
    // A sequence read: behind DISCARD SEQUENCES when the server is foreign (flag 16).
    "select lastval()",
];
const NAMES: [&str; 3] = ["", "s1", "s2"];

/// One client message from the menu (or a raw one), appended to `out`.
fn client_message(s: &mut Script<'_>, out: &mut Vec<u8>) {
    let mut body = Vec::new();
    match s.byte() % 14 {
        0 => {
            cstr(QUERIES[s.byte() as usize % QUERIES.len()], &mut body);
            frame(b'Q', &body, out);
        }
        1 => {
            cstr(NAMES[s.byte() as usize % NAMES.len()], &mut body);
            cstr(QUERIES[s.byte() as usize % QUERIES.len()], &mut body);
            body.extend_from_slice(&[0, 0]);
            frame(b'P', &body, out);
        }
        2 => {
            body.push(0); // unnamed portal
            cstr(NAMES[s.byte() as usize % NAMES.len()], &mut body);
            if s.byte().is_multiple_of(2) {
                body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            } else {
                // One text parameter (a NULL one, some of the time).
                body.extend_from_slice(&[0, 0, 0, 1]);
                if s.byte().is_multiple_of(4) {
                    body.extend_from_slice(&(-1i32).to_be_bytes());
                } else {
                    body.extend_from_slice(&1i32.to_be_bytes());
                    body.push(b'v');
                }
                body.extend_from_slice(&[0, 0]);
            }
            frame(b'B', &body, out);
        }
        3 => {
            body.push(if s.byte().is_multiple_of(2) {
                b'S'
            } else {
                b'P'
            });
            cstr(NAMES[s.byte() as usize % NAMES.len()], &mut body);
            frame(b'D', &body, out);
        }
        4 => {
            body.extend_from_slice(&[0, 0, 0, 0, 0]);
            frame(b'E', &body, out);
        }
        5 | 6 => frame(b'S', &[], out),
        7 => frame(b'H', &[], out),
        8 => {
            body.push(b'S');
            cstr(NAMES[s.byte() as usize % NAMES.len()], &mut body);
            frame(b'C', &body, out);
        }
        9 => frame(b'd', b"1\n", out),
        10 => frame(b'c', &[], out),
        11 => {
            cstr("stop", &mut body);
            frame(b'f', &body, out);
        }
        12 => frame(b'X', &[], out),
        _ => {
            // Anything: a tag and a short body, or a lying length word.
            let tag = s.byte();
            let n = s.byte() as usize % 8;
            if s.byte().is_multiple_of(8) {
                out.push(tag);
                out.extend_from_slice(&(0x4000_0000u32 | u32::from(s.byte())).to_be_bytes());
            } else {
                body.resize(n, b'x');
                frame(tag, &body, out);
            }
        }
    }
}

/// What a portal runs when executed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runs {
    Plain,
    Copy,
    Begin,
    End,
    /// COMMIT AND CHAIN: ends the transaction and starts the next.
    Chain,
    Error,
}

impl Runs {
    /// Runs in a failed transaction too (ends it).
    fn ends(self) -> bool {
        matches!(self, Runs::End | Runs::Chain)
    }
}

fn runs(sql: &str) -> Runs {
    match sql {
        "begin" => Runs::Begin,
        "commit" | "rollback" => Runs::End,
        "commit and chain" => Runs::Chain,
        "copy t from stdin" => Runs::Copy,
        "syntax error" => Runs::Error,
        _ => Runs::Plain,
    }
}

/// A small model of a PostgreSQL backend: what it does with each message it is sent.
#[derive(Default)]
struct Backend {
    input: Vec<u8>,
    output: VecDeque<u8>,
    in_tx: bool,
    failed_tx: bool,
    /// An extended-protocol error: everything up to the next Sync is skipped.
    skipping: bool,
    /// In COPY FROM STDIN; `Some(true)` when a simple Query started it (ReadyForQuery follows the
    /// copy), `Some(false)` when Execute did (the client's next Sync gets it).
    copy_in: Option<bool>,
    /// The unnamed portal's statement, once bound.
    portal: Option<Runs>,
    unnamed: Option<Runs>,
    named: HashMap<String, Runs>,
}

impl Backend {
    fn reply(&mut self, tag: u8, body: &[u8]) {
        let mut v = Vec::new();
        frame(tag, body, &mut v);
        self.output.extend(v);
    }

    fn ready(&mut self) {
        let s = if self.failed_tx {
            b'E'
        } else if self.in_tx {
            b'T'
        } else {
            b'I'
        };
        self.reply(b'Z', &[s]);
    }

    fn error(&mut self) {
        self.reply(b'E', b"SERROR\0C42601\0Mfails\0\0");
        if self.in_tx {
            self.failed_tx = true;
        }
    }

    fn execute(&mut self, r: Runs, simple: bool) {
        if self.failed_tx && !r.ends() {
            self.error();
            return;
        }
        match r {
            Runs::Plain => self.reply(b'C', b"SELECT 1\0"),
            Runs::Begin => {
                self.in_tx = true;
                self.reply(b'C', b"BEGIN\0");
            }
            Runs::End => {
                self.in_tx = false;
                self.failed_tx = false;
                self.reply(b'C', b"COMMIT\0");
            }
            Runs::Chain if !self.in_tx => self.error(),
            Runs::Chain => {
                let tag: &[u8] = if self.failed_tx {
                    b"ROLLBACK\0"
                } else {
                    b"COMMIT\0"
                };
                self.in_tx = true;
                self.failed_tx = false;
                self.reply(b'C', tag);
            }
            Runs::Copy => {
                self.copy_in = Some(simple);
                self.reply(b'G', &[0, 0, 0]);
            }
            Runs::Error => self.error(),
        }
    }

    /// Handle every whole message received. Panics when the relay forwarded a message type
    /// undefined after login (PostgreSQL would end the connection with a FATAL, and the next
    /// client of that server would get it) or Terminate.
    fn run(&mut self) {
        loop {
            if self.input.len() < 5 {
                return;
            }
            let len =
                u32::from_be_bytes([self.input[1], self.input[2], self.input[3], self.input[4]])
                    as usize;
            assert!(len >= 4, "the relay forwarded a length word below 4");
            if self.input.len() < 1 + len {
                return;
            }
            let msg: Vec<u8> = self.input.drain(..1 + len).collect();
            self.handle(msg[0], &msg[5..]);
        }
    }

    fn handle(&mut self, tag: u8, body: &[u8]) {
        assert!(
            frontend_tag::is_defined_after_login(tag) && tag != b'X',
            "the relay forwarded message type {tag}"
        );
        if let Some(simple) = self.copy_in {
            match tag {
                b'd' | b'H' | b'S' => {} // Flush and Sync are ignored in COPY IN
                _ => {
                    // CopyDone ends the copy; CopyFail, or any other message (PostgreSQL:
                    // "unexpected message type during COPY from stdin"), fails it.
                    self.copy_in = None;
                    if tag == b'c' {
                        self.reply(b'C', b"COPY 1\0");
                    } else {
                        self.error();
                        self.skipping = !simple;
                    }
                    if simple {
                        self.ready();
                    }
                }
            }
            return;
        }
        // After an extended-protocol error every message but Sync is ignored.
        if self.skipping && tag != b'S' {
            return;
        }
        // A C string at the front of `b`, and what follows its NUL; None when there is no NUL.
        fn cstr_at(b: &[u8]) -> Option<(String, &[u8])> {
            let end = b.iter().position(|&c| c == 0)?;
            Some((
                String::from_utf8_lossy(&b[..end]).into_owned(),
                &b[end + 1..],
            ))
        }
        let malformed = |me: &mut Backend| {
            me.error();
            me.skipping = true;
        };
        match tag {
            b'Q' => {
                let sql = cstr_at(body).map(|(s, _)| s).unwrap_or_default();
                for p in sql.split("; ") {
                    let failed_before = self.failed_tx;
                    let r = runs(p);
                    self.execute(r, true);
                    if self.copy_in.is_some() || r == Runs::Error || (failed_before && !r.ends()) {
                        break;
                    }
                }
                if self.copy_in.is_none() {
                    self.ready();
                }
            }
            b'F' => {
                self.error();
                self.ready();
            }
            b'P' => {
                let Some((name, rest)) = cstr_at(body) else {
                    return malformed(self);
                };
                let Some((sql, _)) = cstr_at(rest) else {
                    return malformed(self);
                };
                if name.is_empty() {
                    self.unnamed = Some(runs(&sql));
                    self.reply(b'1', &[]);
                    return;
                }
                match self.named.entry(name) {
                    std::collections::hash_map::Entry::Occupied(_) => malformed(self),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(runs(&sql));
                        self.reply(b'1', &[]);
                    }
                }
            }
            b'B' => {
                let stmt = cstr_at(body)
                    .and_then(|(_, rest)| cstr_at(rest))
                    .map(|(s, _)| s);
                let r = match stmt.as_deref() {
                    Some("") => self.unnamed,
                    Some(name) => self.named.get(name).copied(),
                    None => None,
                };
                match r {
                    Some(r) => {
                        self.portal = Some(r);
                        self.reply(b'2', &[]);
                    }
                    None => malformed(self),
                }
            }
            b'D' => self.reply(b'n', &[]),
            b'E' => match self.portal {
                Some(r) => {
                    let failed_before = self.failed_tx;
                    self.execute(r, false);
                    if r == Runs::Error || (failed_before && !r.ends()) {
                        self.skipping = true;
                    }
                }
                None => malformed(self),
            },
            b'C' => {
                if let (Some(b'S'), Some((name, _))) =
                    (body.first(), cstr_at(body.get(1..).unwrap_or(&[])))
                {
                    self.named.remove(&name);
                }
                self.reply(b'3', &[]);
            }
            b'S' => {
                self.skipping = false;
                self.ready();
            }
            _ => {} // Flush; CopyData/CopyDone/CopyFail outside COPY are ignored
        }
    }

    /// Nothing received that is not handled, nothing to send, idle and not in COPY or skipping.
    fn reusable(&self) -> bool {
        self.input.is_empty()
            && self.output.is_empty()
            && !self.in_tx
            && !self.failed_tx
            && self.copy_in.is_none()
            && !self.skipping
    }
}

/// Everything a relay borrows, owned by the caller (this check and `core_tests.rs`).
pub(super) struct World {
    pub c_rbuf: BytesMut,
    pub s_rbuf: BytesMut,
    pub status: TransactionStatus,
    pub server_params: ParamMap,
    pub server_prepared: ServerStatements,
    addr: Arc<ServerAddr>,
    pub client_params: ParamMap,
    tracked: TrackedSet,
    pub stats: PoolStats,
    registry: StatementRegistry,
    pub statements: ClientStatements,
    pub tracker: SessionTracker,
    timeouts: RelayTimeouts,
    pub scratch: RelayScratch,
}

impl World {
    pub fn new() -> Self {
        World {
            c_rbuf: BytesMut::new(),
            s_rbuf: BytesMut::new(),
            status: TransactionStatus::Idle,
            server_params: ParamMap::new(),
            server_prepared: ServerStatements::default(),
            addr: Arc::new(ServerAddr::Tcp {
                host: "sim".into(),
                port: 5432,
            }),
            client_params: ParamMap::new(),
            tracked: TrackedSet::new(&[]),
            stats: PoolStats::default(),
            registry: StatementRegistry::default(),
            statements: ClientStatements::default(),
            tracker: SessionTracker::default(),
            timeouts: RelayTimeouts::default(),
            scratch: RelayScratch::default(),
        }
    }

    /// A relay in `mode` over this world's buffers, rewriting prepared statements when `rewrite`
    /// (transaction and statement mode also track session state, as the session sets them up,
    /// letting it pin when `may_pin`).
    pub fn relay(&mut self, mode: PoolMode, rewrite: bool, may_pin: bool) -> RelayCore<'_> {
        let pooled = mode != PoolMode::Session;
        RelayCore::new(
            ClientSide {
                rbuf: &mut self.c_rbuf,
            },
            ServerSide {
                rbuf: &mut self.s_rbuf,
                status: &mut self.status,
                params: &mut self.server_params,
                prepared: &mut self.server_prepared,
                addr: &self.addr,
                backend_key: CancelKey { pid: 1, secret: 1 },
            },
            SessionParts {
                client_params: &mut self.client_params,
                tracked: &self.tracked,
                stats: &self.stats,
                prepared: rewrite.then_some(Prepared {
                    registry: &self.registry,
                    client: &mut self.statements,
                    max_per_server: 2,
                }),
                tracking: pooled.then_some((&mut self.tracker, may_pin)),
                scratch: &mut self.scratch,
                shown: None,
            },
            RelayRules {
                mode,
                max_packet: 1 << 30,
                timeouts: &self.timeouts,
                refuse_simple_query: false,
                write_cap: 0,
            },
            Instant::now(),
        )
    }
}

/// How the relays of one script ended.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ends {
    /// The server went back to the pool (the backend agreed it was reusable).
    pub released: usize,
    /// The relay ended otherwise (client gone, refused, server gone).
    pub ended: usize,
    /// Of those, the server was lost and the client went on (`lost.rs`).
    pub lost: usize,
    /// Requests the relay sent behind a DISCARD SEQUENCES.
    pub discards: u64,
}

/// Run one scripted relay. Panics when the relay and the backend model disagree about whether
/// the server may be reused, or the relay forwarded what the backend must never see.
pub fn run(data: &[u8]) -> Ends {
    let mut w = World::new();
    let mut ends = run_in(data, &mut w);
    ends.discards = w
        .stats
        .sequence_discards
        .load(std::sync::atomic::Ordering::Relaxed);
    ends
}

fn run_in(data: &[u8], w: &mut World) -> Ends {
    let mut ends = Ends::default();
    let mut s = Script(data);
    let flags = s.byte();
    let mode = match flags % 3 {
        0 => PoolMode::Transaction,
        1 => PoolMode::Statement,
        _ => PoolMode::Session,
    };
    let rewrite = mode != PoolMode::Session && flags & 4 != 0;
    let mut backend = Backend::default();
    // Everything the client was sent, across the relays.
    let mut got = Vec::new();
    // Several relays in a row on one server, as transactions of one client would run.
    for _ in 0..8 {
        if s.done() {
            return ends;
        }
        if flags & 16 != 0 {
            // Another client used the server since: a sequence read goes behind DISCARD SEQUENCES.
            w.scratch.sequences_foreign();
        }
        let mut relay = w.relay(mode, rewrite, flags & 8 != 0);
        let mut wire = Vec::new();
        client_message(&mut s, &mut wire);
        let end = drive(&mut s, &mut relay, &mut backend, &mut wire, &mut got);
        let clean = match &end {
            Some(RelayEnd::Released) | Some(RelayEnd::PinCheck) => true,
            Some(RelayEnd::ClientGone { clean, .. }) => *clean,
            Some(RelayEnd::Fatal { server_clean, .. }) => *server_clean,
            Some(RelayEnd::ServerGone(_)) | Some(RelayEnd::ServerLost(_)) | None => false,
        };
        if clean {
            assert!(
                backend.reusable(),
                "the relay called the server clean ({end:?}) while the backend is not: in_tx {} \
                 failed {} copy {:?} skipping {} unread input {} unsent output {}",
                backend.in_tx,
                backend.failed_tx,
                backend.copy_in,
                backend.skipping,
                backend.input.len(),
                backend.output.len()
            );
        }
        drop(relay);
        let end = match end {
            Some(RelayEnd::ServerLost(lost)) => {
                check_after_loss(*lost, w, &wire, &got);
                ends.ended += 1;
                ends.lost += 1;
                return ends;
            }
            end => end,
        };
        match end {
            Some(RelayEnd::Released) | Some(RelayEnd::PinCheck) => {
                // The next transaction starts with a fresh request.
                ends.released += 1;
                w.c_rbuf.clear();
            }
            Some(_) => {
                ends.ended += 1;
                return ends;
            }
            None => return ends,
        }
    }
    ends
}

/// The answer a client gets after its server was lost, and to what it sends next, is whole
/// messages; the errors among them are ERRORs (the connection goes on).
fn check_after_loss(lost: super::lost::ServerLost, w: &mut World, wire: &[u8], got: &[u8]) {
    fn whole(all: &[u8]) {
        let mut b = all;
        while !b.is_empty() {
            assert!(b.len() >= 5, "a partial header: {b:?} in {all:?}");
            let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            assert!(
                len >= 4 && b.len() > len,
                "a partial message: {b:?} in {all:?}"
            );
            if b[0] == b'E' {
                let f = sluice_protocol::decode_error_fields(&b[5..1 + len]).unwrap();
                assert_eq!(f.severity, "ERROR");
            }
            b = &b[1 + len..];
        }
    }
    // The reply may finish a message the client got the start of.
    whole(&[got, &lost.reply[..]].concat());
    // What the client sends next: its buffered bytes, then the rest of the script's.
    let mut next: Vec<u8> = [&w.c_rbuf[..], wire].concat();
    next.drain(..lost.client_skip.min(next.len()));
    let mut state = lost.state;
    let mut out = BytesMut::new();
    let mut b = &next[..];
    while b.len() >= 5 {
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        if len < 4 || b.len() < 1 + len {
            break;
        }
        if !frontend_tag::is_defined_after_login(b[0]) {
            break; // the session ends such a client before this state sees it
        }
        let body = &b[5..1 + len];
        let mut named = Some(Prepared {
            registry: &w.registry,
            client: &mut w.statements,
            max_per_server: 2,
        });
        let mut step = state.on_message(b[0], None, named.as_mut(), &mut out);
        if step == super::after_loss::Step::NeedBody {
            step = state.on_message(b[0], Some(body), named.as_mut(), &mut out);
            assert_eq!(step, super::after_loss::Step::Consumed);
        }
        if step == super::after_loss::Step::HandOff {
            assert!(state.is_done() || b[0] == frontend_tag::TERMINATE);
            break;
        }
        b = &b[1 + len..];
    }
    whole(&out);
}

/// Move bytes as the script says until the relay ends (Some) or the script runs out (None).
fn drive(
    s: &mut Script<'_>,
    relay: &mut RelayCore<'_>,
    backend: &mut Backend,
    wire: &mut Vec<u8>,
    got: &mut Vec<u8>,
) -> Option<RelayEnd> {
    let mut started = false;
    let mut steps = 0;
    while !s.done() && steps < 400 {
        steps += 1;
        let r: Result<(), RelayEnd> = match s.byte() % 8 {
            // The server is lost (closed, or its FATAL arrived), rarely.
            7 if s.byte() < 16 && started => Err(relay.server_lost("sim")),
            7 => Ok(()),
            // The client writes another message.
            0 => {
                client_message(s, wire);
                Ok(())
            }
            // Some of the client's bytes arrive.
            1 | 2 => {
                let n = (usize::from(s.byte()) + 1).min(wire.len());
                if n == 0 {
                    Ok(())
                } else {
                    match relay.client_wants(64 * 1024) {
                        Some(buf) => {
                            buf.put_slice(&wire[..n]);
                            wire.drain(..n);
                            if started {
                                relay.read_from_client(n)
                            } else {
                                started = true;
                                relay.start()
                            }
                        }
                        None => Ok(()),
                    }
                }
            }
            // The relay writes to the server (some or all), which handles what it got.
            3 => {
                let (a, b) = relay.to_server();
                let all: Vec<u8> = [a, b].concat();
                let n = (usize::from(s.byte()) * 4 + 1).min(all.len());
                backend.input.extend_from_slice(&all[..n]);
                relay.wrote_to_server(n);
                backend.run();
                relay.after_writes()
            }
            // Some of the server's replies arrive.
            4 | 5 => {
                let n = (usize::from(s.byte()) + 1).min(backend.output.len());
                match relay.server_wants(64 * 1024) {
                    Some(buf) if n > 0 => {
                        buf.extend(backend.output.drain(..n));
                        relay.read_from_server()
                    }
                    _ => Ok(()),
                }
            }
            // The relay writes to the client (the client reads everything).
            _ => {
                let (a, b) = relay.to_client();
                let n = a.len() + b.len();
                got.extend_from_slice(a);
                got.extend_from_slice(b);
                relay.wrote_to_client(n);
                relay.after_writes()
            }
        };
        if let Err(end) = r {
            return Some(end);
        }
        if started {
            if let Some(end) = relay.outcome() {
                return Some(end);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    /// The fuzz target's check over pseudo-random scripts (a fixed seed: the same scripts every
    /// run); the fuzzer explores further (`scripts/fuzz.sh`).
    #[test]
    fn the_relay_never_calls_a_busy_server_clean() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut total = super::Ends::default();
        for _ in 0..6000 {
            let len = 20 + (x % 300) as usize;
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            let e = super::run(&data);
            total.released += e.released;
            total.ended += e.ended;
            total.lost += e.lost;
            total.discards += e.discards;
        }
        // The scripts must reach the interesting ends, or the check checks nothing.
        assert!(total.released > 1000 && total.ended > 1000, "{total:?}");
        assert!(total.lost > 100, "{total:?}");
        assert!(total.discards > 10, "{total:?}");
    }
}
