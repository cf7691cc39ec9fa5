//! Worker affinity of hand-outs (see `workers`): which idle server a client gets and which waiter
//! a released server goes to, so that a server's socket usually stays on the worker whose IO
//! driver it is registered with. Pure functions over the pool's lists, under the pool lock.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::Waiter;
use crate::server::ServerConn;

/// A released server stays with its worker's oldest waiter unless the first in line (another
/// worker's) has waited this much longer in absolute terms...
pub(super) const LOCAL_WAITER_SKEW: Duration = Duration::from_millis(2);
/// ...plus this fraction of the local waiter's wait: lending is for real imbalance, not for the
/// jitter of a long queue (at 1,000 clients on a pool of 20 every wait is tens of ms).
pub(super) const LOCAL_WAITER_SLACK_DIV: u32 = 2;
/// How deep the line is searched for a waiter of the server's worker.
pub(super) const LOCAL_WAITER_SCAN: usize = 256;

/// The waiter a released server of worker `home` goes to, at `now`: the oldest waiter of the same
/// worker, unless the first in line (another worker's) has waited more than `LOCAL_WAITER_SKEW`
/// plus half the local waiter's wait longer than it; the first in line when no waiter of the
/// worker is found.
///
/// Serving a local waiter wakes it on this thread and keeps the server's socket where it is: the
/// whole transaction stays on one worker. The bound keeps the line fair: a worker short of servers
/// soon has waiters that waited clearly longer, which then get the next servers (lent: they move
/// over), until the workers' shares match their clients again. Measured with 2 workers (-S, pool
/// of 20): the first-in-line-within-2-ms rule this replaces handed 4.6% of transactions' servers
/// to the other worker at 100 clients and 11.7% at 1,000 (docs/performance.md).
pub(super) fn pick_waiter(waiters: &VecDeque<Waiter>, home: u16, now: Instant) -> usize {
    let Some(first) = waiters.front() else {
        return 0;
    };
    if first.worker == home {
        return 0;
    }
    let Some(i) = waiters
        .iter()
        .take(LOCAL_WAITER_SCAN)
        .position(|w| w.worker == home)
    else {
        return 0;
    };
    let local_wait = now.saturating_duration_since(waiters[i].since);
    let first_wait = now.saturating_duration_since(first.since);
    if first_wait <= local_wait + local_wait / LOCAL_WAITER_SLACK_DIV + LOCAL_WAITER_SKEW {
        i
    } else {
        0
    }
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
