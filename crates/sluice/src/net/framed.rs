//! Whole-message reads for the phases that need complete messages (startup, login, pooler-run
//! queries). The hot path does not use this: it forwards by header (see `forward`).

use std::io;

use bytes::{Buf, BytesMut};
use sluice_protocol::{peek_header, ProtocolError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a framed read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
    #[error("connection closed")]
    Closed,
}

/// Read one tagged message (tag, body without header). Lengths above `max_len` are refused before
/// anything is allocated for them.
pub async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max_len: usize,
) -> Result<(u8, BytesMut), ReadError> {
    loop {
        if let Some(m) = take_message(buf, max_len)? {
            return Ok(m);
        }
        if buf.is_empty() && buf.capacity() < 512 {
            buf.reserve(4096);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(ReadError::Closed);
        }
    }
}

/// `read_message` for a client between messages: while nothing of the next message has arrived,
/// the read buffer goes back to the worker's spares and is taken again once the socket is
/// readable (`Stream::read_when_ready`). A login waiting for its client's next message (the
/// password, after the challenge) then holds no buffer: in a connection storm only the logins
/// being read at that moment do.
///
/// `only`: the one message type expected. Another type is returned as soon as its tag byte is
/// read, with an empty body, for the caller to refuse: a login does not wait for the rest of a
/// message it will refuse anyway (a second StartupMessage, whose "length" read as a tagged
/// message is thousands of bytes that never come).
pub async fn read_message_when_ready(
    stream: &mut super::Stream,
    buf: &mut BytesMut,
    max_len: usize,
    chunk: usize,
    only: Option<u8>,
) -> Result<(u8, BytesMut), ReadError> {
    loop {
        match (buf.first(), only) {
            (Some(&tag), Some(want)) if tag != want => return Ok((tag, BytesMut::new())),
            _ => {}
        }
        if let Some(m) = take_message(buf, max_len)? {
            return Ok(m);
        }
        let n = if buf.is_empty() {
            stream.read_when_ready(buf, chunk).await?
        } else {
            stream.read_buf(buf).await?
        };
        if n == 0 {
            return Err(ReadError::Closed);
        }
    }
}

/// Split the first whole message off `buf`, if it holds one; else make room for the rest of it
/// (or for a header) to be read.
fn take_message(buf: &mut BytesMut, max_len: usize) -> Result<Option<(u8, BytesMut)>, ReadError> {
    if let Some(h) = peek_header(buf, max_len)? {
        let total = h.total_len();
        if buf.len() >= total {
            let mut msg = buf.split_to(total);
            msg.advance(5);
            return Ok(Some((h.tag, msg)));
        }
        buf.reserve(total - buf.len());
    } else if !buf.is_empty() && buf.capacity() - buf.len() < 512 {
        buf.reserve(4096);
    }
    Ok(None)
}

/// Write a whole buffer and clear it.
pub async fn write_all<S: AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> io::Result<()> {
    stream.write_all(buf).await?;
    buf.clear();
    Ok(())
}
