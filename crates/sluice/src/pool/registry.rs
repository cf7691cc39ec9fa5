//! All pools of the process, plus the per-database and per-user server counters that enforce
//! max_db_connections / max_user_connections across pools.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::connector::Connector;
use super::counter::ConnCounter;
use super::{Pool, PoolKey, PoolSettings};

pub struct PoolRegistry {
    pools: RwLock<HashMap<PoolKey, Arc<Pool>>>,
    db_servers: Mutex<HashMap<String, Arc<ConnCounter>>>,
    user_servers: Mutex<HashMap<String, Arc<ConnCounter>>>,
    connector: Arc<dyn Connector>,
    generation: AtomicU64,
    /// Copies of each pool's counters: one per worker (`StatsShards`).
    stat_shards: usize,
}

impl PoolRegistry {
    pub fn new(connector: Arc<dyn Connector>, stat_shards: usize) -> Self {
        PoolRegistry {
            pools: RwLock::new(HashMap::new()),
            db_servers: Mutex::new(HashMap::new()),
            user_servers: Mutex::new(HashMap::new()),
            connector,
            generation: AtomicU64::new(1),
            stat_shards,
        }
    }

    /// What the connector learned of the servers (max_connections...), when it learns any.
    pub fn server_facts(&self) -> Option<&crate::server::facts::ServerFactsBook> {
        self.connector.server_facts()
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
        map: &Mutex<HashMap<String, Arc<ConnCounter>>>,
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
