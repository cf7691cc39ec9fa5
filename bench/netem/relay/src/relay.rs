//! The event loop: one thread, level-triggered epoll whose timeout is the next release. Each
//! accepted client gets its own connection to the target; bytes read from either side are queued
//! with a release time and written to the other side once it has passed (at once for a direction
//! that is not delayed). End of stream travels the same way (a shutdown of the write side at its
//! release time), so a connection closes only after both directions have been relayed.

use crate::delay::Delay;
use crate::sys::{mono_ns, Epoll};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;

const LISTENER: u64 = 1 << 62;
/// Bytes queued in one direction before the relay stops reading that side.
const QUEUE_CAP: usize = 1 << 20;
const IN: u32 = libc::EPOLLIN as u32;
const OUT: u32 = libc::EPOLLOUT as u32;

/// One queued read: its bytes (empty: the end of the stream) and when they leave.
struct Chunk {
    at: u64,
    data: Vec<u8>,
}

/// One direction: bytes read from side `d`, written to side `1 - d`.
#[derive(Default)]
struct Dir {
    queue: VecDeque<Chunk>,
    /// Bytes of the front chunk already written.
    written: usize,
    queued: usize,
    /// Release time of the last chunk queued (the next one never leaves before it).
    last: u64,
    eof_read: bool,
    shut: bool,
    /// The writing side returned EAGAIN with a due chunk left.
    blocked: bool,
}

struct Side {
    stream: TcpStream,
    /// Events registered with epoll (0: not registered).
    mask: u32,
}

/// Side 0 is the client, side 1 the target; dirs[0] carries client -> target.
struct Conn {
    sides: [Side; 2],
    dirs: [Dir; 2],
}

pub struct Relay {
    epoll: Epoll,
    listeners: Vec<(TcpListener, SocketAddr)>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    due: BinaryHeap<Reverse<(u64, usize, usize)>>,
    delay: Delay,
    delayed: [bool; 2],
    buf: Vec<u8>,
}

impl Relay {
    /// `delayed[d]`: whether direction d (0: client -> target, 1: target -> client) is delayed.
    pub fn new(
        listeners: Vec<(TcpListener, SocketAddr)>,
        delay: Delay,
        delayed: [bool; 2],
    ) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        for (i, (l, _)) in listeners.iter().enumerate() {
            l.set_nonblocking(true)?;
            epoll.add(l.as_raw_fd(), IN, LISTENER | i as u64)?;
        }
        Ok(Relay {
            epoll,
            listeners,
            conns: Vec::new(),
            free: Vec::new(),
            due: BinaryHeap::new(),
            delay,
            delayed,
            buf: vec![0; 64 * 1024],
        })
    }

    pub fn run(&mut self) -> io::Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        loop {
            let timeout = self
                .due
                .peek()
                .map(|&Reverse((at, _, _))| at.saturating_sub(mono_ns()));
            let n = self.epoll.wait(&mut events, timeout)?;
            for ev in &events[..n] {
                let (token, bits) = (ev.u64, ev.events);
                if token & LISTENER != 0 {
                    self.accept((token & !LISTENER) as usize);
                } else {
                    self.on_socket((token >> 1) as usize, (token & 1) as usize, bits);
                }
            }
            self.release_due();
        }
    }

    fn accept(&mut self, index: usize) {
        loop {
            let (listener, target) = &self.listeners[index];
            let client = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!(
                        "delay-relay: accept on {}: {e}",
                        listener
                            .local_addr()
                            .map_or(String::new(), |a| a.to_string())
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    return;
                }
            };
            let target = *target;
            // The target is on this host: a blocking connect returns at once (or is refused,
            // which closes the client).
            match TcpStream::connect(target).and_then(|server| self.add_conn(client, server)) {
                Ok(()) => {}
                Err(e) => eprintln!("delay-relay: connecting to {target}: {e}"),
            }
        }
    }

    fn add_conn(&mut self, client: TcpStream, server: TcpStream) -> io::Result<()> {
        for s in [&client, &server] {
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
        }
        let id = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.conns[id] = Some(Conn {
            sides: [
                Side {
                    stream: client,
                    mask: 0,
                },
                Side {
                    stream: server,
                    mask: 0,
                },
            ],
            dirs: [Dir::default(), Dir::default()],
        });
        self.update_interest(id);
        Ok(())
    }

    fn on_socket(&mut self, id: usize, side: usize, bits: u32) {
        if self.conns.get(id).is_none_or(Option::is_none) {
            return;
        }
        if bits & (IN | libc::EPOLLHUP as u32 | libc::EPOLLERR as u32) != 0 {
            self.read(id, side);
        }
        if bits & OUT != 0 {
            self.flush(id, 1 - side);
        }
        self.update_interest(id);
    }

    /// Reads side `d` into direction d's queue until it is empty, at its end or the queue is full.
    fn read(&mut self, id: usize, d: usize) {
        loop {
            let Some(conn) = self.conns[id].as_mut() else {
                return;
            };
            let dir = &conn.dirs[d];
            if dir.eof_read || dir.queued >= QUEUE_CAP {
                break;
            }
            let (data, more) = match (&conn.sides[d].stream).read(&mut self.buf) {
                Ok(0) => (Vec::new(), false),
                Ok(n) => (self.buf[..n].to_vec(), n == self.buf.len()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return self.close(id),
            };
            self.enqueue(id, d, data);
            // A short read emptied the socket: the next read would only say EAGAIN (epoll is
            // level-triggered and reports whatever arrives later), a system call per message saved.
            if !more {
                break;
            }
        }
        if !self.delayed[d] {
            self.flush(id, d);
        }
    }

    fn enqueue(&mut self, id: usize, d: usize, data: Vec<u8>) {
        let now = mono_ns();
        let Some(conn) = self.conns[id].as_mut() else {
            return;
        };
        let dir = &mut conn.dirs[d];
        let at = if self.delayed[d] {
            self.delay.release_at(now, dir.last)
        } else {
            now.max(dir.last)
        };
        dir.last = at;
        dir.eof_read |= data.is_empty();
        dir.queued += data.len();
        dir.queue.push_back(Chunk { at, data });
        if self.delayed[d] {
            self.due.push(Reverse((at, id, d)));
        }
    }

    /// Writes direction d's chunks whose time has come to side 1 - d.
    fn flush(&mut self, id: usize, d: usize) {
        let now = mono_ns();
        let Some(conn) = self.conns[id].as_mut() else {
            return;
        };
        let (dir, out) = (&mut conn.dirs[d], &conn.sides[1 - d].stream);
        dir.blocked = false;
        while let Some(front) = dir.queue.front() {
            if front.at > now {
                break;
            }
            if front.data.is_empty() {
                let _ = out.shutdown(Shutdown::Write);
                dir.shut = true;
                dir.queue.pop_front();
                continue;
            }
            match (&*out).write(&front.data[dir.written..]) {
                Ok(0) => return self.close(id),
                Ok(n) => {
                    dir.written += n;
                    if dir.written == front.data.len() {
                        dir.queued -= front.data.len();
                        dir.written = 0;
                        dir.queue.pop_front();
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    dir.blocked = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(id),
            }
        }
        if conn.dirs[0].shut && conn.dirs[1].shut {
            self.close(id);
        }
    }

    fn release_due(&mut self) {
        let now = mono_ns();
        while let Some(&Reverse((at, id, d))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            // An entry may outlive its connection (closed, or the slot reused): flushing then
            // writes only what is due, which is harmless.
            if self.conns[id].is_some() {
                self.flush(id, d);
                self.update_interest(id);
            }
        }
    }

    /// Registers each side for what it is waiting for: reading while its direction is open and
    /// not full, writing while the other direction is blocked on it. A side waiting for
    /// neither leaves epoll (a half-closed socket would otherwise report HUP on every wait).
    fn update_interest(&mut self, id: usize) {
        let Some(conn) = self.conns[id].as_mut() else {
            return;
        };
        for s in 0..2 {
            let dir_in = &conn.dirs[s];
            let mut want = 0;
            if !dir_in.eof_read && dir_in.queued < QUEUE_CAP {
                want |= IN;
            }
            if conn.dirs[1 - s].blocked {
                want |= OUT;
            }
            let side = &mut conn.sides[s];
            if want == side.mask {
                continue;
            }
            let fd = side.stream.as_raw_fd();
            let token = (id as u64) << 1 | s as u64;
            let result = match (side.mask, want) {
                (_, 0) => self.epoll.delete(fd),
                (0, w) => self.epoll.add(fd, w, token),
                (_, w) => self.epoll.modify(fd, w, token),
            };
            if let Err(e) = result {
                eprintln!("delay-relay: epoll: {e}");
                return self.close(id);
            }
            side.mask = want;
        }
    }

    fn close(&mut self, id: usize) {
        // Dropping the streams closes both descriptors, which also takes them out of epoll.
        if self.conns[id].take().is_some() {
            self.free.push(id);
        }
    }
}
