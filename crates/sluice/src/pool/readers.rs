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
        let mut readers = self.readers.lock();
        if let Some((_, p)) = readers.iter().find(|(a, _)| a == addr) {
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
        readers.push((addr.clone(), p.clone()));
        Some(p)
    }

    /// The health of the hosts of databases with failover, from the pool's connector.
    pub fn host_book(&self) -> Option<&crate::hosts::HostBook> {
        self.connector.host_book()
    }

    /// The sibling pools now (for the pool's own maintenance, counts and switches).
    pub(super) fn readers_now(&self) -> Vec<Arc<Pool>> {
        self.readers.lock().iter().map(|(_, p)| p.clone()).collect()
    }

    /// A reload: siblings are made again with the new settings at their next use; servers
    /// handed out by the old ones close when released there (their pool is gone).
    pub(super) fn drop_readers(&self) {
        let old: Vec<_> = std::mem::take(&mut *self.readers.lock());
        for (_, p) in old {
            p.mark_removed();
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
