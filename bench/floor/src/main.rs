//! The floor of pooler CPU on this machine: the cheapest possible forwarder between pgbench and
//! PostgreSQL. Each client socket is paired with its own server socket (session mode, no pool)
//! and bytes are copied both ways without a look at them: no parsing, no accounting, no timers.
//! Whatever CPU this costs per transaction, any pooler pays too, since it moves the same bytes
//! through the same kernel calls. Not part of Sluice; bench/bench.py runs it as two targets:
//!
//!   floor epoll <listen_port> <server_port>   level-triggered epoll, one read and one write per
//!                                             message (the system calls PgBouncer makes)
//!   floor uring <listen_port> <server_port>   io_uring (single issuer, deferred task work): one
//!                                             io_uring_enter per loop for all sockets' sends and
//!                                             receives
//!
//! Both are single-threaded. Errors close the pair; the process exits only on a setup error.

use io_uring::{opcode, squeue, types, IoUring};
use std::collections::HashMap;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

const BUF: usize = 16 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: floor epoll|uring <listen_port> <server_port>");
        std::process::exit(2);
    }
    let (Ok(listen), Ok(server)) = (args[2].parse::<u16>(), args[3].parse::<u16>()) else {
        eprintln!("floor: ports must be numbers");
        std::process::exit(2);
    };
    let result = TcpListener::bind(("127.0.0.1", listen)).and_then(|l| match args[1].as_str() {
        "epoll" => run_epoll(l, server),
        "uring" => run_uring(l, server),
        m => Err(io::Error::other(format!("unknown mode {m}"))),
    });
    if let Err(e) = result {
        eprintln!("floor {}: {e}", args[1]);
        std::process::exit(1);
    }
}

/// The server side of a new client, non-blocking, with TCP_NODELAY (as the client side).
fn connect_server(port: u16) -> io::Result<RawFd> {
    let s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(s.into_raw_fd())
}

fn close(fd: RawFd) {
    // SAFETY: fd is a socket this process opened; callers close each one once.
    unsafe { libc::close(fd) };
}

/// Write all of `b` to a non-blocking socket, waiting in poll(2) when its buffer is full (never
/// for pgbench's small messages).
fn write_all(fd: RawFd, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        // SAFETY: b is a valid slice for its length.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if n > 0 {
            b = &b[n as usize..];
            continue;
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, -1) };
            continue;
        }
        return false;
    }
    true
}

fn run_epoll(listener: TcpListener, server: u16) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let lfd = listener.as_raw_fd();
    // SAFETY: plain system calls on descriptors this process owns.
    let ep = unsafe { libc::epoll_create1(0) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    let watch = |fd: RawFd| {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: as above.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    };
    watch(lfd);
    let mut peer: HashMap<RawFd, RawFd> = HashMap::new();
    let mut buf = vec![0u8; BUF];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        // SAFETY: events has room for 256 entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 256, -1) };
        for ev in &events[..n.max(0) as usize] {
            let fd = ev.u64 as RawFd;
            if fd == lfd {
                while let Ok((c, _)) = listener.accept() {
                    let pair = c
                        .set_nodelay(true)
                        .and(c.set_nonblocking(true))
                        .and_then(|_| connect_server(server));
                    match pair {
                        Ok(s) => {
                            let c = c.into_raw_fd();
                            peer.insert(c, s);
                            peer.insert(s, c);
                            watch(c);
                            watch(s);
                        }
                        Err(e) => eprintln!("floor epoll: {e}"),
                    }
                }
                continue;
            }
            let Some(&other) = peer.get(&fd) else {
                continue;
            };
            // SAFETY: buf is valid for BUF bytes.
            let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), BUF) };
            if r > 0 && write_all(other, &buf[..r as usize]) {
                continue;
            }
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
                continue;
            }
            peer.remove(&fd);
            peer.remove(&other);
            close(fd);
            close(other);
        }
    }
}

/// One direction of a pair: receives on `fd` into `buf`, sends `buf[sent..len]` to `peer`.
struct Side {
    fd: RawFd,
    peer: RawFd,
    buf: Box<[u8]>,
    len: usize,
    sent: usize,
}

const ACCEPT: u64 = u64::MAX;

/// Pairs live in `sides` at slots 2k (client -> server) and 2k+1 (server -> client); a CQE's
/// user_data is `slot << 1 | is_send`. A side has one operation in flight: its receive, or the
/// send of what it received (the receive is re-armed when the send completes).
fn run_uring(listener: TcpListener, server: u16) -> io::Result<()> {
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(1024)
        .or_else(|_| IoUring::new(1024))?;
    let lfd = listener.as_raw_fd();
    let mut sides: Vec<Option<Side>> = Vec::new();
    let mut free_pairs: Vec<usize> = Vec::new();
    let accept = || {
        opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut())
            .build()
            .user_data(ACCEPT)
    };
    let recv = |s: &mut Side, slot: usize| -> squeue::Entry {
        opcode::Recv::new(types::Fd(s.fd), s.buf.as_mut_ptr(), s.buf.len() as u32)
            .build()
            .user_data((slot as u64) << 1)
    };
    let mut pending: Vec<squeue::Entry> = vec![accept()];
    let mut done: Vec<(u64, i32)> = Vec::new();
    loop {
        {
            let mut sq = ring.submission();
            for e in pending.drain(..) {
                // SAFETY: every buffer an entry points at lives in `sides` until its CQE arrives
                // (a side's slot is emptied only when its own operation has completed).
                if unsafe { sq.push(&e) }.is_err() {
                    return Err(io::Error::other("submission queue full"));
                }
            }
        }
        ring.submit_and_wait(1)?;
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for (ud, res) in done.drain(..) {
            if ud == ACCEPT {
                pending.push(accept());
                if res < 0 {
                    continue;
                }
                let c = res as RawFd;
                let one: libc::c_int = 1;
                // SAFETY: setsockopt with a valid int option value.
                unsafe {
                    libc::setsockopt(
                        c,
                        libc::IPPROTO_TCP,
                        libc::TCP_NODELAY,
                        (&one as *const libc::c_int).cast(),
                        4,
                    )
                };
                let s = match connect_server(server) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("floor uring: {e}");
                        close(c);
                        continue;
                    }
                };
                let a = free_pairs.pop().unwrap_or_else(|| {
                    sides.push(None);
                    sides.push(None);
                    sides.len() - 2
                });
                for (slot, fd, peer) in [(a, c, s), (a + 1, s, c)] {
                    let mut side = Side {
                        fd,
                        peer,
                        buf: vec![0; BUF].into(),
                        len: 0,
                        sent: 0,
                    };
                    pending.push(recv(&mut side, slot));
                    sides[slot] = Some(side);
                }
                continue;
            }
            let slot = (ud >> 1) as usize;
            let partner_gone = sides[slot ^ 1].is_none();
            let Some(side) = sides[slot].as_mut() else {
                continue;
            };
            let is_send = ud & 1 == 1;
            if res < 0 || (res == 0 && !is_send) || partner_gone {
                // End or error on one side: shut both sockets down, which ends the other side's
                // operation; the last side to finish closes both (no descriptor is closed while
                // an operation on it may be in flight, so none is reused under one).
                if partner_gone {
                    close(side.fd);
                    close(side.peer);
                    free_pairs.push(slot & !1);
                } else {
                    // SAFETY: shutdown on sockets this process owns and has not closed.
                    unsafe {
                        libc::shutdown(side.fd, libc::SHUT_RDWR);
                        libc::shutdown(side.peer, libc::SHUT_RDWR);
                    }
                }
                sides[slot] = None;
                continue;
            }
            if is_send {
                side.sent += res as usize;
                if side.sent == side.len {
                    pending.push(recv(side, slot));
                    continue;
                }
            } else {
                side.len = res as usize;
                side.sent = 0;
            }
            let rest = &side.buf[side.sent..side.len];
            pending.push(
                opcode::Send::new(types::Fd(side.peer), rest.as_ptr(), rest.len() as u32)
                    .build()
                    .user_data(((slot as u64) << 1) | 1),
            );
        }
    }
}
