//! Listening sockets as descriptors: the copies a process keeps (what it offers a successor, and
//! what it accepts on again when a takeover fails), and `Listeners` made from descriptors.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use socket2::Socket;
use tokio::net::{TcpListener, UnixListener};

use super::codec::{ListenerDesc, ListenerKind};
use crate::net::listen::{Listeners, TcpListening};

/// Copies of every listening socket of `listeners`, described.
pub fn keep(listeners: &Listeners) -> io::Result<Vec<(ListenerDesc, OwnedFd)>> {
    let mut out = Vec::new();
    let desc = |kind, worker: usize, steers, addr: String| ListenerDesc {
        kind,
        worker: worker as u16,
        steers,
        addr,
    };
    for l in &listeners.tcp {
        out.push((
            desc(
                ListenerKind::Tcp,
                l.worker,
                l.steers,
                l.listener.local_addr()?.to_string(),
            ),
            l.listener.as_fd().try_clone_to_owned()?,
        ));
    }
    if let Some((u, path)) = &listeners.unix {
        out.push((
            desc(ListenerKind::Unix, 0, false, path.display().to_string()),
            u.as_fd().try_clone_to_owned()?,
        ));
    }
    if let Some(m) = &listeners.metrics {
        out.push((
            desc(ListenerKind::Metrics, 0, false, m.local_addr()?.to_string()),
            m.as_fd().try_clone_to_owned()?,
        ));
    }
    if let Some((c, path)) = &listeners.control {
        out.push((
            desc(ListenerKind::Control, 0, false, path.display().to_string()),
            c.as_fd().try_clone_to_owned()?,
        ));
    }
    Ok(out)
}

/// `Listeners` from described descriptors, for a process with `workers` workers: TCP socket i of
/// worker w goes to worker w % workers (a successor with fewer workers accepts on several). Each
/// descriptor must be a listening socket of the family its kind says. Must run inside a tokio
/// runtime.
pub fn rebuild(
    descs: &[ListenerDesc],
    fds: Vec<OwnedFd>,
    workers: usize,
) -> Result<Listeners, String> {
    if descs.len() != fds.len() {
        return Err(format!(
            "{} sockets described, {} received",
            descs.len(),
            fds.len()
        ));
    }
    let workers = workers.max(1);
    let mut out = Listeners {
        tcp: Vec::new(),
        unix: None,
        metrics: None,
        control: None,
    };
    for (d, fd) in descs.iter().zip(fds) {
        let sock = checked(d, Socket::from(fd))
            .map_err(|e| format!("{} {}: {e}", kind_name(d.kind), d.addr))?;
        let bad = |e: io::Error| format!("{} {}: {e}", kind_name(d.kind), d.addr);
        match d.kind {
            ListenerKind::Tcp => {
                let worker = usize::from(d.worker) % workers;
                out.tcp.push(TcpListening {
                    worker,
                    listener: sock.into(),
                    steers: d.steers && worker == usize::from(d.worker),
                });
            }
            ListenerKind::Metrics => {
                out.metrics = Some(TcpListener::from_std(sock.into()).map_err(bad)?);
            }
            ListenerKind::Unix => {
                let l = UnixListener::from_std(sock.into()).map_err(bad)?;
                out.unix = Some((l, PathBuf::from(&d.addr)));
            }
            ListenerKind::Control => {
                let l = UnixListener::from_std(sock.into()).map_err(bad)?;
                out.control = Some((l, PathBuf::from(&d.addr)));
            }
        }
    }
    Ok(out)
}

fn kind_name(k: ListenerKind) -> &'static str {
    match k {
        ListenerKind::Tcp => "TCP listener",
        ListenerKind::Unix => "Unix socket",
        ListenerKind::Metrics => "metrics listener",
        ListenerKind::Control => "takeover socket",
    }
}

/// The socket, non-blocking, if it listens and is of the family `d` says.
fn checked(d: &ListenerDesc, sock: Socket) -> io::Result<Socket> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    if !sock.is_listener()? {
        return Err(invalid("not a listening socket"));
    }
    let local = sock.local_addr()?;
    let unix = matches!(d.kind, ListenerKind::Unix | ListenerKind::Control);
    if unix != local.is_unix() {
        return Err(invalid(if unix {
            "not a Unix socket"
        } else {
            "not a TCP socket"
        }));
    }
    sock.set_nonblocking(true)?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn kept_sockets_rebuild_and_a_wrong_descriptor_is_refused() {
        let dir = std::env::temp_dir().join(format!("sluice-takeover-l-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let tcp = |w| TcpListening {
            worker: w,
            listener: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            steers: w == 0,
        };
        let path = dir.join("s");
        let listeners = Listeners {
            tcp: vec![tcp(0), tcp(1)],
            unix: Some((UnixListener::bind(&path).unwrap(), path.clone())),
            metrics: None,
            control: None,
        };
        let kept = keep(&listeners).unwrap();
        let (descs, fds): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
        // A successor with one worker accepts on both TCP sockets from worker 0; only the first steers.
        let one = rebuild(&descs, fds, 1).unwrap();
        let shape: Vec<_> = one.tcp.iter().map(|t| (t.worker, t.steers)).collect();
        assert_eq!(shape, [(0, true), (0, false)]);
        assert_eq!(one.unix.as_ref().unwrap().1, path);
        assert_eq!(
            one.tcp[1].listener.local_addr().unwrap(),
            listeners.tcp[1].listener.local_addr().unwrap()
        );
        // A Unix socket described as TCP, a connected (not listening) socket.
        let (descs, fds): (Vec<_>, Vec<_>) = keep(&listeners).unwrap().into_iter().unzip();
        let mut swapped = descs.clone();
        swapped[2].kind = ListenerKind::Tcp;
        let e = rebuild(&swapped, fds, 2).err().unwrap();
        assert!(e.contains("not a TCP socket"), "{e}");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = rebuild(&descs[2..3], vec![OwnedFd::from(a)], 2)
            .err()
            .unwrap();
        assert!(e.contains("not a listening socket"), "{e}");
        assert!(rebuild(&descs, Vec::new(), 2).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
