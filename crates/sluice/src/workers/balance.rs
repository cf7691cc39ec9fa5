//! The balancer: once a second, each worker's busy share (its thread's CPU time over the period)
//! goes through the packing rule, and a new active count is applied (`Workers::set_active`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::packing::Packing;
use super::Workers;

/// How often the balancer looks at the workers' load.
pub const PERIOD: Duration = Duration::from_secs(1);

/// What the balancer remembers between periods.
pub struct Balancer {
    packing: Packing,
    cpu: Vec<Option<Duration>>,
    at: Instant,
}

impl Balancer {
    pub fn new(workers: &Workers) -> Self {
        Balancer {
            packing: Packing::new(workers.active()),
            cpu: workers.slots().iter().map(|s| s.cpu_time()).collect(),
            at: Instant::now(),
        }
    }

    /// One period: measure, decide, apply. `spread_percent` is `[sluice] worker_spread_percent`.
    pub fn tick(&mut self, workers: &Workers, spread_percent: u32) {
        let slots = workers.slots();
        if slots.len() < 2 {
            return;
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
        let before = workers.active();
        self.packing.active = before;
        let after = self.packing.next(&busy, spread_at);
        if after != before {
            let busiest = busy.iter().copied().fold(0.0, f64::max);
            tracing::info!(
                "workers: {after} of {} active (was {before}; busiest worker {:.0}% of a CPU)",
                slots.len(),
                busiest * 100.0
            );
            workers.set_active(after);
        }
    }
}
