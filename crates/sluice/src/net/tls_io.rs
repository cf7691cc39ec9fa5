//! `FlushedTls`: a TLS stream whose writes complete only once the ciphertext reached the socket.
//!
//! tokio-rustls accepts plaintext into its buffer and may leave ciphertext there when the socket
//! would block, expecting a later `poll_flush`. The relay and the login code never flush (plain
//! sockets need no flush), and they decide "everything was sent" from `poll_write` results, so a
//! write is only reported done after the TLS buffer drained: bytes accepted by the TLS layer are
//! remembered and reported on the retry that finds them flushed.
//!
//! A retry is a write whose bytes start with the ones accepted, as `write_all` and the relay retry.
//! A writer may also give up on a write that is pending (its future dropped: a relay ended by a
//! KILL or a lost server) and another one write something else (the FATAL the client is owed).
//! The bytes the TLS layer took are in the stream by then, as a plain socket's partial write
//! would be: they go out first, and the new write is reported by its own length. Telling the two
//! apart takes a copy of the accepted bytes, made only when a write has to wait (the socket full).

use std::io;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Debug)]
pub struct FlushedTls<S> {
    inner: S,
    /// Plaintext bytes already taken by the TLS layer but not yet reported to the writer.
    accepted: usize,
    /// Those bytes, kept once their flush had to wait: the next write reports them only if it
    /// starts with them.
    held: Vec<u8>,
}

impl<S> FlushedTls<S> {
    pub fn new(inner: S) -> Self {
        FlushedTls {
            inner,
            accepted: 0,
            held: Vec::new(),
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Bytes the TLS layer took from a write that has not been reported yet: they reach the
    /// peer before anything written next.
    pub fn unreported(&self) -> usize {
        self.accepted
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

/// Whether the concatenation of `bufs` starts with `prefix`.
fn starts_with<B: Deref<Target = [u8]>>(bufs: &[B], prefix: &[u8]) -> bool {
    let mut rest = prefix;
    for b in bufs {
        if rest.is_empty() {
            break;
        }
        let n = b.len().min(rest.len());
        if b[..n] != rest[..n] {
            return false;
        }
        rest = &rest[n..];
    }
    rest.is_empty()
}

/// The first `n` bytes of the concatenation of `bufs`, into `out`.
fn copy_prefix<B: Deref<Target = [u8]>>(bufs: &[B], n: usize, out: &mut Vec<u8>) {
    out.clear();
    for b in bufs {
        let take = b.len().min(n - out.len());
        out.extend_from_slice(&b[..take]);
        if out.len() == n {
            break;
        }
    }
}

impl<S: AsyncWrite + Unpin> FlushedTls<S> {
    /// Hand plaintext (`bufs`, written with `write`) to the TLS layer unless a pending write
    /// already took it, then report it once the flush completes.
    fn write_then_flush<B: Deref<Target = [u8]>>(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[B],
        write: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.accepted > 0 && !starts_with(bufs, &self.held) {
            // Not a retry: the earlier writer gave up. Its bytes go out first (they are in the
            // TLS layer already), then this write on its own.
            ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
            self.accepted = 0;
            self.held.clear();
        }
        if self.accepted == 0 {
            let n = ready!(write(Pin::new(&mut self.inner), cx))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
            self.accepted = n;
            match Pin::new(&mut self.inner).poll_flush(cx) {
                Poll::Ready(r) => {
                    self.accepted = 0;
                    return Poll::Ready(r.map(|()| n));
                }
                Poll::Pending => {
                    copy_prefix(bufs, n, &mut self.held);
                    return Poll::Pending;
                }
            }
        }
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.held.clear();
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
            .write_then_flush(cx, &[buf], |inner, cx| inner.poll_write(cx, buf))
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
            .write_then_flush(cx, bufs, |inner, cx| inner.poll_write_vectored(cx, bufs))
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

    /// A writer gave up on a pending write (its future dropped) and another writes something
    /// else, shorter or longer: each new write is reported by its own length, and the stream
    /// holds the abandoned bytes the TLS layer took, then the new ones, nothing skipped.
    #[test]
    fn a_write_after_an_abandoned_one_is_reported_by_its_own_length() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        for (new, expect_sent) in [(&b"EF"[..], &b"0123EF"[..]), (b"ABCDEFGH", b"0123ABCD")] {
            let mut s = FlushedTls::new(Buffering::default());
            assert!(Pin::new(&mut s)
                .poll_write(&mut cx, b"0123456789")
                .is_pending());
            // Still blocked: the new write waits behind the abandoned bytes.
            assert!(Pin::new(&mut s).poll_write(&mut cx, new).is_pending());
            s.inner.can_flush = true;
            let n = match Pin::new(&mut s).poll_write(&mut cx, new) {
                Poll::Ready(Ok(n)) => n,
                other => panic!("{other:?}"),
            };
            assert_eq!(n, new.len().min(4), "reported by its own length");
            assert_eq!(s.inner.sent, expect_sent);
        }
    }

    /// A retry whose buffer grew behind the accepted bytes (the relay read more meanwhile) is
    /// still a retry: the bytes are reported, not sent twice.
    #[test]
    fn a_retry_with_more_bytes_behind_is_a_retry() {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut s = FlushedTls::new(Buffering::default());
        assert!(Pin::new(&mut s).poll_write(&mut cx, b"01234").is_pending());
        s.inner.can_flush = true;
        match Pin::new(&mut s).poll_write(&mut cx, b"0123456789") {
            Poll::Ready(Ok(4)) => assert_eq!(s.inner.sent, b"0123"),
            other => panic!("{other:?}"),
        }
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
