//! How many workers should carry the clients: the pure rule behind worker packing, unit-tested
//! without threads or sockets.
//!
//! A worker that sleeps and wakes for every request costs a context switch per wake-up; on a
//! lightly loaded pooler, two half-idle workers do that twice as often as one busier worker (on
//! the 2-core bench, ~13% more CPU per transaction and ~25 µs more per login). So clients gather
//! on the fewest workers whose load stays below `[sluice] worker_spread_percent` of one CPU, and
//! spread to more workers as soon as the busiest one goes past it.

/// What limits throughput besides the workers' CPU, over the period that ended.
///
/// Clients queued for servers mean the servers are the bottleneck, and a server's turn-around
/// includes the pooler's latency (its reply read, the next request written): a worker that carries
/// many clients is slower to get to each, although it is far from CPU-bound. Spreading the clients
/// then shortens every server's round trip, but it costs wake-ups, so only when the machine has
/// CPU to spare (on a box whose cores PostgreSQL and the clients already use, it would not pay).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queueing {
    /// Clients waited for a server: on average at least one was queued over the period.
    pub clients_waited: bool,
    /// The machine had at least one CPU's worth of idle time over the period.
    pub idle_cpu: bool,
}

impl Queueing {
    fn needs_spread(self) -> bool {
        self.clients_waited && self.idle_cpu
    }
}

/// The balancer's memory between periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// Workers 0..active take new clients and keep theirs; the others hand theirs over.
    pub active: usize,
    /// Consecutive periods in which the load would have fitted on one worker fewer.
    calm: u32,
}

/// Periods (seconds) the load must fit on fewer workers before they are given up: gathering is
/// cheap to delay, flapping is not.
pub const CALM_PERIODS: u32 = 3;

/// Gather only when the remaining workers would stay this far below the spread threshold, so that
/// the extra wake-ups of the larger set, once gone, cannot push the smaller set straight back over it.
const GATHER_MARGIN: f64 = 0.8;

impl Packing {
    pub fn new(active: usize) -> Self {
        Packing {
            active: active.max(1),
            calm: 0,
        }
    }

    /// The next period's active count, from each worker's busy fraction (CPU seconds per second)
    /// over the period that ended. `spread_at` is the fraction of one CPU past which a worker is
    /// too busy; 0 or less means every worker is always active.
    pub fn next(&mut self, busy: &[f64], spread_at: f64) -> usize {
        self.next_with(busy, spread_at, Queueing::default())
    }

    /// `next`, also told whether clients queued for servers while CPU was to spare: then every
    /// worker takes clients (clients stay spread while they queue: no gathering meanwhile).
    pub fn next_with(&mut self, busy: &[f64], spread_at: f64, queueing: Queueing) -> usize {
        let total = busy.len().max(1);
        if spread_at <= 0.0 {
            *self = Packing::new(total);
            return total;
        }
        let active = self.active.clamp(1, total);
        if queueing.needs_spread() || (queueing.clients_waited && active == total) {
            self.calm = 0;
            self.active = if queueing.needs_spread() {
                total
            } else {
                active
            };
            return self.active;
        }
        let shown = &busy[..active.min(busy.len())];
        // Work still running on workers being given up counts as well: it is moving to the others.
        let load: f64 = busy.iter().sum();
        let hottest = shown.iter().copied().fold(0.0, f64::max);
        let next = if hottest > spread_at && active < total {
            self.calm = 0;
            // Enough workers to bring the load below the threshold; at least one more.
            let need = (load / spread_at).ceil() as usize;
            need.max(active + 1).min(total)
        } else if active > 1 && load < spread_at * GATHER_MARGIN * (active - 1) as f64 {
            self.calm += 1;
            if self.calm >= CALM_PERIODS {
                self.calm = 0;
                // Straight to where one worker at a time would end: the fewest workers that keep
                // the load under the margin. Stepping down one per CALM_PERIODS took 45 s from 16
                // workers to 1, and every second of it paid the wake-ups of the idle ones (a login
                // cost 1.8x its packed CPU on 16 cores in 7 s runs after a spread).
                let fits = (load / (spread_at * GATHER_MARGIN)).ceil() as usize;
                fits.clamp(1, active - 1)
            } else {
                active
            }
        } else {
            self.calm = 0;
            active
        };
        self.active = next;
        next
    }
}

/// When `from` active workers become `to` (more), how many clients each of the first `from`
/// workers should hand over, from their client counts: each keeps `from / to` of its clients.
pub fn shed_counts(clients: &[usize], from: usize, to: usize) -> Vec<usize> {
    clients
        .iter()
        .enumerate()
        .map(|(w, &n)| {
            if w < from && to > from {
                n * (to - from) / to
            } else {
                0
            }
        })
        .collect()
}

/// Each active worker's share of the servers, as the pool's lending will soon leave them: a
/// worker's count clamped to the even split (`floor..=ceil` of servers per active worker), since
/// servers are lent until no two workers with waiters differ by more than one
/// (`pool::affinity::choose`). Empty when no server is open: then clients are shared evenly.
fn server_shares(servers: &[usize], active: usize) -> Vec<usize> {
    let active = active.min(servers.len());
    let total: usize = servers.iter().sum();
    if active == 0 || total == 0 {
        return Vec::new();
    }
    let lo = total / active;
    let hi = total.div_ceil(active);
    servers[..active].iter().map(|&s| s.clamp(lo, hi)).collect()
}

/// How many clients each active worker should carry for its clients to wait alike: in proportion
/// to its servers (`server_shares`), or evenly when no server is open.
fn client_targets(clients: &[usize], servers: &[usize], active: usize) -> Vec<f64> {
    let active = active.min(clients.len());
    let total = clients[..active].iter().sum::<usize>() as f64;
    let shares = server_shares(servers, active);
    let sum: usize = shares.iter().sum();
    if shares.len() != active || sum == 0 {
        return vec![total / active.max(1) as f64; active];
    }
    shares
        .iter()
        .map(|&s| total * s as f64 / sum as f64)
        .collect()
}

/// While clients queue for servers, a worker whose clients outnumber its share of the servers has
/// the longest queue, and the pool would lend it servers from the others (a cross-worker hand-off
/// each, for as long as the imbalance lasts); moving the surplus clients to where the servers are
/// costs one move each, once. The worker with the largest surplus over its target
/// (`client_targets`) and how many clients it should hand over, when that surplus is more than
/// `max(1, 1%)` of the clients (half the gap of `max(2, 2%)` between two workers).
pub fn share_out(clients: &[usize], servers: &[usize], active: usize) -> Option<(usize, usize)> {
    let active = active.min(clients.len());
    if active < 2 {
        return None;
    }
    let total: usize = clients[..active].iter().sum();
    let targets = client_targets(clients, servers, active);
    let gap = |w: usize| clients[w] as f64 - targets[w];
    let heavy = (0..active).max_by(|&a, &b| gap(a).total_cmp(&gap(b)).then(b.cmp(&a)))?;
    let light = (0..active).min_by(|&a, &b| gap(a).total_cmp(&gap(b)).then(a.cmp(&b)))?;
    let surplus = gap(heavy);
    let n = surplus.min(-gap(light)).floor();
    (surplus > 1usize.max(total / 100) as f64 && n >= 1.0).then_some((heavy, n as usize))
}

/// The active worker a moving client should go to: the one furthest below its target
/// (`client_targets`; ties: the lowest index), never `from` itself.
pub fn destination(
    clients: &[usize],
    servers: &[usize],
    active: usize,
    from: usize,
) -> Option<usize> {
    let active = active.min(clients.len());
    let targets = client_targets(clients, servers, active);
    let room = |w: usize| targets[w] - clients[w] as f64;
    (0..active)
        .filter(|&w| w != from)
        .max_by(|&a, &b| room(a).total_cmp(&room(b)).then(b.cmp(&a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_clients_are_evened_out_over_the_active_workers() {
        let even = &[10, 10, 10, 10];
        // 520 against 480: the heavier hands 20 over.
        assert_eq!(share_out(&[520, 480], even, 2), Some((0, 20)));
        assert_eq!(share_out(&[480, 520, 500, 0], even, 3), Some((1, 20)));
        // No server open yet: the same.
        assert_eq!(share_out(&[520, 480], &[0, 0], 2), Some((0, 20)));
        // Within 1% of the target (or 1 client): left alone.
        assert_eq!(share_out(&[505, 495], even, 2), None);
        assert_eq!(share_out(&[3, 1], even, 2), None);
        // One active worker, or none listed: nothing to even out.
        assert_eq!(share_out(&[900, 0], even, 1), None);
        assert_eq!(share_out(&[], even, 2), None);
    }

    #[test]
    fn queued_clients_follow_the_servers() {
        // 20 servers on 16 workers: the 4 with two servers should carry twice the clients of
        // the others (of 1008 clients, 100.8 against 50.4).
        let mut servers = vec![1; 16];
        servers[..4].fill(2);
        let clients = vec![63; 16];
        let (from, n) = share_out(&clients, &servers, 16).unwrap();
        assert!(from >= 4, "a one-server worker hands clients over");
        assert_eq!(n, 12, "63 - 50.4 surplus, 100.8 - 63 room");
        assert_eq!(destination(&clients, &servers, 16, from), Some(0));
        // Balanced that way: nothing to do.
        let mut balanced = vec![50; 16];
        balanced[..4].fill(101);
        assert_eq!(share_out(&balanced, &servers, 16), None);
        // All 20 servers still on worker 0 (before lending spreads them): its share counts as
        // the even split's ceiling (2), the others' as its floor (1).
        let mut piled = vec![0; 16];
        piled[0] = 20;
        let mut one_heavy = vec![59; 16];
        one_heavy[0] = 118;
        assert_eq!(share_out(&one_heavy, &piled, 16), None);
        // Fewer servers than workers: the workers without one should hand their clients over.
        let few = [1, 1, 0, 0];
        assert_eq!(share_out(&[25, 25, 25, 25], &few, 4), Some((2, 25)));
        assert_eq!(destination(&[25, 25, 25, 25], &few, 4, 3), Some(0));
    }

    #[test]
    fn an_idle_pooler_stays_on_one_worker() {
        let mut p = Packing::new(1);
        assert_eq!(p.next(&[0.02, 0.0, 0.0, 0.0], 0.75), 1);
        assert_eq!(p.next(&[0.70, 0.0, 0.0, 0.0], 0.75), 1);
    }

    #[test]
    fn a_busy_worker_brings_in_enough_workers_for_the_load() {
        let mut p = Packing::new(1);
        assert_eq!(p.next(&[0.80, 0.0, 0.0, 0.0], 0.75), 2);
        // Saturated workers: load 2.9 CPUs on 3 workers needs 4 (capped at the total).
        let mut p = Packing::new(3);
        assert_eq!(p.next(&[0.99, 0.98, 0.95, 0.0], 0.75), 4);
        assert_eq!(p.next(&[0.99, 0.98, 0.95, 0.9], 0.75), 4);
    }

    #[test]
    fn gathering_waits_for_calm_periods_and_a_margin() {
        let mut p = Packing::new(2);
        // 0.65 of load would fit under 0.75 on one worker, but not under the 0.6 margin: stay.
        for _ in 0..10 {
            assert_eq!(p.next(&[0.35, 0.30], 0.75), 2);
        }
        // 0.4: one worker fewer, after CALM_PERIODS periods in a row.
        for _ in 1..CALM_PERIODS {
            assert_eq!(p.next(&[0.2, 0.2], 0.75), 2);
        }
        assert_eq!(p.next(&[0.2, 0.2], 0.75), 1);
    }

    #[test]
    fn gathering_goes_straight_to_the_workers_the_load_needs() {
        // 16 workers after a spread, 1.0 CPU of load left: 1.0 / (0.75 * 0.8) -> 2 workers at once.
        let mut p = Packing::new(16);
        let busy = [1.0 / 16.0; 16];
        for _ in 1..CALM_PERIODS {
            assert_eq!(p.next(&busy, 0.75), 16);
        }
        assert_eq!(p.next(&busy, 0.75), 2);
        // Where one at a time would have ended too: 2 is not gathered further (1.0 >= 0.6 * 1).
        for _ in 0..10 {
            assert_eq!(p.next(&[0.5, 0.5], 0.75), 2);
        }
        // Nearly idle: all the way to one.
        let mut p = Packing::new(16);
        for _ in 1..CALM_PERIODS {
            p.next(&[0.001; 16], 0.75);
        }
        assert_eq!(p.next(&[0.001; 16], 0.75), 1);
    }

    #[test]
    fn a_busy_period_resets_the_calm_count() {
        let mut p = Packing::new(2);
        for _ in 1..CALM_PERIODS {
            p.next(&[0.1, 0.1], 0.75);
        }
        assert_eq!(p.next(&[0.5, 0.3], 0.75), 2);
        for _ in 1..CALM_PERIODS {
            assert_eq!(p.next(&[0.1, 0.1], 0.75), 2);
        }
        assert_eq!(p.next(&[0.1, 0.1], 0.75), 1);
    }

    #[test]
    fn queued_clients_spread_over_every_worker_when_cpu_is_to_spare() {
        let waited = Queueing {
            clients_waited: true,
            idle_cpu: true,
        };
        // Far below the CPU threshold, but clients queue and cores idle: all workers at once.
        let mut p = Packing::new(1);
        assert_eq!(p.next_with(&[0.4, 0.0, 0.0, 0.0], 0.75, waited), 4);
        // While clients queue, no gathering however calm the CPU.
        let busy_box = Queueing {
            clients_waited: true,
            idle_cpu: false,
        };
        for _ in 0..10 {
            assert_eq!(p.next_with(&[0.1, 0.1, 0.1, 0.1], 0.75, busy_box), 4);
        }
        // Queueing on a machine without spare CPU does not spread (the 2-core bench box).
        let mut p = Packing::new(1);
        assert_eq!(p.next_with(&[0.4, 0.0], 0.75, busy_box), 1);
        // Spare CPU without queueing does not either.
        let idle = Queueing {
            clients_waited: false,
            idle_cpu: true,
        };
        assert_eq!(p.next_with(&[0.4, 0.0], 0.75, idle), 1);
        // Once the queue is gone, the usual calm periods gather again.
        let mut p = Packing::new(2);
        for _ in 1..CALM_PERIODS {
            assert_eq!(p.next_with(&[0.1, 0.1], 0.75, idle), 2);
        }
        assert_eq!(p.next_with(&[0.1, 0.1], 0.75, idle), 1);
        // With packing off, everything is active anyway.
        assert_eq!(Packing::new(1).next_with(&[0.0, 0.0], 0.0, waited), 2);
    }

    #[test]
    fn a_zero_threshold_keeps_every_worker_active() {
        let mut p = Packing::new(1);
        assert_eq!(p.next(&[0.0, 0.0, 0.0], 0.0), 3);
        assert_eq!(p.next(&[0.0, 0.0, 0.0], 0.0), 3);
        // Back on: gathers from all workers after calm periods (to one: there is no load).
        for _ in 1..CALM_PERIODS {
            assert_eq!(p.next(&[0.0, 0.0, 0.0], 0.75), 3);
        }
        assert_eq!(p.next(&[0.0, 0.0, 0.0], 0.75), 1);
    }

    #[test]
    fn a_single_worker_is_always_active() {
        let mut p = Packing::new(1);
        assert_eq!(p.next(&[1.0], 0.75), 1);
        assert_eq!(p.next(&[], 0.75), 1);
    }

    #[test]
    fn spreading_sheds_a_fair_share_to_the_new_workers() {
        assert_eq!(shed_counts(&[10, 0, 0], 1, 2), vec![5, 0, 0]);
        assert_eq!(shed_counts(&[9, 9, 0, 0], 2, 4), vec![4, 4, 0, 0]);
        assert_eq!(shed_counts(&[9, 9, 0], 2, 2), vec![0, 0, 0]);
        assert_eq!(shed_counts(&[9, 9, 0], 2, 1), vec![0, 0, 0]);
    }

    #[test]
    fn movers_go_to_the_emptiest_active_worker() {
        let none = &[0, 0, 0, 0];
        assert_eq!(destination(&[5, 1, 0, 0], none, 2, 0), Some(1));
        assert_eq!(destination(&[5, 3, 2, 9], none, 4, 2), Some(1));
        assert_eq!(destination(&[5, 0], none, 1, 0), None);
        assert_eq!(destination(&[0, 7], none, 1, 1), Some(0));
        // With servers open, to the one furthest below its share of them.
        assert_eq!(destination(&[5, 4, 5, 9], &[4, 1, 4, 1], 4, 3), Some(0));
    }
}
