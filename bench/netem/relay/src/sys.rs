//! The few system calls std does not wrap: epoll (with a nanosecond timeout), CLOCK_MONOTONIC,
//! the thread's timer slack, and a listen backlog above std's 128.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Timers of this thread fire within `ns` of their deadline (the default slack is 50 µs, half the
/// jitter the relay draws).
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// Re-listen with a larger backlog (1,000 clients log in at once).
pub fn set_backlog(fd: RawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: listen on a socket the caller owns.
    check(unsafe { libc::listen(fd, backlog) }).map(drop)
}

pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 returns a new descriptor that we own.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: ev outlives the call; fd is open.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits at most `timeout_ns` (None: until an event), with nanosecond resolution
    /// (epoll_pwait2, Linux 5.11; older kernels get epoll_wait rounded up to whole milliseconds).
    /// EINTR counts as no events.
    pub fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout_ns: Option<u64>,
    ) -> io::Result<usize> {
        let (ep, buf, max) = (
            self.0.as_raw_fd(),
            events.as_mut_ptr(),
            events.len() as libc::c_int,
        );
        let ts = timeout_ns.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let n = if PWAIT2_MISSING.load(Ordering::Relaxed) {
            -1
        } else {
            let tsp = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: buf holds max entries; tsp is null or points at ts, alive for the call.
            unsafe { libc::epoll_pwait2(ep, buf, max, tsp, std::ptr::null()) }
        };
        let n = if n < 0
            && (PWAIT2_MISSING.load(Ordering::Relaxed)
                || io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
        {
            if !PWAIT2_MISSING.swap(true, Ordering::Relaxed) {
                eprintln!("delay-relay: no epoll_pwait2 (Linux < 5.11): delays round up to whole milliseconds");
            }
            let ms = timeout_ns.map_or(-1, |ns| {
                ns.div_ceil(1_000_000).min(i32::MAX as u64) as libc::c_int
            });
            // SAFETY: buf holds max entries.
            unsafe { libc::epoll_wait(ep, buf, max, ms) }
        } else {
            n
        };
        match check(n) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// Set once epoll_pwait2 said ENOSYS.
static PWAIT2_MISSING: AtomicBool = AtomicBool::new(false);
