//! The takeover socket: codec frames over a Unix stream socket, with descriptors attached to the
//! frame that carries them (SCM_RIGHTS). One task reads (`LinkReader`), one writes
//! (`LinkWriter`); both share the socket.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};
use tokio::io::Interest;
use tokio::net::UnixStream;

use super::codec::{CodecError, Msg};

/// The most descriptors one frame carries (the kernel's SCM_MAX_FD).
pub const MAX_FDS: usize = 253;

/// Why the link failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Codec(#[from] CodecError),
    #[error("the other process closed the takeover socket")]
    Closed,
    #[error("a takeover message came with {got} descriptors where {want} were expected")]
    Descriptors { got: usize, want: usize },
    #[error("no answer from the other process within {0:?}")]
    Timeout(Duration),
}

/// A message read, with the descriptors that came with it (owned: closed when dropped).
pub type Received = (Msg, Vec<OwnedFd>);

/// Split a connected socket into its two halves.
pub fn split(sock: UnixStream) -> (LinkReader, LinkWriter) {
    let sock = Arc::new(sock);
    (
        LinkReader {
            sock: sock.clone(),
            buf: Vec::new(),
            fds: VecDeque::new(),
        },
        LinkWriter { sock },
    )
}

/// The reading half. `recv` is cancel-safe: bytes and descriptors read stay here until their
/// message is complete.
pub struct LinkReader {
    sock: Arc<UnixStream>,
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl LinkReader {
    /// The next message; `LinkError::Closed` at end of stream.
    pub async fn recv(&mut self) -> Result<Received, LinkError> {
        loop {
            if let Some((msg, used)) = Msg::decode(&self.buf)? {
                self.buf.drain(..used);
                let want = msg.fd_count();
                // Descriptors come with the first bytes of their frame, so a complete frame's
                // are all here (and no later frame's can be ahead of them).
                if self.fds.len() < want {
                    return Err(LinkError::Descriptors {
                        got: self.fds.len(),
                        want,
                    });
                }
                let fds = self.fds.drain(..want).collect();
                return Ok((msg, fds));
            }
            let mut chunk = [0u8; 16 * 1024];
            let (n, fds) = self
                .sock
                .async_io(Interest::READABLE, || {
                    recv_some(self.sock.as_raw_fd(), &mut chunk)
                })
                .await?;
            self.fds.extend(fds);
            if n == 0 {
                return Err(LinkError::Closed);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// `recv` within `limit`.
    pub async fn recv_within(&mut self, limit: Duration) -> Result<Received, LinkError> {
        tokio::time::timeout(limit, self.recv())
            .await
            .unwrap_or(Err(LinkError::Timeout(limit)))
    }
}

/// The writing half; clone it for the task that writes.
#[derive(Clone)]
pub struct LinkWriter {
    sock: Arc<UnixStream>,
}

impl LinkWriter {
    /// Send one message with its descriptors (borrowed: the kernel gives the other process its
    /// own copies; ours stay open).
    pub async fn send(&self, msg: &Msg, fds: &[RawFd]) -> Result<(), LinkError> {
        debug_assert_eq!(fds.len(), msg.fd_count());
        if fds.len() > MAX_FDS {
            return Err(LinkError::Descriptors {
                got: fds.len(),
                want: MAX_FDS,
            });
        }
        let frame = msg.encode();
        let mut sent = 0;
        while sent < frame.len() {
            // The descriptors go with the frame's first bytes only.
            let attach = if sent == 0 { fds } else { &[] };
            sent += self
                .sock
                .async_io(Interest::WRITABLE, || {
                    send_some(self.sock.as_raw_fd(), &frame[sent..], attach)
                })
                .await?;
        }
        Ok(())
    }
}

impl LinkWriter {
    /// Shut the socket down both ways: the reading half then sees its end.
    pub fn shutdown(&self) {
        let _ = nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    }
}

fn send_some(fd: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let iov = [IoSlice::new(bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<UnixAddr>(fd, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(io::Error::from)
}

fn recv_some(fd: RawFd, chunk: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(chunk)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<UnixAddr>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: the kernel just installed these descriptors in this process for us; nothing
            // else owns them.
            fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "takeover message carried more descriptors than fit",
        ));
    }
    Ok((msg.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::takeover::codec::{ListenerDesc, ListenerKind};
    use std::io::{Read, Write};

    #[tokio::test]
    async fn messages_and_their_descriptors_cross_in_order() {
        let (a, b) = UnixStream::pair().unwrap();
        // The writer's task holds the socket's last reference: its end is the reader's EOF.
        let (ra, wa) = split(a);
        drop(ra);
        let (mut rb, _wb) = split(b);
        // Two socket pairs whose far ends we keep: what comes through must be the same sockets.
        let (p1, mut q1) = std::os::unix::net::UnixStream::pair().unwrap();
        let (p2, mut q2) = std::os::unix::net::UnixStream::pair().unwrap();
        let desc = |kind| ListenerDesc {
            kind,
            worker: 0,
            steers: false,
            addr: String::new(),
        };
        let offer = Msg::Offer {
            pid: 1,
            active_workers: 1,
            listeners: vec![desc(ListenerKind::Unix), desc(ListenerKind::Control)],
        };
        // A long message between them spans several reads.
        let long = Msg::Refused {
            reason: "x".repeat(100_000),
        };
        let writer = tokio::spawn(async move {
            wa.send(&Msg::Take, &[]).await.unwrap();
            wa.send(&offer, &[p1.as_raw_fd(), p2.as_raw_fd()])
                .await
                .unwrap();
            wa.send(&long, &[]).await.unwrap();
            wa.send(&Msg::Taken, &[]).await.unwrap();
            drop((p1, p2));
        });
        assert_eq!(rb.recv().await.unwrap().0, Msg::Take);
        let (m, fds) = rb.recv().await.unwrap();
        assert!(matches!(m, Msg::Offer { .. }));
        assert_eq!(fds.len(), 2);
        let (m, fds2) = rb.recv().await.unwrap();
        assert!(matches!(m, Msg::Refused { reason } if reason.len() == 100_000));
        assert!(fds2.is_empty());
        assert_eq!(rb.recv().await.unwrap().0, Msg::Taken);
        writer.await.unwrap();
        for (fd, far) in fds.into_iter().zip([&mut q1, &mut q2]) {
            let mut s = std::os::unix::net::UnixStream::from(fd);
            s.write_all(b"hi").unwrap();
            let mut got = [0u8; 2];
            far.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"hi");
        }
        assert!(matches!(rb.recv().await, Err(LinkError::Closed)));
    }

    #[tokio::test]
    async fn a_frame_missing_its_descriptors_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        let (_ra, wa) = split(a);
        let (mut rb, _wb) = split(b);
        let frame = Msg::Client(Box::new(crate::takeover::codec::tests::sample_client())).encode();
        // The frame's bytes without the socket it announces.
        wa.sock
            .async_io(Interest::WRITABLE, || {
                send_some(wa.sock.as_raw_fd(), &frame, &[])
            })
            .await
            .unwrap();
        assert!(matches!(
            rb.recv().await,
            Err(LinkError::Descriptors { got: 0, want: 1 })
        ));
    }
}
