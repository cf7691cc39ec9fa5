//! Limits lowered while servers live (RELOAD, SET): surplus servers close, idle ones at once and
//! busy ones as they come back; and the cross-worker counts of hand-outs (`workers::cross`).

use super::rules;
use super::{Pool, PoolSettings, Waiter};
use crate::server::ServerConn;
use crate::workers::cross::CrossEvent;

impl Pool {
    /// The pool, its database or its user holds more servers than a (lowered) limit allows: a
    /// server that comes back closes instead of serving anyone else. Three loads of counters
    /// that change only when a server opens or closes.
    pub(super) fn over_limits(&self, settings: &PoolSettings) -> bool {
        rules::keep_cap(&settings.limits).is_some_and(|cap| self.servers.current() > cap)
            || rules::over_limit(self.db_servers.current(), settings.max_db_connections)
            || rules::over_limit(self.user_servers.current(), settings.max_user_connections)
    }

    /// Close idle servers while a lowered limit is exceeded (reload, SET, janitor).
    pub(super) fn trim_surplus(&self, settings: &PoolSettings) {
        let mut closing = Vec::new();
        // Each close lowers the counters only when the connection drops, so count ahead.
        let cap = rules::keep_cap(&settings.limits);
        let (mut pool, mut db, mut user) = (
            self.servers.current(),
            self.db_servers.current(),
            self.user_servers.current(),
        );
        let over = |pool: usize, db: usize, user: usize| {
            cap.is_some_and(|c| pool > c)
                || rules::over_limit(db, settings.max_db_connections)
                || rules::over_limit(user, settings.max_user_connections)
        };
        for shard in self.shards.iter() {
            if !over(pool, db, user) {
                break;
            }
            let mut l = shard.lock();
            while over(pool, db, user) {
                let Some(conn) = l.idle.pop_front() else {
                    break;
                };
                closing.push(conn);
                pool -= 1;
                db = db.saturating_sub(1);
                user = user.saturating_sub(1);
            }
            shard.publish(&l, self.born);
        }
        for c in &closing {
            tracing::info!(
                "S-{}: {} closing server: too many servers in the pool",
                c.id,
                self.key
            );
        }
    }

    /// Count what handing a server of worker `home` to waiter `w` crosses: the server goes to
    /// another worker's client, and/or the waiter is woken from another worker's thread.
    pub(super) fn note_hand_to(&self, w: &Waiter, home: u16) {
        if w.worker != home {
            self.cross.note(CrossEvent::ServerHandoff);
        }
        if w.worker != crate::workers::current() {
            self.cross.note(CrossEvent::RemoteWake);
        }
    }

    /// An idle server taken by a client of the calling worker: a hand-off when its socket lives
    /// on another worker.
    pub(super) fn note_taken(&self, conn: &ServerConn) {
        if conn.home != crate::workers::current() {
            self.cross.note(CrossEvent::ServerHandoff);
        }
    }
}
