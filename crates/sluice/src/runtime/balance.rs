//! The balancer's task: once a second, how many workers take clients (`workers::balance` decides).

use std::sync::Arc;

use crate::app::App;

/// Once a second: how many workers take clients (`workers::balance`).
pub async fn run(app: Arc<App>) {
    let mut balancer = crate::workers::balance::Balancer::new(&app.workers);
    let mut tick = tokio::time::interval(crate::workers::balance::PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let spread = app.config().sluice.worker_spread_percent;
        let pools = app.pools.all();
        let wait_us = pools.iter().map(|p| p.stats.snapshot().wait_time_us).sum();
        let servers: Vec<usize> = (0..app.workers.count())
            .map(|w| pools.iter().map(|p| p.homed(w)).sum())
            .collect();
        balancer.tick(&app.workers, spread, wait_us, &servers);
    }
}
