//! A moment kept in an atomic for the admin views (SHOW CLIENTS / SHOW SERVERS `request_time`):
//! µs after a base `Instant`, shown as wall-clock time from the base's wall-clock reading.
//!
//! Why not store wall-clock time directly: the hot path reads the clock once per request and once
//! per reply and hands that `Instant` around; a stamp then costs a subtraction instead of another
//! clock read (there were nine per -S transaction). A wall-clock step after the base moves the
//! shown time by as much, as PgBouncer's cached time would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// `repr(C)`: `base` and `after_us`, which every `set` touches, first (see `ClientEntry`).
#[derive(Debug)]
#[repr(C)]
pub struct Stamp {
    base: Instant,
    after_us: AtomicU64,
    base_wall: SystemTime,
}

impl Stamp {
    /// A stamp at the current moment, which is also its base.
    pub fn now() -> Self {
        Stamp {
            base: Instant::now(),
            base_wall: SystemTime::now(),
            after_us: AtomicU64::new(0),
        }
    }

    pub fn set(&self, at: Instant) {
        let us = at.saturating_duration_since(self.base).as_micros() as u64;
        self.after_us.store(us, Ordering::Relaxed);
    }

    /// The base (when the stamp was made).
    pub fn base(&self) -> Instant {
        self.base
    }

    /// The wall-clock time of the base (when the stamp was made).
    pub fn base_wall(&self) -> SystemTime {
        self.base_wall
    }

    /// The latest `set`, as µs after the base (0 before the first).
    pub fn after_us(&self) -> u64 {
        self.after_us.load(Ordering::Relaxed)
    }

    /// The wall-clock time of the latest `set` (the base's before the first).
    pub fn wall(&self) -> SystemTime {
        self.base_wall + Duration::from_micros(self.after_us.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_base_until_set_then_the_set_moment() {
        let s = Stamp::now();
        assert_eq!(s.wall(), s.base_wall());
        s.set(s.base + Duration::from_millis(1500));
        assert_eq!(s.wall(), s.base_wall() + Duration::from_millis(1500));
        // A moment before the base (an Instant read earlier by the caller) shows the base.
        s.set(s.base - Duration::from_millis(1));
        assert_eq!(s.wall(), s.base_wall());
    }
}
