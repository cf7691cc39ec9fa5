//! The client connection as every layer sees it: its socket, buffers, peer and TLS facts
//! (`ClientConn`), its log label, and how its session ended (`EndReason`). A leaf: it knows
//! nothing of the phases (`client/`), the admin console, the relay or TLS setup that use it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sluice_protocol::{encode_error, encode_error_fields, Severity};
use tokio::io::AsyncWriteExt;

use crate::error::ClientNotice;
use crate::ids::ClientId;
use crate::lifecycle::suspend::SuspendGate;
use crate::net::{PeerAddr, Stream};

/// Read buffer growth on a client's socket: clients mostly send short requests (PgBouncer's
/// pkt_buf is 4 KiB). The relay grows server buffers by its own, larger `READ_CHUNK`.
pub const CLIENT_READ_CHUNK: usize = 4 * 1024;

/// The client's socket and buffers.
pub struct ClientConn {
    pub id: ClientId,
    pub stream: Stream,
    /// Bytes read from the client and not yet forwarded or handled.
    pub rbuf: BytesMut,
    /// Messages the pooler composes for the client.
    pub wbuf: BytesMut,
    pub peer: PeerAddr,
    /// Database and user once the startup packet named them, for log lines (see `label`).
    pub names: Option<ClientNames>,
    /// SUSPEND: where the idle loop and the relay stop reading (carried here so that the relay
    /// reaches it without another argument).
    pub suspend: Arc<SuspendGate>,
    /// TLS facts of this connection (None: plaintext), for auth and HBA rules.
    pub tls: Option<Box<TlsFacts>>,
    /// A relay ended with the client's stream in the middle of a message (a server lost or a
    /// timeout mid-row): no FATAL may follow, the connection only closes
    /// (`RelayScratch::client_mid_message`).
    pub mid_message: bool,
}

impl ClientConn {
    pub fn new(id: ClientId, stream: Stream, peer: PeerAddr, suspend: Arc<SuspendGate>) -> Self {
        ClientConn {
            id,
            stream,
            // None until bytes arrive: reads take one from the worker's spares once the socket
            // is readable (`Stream::read_when_ready`) and give it back while waiting, so a
            // login waiting for its client holds none (a connection storm's peak memory), and
            // it goes back there on drop (`Drop`).
            rbuf: BytesMut::new(),
            // Grown by the first message composed for the client.
            wbuf: BytesMut::new(),
            peer,
            names: None,
            suspend,
            tls: None,
            mid_message: false,
        }
    }

    /// "db/user@addr" ("@addr" before the startup packet) for log lines. Formatted only when a line
    /// is written: formatting the address costs more than the rest of a login's bookkeeping.
    pub fn label(&self) -> Label<'_> {
        Label {
            peer: &self.peer,
            names: self.names.as_ref(),
        }
    }

    /// Write whatever was composed in `wbuf`.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Send a FATAL error (best effort, bounded in time) before closing; nothing when the stream
    /// stopped mid-message (`mid_message`).
    pub async fn send_fatal(&mut self, notice: &ClientNotice) {
        if self.mid_message {
            tracing::debug!(
                "C-{}: the FATAL is not sent: the client's stream stopped mid-message",
                self.id
            );
            return;
        }
        match &notice.forwarded {
            Some(fields) => encode_error_fields(b'E', fields, &mut self.wbuf),
            None => encode_error(
                Severity::Fatal,
                &notice.sqlstate,
                &notice.message,
                notice.detail.as_deref(),
                notice.hint.as_deref(),
                &mut self.wbuf,
            ),
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.flush()).await;
    }
}

impl Drop for ClientConn {
    fn drop(&mut self) {
        if self.rbuf.capacity() > 0 {
            crate::net::spare_buffers::give(std::mem::take(&mut self.rbuf), CLIENT_READ_CHUNK);
        }
    }
}

/// A client's database and user names, for its log lines: one allocation (a login used to make
/// three here: a box and two copies of the strings), the two names apart by a NUL, which neither
/// can hold (the startup packet's strings end at one). 16 bytes where it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientNames(Box<str>);

impl ClientNames {
    pub fn new(database: &str, user: &str) -> Self {
        let mut both = String::with_capacity(database.len() + 1 + user.len());
        both.push_str(database);
        both.push('\0');
        both.push_str(user);
        ClientNames(both.into_boxed_str())
    }

    fn split(&self) -> (&str, &str) {
        self.0.split_once('\0').unwrap_or((&self.0, ""))
    }
}

/// See [`ClientConn::label`]. Borrows only the two fields it shows, so that a relay holding the
/// connection's other fields mutably can still name the client in a log line.
#[derive(Clone, Copy)]
pub struct Label<'a> {
    pub peer: &'a PeerAddr,
    pub names: Option<&'a ClientNames>,
}

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.names.map(ClientNames::split) {
            Some((database, user)) => write!(f, "{database}/{user}@{}", self.peer),
            None => write!(f, "@{}", self.peer),
        }
    }
}

/// How a client session ended, for the disconnect log line.
#[derive(Debug)]
pub enum EndReason {
    /// Closed (or a cancel request) before any startup packet: TCP health checks, not logged.
    NoSession,
    /// The client sent Terminate (PgBouncer's `client close request`).
    ClientClosed,
    /// The client's socket closed or failed without a Terminate (`client unexpected eof`).
    ClientEof,
    LoginTimeout,
    Error(ClientNotice),
    Shutdown,
}

/// What the rest of the pooler may know about a client connection's TLS (auth, HBA rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFacts {
    /// Subject CN of the client certificate, when one was presented and verified.
    pub peer_cert_cn: Option<String>,
    /// tls-server-end-point data of our certificate, for SCRAM-SHA-256-PLUS.
    pub channel_binding: Option<Vec<u8>>,
    /// PgBouncer's `tls` column text ("TLSv1.3/TLS_AES_256_GCM_SHA384", "TLSv1.2/.../ECDH=X25519").
    pub description: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_both_parts_and_label_a_client() {
        let peer = PeerAddr::Tcp("10.0.0.7:5000".parse().unwrap());
        // A database name may hold a slash; the two names are kept apart all the same.
        let n = ClientNames::new("app/db", "alice");
        assert_eq!(n.split(), ("app/db", "alice"));
        let label = Label {
            peer: &peer,
            names: Some(&n),
        };
        assert_eq!(label.to_string(), "app/db/alice@10.0.0.7:5000");
        let empty = ClientNames::new("", "");
        assert_eq!(empty.split(), ("", ""));
        let before = Label {
            peer: &peer,
            names: None,
        };
        assert_eq!(before.to_string(), "@10.0.0.7:5000");
        assert_eq!(std::mem::size_of::<Option<ClientNames>>(), 16);
    }
}
