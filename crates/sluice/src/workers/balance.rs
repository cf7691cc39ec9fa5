//! The balancer: once a second, each worker's busy share (its thread's CPU time over the period)
//! goes through the packing rule, and a new active count is applied (`Workers::set_active`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::packing::{Packing, Queueing};
use super::Workers;

/// Average clients queued over a period from which the load counts as waiting for servers.
const QUEUED_CLIENTS: f64 = 1.0;
/// Idle CPUs (machine-wide, on average over the period) from which spreading has CPU to spare.
const SPARE_CPUS: f64 = 1.0;

/// How often the balancer looks at the workers' load.
pub const PERIOD: Duration = Duration::from_secs(1);

/// What the balancer remembers between periods.
pub struct Balancer {
    packing: Packing,
    cpu: Vec<Option<Duration>>,
    at: Instant,
    /// Total client wait time of every pool (µs) at the last period.
    wait_us: u64,
    /// The machine's idle jiffies at the last period (`/proc/stat`).
    idle_jiffies: Option<u64>,
}

impl Balancer {
    pub fn new(workers: &Workers) -> Self {
        Balancer {
            packing: Packing::new(workers.active()),
            cpu: workers.slots().iter().map(|s| s.cpu_time()).collect(),
            at: Instant::now(),
            wait_us: 0,
            idle_jiffies: idle_jiffies(),
        }
    }

    /// One period: measure, decide, apply. `spread_percent` is `[sluice] worker_spread_percent`;
    /// `wait_us` the total time clients of every pool have waited for servers so far; `servers`
    /// the server connections whose socket lives on each worker (`Pool::homed`, all pools).
    pub fn tick(
        &mut self,
        workers: &Workers,
        spread_percent: u32,
        wait_us: u64,
        servers: &[usize],
    ) {
        let slots = workers.slots();
        if slots.len() < 2 {
            return;
        }
        for (slot, &n) in slots.iter().zip(servers) {
            slot.servers.store(n, Ordering::Relaxed);
        }
        let now = Instant::now();
        let wall = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        let mut busy = Vec::with_capacity(slots.len());
        for (slot, last) in slots.iter().zip(self.cpu.iter_mut()) {
            let cpu = slot.cpu_time();
            let share = match (cpu, *last) {
                (Some(c), Some(l)) if wall > 0.0 => c.saturating_sub(l).as_secs_f64() / wall,
                _ => 0.0,
            };
            *last = cpu;
            slot.busy_permille
                .store((share * 1000.0).round() as u32, Ordering::Relaxed);
            busy.push(share);
        }
        // Workers without a CPU clock cannot be measured: then every worker stays active.
        let spread_at = if slots.iter().all(|s| s.cpu_clock.is_some()) {
            f64::from(spread_percent.min(100)) / 100.0
        } else {
            0.0
        };
        let waited = wait_us.saturating_sub(self.wait_us) as f64 / 1e6;
        self.wait_us = wait_us;
        let idle = idle_jiffies();
        let idle_cpus = match (idle, self.idle_jiffies) {
            (Some(now), Some(then)) if wall > 0.0 => {
                now.saturating_sub(then) as f64 / clock_ticks() / wall
            }
            _ => 0.0,
        };
        self.idle_jiffies = idle;
        let queueing = Queueing {
            clients_waited: wall > 0.0 && waited / wall >= QUEUED_CLIENTS,
            idle_cpu: idle_cpus >= SPARE_CPUS,
        };
        let before = workers.active();
        self.packing.active = before;
        let after = self.packing.next_with(&busy, spread_at, queueing);
        if after != before {
            let busiest = busy.iter().copied().fold(0.0, f64::max);
            tracing::info!(
                "workers: {after} of {} active (was {before}; busiest worker {:.0}% of a CPU; \
                 {:.1} clients waiting for servers on average, {idle_cpus:.1} CPUs idle)",
                slots.len(),
                busiest * 100.0,
                if wall > 0.0 { waited / wall } else { 0.0 },
            );
            workers.set_active(after);
        } else if queueing.clients_waited {
            // Clients queue: share them out as the servers are, so that servers need not be lent
            // across.
            let clients: Vec<usize> = slots
                .iter()
                .map(|s| s.clients.load(Ordering::Relaxed))
                .collect();
            if let Some((from, n)) = super::packing::share_out(&clients, servers, after) {
                tracing::debug!(
                    "workers: worker {from} hands {n} clients over (clients {clients:?}, \
                     servers {servers:?})"
                );
                workers.shed_from(from, n);
            }
        }
    }
}

/// The machine's idle and iowait time so far, in clock ticks (the first line of `/proc/stat`);
/// None where there is no such file.
fn idle_jiffies() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_idle(stat.lines().next()?)
}

/// Idle + iowait from `/proc/stat`'s `cpu` line.
fn parse_idle(line: &str) -> Option<u64> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.take(5).filter_map(|f| f.parse().ok()).collect();
    (v.len() == 5).then(|| v[3] + v[4])
}

/// Clock ticks per second (`_SC_CLK_TCK`, the unit of `/proc/stat`).
fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_time_is_idle_plus_iowait() {
        assert_eq!(
            parse_idle("cpu  4705 150 1120 16250 520 30 45 0 0 0"),
            Some(16770)
        );
        assert_eq!(parse_idle("cpu0 1 2 3 4 5"), None);
        assert_eq!(parse_idle("cpu 1 2"), None);
        assert!(clock_ticks() > 0.0);
    }
}
