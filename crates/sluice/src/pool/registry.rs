//! All pools of the process, plus the per-database and per-user server counters that enforce
//! max_db_connections / max_user_connections across pools, and the auto-databases unused since
//! when (autodb_idle_timeout).

use std::collections::HashMap;

use crate::keyed_hash::NameKeys;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

use super::connector::Connector;
use super::counter::ConnCounter;
use super::{Pool, PoolKey, PoolSettings};

pub struct PoolRegistry {
    pools: RwLock<HashMap<PoolKey, Arc<Pool>, NameKeys>>,
    db_servers: Mutex<HashMap<String, Arc<ConnCounter>, NameKeys>>,
    user_servers: Mutex<HashMap<String, Arc<ConnCounter>, NameKeys>>,
    connector: Arc<dyn Connector>,
    generation: AtomicU64,
    /// Copies of each pool's counters: one per worker (`StatsShards`).
    stat_shards: usize,
    /// Auto-databases without clients and servers, since when (PgBouncer's idle autodb list:
    /// gone from SHOW DATABASES, freed after autodb_idle_timeout).
    idle_auto: Mutex<HashMap<String, Instant, NameKeys>>,
    /// Pools without clients and servers, since when (pool_idle_timeout).
    idle_pools: Mutex<HashMap<PoolKey, Instant, NameKeys>>,
}

/// What the janitor needs to know of auto-databases, from the config of the moment.
pub struct AutoDatabases<'a> {
    pub is_auto: &'a dyn Fn(&str) -> bool,
    /// autodb_idle_timeout (None: never freed).
    pub idle_timeout: Option<Duration>,
    /// Paused databases are kept (as PgBouncer keeps them).
    pub paused: &'a dyn Fn(&str) -> bool,
}

impl PoolRegistry {
    pub fn new(connector: Arc<dyn Connector>, stat_shards: usize) -> Self {
        PoolRegistry {
            pools: RwLock::new(HashMap::default()),
            db_servers: Mutex::new(HashMap::default()),
            user_servers: Mutex::new(HashMap::default()),
            connector,
            generation: AtomicU64::new(1),
            stat_shards,
            idle_auto: Mutex::new(HashMap::default()),
            idle_pools: Mutex::new(HashMap::default()),
        }
    }

    /// What the connector learned of the servers (max_connections...), when it learns any.
    pub fn server_facts(&self) -> Option<&crate::server::facts::ServerFactsBook> {
        self.connector.server_facts()
    }

    /// The connector's kept host names (SHOW DNS_HOSTS, SHOW LISTS), when it resolves any.
    pub fn dns(&self) -> Option<&crate::net::dns::DnsCache> {
        self.connector.dns()
    }

    /// Host roles and health of databases with failover (SHOW HOSTS, /metrics, read routing).
    pub fn host_book(&self) -> Option<&crate::hosts::HostBook> {
        self.connector.host_book()
    }

    /// A fresh config generation number (reload bumps it for databases whose login changed).
    pub fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn current_generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    pub fn get(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.pools.read().get(key).cloned()
    }

    /// The pool of `database` and `user`, created with `make()` settings when missing (or when the
    /// old one was removed). Looked up by the borrowed names: a login builds no `PoolKey`.
    pub fn get_or_create(
        &self,
        database: &str,
        user: &str,
        make: impl FnOnce() -> PoolSettings,
    ) -> Arc<Pool> {
        // A client for an idle auto-database makes it active again at once (SHOW DATABASES).
        let mut idle = self.idle_auto.lock();
        if !idle.is_empty() {
            idle.remove(database);
        }
        drop(idle);
        let names: &dyn KeyParts = &(database, user);
        if let Some(p) = self.pools.read().get(names) {
            if !p.is_removed() {
                return p.clone();
            }
        }
        let mut pools = self.pools.write();
        if let Some(p) = pools.get(names) {
            if !p.is_removed() {
                return p.clone();
            }
        }
        let key = PoolKey {
            database: database.to_owned(),
            user: user.to_owned(),
        };
        let db = self.counter(&self.db_servers, database);
        let user = self.counter(&self.user_servers, user);
        let pool = Pool::new(
            key.clone(),
            make(),
            db,
            user,
            self.connector.clone(),
            self.stat_shards,
        );
        pools.insert(key, pool.clone());
        pool
    }

    fn counter(
        &self,
        map: &Mutex<HashMap<String, Arc<ConnCounter>, NameKeys>>,
        name: &str,
    ) -> Arc<ConnCounter> {
        map.lock().entry(name.to_string()).or_default().clone()
    }

    pub fn all(&self) -> Vec<Arc<Pool>> {
        let mut v: Vec<Arc<Pool>> = self.pools.read().values().cloned().collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// Servers currently open to a database, all users.
    pub fn db_server_count(&self, database: &str) -> usize {
        self.db_servers
            .lock()
            .get(database)
            .map(|c| c.current())
            .unwrap_or(0)
    }

    /// A pool of `database` was made and not freed since (its server counter lives as long).
    pub fn knows_database(&self, database: &str) -> bool {
        self.db_servers.lock().contains_key(database)
    }

    /// An auto-database with no clients and no servers (SHOW DATABASES leaves it out).
    pub fn is_idle_auto(&self, database: &str) -> bool {
        self.idle_auto.lock().contains_key(database)
    }

    /// autodb_idle_timeout: note the auto-databases whose pools have no clients and no servers
    /// (since when), and free those unused for the timeout: their pools leave the registry (and
    /// with them their SHOW and metric rows), their server counters too. The next client makes
    /// the database again from the `*` entry.
    pub fn free_idle_auto_databases(&self, auto: &AutoDatabases<'_>) {
        let now = Instant::now();
        let mut used: HashMap<String, bool> = HashMap::new();
        for p in self.all() {
            if (auto.is_auto)(&p.key.database) {
                let c = p.counts();
                *used.entry(p.key.database.clone()).or_default() |=
                    c.clients > 0 || c.total > 0 || c.connecting > 0;
            }
        }
        let expired: Vec<String> = {
            let mut idle = self.idle_auto.lock();
            idle.retain(|db, _| used.get(db) == Some(&false));
            for (db, _) in used.iter().filter(|(_, u)| !**u) {
                idle.entry(db.clone()).or_insert(now);
            }
            let Some(timeout) = auto.idle_timeout else {
                return;
            };
            idle.iter()
                .filter(|(db, since)| now.duration_since(**since) >= timeout && !(auto.paused)(db))
                .map(|(db, _)| db.clone())
                .collect()
        };
        for db in expired {
            self.free_database(&db);
        }
    }

    /// Remove the pools of an unused auto-database; a pool that found a client meanwhile stays
    /// (and so does the database).
    fn free_database(&self, db: &str) {
        let mut kept = false;
        {
            let mut pools = self.pools.write();
            pools.retain(|k, p| {
                if k.database != db {
                    return true;
                }
                let keep = !p.retire_if_unused();
                kept |= keep;
                keep
            });
        }
        if kept {
            return;
        }
        self.idle_auto.lock().remove(db);
        // Counters no pool holds any more (a pool still referenced elsewhere keeps its own).
        self.db_servers
            .lock()
            .retain(|name, c| name != db || Arc::strong_count(c) > 1);
        self.user_servers
            .lock()
            .retain(|_, c| Arc::strong_count(c) > 1);
        tracing::info!("auto-database {db} freed: unused for autodb_idle_timeout");
    }

    /// pool_idle_timeout (PgBouncer 1.25): a pool without clients and servers for that long leaves
    /// the registry (SHOW POOLS, its metric series); the next client makes it again. Paused
    /// databases and pools with a min_pool_size keep their pools.
    pub fn free_idle_pools(&self, timeout: Option<Duration>, paused: &dyn Fn(&str) -> bool) {
        let Some(timeout) = timeout else {
            self.idle_pools.lock().clear();
            return;
        };
        let now = Instant::now();
        let mut expired = Vec::new();
        {
            let pools = self.all();
            let mut idle = self.idle_pools.lock();
            let unused: Vec<&Arc<Pool>> = pools
                .iter()
                .filter(|p| {
                    // A pool kept at min_pool_size stays, even while its connects fail.
                    if p.settings().limits.min_pool_size > 0 {
                        return false;
                    }
                    let c = p.counts();
                    c.clients == 0 && c.total == 0 && c.connecting == 0
                })
                .collect();
            idle.retain(|k, _| unused.iter().any(|p| &p.key == k));
            for p in unused {
                let since = *idle.entry(p.key.clone()).or_insert(now);
                let unused_for = now.duration_since(since);
                if unused_for >= timeout && !paused(&p.key.database) {
                    expired.push((p.clone(), unused_for));
                }
            }
        }
        if expired.is_empty() {
            return;
        }
        let mut pools = self.pools.write();
        for (p, unused_for) in expired {
            // Retired under the lock a joining client takes: one that got it first keeps it.
            if p.retire_if_unused() {
                pools.remove(&p.key);
                self.idle_pools.lock().remove(&p.key);
                // PgBouncer's words (and spacing), which its test suite and operators look for.
                tracing::info!(
                    "cleaning up idle pool for user {} on db {} because: pool idle timeout (age= {}s)",
                    p.key.user,
                    p.key.database,
                    unused_for.as_secs()
                );
            }
        }
    }

    /// Drop pools that were removed and hold nothing any more.
    pub fn sweep_removed(&self) {
        self.pools
            .write()
            .retain(|_, p| !(p.is_removed() && p.counts().total == 0 && p.counts().clients == 0));
    }
}

/// A pool's names, owned (`PoolKey`) or borrowed (`(&str, &str)`), so that the map of pools can be
/// searched without building a key. Hashed and compared as `PoolKey`'s derived impls do (database,
/// then user), which is what lets `PoolKey` lend itself as one (`Borrow`).
trait KeyParts {
    fn parts(&self) -> (&str, &str);
}

impl KeyParts for PoolKey {
    fn parts(&self) -> (&str, &str) {
        (&self.database, &self.user)
    }
}

impl KeyParts for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn KeyParts + 'a> for PoolKey {
    fn borrow(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

impl std::hash::Hash for dyn KeyParts + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (database, user) = self.parts();
        database.hash(state);
        user.hash(state);
    }
}

impl PartialEq for dyn KeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyParts + '_ {}
