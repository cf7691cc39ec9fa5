//! The server states a pool counts by hand rather than by its lists: a connection being opened
//! (sv_login, `PoolState::connecting`), a checked-out server running a pooler query (sv_tested,
//! `Pool::testing`) and a released one waiting for its client's cancels to land
//! (sv_being_canceled, `Pool::being_canceled`). Each is a guard that takes its count when the state begins and gives it back
//! when it is dropped, so a task cancelled mid-way (a client gone during a reset, a runtime shut
//! down during a connect) cannot leave a count behind; idle and active need no count of their own
//! (idle servers are the shards' lists, active is open − idle − connecting).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use super::servers::ServerState;
use super::{Pool, PoolState};
use crate::server::ServerConn;

/// A server counted as sv_tested (SHOW SERVERS `tested`) while a pooler query runs on it.
pub(super) struct Testing<'a> {
    pool: &'a Pool,
}

impl<'a> Testing<'a> {
    pub fn begin(pool: &'a Pool, server: &ServerConn) -> Self {
        server.set_book_state(ServerState::Tested, Instant::now());
        pool.testing.fetch_add(1, Ordering::Relaxed);
        Testing { pool }
    }

    /// The query is done: the server is the checking-out client's again.
    pub fn end(self, server: &ServerConn) {
        server.set_book_state(ServerState::Active, Instant::now());
    }
}

impl Drop for Testing<'_> {
    fn drop(&mut self) {
        self.pool.testing.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A released server counted as sv_being_canceled (SHOW SERVERS `being_canceled`) while a cancel
/// its client sent is still on its way to it.
pub(super) struct BeingCanceled<'a> {
    pool: &'a Pool,
}

impl<'a> BeingCanceled<'a> {
    pub fn begin(pool: &'a Pool, server: &ServerConn) -> Self {
        server.set_book_state(ServerState::BeingCanceled, Instant::now());
        pool.being_canceled.fetch_add(1, Ordering::Relaxed);
        BeingCanceled { pool }
    }

    /// The cancels have landed: the server is its client's again, for the release that follows.
    pub fn end(self, server: &ServerConn) {
        server.set_book_state(ServerState::Active, Instant::now());
    }
}

impl Drop for BeingCanceled<'_> {
    fn drop(&mut self) {
        self.pool.being_canceled.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection being opened (sv_login), counted from the growth plan that made room for it
/// (`plan_locked`, under the pool's lock) until its login ends either way.
pub(super) struct Connecting {
    pool: Arc<Pool>,
    counted: bool,
}

impl Connecting {
    /// Take over one count `plan_locked` added.
    pub fn adopt(pool: &Arc<Pool>) -> Self {
        Connecting {
            pool: pool.clone(),
            counted: true,
        }
    }

    /// The login ended: give the count back inside the caller's hold of the pool's lock, with
    /// the other changes of that moment (the login failure cleared or recorded).
    pub fn finish(mut self, st: &mut PoolState) {
        debug_assert!(
            st.connecting > 0,
            "{}: connecting count drifted",
            self.pool.key
        );
        st.connecting -= 1;
        self.counted = false;
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        if self.counted {
            let mut st = self.pool.state.lock();
            debug_assert!(
                st.connecting > 0,
                "{}: connecting count drifted",
                self.pool.key
            );
            st.connecting -= 1;
        }
    }
}
