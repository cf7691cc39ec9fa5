//! The one periodic task: idle and lifetime closing, min_pool_size, login retries, reserve pool
//! activation, evicting idle servers of other pools when a shared limit blocks a waiting pool,
//! freeing auto-databases unused for autodb_idle_timeout and pools unused for pool_idle_timeout.

use std::sync::Arc;
use std::time::Duration;

use super::registry::{AutoDatabases, PoolRegistry};

/// How often the janitor runs (PgBouncer runs its janitor three times a second).
pub const JANITOR_PERIOD: Duration = Duration::from_millis(200);

/// One janitor pass over every pool.
pub fn tick(registry: &PoolRegistry, auto: &AutoDatabases<'_>, pool_idle: Option<Duration>) {
    let pools = registry.all();
    for p in &pools {
        p.maintain();
    }
    // A pool with waiters that cannot grow because its database or user is at its limit gets room
    // by closing an idle server of a sibling pool.
    for p in pools.iter().filter(|p| p.starved_by_shared_limit()) {
        let evicted = pools
            .iter()
            .filter(|o| !Arc::ptr_eq(o, p))
            .filter(|o| o.key.database == p.key.database || o.key.user == p.key.user)
            .any(|o| o.evict_one_idle());
        if evicted {
            p.kick();
        }
    }
    drop(pools);
    registry.free_idle_auto_databases(auto);
    registry.free_idle_pools(pool_idle, auto.paused);
    registry.sweep_removed();
}
