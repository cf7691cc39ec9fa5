//! Connection counters shared across pools (per database, per user, per pool) with RAII slots,
//! so global limits hold across all worker threads without a global lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A count of live connections with an optional limit checked atomically on acquire.
#[derive(Debug, Default)]
pub struct ConnCounter {
    current: AtomicUsize,
}

impl ConnCounter {
    pub fn new() -> Arc<Self> {
        Arc::new(ConnCounter::default())
    }

    pub fn current(&self) -> usize {
        self.current.load(Ordering::Acquire)
    }

    /// Take one slot unless `limit` (0 = unlimited) is reached.
    pub fn try_acquire(self: &Arc<Self>, limit: usize) -> Option<Slot> {
        let mut cur = self.current.load(Ordering::Acquire);
        loop {
            if limit != 0 && cur >= limit {
                return None;
            }
            match self.current.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Slot {
                        counter: self.clone(),
                    })
                }
                Err(now) => cur = now,
            }
        }
    }
}

/// One counted connection; dropping it gives the slot back.
#[derive(Debug)]
pub struct Slot {
    counter: Arc<ConnCounter>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counter.current.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The slots a server connection holds: its pool, its database and its user.
#[derive(Debug)]
pub struct ServerSlots {
    pub pool: Slot,
    pub database: Slot,
    pub user: Slot,
    /// Keeps the server's SHOW SERVERS record alive exactly as long as the connection.
    pub tracker: Option<super::servers::ServerTracker>,
    /// Counts the server among those of its worker (`Pool::homed`) while its socket lives there.
    pub home: Option<Slot>,
}

impl ServerSlots {
    /// Acquire all three or none.
    pub fn acquire(
        pool: &Arc<ConnCounter>,
        pool_cap: usize,
        database: &Arc<ConnCounter>,
        db_limit: usize,
        user: &Arc<ConnCounter>,
        user_limit: usize,
    ) -> Result<ServerSlots, LimitHit> {
        let pool = pool.try_acquire(pool_cap).ok_or(LimitHit::Pool)?;
        let database = database.try_acquire(db_limit).ok_or(LimitHit::Database)?;
        let user = user.try_acquire(user_limit).ok_or(LimitHit::User)?;
        Ok(ServerSlots {
            pool,
            database,
            user,
            tracker: None,
            home: None,
        })
    }
}

/// Which limit stopped a new server connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    Pool,
    Database,
    User,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_and_release() {
        let c = ConnCounter::new();
        let a = c.try_acquire(2).unwrap();
        let _b = c.try_acquire(2).unwrap();
        assert!(c.try_acquire(2).is_none());
        drop(a);
        assert_eq!(c.current(), 1);
        assert!(c.try_acquire(2).is_some());
        assert!(c.try_acquire(0).is_some(), "0 = unlimited");
    }

    #[test]
    fn all_or_nothing() {
        let p = ConnCounter::new();
        let d = ConnCounter::new();
        let u = ConnCounter::new();
        let _held = d.try_acquire(0).unwrap();
        assert_eq!(
            ServerSlots::acquire(&p, 5, &d, 1, &u, 0).unwrap_err(),
            LimitHit::Database
        );
        assert_eq!(
            p.current(),
            0,
            "pool slot given back when the db limit is hit"
        );
        let s = ServerSlots::acquire(&p, 5, &d, 2, &u, 0).unwrap();
        assert_eq!((p.current(), d.current(), u.current()), (1, 2, 1));
        drop(s);
        assert_eq!((p.current(), d.current(), u.current()), (0, 1, 0));
    }

    #[test]
    fn concurrent_acquire_never_exceeds_limit() {
        let c = ConnCounter::new();
        let held = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        if let Some(slot) = c.try_acquire(5) {
                            held.lock().unwrap().push(slot);
                        }
                    }
                });
            }
        });
        assert_eq!(held.lock().unwrap().len(), 5);
    }
}
