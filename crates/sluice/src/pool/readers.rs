//! Read routing's servers on standbys: one sibling pool per standby host of a pool whose
//! `route_reads` is on, owned by the pool (made at first use, dropped at a reload). A sibling
//! has the pool's key, settings and shared counters (max_db_connections, max_user_connections,
//! SHOW SERVERS' book), and a target of that one host with target_session_attrs=standby; its
//! own pool_size. SHOW POOLS stays one row per (database, user): `Pool::counts` adds the
//! siblings' servers; clients count in the pool they logged in to.

use std::sync::Arc;

use super::settings::PoolSettings;
use super::Pool;
use crate::server::{ServerAddr, ServerTarget};

impl Pool {
    /// The sibling pool of standby `addr` (one of this pool's hosts), made at first use. None
    /// when this pool is itself a sibling or has been removed.
    pub fn reader(self: &Arc<Self>, addr: &ServerAddr) -> Option<Arc<Pool>> {
        if self.is_reader || self.is_removed() {
            return None;
        }
        // The common case: one lock-free load, no shared write but the clone's count.
        if let Some((_, p)) = self.readers.load().iter().find(|(a, _)| a == addr) {
            return Some(p.clone());
        }
        let _made = self.readers_made.lock();
        let now = self.readers.load_full();
        if let Some((_, p)) = now.iter().find(|(a, _)| a == addr) {
            return Some(p.clone());
        }
        let settings = standby_settings(&self.settings(), addr);
        let p = Pool::build(
            self.key.clone(),
            settings,
            self.db_servers.clone(),
            self.user_servers.clone(),
            self.connector.clone(),
            self.shards.len(),
            Some(self.servers_book.clone()),
        );
        if let Some(k) = self.scram_keys() {
            p.set_scram_keys(k);
        }
        if self.is_paused() {
            p.paused.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut next = (*now).clone();
        next.push((addr.clone(), p.clone()));
        self.readers.store(Arc::new(next));
        Some(p)
    }

    /// The health of the hosts of databases with failover, from the pool's connector.
    pub fn host_book(&self) -> Option<&crate::hosts::HostBook> {
        self.connector.host_book()
    }

    /// The sibling pools now (for the pool's own maintenance, counts and switches).
    pub(super) fn readers_now(&self) -> Arc<Vec<(ServerAddr, Arc<Pool>)>> {
        self.readers.load_full()
    }

    /// Forget the siblings: at a reload (`removed` false) they are made again with the new
    /// settings at their next use, while the old ones serve the clients already waiting there
    /// and close their servers when the last session using them lets go (their idle ones now);
    /// when the pool is removed, they are removed with it.
    pub(super) fn drop_readers(&self, removed: bool) {
        let old = {
            let _made = self.readers_made.lock();
            self.readers.swap(Arc::new(Vec::new()))
        };
        for (_, p) in old.iter() {
            if removed {
                p.mark_removed();
            } else {
                drop(p.drain_idle());
            }
        }
    }
}

/// The settings of a sibling pool: the pool's, with a target of `addr` alone that must be a
/// standby, and nothing of the pool's own connection count rules that need a client (min_pool_size
/// stays 0: standbys open servers only for reads).
fn standby_settings(s: &PoolSettings, addr: &ServerAddr) -> PoolSettings {
    let mut limits = s.limits;
    limits.min_pool_size = 0;
    PoolSettings {
        mode: s.mode,
        limits,
        timeouts: s.timeouts,
        check_delay: s.check_delay,
        check_query: s.check_query.clone(),
        reset_query: s.reset_query.clone(),
        reset_always: s.reset_always,
        query_wait_timeout: s.query_wait_timeout,
        relay: s.relay,
        login_retry: s.login_retry,
        round_robin: s.round_robin,
        max_db_connections: s.max_db_connections,
        max_user_connections: s.max_user_connections,
        connect: s.connect.clone(),
        target: Arc::new(ServerTarget::standby_of(&s.target, addr)),
        generation: s.generation,
        forced_user: false,
        listed_secret: s.listed_secret.clone(),
        session: s.session,
        route_reads: s.route_reads,
    }
}
