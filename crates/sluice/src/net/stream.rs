//! `Stream`: a TCP or Unix-domain socket, or TLS over TCP, behind one AsyncRead/AsyncWrite type.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
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
fn reregister(tcp: &mut TcpStream) -> io::Result<()> {
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
    /// The read itself goes through `read_buf` (not `try_read_buf`) because tokio clears readiness
    /// after a short read there, which saves the next wait a system call.
    pub async fn read_when_ready(&mut self, buf: &mut BytesMut, chunk: usize) -> io::Result<usize> {
        if buf.is_empty() && matches!(self, Stream::Tcp(_) | Stream::Unix(_)) {
            let stream = &*self;
            std::future::poll_fn(|cx| {
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
        self.read_buf(buf).await
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
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let ready = match (self, self.tcp()) {
            (Stream::Unix(s), _) => s.poll_read_ready(&mut cx).is_ready(),
            (_, Some(s)) => s.poll_read_ready(&mut cx).is_ready(),
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
