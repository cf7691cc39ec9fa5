//! Worker affinity of hand-outs (see `workers`): which idle server a client gets and which waiter
//! a released server goes to, so that a server's socket usually stays on the worker whose IO
//! driver it is registered with. Pure functions over the pool's lists, under the pool lock.

use std::collections::VecDeque;
use std::time::Duration;

use super::Waiter;
use crate::server::ServerConn;

/// How much longer than a waiter of the server's own worker the first waiter may have waited and
/// still be passed over by `pick_waiter`.
pub(super) const LOCAL_WAITER_SKEW: Duration = Duration::from_millis(2);

/// The waiter a released server of worker `home` goes to: the first in line, unless a waiter of
/// the same worker joined at most `LOCAL_WAITER_SKEW` after it (then the first such one).
/// Serving a local waiter wakes it on this thread and keeps the server's socket where it is; the
/// skew bound keeps the line fair (a worker short of servers soon has the oldest waiter, which
/// then gets the next server, and the server moves over). Waiters queue in order of `since`, so
/// the scan stops at the end of the window.
pub(super) fn pick_waiter(waiters: &VecDeque<Waiter>, home: u16) -> usize {
    let Some(first) = waiters.front() else {
        return 0;
    };
    let window_end = first.since + LOCAL_WAITER_SKEW;
    waiters
        .iter()
        .take_while(|w| w.since <= window_end)
        .position(|w| w.worker == home)
        .unwrap_or(0)
}

/// How far from the most recent end `pop_most_recent_local` looks for a server of this worker.
pub(super) const LOCAL_SCAN: usize = 8;

/// LIFO take, preferring a server whose socket belongs to the calling worker (its replies then
/// wake this thread's driver directly): among the `LOCAL_SCAN` most recently released, the most
/// recent local one, else the most recent of all.
pub(super) fn pop_most_recent_local(
    idle: &mut VecDeque<Box<ServerConn>>,
) -> Option<Box<ServerConn>> {
    let me = crate::workers::current();
    let local = idle
        .iter()
        .rev()
        .take(LOCAL_SCAN)
        .position(|c| c.home == me)
        .map(|back| idle.len() - 1 - back);
    match local {
        Some(i) => idle.remove(i),
        None => idle.pop_back(),
    }
}
