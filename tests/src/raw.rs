//! Raw PostgreSQL wire-protocol client for bad-input tests.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A plain TCP connection to 127.0.0.1:`port` with a read buffer.
#[derive(Debug)]
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    /// Connect to 127.0.0.1:`port`; panics if the connection is refused.
    pub async fn connect(port: u16) -> RawConn {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("RawConn connect 127.0.0.1:{port}: {e}"));
        let _ = stream.set_nodelay(true);
        RawConn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Send bytes; write errors (peer already closed) are ignored, reads will report the close.
    pub async fn send(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
        let _ = self.stream.flush().await;
    }

    /// Half-close: no more bytes from us (the peer reads EOF); reading still works.
    pub async fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown().await;
    }

    /// Read more bytes into the buffer until `deadline`. Ok(false) on EOF/reset, Err(()) on timeout.
    async fn fill(&mut self, deadline: Instant) -> Result<bool, ()> {
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
            Err(_) => Err(()),
            Ok(Ok(0)) | Ok(Err(_)) => Ok(false),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
        }
    }

    /// Read until the peer closes or `timeout`; returns the bytes read (including any buffered by
    /// earlier calls) and whether the peer closed (EOF or reset).
    pub async fn read_until_close(&mut self, timeout: Duration) -> (Vec<u8>, bool) {
        let deadline = Instant::now() + timeout;
        let closed = loop {
            match self.fill(deadline).await {
                Ok(true) => continue,
                Ok(false) => break true,
                Err(()) => break false,
            }
        };
        (std::mem::take(&mut self.buf), closed)
    }

    /// Read exactly `n` bytes (e.g. the single 'S'/'N' answer to an SSLRequest); `None` on timeout/close.
    pub async fn read_bytes(&mut self, n: usize, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            if self.fill(deadline).await != Ok(true) {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Read one backend message (tag, body without the length); `None` on timeout or close.
    pub async fn read_message(&mut self, timeout: Duration) -> Option<(u8, Vec<u8>)> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
                let total = 1 + len as usize;
                if len >= 4 && self.buf.len() >= total {
                    let tag = self.buf[0];
                    let body = self.buf[5..total].to_vec();
                    self.buf.drain(..total);
                    return Some((tag, body));
                }
            }
            if self.fill(deadline).await != Ok(true) {
                return None;
            }
        }
    }

    /// StartupMessage for protocol 3.0 with the given parameters.
    pub fn startup_packet(params: &[(&str, &str)]) -> Vec<u8> {
        let mut body = 196_608u32.to_be_bytes().to_vec();
        for (k, v) in params {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// SSLRequest packet (length 8, code 80877103).
    pub fn ssl_request() -> Vec<u8> {
        let mut out = 8u32.to_be_bytes().to_vec();
        out.extend_from_slice(&80_877_103u32.to_be_bytes());
        out
    }

    /// A tagged frontend message: tag, int32 length (body + 4), body.
    pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }
}

/// Parse an ErrorResponse/NoticeResponse body into field code -> value ('C' SQLSTATE, 'M' message, ...).
pub fn error_fields(body: &[u8]) -> HashMap<u8, String> {
    let mut out = HashMap::new();
    let mut rest = body;
    while let Some((&code, tail)) = rest.split_first() {
        if code == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        out.insert(code, String::from_utf8_lossy(&tail[..end]).into_owned());
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    out
}
