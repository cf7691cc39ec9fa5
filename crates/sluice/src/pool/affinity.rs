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

/// The servers whose socket lives on the releasing worker (`here`) and on the other worker
/// (`there`), idle or in use (`Pool::homed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Homed {
    pub here: usize,
    pub there: usize,
}

/// `local`: how long this worker's oldest waiter has waited (None: no waiter); `other`: the
/// longest-waiting oldest waiter of the other workers and its shard (None: none, or not looked);
/// `homed`: the two workers' server counts.
///
/// The local waiter gets the server unless the other waited more than `LOCAL_WAITER_SKEW` plus
/// half the local wait longer, and the other worker has clearly fewer servers: none at all, or at
/// least two fewer. Servers then spread over the workers that have waiters until their counts
/// differ by at most one, and stay there. Counts that differ by one are as even as integers get
/// (20 servers on 16 workers: 4 workers have 2), and the workers with fewer have longer queues:
/// lending on wait times alone then moved a server back and forth for ever, 7.5% of
/// transactions' servers on 16 cores (docs/performance.md). The balancer evens those waits out
/// instead, once, by moving clients to where the servers are (`workers::packing::share_out`).
pub(super) fn choose(
    local: Option<Duration>,
    other: Option<(usize, Duration)>,
    homed: impl FnOnce(usize) -> Homed,
) -> Target {
    match (local, other) {
        (None, None) => Target::Idle,
        (None, Some((o, _))) => Target::Other(o),
        (Some(_), None) => Target::Local,
        (Some(l), Some((o, w))) => {
            if w > l + l / LOCAL_WAITER_SLACK_DIV + LOCAL_WAITER_SKEW && short_of_servers(homed(o))
            {
                Target::Other(o)
            } else {
                Target::Local
            }
        }
    }
}

/// The other worker has clearly fewer servers than this one.
pub(super) fn short_of_servers(h: Homed) -> bool {
    h.there == 0 || h.here > h.there + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// This worker has 3 servers, the other none: only the waits decide.
    fn short(_: usize) -> Homed {
        Homed { here: 3, there: 0 }
    }

    #[test]
    fn a_released_server_stays_local_unless_another_worker_waited_clearly_longer() {
        assert_eq!(choose(None, None, short), Target::Idle);
        assert_eq!(choose(None, Some((3, ms(0))), short), Target::Other(3));
        assert_eq!(choose(Some(ms(5)), None, short), Target::Local);
        // Short waits: the absolute skew decides.
        assert_eq!(choose(Some(ms(0)), Some((1, ms(2))), short), Target::Local);
        assert_eq!(
            choose(
                Some(ms(0)),
                Some((1, ms(2) + Duration::from_micros(1))),
                short
            ),
            Target::Other(1)
        );
        // Long waits: 10 ms of difference on 40 ms is jitter (within half the local wait + skew)...
        assert_eq!(
            choose(Some(ms(40)), Some((1, ms(50))), short),
            Target::Local
        );
        // ...but on 2 ms of local wait it is an imbalance: the server is lent.
        assert_eq!(
            choose(Some(ms(2)), Some((1, ms(12))), short),
            Target::Other(1)
        );
    }

    #[test]
    fn servers_are_lent_only_to_a_worker_clearly_short_of_them() {
        let waited = (Some(ms(2)), Some((1, ms(20))));
        let with = |here, there| move |_: usize| Homed { here, there };
        // One more here than there is as even as it gets: no server moves back and forth.
        assert_eq!(choose(waited.0, waited.1, with(2, 1)), Target::Local);
        assert_eq!(choose(waited.0, waited.1, with(5, 5)), Target::Local);
        assert_eq!(choose(waited.0, waited.1, with(1, 2)), Target::Local);
        // Two more, or none there at all: lent.
        assert_eq!(choose(waited.0, waited.1, with(3, 1)), Target::Other(1));
        assert_eq!(choose(waited.0, waited.1, with(1, 0)), Target::Other(1));
        // Nobody waits here: lent whatever the counts (else it would idle beside a waiter).
        assert_eq!(choose(None, waited.1, with(0, 9)), Target::Other(1));
    }
}
