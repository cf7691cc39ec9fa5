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

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
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

impl<S: AsyncWrite + Unpin> FlushedTls<S> {
    /// Hand plaintext to the TLS layer with `write` (unless a Pending flush already took some),
    /// then report it once the flush completes.
    fn write_then_flush(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.accepted == 0 {
            let n = ready!(write(Pin::new(&mut self.inner), cx))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
            self.accepted = n;
        }
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        Poll::Ready(Ok(std::mem::take(&mut self.accepted)))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FlushedTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_then_flush(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    /// As `poll_write`, for several buffers handed to the TLS layer at once (one record and one
    /// send where `poll_write` per buffer made one each); a retry passes buffers whose
    /// concatenation starts with the same bytes.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .write_then_flush(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use super::*;

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    /// Accepts every write into `buffered`; a flush moves it to `sent` only when `can_flush`.
    #[derive(Default)]
    struct Buffering {
        buffered: Vec<u8>,
        sent: Vec<u8>,
        can_flush: bool,
    }

    impl AsyncRead for Buffering {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Buffering {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(4);
            self.get_mut().buffered.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        /// Up to 4 bytes across the buffers, as a TLS layer takes plaintext from several.
        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = all.len().min(4);
            this.buffered.extend_from_slice(&all[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if !this.can_flush {
                return Poll::Pending;
            }
            let b = std::mem::take(&mut this.buffered);
            this.sent.extend(b);
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn a_write_is_reported_once_flushed_and_only_once() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut s = FlushedTls::new(Buffering::default());
        let data = b"0123456789";
        assert!(Pin::new(&mut s).poll_write(&mut cx, data).is_pending());
        // The retry does not hand the bytes to the TLS layer twice.
        assert!(Pin::new(&mut s).poll_write(&mut cx, data).is_pending());
        assert_eq!(s.inner.buffered, b"0123");
        s.inner.can_flush = true;
        match Pin::new(&mut s).poll_write(&mut cx, data) {
            Poll::Ready(Ok(4)) => {}
            other => panic!("{other:?}"),
        }
        match Pin::new(&mut s).poll_write(&mut cx, &data[4..]) {
            Poll::Ready(Ok(4)) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(s.inner.sent, b"01234567");
    }

    #[test]
    fn a_vectored_write_is_reported_once_flushed() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut s = FlushedTls::new(Buffering::default());
        let bufs = [io::IoSlice::new(b"ab"), io::IoSlice::new(b"cdef")];
        assert!(Pin::new(&mut s)
            .poll_write_vectored(&mut cx, &bufs)
            .is_pending());
        assert!(Pin::new(&mut s)
            .poll_write_vectored(&mut cx, &bufs)
            .is_pending());
        s.inner.can_flush = true;
        // Both buffers reached the TLS layer in the one write, and were reported once flushed.
        match Pin::new(&mut s).poll_write_vectored(&mut cx, &bufs) {
            Poll::Ready(Ok(4)) => assert_eq!(s.inner.sent, b"abcd"),
            other => panic!("{other:?}"),
        }
    }
}
