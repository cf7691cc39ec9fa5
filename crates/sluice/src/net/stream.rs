//! `Stream`: a TCP or Unix-domain socket, or TLS over TCP, behind one AsyncRead/AsyncWrite type.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::spare_buffers;
use super::tls_io::FlushedTls;

/// A connected socket.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A client that negotiated TLS with us (we are the TLS server).
    ClientTls(Box<FlushedTls<tokio_rustls::server::TlsStream<TcpStream>>>),
    /// A server we reached over TLS (we are the TLS client).
    ServerTls(Box<FlushedTls<tokio_rustls::client::TlsStream<TcpStream>>>),
    /// The socket was handed to the TLS layer (`take`); reads and writes fail.
    Closed,
}

/// Swap a socket held inside a TLS stream for a duplicate descriptor registered with the current
/// runtime; dropping the old one deregisters it from its worker and closes only that descriptor.
pub fn reregister(tcp: &mut TcpStream) -> io::Result<()> {
    let dup = tcp.as_fd().try_clone_to_owned()?;
    let fresh = TcpStream::from_std(std::net::TcpStream::from(dup))?;
    drop(std::mem::replace(tcp, fresh));
    Ok(())
}

/// Where a connection comes from (clients) or goes to (servers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAddr {
    Tcp(SocketAddr),
    /// Unix socket; the peer's pid when the kernel told us.
    Unix {
        pid: Option<i32>,
    },
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAddr::Tcp(SocketAddr::V4(a)) => write!(f, "{}:{}", a.ip(), a.port()),
            PeerAddr::Tcp(SocketAddr::V6(a)) => write!(f, "[{}]:{}", a.ip(), a.port()),
            PeerAddr::Unix { pid: Some(pid) } => write!(f, "unix({pid})"),
            PeerAddr::Unix { pid: None } => write!(f, "unix"),
        }
    }
}

impl Stream {
    pub fn is_unix(&self) -> bool {
        matches!(self, Stream::Unix(_))
    }

    /// Hands the socket over (for a TLS upgrade), leaving `Closed` behind.
    pub fn take(&mut self) -> Stream {
        std::mem::replace(self, Stream::Closed)
    }

    /// Register the socket with the IO driver of the calling worker (see `workers`), so that its
    /// readiness wakes this thread directly instead of crossing from the worker that opened it.
    /// On error the stream is left `Closed`.
    pub fn move_to_current_worker(&mut self) -> io::Result<()> {
        *self = match self.take() {
            Stream::Tcp(s) => Stream::Tcp(TcpStream::from_std(s.into_std()?)?),
            Stream::Unix(s) => Stream::Unix(UnixStream::from_std(s.into_std()?)?),
            Stream::ClientTls(mut s) => {
                reregister(s.get_mut().get_mut().0)?;
                Stream::ClientTls(s)
            }
            Stream::ServerTls(mut s) => {
                reregister(s.get_mut().get_mut().0)?;
                Stream::ServerTls(s)
            }
            Stream::Closed => Stream::Closed,
        };
        Ok(())
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::ClientTls(_) | Stream::ServerTls(_))
    }

    /// The TCP socket, under TLS or not.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Tcp(s) => Some(s),
            Stream::ClientTls(s) => Some(s.get_ref().get_ref().0),
            Stream::ServerTls(s) => Some(s.get_ref().get_ref().0),
            Stream::Unix(_) | Stream::Closed => None,
        }
    }

    /// Read more into `buf`; while `buf` is empty, hold no memory for it until the peer has sent
    /// something. An idle client waits far longer than it talks, so a plain socket is waited on for
    /// readiness with `buf` given back to the worker's spare buffers, and a buffer of at least
    /// `chunk` bytes is taken once there is something to read (or EOF). Under TLS, decrypted bytes
    /// may already sit in rustls' buffer where the socket's readiness does not show them, so a TLS
    /// stream is read with its buffer as usual.
    ///
    /// The read itself is `poll_read_into`'s (a short read clears the readiness there too).
    pub async fn read_when_ready(&mut self, buf: &mut BytesMut, chunk: usize) -> io::Result<usize> {
        if buf.is_empty() && matches!(self, Stream::Tcp(_) | Stream::Unix(_)) {
            let stream = &*self;
            std::future::poll_fn(|cx| {
                // Readiness already seen (woken for the request, or it came first): nothing to
                // register; `poll_read_ready` would also charge the cooperative budget.
                let seen = match stream {
                    Stream::Tcp(s) => readable_now(s),
                    Stream::Unix(s) => readable_now(s),
                    _ => true,
                };
                if seen {
                    return Poll::Ready(Ok(()));
                }
                let ready = match stream {
                    Stream::Tcp(s) => s.poll_read_ready(cx),
                    Stream::Unix(s) => s.poll_read_ready(cx),
                    _ => Poll::Ready(Ok(())),
                };
                // Only a wait gives the buffer up: a request already there is read into it.
                if ready.is_pending() && buf.capacity() > 0 {
                    spare_buffers::give(std::mem::take(buf), chunk);
                }
                ready
            })
            .await?;
        }
        if buf.capacity() == 0 {
            *buf = spare_buffers::take(chunk);
        } else if buf.capacity() - buf.len() < chunk / 4 {
            buf.reserve(chunk);
        }
        std::future::poll_fn(|cx| self.poll_read_into(cx, buf)).await
    }

    /// Bytes a TLS layer took from an unfinished write without reporting them (0 for a plain
    /// socket, whose writes report what they wrote): they go out ahead of the next write.
    pub fn unreported(&self) -> usize {
        match self {
            Stream::ClientTls(s) => s.unreported(),
            Stream::ServerTls(s) => s.unreported(),
            _ => 0,
        }
    }

    /// Non-blocking check used before handing an idle server out: true means the socket is still
    /// quiet (no bytes, no EOF, no error), the only state in which a pooled server is reusable.
    ///
    /// Hot path: tokio's readiness costs no system call. Our last read of this socket was short (a
    /// ReadyForQuery), which cleared readiness, so "ready" now means the IO driver saw something
    /// arrive since (a message, EOF, an error) and the kernel is asked to tell which. A socket that
    /// sat idle for long is always asked (`ask_kernel`): the driver may not have turned since a
    /// hang-up, and one MSG_PEEK per long-idle hand-out is cheap, whereas one per transaction is not.
    pub fn is_quiet(&self, ask_kernel: bool) -> bool {
        // Under TLS, decrypted bytes (or a close_notify) may already sit in rustls' buffer; then
        // it does not want to read, and the connection is not quiet whatever the socket says.
        let tls_quiet = match self {
            Stream::ClientTls(s) => s.get_ref().get_ref().1.wants_read(),
            Stream::ServerTls(s) => s.get_ref().get_ref().1.wants_read(),
            _ => true,
        };
        if !tls_quiet {
            return false;
        }
        let ready = match (self, self.tcp()) {
            (Stream::Unix(s), _) => readable_now(s),
            (_, Some(s)) => readable_now(s),
            _ => return false,
        };
        if !ready && !ask_kernel {
            return true;
        }
        self.peek_quiet()
    }

    /// Ask the kernel (MSG_PEEK) whether the socket has nothing to read and no EOF or error.
    fn peek_quiet(&self) -> bool {
        let fd = match (self, self.tcp()) {
            (Stream::Unix(s), _) => s.as_raw_fd(),
            (_, Some(s)) => s.as_raw_fd(),
            _ => return false,
        };
        let mut probe = [0u8; 1];
        // SAFETY: recv into a valid 1-byte buffer on a socket fd we own; MSG_PEEK consumes nothing.
        let r = unsafe {
            libc::recv(
                fd,
                probe.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
    }
}

impl Stream {
    /// Read what the socket has into `buf`'s spare capacity (the caller reserves it); 0 = EOF.
    ///
    /// The relay's and the idle wait's read. A plain socket is read straight through tokio's
    /// readiness (`try_io`) when it is ready, and only waits (`poll_read_ready`) when it is not:
    /// the AsyncRead path spent ~150 instructions per read on its cooperative-scheduling budget
    /// and buffer adapters (callgrind). Without that budget, a caller that loops on reads and
    /// writes must yield by itself now and then (the relay does, `RELAY_ROUNDS`). As in tokio's
    /// own `poll_read`, a short read clears the readiness (the socket is drained), which saves
    /// the next wait a system call.
    pub fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        match self {
            Stream::Tcp(s) => poll_read_plain(s, cx, buf),
            Stream::Unix(s) => poll_read_plain(s, cx, buf),
            other => tokio_util::io::poll_read_buf(Pin::new(other), cx, buf),
        }
    }

    /// Write from `buf`, as `poll_read_into` reads: a plain socket straight through its
    /// readiness, waiting only when it is full.
    pub fn poll_write_from(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_pair(cx, buf, &[])
    }

    /// `poll_write_pair` of at most `cap` bytes (0: no cap) on a TCP connection, plain or TLS,
    /// out of line (the relay calls it only when a cap is set);
    /// a Unix socket writes all. tcp_socket_buffer's: a write larger than the socket's send
    /// buffer is taken whole by the kernel (up to a 64 KiB segment on loopback) and then waits
    /// on the peer's delayed ACK, so a COPY through a 4 KiB buffer ran 30 times slower than
    /// with writes of the buffer's size (as PgBouncer's, which are at most its 4 KiB pkt_buf).
    #[inline(never)]
    pub fn poll_write_pair_capped(
        &mut self,
        cx: &mut Context<'_>,
        first: &[u8],
        second: &[u8],
        cap: usize,
    ) -> Poll<io::Result<usize>> {
        if cap == 0 || matches!(self, Stream::Unix(_)) || first.len() + second.len() <= cap {
            return self.poll_write_pair(cx, first, second);
        }
        let first = &first[..first.len().min(cap)];
        let second = &second[..second.len().min(cap - first.len())];
        self.poll_write_pair(cx, first, second)
    }

    /// Write `first` and then `second` (either may be empty), in one system call on a plain
    /// socket (`writev`): the relay's rewritten or synthesized bytes and the bytes that follow
    /// them, which as two writes cost a second `sendto` and, with TCP_NODELAY, a second segment
    /// for the peer to wake up for. Over TLS both go into one record. The count covers `first`
    /// before `second`.
    pub fn poll_write_pair(
        &mut self,
        cx: &mut Context<'_>,
        first: &[u8],
        second: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            Stream::Tcp(s) => poll_write_plain(s, cx, first, second),
            Stream::Unix(s) => poll_write_plain(s, cx, first, second),
            other if first.is_empty() || second.is_empty() => {
                let buf = if first.is_empty() { second } else { first };
                Pin::new(other).poll_write(cx, buf)
            }
            Stream::ClientTls(s) => Pin::new(&mut **s)
                .poll_write_vectored(cx, &[io::IoSlice::new(first), io::IoSlice::new(second)]),
            Stream::ServerTls(s) => Pin::new(&mut **s)
                .poll_write_vectored(cx, &[io::IoSlice::new(first), io::IoSlice::new(second)]),
            Stream::Closed => Poll::Ready(Err(closed())),
        }
    }
}

/// The readiness operations of a plain (non-TLS) tokio socket.
trait PlainSocket {
    fn try_io_read(&self, f: impl FnOnce() -> io::Result<usize>) -> io::Result<usize>;
    fn try_read_into(&self, buf: &mut BytesMut) -> io::Result<usize>;
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn try_write_from(&self, buf: &[u8]) -> io::Result<usize>;
    fn try_write_pair(&self, first: &[u8], second: &[u8]) -> io::Result<usize>;
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

macro_rules! plain_socket {
    ($t:ty) => {
        impl PlainSocket for $t {
            fn try_io_read(&self, f: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
                self.try_io(tokio::io::Interest::READABLE, f)
            }
            fn try_read_into(&self, buf: &mut BytesMut) -> io::Result<usize> {
                self.try_read_buf(buf)
            }
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_read_ready(self, cx)
            }
            fn try_write_from(&self, buf: &[u8]) -> io::Result<usize> {
                self.try_write(buf)
            }
            fn try_write_pair(&self, first: &[u8], second: &[u8]) -> io::Result<usize> {
                self.try_write_vectored(&[io::IoSlice::new(first), io::IoSlice::new(second)])
            }
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_write_ready(self, cx)
            }
        }
    };
}
plain_socket!(TcpStream);
plain_socket!(UnixStream);

/// Whether tokio's driver has seen the socket readable (bytes, EOF or an error) since a read
/// last cleared that: `try_io` looks at the readiness and runs nothing when it is clear. One load,
/// where `poll_read_ready` with a no-op waker (~260 instructions per hand-out) also went through
/// the cooperative budget and stored the waker.
fn readable_now<S: PlainSocket>(s: &S) -> bool {
    s.try_io_read(|| Ok(0)).is_ok()
}

fn poll_read_plain<S: PlainSocket>(
    s: &S,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    let room = buf.capacity() - buf.len();
    loop {
        // A short read is reported to `try_io` as WouldBlock, which makes it clear the readiness
        // (only if no newer event arrived meanwhile); the bytes read are kept in `got`.
        let mut got = 0;
        let r = s.try_io_read(|| {
            got = s.try_read_into(buf)?;
            if got > 0 && got < room {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(got)
            }
        });
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if got > 0 {
                    return Poll::Ready(Ok(got));
                }
                match s.poll_read_ready(cx) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            r => return Poll::Ready(r),
        }
    }
}

fn poll_write_plain<S: PlainSocket>(
    s: &S,
    cx: &mut Context<'_>,
    first: &[u8],
    second: &[u8],
) -> Poll<io::Result<usize>> {
    loop {
        let r = match (first.is_empty(), second.is_empty()) {
            (false, false) => s.try_write_pair(first, second),
            (false, true) => s.try_write_from(first),
            _ => s.try_write_from(second),
        };
        match r {
            // (`try_write` cleared the readiness.)
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => match s.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            },
            r => return Poll::Ready(r),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::ClientTls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::ServerTls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::Closed => Poll::Ready(Err(closed())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::ClientTls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::ServerTls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::Closed => Poll::Ready(Err(closed())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::ClientTls(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::ServerTls(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::Closed => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::ClientTls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::ServerTls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::Closed => Poll::Ready(Ok(())),
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "socket handed over to TLS")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn pair() -> (Stream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (ours, _) = listener.accept().await.unwrap();
        (Stream::Tcp(ours), peer)
    }

    #[tokio::test]
    async fn an_idle_socket_is_waited_on_without_a_buffer() {
        let (mut stream, mut peer) = pair().await;
        let mut buf = BytesMut::new();
        peer.write_all(b"Q\0\0\0\x05x").await.unwrap();
        let n = stream.read_when_ready(&mut buf, 4096).await.unwrap();
        assert_eq!((n, &buf[..]), (6, &b"Q\0\0\0\x05x"[..]));
        assert!(buf.capacity() >= 4096);
        // Everything consumed, nothing more sent: the wait holds no buffer.
        buf.clear();
        {
            let read = stream.read_when_ready(&mut buf, 4096);
            tokio::pin!(read);
            assert!(poll_once(read.as_mut()).await.is_none());
        }
        assert_eq!(buf.capacity(), 0);
        peer.write_all(b"yz").await.unwrap();
        let n = stream.read_when_ready(&mut buf, 4096).await.unwrap();
        assert_eq!((n, &buf[..]), (2, &b"yz"[..]));
        // With bytes still buffered, a read keeps them and appends.
        peer.write_all(b"!").await.unwrap();
        let n = stream.read_when_ready(&mut buf, 4096).await.unwrap();
        assert_eq!((n, &buf[..]), (1, &b"yz!"[..]));
        // EOF is a zero-byte read, as with read_buf.
        drop(peer);
        buf.clear();
        assert_eq!(stream.read_when_ready(&mut buf, 4096).await.unwrap(), 0);
    }

    /// Rewritten bytes and what follows them leave in one write, in order; an empty half is
    /// skipped.
    #[tokio::test]
    async fn a_pair_is_written_in_one_call() {
        use tokio::io::AsyncReadExt;
        let (mut stream, mut peer) = pair().await;
        for (a, b, n) in [
            (&b"B\0\0\0\x0f"[..], &b"rest"[..], 9),
            (b"", b"tail", 4),
            (b"head", b"", 4),
        ] {
            let wrote = std::future::poll_fn(|cx| stream.poll_write_pair(cx, a, b)).await;
            assert_eq!(wrote.unwrap(), n);
        }
        let mut got = [0u8; 17];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"B\0\0\0\x0fresttailhead");
    }

    /// tcp_socket_buffer's cap: a TCP write carries at most the cap, `first` before `second`;
    /// no cap (0) or a Unix socket writes what the socket takes.
    #[tokio::test]
    async fn a_capped_write_carries_at_most_the_cap_over_tcp() {
        use tokio::io::AsyncReadExt;
        let (mut stream, mut peer) = pair().await;
        let big = vec![b'x'; 100_000];
        for (a, b, cap, want) in [
            (&big[..], &b""[..], 4096, 4096),
            (&b"head"[..], &big[..], 4096, 4096),
            (&b"head"[..], &b"tail"[..], 4096, 8),
            (&b"head"[..], &b"tail"[..], 6, 6),
        ] {
            let wrote =
                std::future::poll_fn(|cx| stream.poll_write_pair_capped(cx, a, b, cap)).await;
            assert_eq!(wrote.unwrap(), want);
        }
        let mut got = vec![0u8; 4096 + 4096 + 8 + 6];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[4096..4100], b"head");
        assert_eq!(&got[8192..], b"headtailheadta");
        let wrote =
            std::future::poll_fn(|cx| stream.poll_write_pair_capped(cx, &big, b"", 0)).await;
        assert!(wrote.unwrap() > 4096);

        let (ours, _theirs) = UnixStream::pair().unwrap();
        let mut unix = Stream::Unix(ours);
        let wrote =
            std::future::poll_fn(|cx| unix.poll_write_pair_capped(cx, &big, b"", 4096)).await;
        assert!(wrote.unwrap() > 4096);
    }

    /// A pooled server is quiet while nothing arrived; a message or a hang-up seen by tokio's
    /// driver makes it not quiet without asking the kernel, and asking the kernel agrees.
    #[tokio::test]
    async fn quiet_until_bytes_or_a_hang_up_arrive() {
        let (s, mut peer) = pair().await;
        assert!(s.is_quiet(false));
        assert!(s.is_quiet(true));
        peer.write_all(b"N").await.unwrap();
        // Let the driver turn and record the readiness.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!s.is_quiet(false));
        assert!(!s.is_quiet(true));

        let (s, peer) = pair().await;
        drop(peer);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!s.is_quiet(false));
        assert!(!s.is_quiet(true));
    }

    #[tokio::test]
    async fn a_short_read_clears_readiness_and_a_full_one_does_not() {
        let (mut stream, mut peer) = pair().await;
        let mut buf = BytesMut::with_capacity(64);
        let room = buf.capacity();
        peer.write_all(b"abc").await.unwrap();
        let n = std::future::poll_fn(|cx| stream.poll_read_into(cx, &mut buf)).await;
        assert_eq!(n.unwrap(), 3);
        // More bytes arrive, but this task has not let the IO driver run: a short read drained
        // the socket, so the next read waits without asking the kernel (no system call).
        peer.write_all(b"de").await.unwrap();
        let again = poll_once(std::future::poll_fn(|cx| {
            stream.poll_read_into(cx, &mut buf)
        }));
        assert!(again.await.is_none());
        // The driver then reports the bytes: nothing is lost.
        let n = std::future::poll_fn(|cx| stream.poll_read_into(cx, &mut buf)).await;
        assert_eq!((n.unwrap(), &buf[..]), (2, &b"abcde"[..]));
        // A read that fills the buffer may have left bytes behind: the next read takes them at once.
        buf.clear();
        peer.write_all(&vec![b'x'; room + 10]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let n = std::future::poll_fn(|cx| stream.poll_read_into(cx, &mut buf)).await;
        assert_eq!(n.unwrap(), room);
        buf.clear();
        let rest = poll_once(std::future::poll_fn(|cx| {
            stream.poll_read_into(cx, &mut buf)
        }));
        assert_eq!(rest.await.map(|r| r.unwrap()), Some(10));
    }

    #[tokio::test]
    async fn writes_go_straight_out_and_wait_when_the_socket_is_full() {
        let (mut stream, mut peer) = pair().await;
        let n = std::future::poll_fn(|cx| stream.poll_write_from(cx, b"hello")).await;
        assert_eq!(n.unwrap(), 5);
        let mut got = [0u8; 5];
        tokio::io::AsyncReadExt::read_exact(&mut peer, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"hello");
        // Fill the socket until a write has to wait, then drain it: the write goes on.
        let chunk = vec![b'y'; 64 * 1024];
        let mut sent = 0;
        while let Some(n) = poll_once(std::future::poll_fn(|cx| {
            stream.poll_write_from(cx, &chunk)
        }))
        .await
        {
            sent += n.unwrap();
        }
        assert!(sent > 0);
        let drain = tokio::spawn(async move {
            let mut sink = vec![0u8; 1 << 20];
            let mut total = 0;
            while total < sent + 5 {
                let n = tokio::io::AsyncReadExt::read(&mut peer, &mut sink)
                    .await
                    .unwrap();
                assert!(n > 0);
                total += n;
            }
            total
        });
        let n = std::future::poll_fn(|cx| stream.poll_write_from(cx, b"tail!")).await;
        assert_eq!(n.unwrap(), 5);
        assert_eq!(drain.await.unwrap(), sent + 5);
    }

    /// Poll a future once: Some(output) if it completed.
    async fn poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut f).poll(cx) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            })
        })
        .await
    }
}
