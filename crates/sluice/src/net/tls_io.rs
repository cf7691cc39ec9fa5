//! `FlushedTls`: a TLS stream whose writes complete only once the ciphertext reached the socket.
//!
//! tokio-rustls accepts plaintext into its buffer and may leave ciphertext there when the socket
//! would block, expecting a later `poll_flush`. The relay and the login code never flush (plain
//! sockets need no flush), and they decide "everything was sent" from `poll_write` results, so a
//! write is only reported done after the TLS buffer drained: bytes accepted by the TLS layer are
//! remembered and reported on the retry that finds them flushed. A caller retrying after `Pending`
//! passes a buffer that starts with the same bytes, as `write_all` and the relay do.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Debug)]
pub struct FlushedTls<S> {
    inner: S,
    /// Plaintext bytes already taken by the TLS layer but not yet reported to the writer.
    accepted: usize,
}

impl<S> FlushedTls<S> {
    pub fn new(inner: S) -> Self {
        FlushedTls { inner, accepted: 0 }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FlushedTls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FlushedTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.accepted == 0 {
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
            this.accepted = n;
        }
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        Poll::Ready(Ok(std::mem::take(&mut this.accepted)))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
