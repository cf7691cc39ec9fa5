//! The few system calls std does not wrap: epoll, a timerfd on CLOCK_MONOTONIC with nanosecond
//! deadlines, the thread's timer slack, and a listen backlog above std's 128.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the timerfd's clock).
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

    /// Waits without a timeout (the timerfd wakes it); EINTR counts as no events.
    pub fn wait(&self, events: &mut [libc::epoll_event]) -> io::Result<usize> {
        // SAFETY: events is a valid buffer of events.len() entries.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                -1,
            )
        };
        match check(n) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

pub struct Timer(OwnedFd);

impl Timer {
    pub fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create returns a new descriptor that we own.
        let fd = check(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        Ok(Timer(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Fires once at `at_ns` on CLOCK_MONOTONIC (at once if that is past).
    pub fn arm_at(&self, at_ns: u64) -> io::Result<()> {
        let at = libc::timespec {
            tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (at_ns % 1_000_000_000).max(1) as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: at,
        };
        // SAFETY: spec is valid; a null old value is allowed.
        check(unsafe {
            libc::timerfd_settime(
                self.fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })
        .map(drop)
    }

    /// Consumes the expiry count so that the descriptor stops being readable.
    pub fn clear(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into n; EAGAIN (not expired) is fine to ignore.
        unsafe { libc::read(self.fd(), (&mut n as *mut u64).cast(), 8) };
    }
}
