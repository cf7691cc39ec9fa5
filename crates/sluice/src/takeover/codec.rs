//! The takeover protocol's messages and the state of a client handed over, as bytes. No IO: the
//! socket side (`link.rs`) sends a message's bytes with its descriptors attached (SCM_RIGHTS).
//!
//! A frame is a tag byte, a big-endian u32 body length and the body. Integers are big-endian;
//! strings and byte strings are a u32 length and the bytes (strings must be UTF-8); a list is a
//! u32 count and its items. Every length is checked against what is left of the frame before
//! anything is allocated, and a frame is at most `MAX_FRAME` bytes.

use std::net::SocketAddr;

use sluice_protocol::{ScramKeys, ScramSecret, StoredSecret};

use crate::net::PeerAddr;

/// The protocol version both sides must speak (Hello).
pub const VERSION: u32 = 1;

/// The largest frame body accepted (a client's prepared statements may be long texts).
pub const MAX_FRAME: usize = 64 << 20;

const HEADER: usize = 5;

/// What a listening socket handed over is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    Tcp,
    Unix,
    Metrics,
    Control,
}

/// A listening socket as the offer describes it (its descriptor travels with the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerDesc {
    pub kind: ListenerKind,
    /// The worker that accepted on it (TCP: its place in the SO_REUSEPORT group).
    pub worker: u16,
    /// Its accept loop steers the SO_REUSEPORT group (`workers::steer`).
    pub steers: bool,
    /// The address (TCP) or path (Unix, control), for logs and for removing the file at exit.
    pub addr: String,
}

/// One named prepared statement of a client (protocol level).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementState {
    pub name: String,
    pub query: String,
    pub param_types: Vec<u32>,
}

/// A logged-in client between two transactions, as the old process hands it over (its socket
/// travels with the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientState {
    /// The old process's id for it; the new process's Ack names it.
    pub id: u64,
    pub peer: PeerAddr,
    pub local_addr: Option<SocketAddr>,
    pub database: String,
    /// The user the client logged in as.
    pub user: String,
    /// The parameters the client expects (startup values, tracked values it changed since).
    pub params: Vec<(String, String)>,
    /// Committed SETs the session tracker replays on each new server: (key, statement).
    pub tracked_sets: Vec<(String, String)>,
    pub statements: Vec<StatementState>,
    /// The cancel key the client was given at login.
    pub cancel_key: [u8; 8],
    /// Bytes the client already sent that no server has seen (the start of its next request).
    pub pending: Vec<u8>,
    /// The secret its pool logs in to the server with, when the database has no forced user
    /// (auth_query secrets are not known to the new process).
    pub server_secret: Option<StoredSecret>,
    /// SCRAM pass-through keys its pool logs in with.
    pub scram_keys: Option<ScramKeys>,
}

/// A message on the takeover socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// new → old: the first message.
    Hello { version: u32, pid: u32 },
    /// old → new: no takeover now, and why.
    Refused { reason: String },
    /// old → new: the listening sockets (one descriptor per entry, in order).
    Offer {
        pid: u32,
        /// Its workers taking clients now (the successor starts with as many).
        active_workers: u16,
        listeners: Vec<ListenerDesc>,
    },
    /// new → old: ready; stop accepting and hand the clients over.
    Take,
    /// old → new: stopped accepting; accept from now on.
    Taken,
    /// old → new: a client (one descriptor: its socket).
    Client(Box<ClientState>),
    /// new → old: whether the client was taken (`reason` when not).
    Ack {
        id: u64,
        taken: bool,
        reason: String,
    },
    /// new → old: a cancel request for a client still in the old process.
    Cancel { seq: u64, key: [u8; 8] },
    /// old → new: the cancel request `seq` was forwarded (or its key was unknown).
    CancelDone { seq: u64 },
}

/// A frame that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("takeover message of {0} bytes is over the limit")]
    TooLong(usize),
    #[error("unknown takeover message type {0}")]
    UnknownTag(u8),
    #[error("takeover message {0} is malformed")]
    Malformed(&'static str),
}

mod tag {
    pub const HELLO: u8 = b'H';
    pub const REFUSED: u8 = b'R';
    pub const OFFER: u8 = b'O';
    pub const TAKE: u8 = b'T';
    pub const TAKEN: u8 = b't';
    pub const CLIENT: u8 = b'C';
    pub const ACK: u8 = b'A';
    pub const CANCEL: u8 = b'X';
    pub const CANCEL_DONE: u8 = b'x';
}

impl Msg {
    /// How many descriptors travel with this message.
    pub fn fd_count(&self) -> usize {
        match self {
            Msg::Offer { listeners, .. } => listeners.len(),
            Msg::Client(_) => 1,
            _ => 0,
        }
    }

    /// The frame of this message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(64));
        let t = match self {
            Msg::Hello { version, pid } => {
                w.u32(*version);
                w.u32(*pid);
                tag::HELLO
            }
            Msg::Refused { reason } => {
                w.str(reason);
                tag::REFUSED
            }
            Msg::Offer {
                pid,
                active_workers,
                listeners,
            } => {
                w.u32(*pid);
                w.u16(*active_workers);
                w.u32(listeners.len() as u32);
                for l in listeners {
                    w.u8(match l.kind {
                        ListenerKind::Tcp => 0,
                        ListenerKind::Unix => 1,
                        ListenerKind::Metrics => 2,
                        ListenerKind::Control => 3,
                    });
                    w.u16(l.worker);
                    w.u8(l.steers.into());
                    w.str(&l.addr);
                }
                tag::OFFER
            }
            Msg::Take => tag::TAKE,
            Msg::Taken => tag::TAKEN,
            Msg::Client(c) => {
                encode_client(c, &mut w);
                tag::CLIENT
            }
            Msg::Ack { id, taken, reason } => {
                w.u64(*id);
                w.u8((*taken).into());
                w.str(reason);
                tag::ACK
            }
            Msg::Cancel { seq, key } => {
                w.u64(*seq);
                w.0.extend_from_slice(key);
                tag::CANCEL
            }
            Msg::CancelDone { seq } => {
                w.u64(*seq);
                tag::CANCEL_DONE
            }
        };
        let body = w.0;
        let mut frame = Vec::with_capacity(HEADER + body.len());
        frame.push(t);
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        frame
    }

    /// The first frame of `buf`: the message and the bytes it took, `None` while incomplete.
    pub fn decode(buf: &[u8]) -> Result<Option<(Msg, usize)>, CodecError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_FRAME {
            return Err(CodecError::TooLong(len));
        }
        if buf.len() < HEADER + len {
            return Ok(None);
        }
        let mut r = Reader {
            buf: &buf[HEADER..HEADER + len],
            what: "",
        };
        let msg = match buf[0] {
            tag::HELLO => {
                r.what = "Hello";
                Msg::Hello {
                    version: r.u32()?,
                    pid: r.u32()?,
                }
            }
            tag::REFUSED => {
                r.what = "Refused";
                Msg::Refused { reason: r.str()? }
            }
            tag::OFFER => {
                r.what = "Offer";
                let pid = r.u32()?;
                let active_workers = r.u16()?;
                let n = r.count(8)?;
                let mut listeners = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = match r.u8()? {
                        0 => ListenerKind::Tcp,
                        1 => ListenerKind::Unix,
                        2 => ListenerKind::Metrics,
                        3 => ListenerKind::Control,
                        _ => return Err(CodecError::Malformed("Offer")),
                    };
                    listeners.push(ListenerDesc {
                        kind,
                        worker: r.u16()?,
                        steers: r.bool()?,
                        addr: r.str()?,
                    });
                }
                Msg::Offer {
                    pid,
                    active_workers,
                    listeners,
                }
            }
            tag::TAKE => Msg::Take,
            tag::TAKEN => Msg::Taken,
            tag::CLIENT => {
                r.what = "Client";
                Msg::Client(Box::new(decode_client(&mut r)?))
            }
            tag::ACK => {
                r.what = "Ack";
                Msg::Ack {
                    id: r.u64()?,
                    taken: r.bool()?,
                    reason: r.str()?,
                }
            }
            tag::CANCEL => {
                r.what = "Cancel";
                Msg::Cancel {
                    seq: r.u64()?,
                    key: r.array()?,
                }
            }
            tag::CANCEL_DONE => {
                r.what = "CancelDone";
                Msg::CancelDone { seq: r.u64()? }
            }
            t => return Err(CodecError::UnknownTag(t)),
        };
        if !r.buf.is_empty() {
            return Err(r.malformed());
        }
        Ok(Some((msg, HEADER + len)))
    }
}

fn encode_client(c: &ClientState, w: &mut Writer) {
    w.u64(c.id);
    match &c.peer {
        PeerAddr::Tcp(a) => {
            w.u8(0);
            w.str(&a.to_string());
        }
        PeerAddr::Unix { pid } => {
            w.u8(1);
            w.u32(pid.map_or(0, |p| p as u32));
        }
    }
    w.str(&c.local_addr.map(|a| a.to_string()).unwrap_or_default());
    w.str(&c.database);
    w.str(&c.user);
    w.pairs(&c.params);
    w.pairs(&c.tracked_sets);
    w.u32(c.statements.len() as u32);
    for s in &c.statements {
        w.str(&s.name);
        w.str(&s.query);
        w.u32(s.param_types.len() as u32);
        for t in &s.param_types {
            w.u32(*t);
        }
    }
    w.0.extend_from_slice(&c.cancel_key);
    w.bytes(&c.pending);
    match &c.server_secret {
        None => w.u8(0),
        Some(StoredSecret::Plain(p)) => {
            w.u8(1);
            w.str(p);
        }
        Some(StoredSecret::Md5(m)) => {
            w.u8(2);
            w.str(m);
        }
        Some(StoredSecret::Scram(s)) => {
            w.u8(3);
            w.u32(s.iterations);
            w.bytes(&s.salt);
            w.0.extend_from_slice(&s.stored_key);
            w.0.extend_from_slice(&s.server_key);
        }
    }
    match &c.scram_keys {
        None => w.u8(0),
        Some(k) => {
            w.u8(1);
            w.0.extend_from_slice(&k.client_key);
            w.0.extend_from_slice(&k.server_key);
        }
    }
}

fn decode_client(r: &mut Reader<'_>) -> Result<ClientState, CodecError> {
    let id = r.u64()?;
    let peer = match r.u8()? {
        0 => PeerAddr::Tcp(r.addr()?),
        1 => PeerAddr::Unix {
            pid: match r.u32()? {
                0 => None,
                p => Some(i32::try_from(p).map_err(|_| r.malformed())?),
            },
        },
        _ => return Err(r.malformed()),
    };
    let local = r.str()?;
    let local_addr = if local.is_empty() {
        None
    } else {
        Some(local.parse().map_err(|_| r.malformed())?)
    };
    let database = r.str()?;
    let user = r.str()?;
    let params = r.pairs()?;
    let tracked_sets = r.pairs()?;
    let n = r.count(12)?;
    let mut statements = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        let query = r.str()?;
        let types = r.count(4)?;
        let mut param_types = Vec::with_capacity(types);
        for _ in 0..types {
            param_types.push(r.u32()?);
        }
        statements.push(StatementState {
            name,
            query,
            param_types,
        });
    }
    let cancel_key = r.array()?;
    let pending = r.bytes()?.to_vec();
    let server_secret = match r.u8()? {
        0 => None,
        1 => Some(StoredSecret::Plain(r.str()?)),
        2 => Some(StoredSecret::Md5(r.str()?)),
        3 => Some(StoredSecret::Scram(ScramSecret {
            iterations: r.u32()?,
            salt: r.bytes()?.to_vec(),
            stored_key: r.array()?,
            server_key: r.array()?,
        })),
        _ => return Err(r.malformed()),
    };
    let scram_keys = match r.u8()? {
        0 => None,
        1 => Some(ScramKeys {
            client_key: r.array()?,
            server_key: r.array()?,
        }),
        _ => return Err(r.malformed()),
    };
    Ok(ClientState {
        id,
        peer,
        local_addr,
        database,
        user,
        params,
        tracked_sets,
        statements,
        cancel_key,
        pending,
        server_secret,
        scram_keys,
    })
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn pairs(&mut self, pairs: &[(String, String)]) {
        self.u32(pairs.len() as u32);
        for (k, v) in pairs {
            self.str(k);
            self.str(v);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn malformed(&self) -> CodecError {
        CodecError::Malformed(if self.what.is_empty() {
            "frame"
        } else {
            self.what
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.buf.len() < n {
            return Err(self.malformed());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }
    fn bool(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.malformed()),
        }
    }
    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A list's count, each item at least `min_item` bytes: a count the rest cannot hold is
    /// refused before anything is reserved for it.
    fn count(&mut self, min_item: usize) -> Result<usize, CodecError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.buf.len() {
            return Err(self.malformed());
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn str(&mut self) -> Result<String, CodecError> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| self.malformed())
    }

    fn addr(&mut self) -> Result<SocketAddr, CodecError> {
        self.str()?.parse().map_err(|_| self.malformed())
    }

    fn pairs(&mut self) -> Result<Vec<(String, String)>, CodecError> {
        let n = self.count(8)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push((self.str()?, self.str()?));
        }
        Ok(v)
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
pub(crate) mod tests;
