//! Worker affinity of hand-outs (see `workers` and `shard.rs`): which waiter a server released on
//! a worker goes to. A pure rule over wait times; the shards supply them.

use std::time::Duration;

/// A released server stays with its worker's oldest waiter unless another worker's oldest has
/// waited this much longer in absolute terms...
pub(super) const LOCAL_WAITER_SKEW: Duration = Duration::from_millis(2);
/// ...plus this fraction of the local waiter's wait: lending is for real imbalance, not for the
/// jitter of a long queue (at 1,000 clients on a pool of 20 every wait is tens of ms).
pub(super) const LOCAL_WAITER_SLACK_DIV: u32 = 2;
/// While a worker has waiters of its own, every this many releases it compares them with the
/// other workers' (a read of one cache line per other worker): often enough that a worker short
/// of servers gets lent some within a few transactions, rare enough to stay off the common path.
pub(super) const FAIRNESS_EVERY: u32 = 8;

/// Where a server released on a worker goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// The worker's own oldest waiter: woken on this thread, the socket stays where it is.
    Local,
    /// Lent to the oldest waiter of that shard (it moves over).
    Other(usize),
    /// Nobody waits: it goes idle on this worker.
    Idle,
}

/// `local`: how long this worker's oldest waiter has waited (None: no waiter); `other`: the
/// longest-waiting oldest waiter of the other workers and its shard (None: none, or not looked).
///
/// The local waiter gets the server unless the other waited more than `LOCAL_WAITER_SKEW` plus
/// half the local wait longer: a worker short of servers soon has waiters that waited clearly
/// longer, which then get the next servers (lent), until the workers' shares match their clients
/// again. Measured with 2 workers (-S, pool of 20): the first-in-line-within-2-ms rule this
/// replaced handed 4.6% of transactions' servers to the other worker at 100 clients and 11.7% at
/// 1,000 (docs/performance.md).
pub(super) fn choose(local: Option<Duration>, other: Option<(usize, Duration)>) -> Target {
    match (local, other) {
        (None, None) => Target::Idle,
        (None, Some((o, _))) => Target::Other(o),
        (Some(_), None) => Target::Local,
        (Some(l), Some((o, w))) => {
            if w > l + l / LOCAL_WAITER_SLACK_DIV + LOCAL_WAITER_SKEW {
                Target::Other(o)
            } else {
                Target::Local
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_released_server_stays_local_unless_another_worker_waited_clearly_longer() {
        assert_eq!(choose(None, None), Target::Idle);
        assert_eq!(choose(None, Some((3, ms(0)))), Target::Other(3));
        assert_eq!(choose(Some(ms(5)), None), Target::Local);
        // Short waits: the absolute skew decides.
        assert_eq!(choose(Some(ms(0)), Some((1, ms(2)))), Target::Local);
        assert_eq!(
            choose(Some(ms(0)), Some((1, ms(2) + Duration::from_micros(1)))),
            Target::Other(1)
        );
        // Long waits: 10 ms of difference on 40 ms is jitter (within half the local wait + skew)...
        assert_eq!(choose(Some(ms(40)), Some((1, ms(50)))), Target::Local);
        // ...but on 2 ms of local wait it is an imbalance: the server is lent.
        assert_eq!(choose(Some(ms(2)), Some((1, ms(12)))), Target::Other(1));
    }
}
