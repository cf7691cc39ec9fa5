//! One pool per (database, user). Idle servers and waiting clients live in per-worker shards
//! (`shard.rs`), each under its own sync lock that is never held across `.await`; the pool-wide
//! figures (servers connecting, clients, the last login failure) under one more lock that only
//! growth, logins and the console take. Servers leave the pool as `PooledServer`; `handout.rs`
//! has the checkout and release paths.

mod affinity;
mod checks;
pub mod connector;
pub mod counter;
mod dedicated;
mod growth;
mod handout;
mod pooled;
mod readers;
pub mod registry;
pub mod rules;
pub mod servers;
pub mod settings;
mod shard;
mod shrink;
mod states;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sluice_protocol::ScramKeys;
use tokio::sync::oneshot;

use crate::error::PoolError;
use crate::server::log::reason;
use crate::server::welcome::Welcome;
use crate::server::ServerConn;
use crate::session_state::policy::Feature;
use crate::stats::StatsShards;
use crate::workers::cross::CrossWorkerCounts;
use connector::Connector;
use counter::ConnCounter;
pub use handout::Queued;
pub use pooled::PooledServer;
use servers::ServerBook;
pub use settings::{PoolSettings, RelayTimeouts, SessionKnobs, SettingsSnapshot};
use shard::Shard;

/// Identity of a pool: the database name clients use and the user the pool logs in as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub database: String,
    pub user: String,
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.database, self.user)
    }
}

/// An idle server parked at least this long is checked with the kernel (MSG_PEEK) before reuse;
/// a busier one with tokio's readiness only (see `Stream::is_quiet`).
const ASK_KERNEL_AFTER_IDLE: Duration = Duration::from_millis(500);

type WaiterReply = Result<PooledServer, PoolError>;

/// A request in line for a server.
struct Waiter {
    since: Instant,
    /// The worker the waiting client runs on (its shard).
    worker: u16,
    tx: oneshot::Sender<WaiterReply>,
}

/// The last server login that failed, while no later one succeeded.
struct LoginFailure {
    /// When that attempt started: the next one waits server_login_retry from there (as
    /// PgBouncer's, so that a slow failure such as a connect timeout does not add to it).
    started: Instant,
    /// PgBouncer's words for it ("connect timeout", "server conn crashed?", the server's message).
    /// The next attempt waits server_login_retry whatever the failure, also in a pool that never
    /// had a server: its clients wait for that attempt, as PgBouncer's do (compared side by side:
    /// a pool whose logins PostgreSQL refuses is tried once per server_login_retry, not once per
    /// client).
    message: String,
}

/// Pool-wide figures, under `Pool::state` (growth, logins, the console; never per transaction).
#[derive(Default)]
struct PoolState {
    connecting: usize,
    failure: Option<LoginFailure>,
    /// Logged-in clients of this pool.
    clients: usize,
    /// The last growth attempt hit max_db_connections or max_user_connections.
    limit_blocked: bool,
    /// A client was refused with the cached login error after server_login_retry had passed: one
    /// new attempt is due (no client waits for it).
    retry_wanted: bool,
    /// When "failover ended" was last logged (once per failover, not per held connect).
    failover_logged: Option<Instant>,
}

/// Counts SHOW POOLS and the janitor read off a pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounts {
    pub clients: usize,
    pub waiting: usize,
    pub max_wait: Duration,
    /// Handed out (linked to a client or being tested).
    pub active: usize,
    /// Idle and usable at once (sv_idle).
    pub idle: usize,
    /// Idle longer than server_check_delay: checked before reuse (sv_used).
    pub used: usize,
    /// Running server_check_query (sv_tested; also counted in `active`).
    pub tested: usize,
    /// Held until a cancel has landed (sv_being_canceled; also counted in `active`).
    pub being_canceled: usize,
    pub connecting: usize,
    pub total: usize,
}

pub struct Pool {
    pub key: PoolKey,
    /// Idle servers and waiters, one shard per worker.
    shards: Box<[Shard]>,
    /// Servers whose socket lives on each worker (index = shard), idle or in use: what decides
    /// whether a released server may be lent away (`affinity::choose`) and where the balancer
    /// wants clients (`workers::packing::share_out`). Written when a server opens, moves or closes.
    homes: Box<[Arc<ConnCounter>]>,
    /// The origin of the shards' published wait stamps.
    born: Instant,
    state: Mutex<PoolState>,
    /// Read under a shard's lock by every checkout; set, then every shard locked once (`barrier`),
    /// so that no hand-out that read the old value is still running when the setter returns.
    removed: AtomicBool,
    paused: AtomicBool,
    /// `state.failure` is set: checkouts that find nothing idle look at it.
    failing: AtomicBool,
    /// Handed-out servers running server_check_query or a reset query (sv_tested).
    testing: AtomicUsize,
    /// Released servers held back until their client's cancels have landed (sv_being_canceled).
    being_canceled: AtomicUsize,
    /// Clients whose session state pins them to their server (transaction/statement mode).
    pinned: AtomicUsize,
    /// What pinned each of them (client id -> the first feature that did), for the advisor;
    /// written when a client becomes pinned or unpinned, never per transaction.
    pinned_by: Mutex<std::collections::HashMap<crate::ids::ClientId, Feature>>,
    settings: ArcSwap<PoolSettings>,
    /// Bumped after every `update_settings` store (`refresh_settings`).
    settings_version: AtomicU64,
    servers: Arc<ConnCounter>,
    db_servers: Arc<ConnCounter>,
    user_servers: Arc<ConnCounter>,
    connector: Arc<dyn Connector>,
    scram_keys: Mutex<Option<ScramKeys>>,
    /// ParameterStatus set of the first server that logged in: the pool's "welcome message".
    welcome: Mutex<Option<Arc<Welcome>>>,
    /// Per-worker counters (`StatsShards` derefs to the calling worker's copy).
    pub stats: StatsShards,
    /// Work that crossed from one worker to another (see `workers::cross`).
    pub cross: CrossWorkerCounts,
    /// Live servers for SHOW SERVERS.
    pub servers_book: Arc<ServerBook>,
    /// RECONNECT: servers with an id up to this one close when next released.
    close_upto: AtomicU64,
    /// Read routing: a sibling pool per standby host (`readers.rs`); empty unless route_reads.
    /// Read without a lock by every routed transaction; replaced whole under `readers_made`.
    readers: ArcSwap<Vec<(crate::server::ServerAddr, Arc<Pool>)>>,
    readers_made: Mutex<()>,
    /// This pool is such a sibling.
    is_reader: bool,
}

impl Pool {
    /// `workers`: how many worker threads serve it (one shard and one statistics copy each).
    pub fn new(
        key: PoolKey,
        settings: PoolSettings,
        db_servers: Arc<ConnCounter>,
        user_servers: Arc<ConnCounter>,
        connector: Arc<dyn Connector>,
        workers: usize,
    ) -> Arc<Self> {
        Self::build(
            key,
            settings,
            db_servers,
            user_servers,
            connector,
            workers,
            None,
        )
    }

    /// `book`: a read routing sibling's servers show in its pool's book (SHOW SERVERS).
    fn build(
        key: PoolKey,
        settings: PoolSettings,
        db_servers: Arc<ConnCounter>,
        user_servers: Arc<ConnCounter>,
        connector: Arc<dyn Connector>,
        workers: usize,
        book: Option<Arc<ServerBook>>,
    ) -> Arc<Self> {
        let is_reader = book.is_some();
        Arc::new(Pool {
            key,
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
            homes: (0..workers.max(1)).map(|_| ConnCounter::new()).collect(),
            born: Instant::now(),
            state: Mutex::new(PoolState::default()),
            removed: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            testing: AtomicUsize::new(0),
            being_canceled: AtomicUsize::new(0),
            pinned: AtomicUsize::new(0),
            pinned_by: Mutex::new(std::collections::HashMap::new()),
            settings: ArcSwap::from_pointee(settings),
            settings_version: AtomicU64::new(0),
            servers: ConnCounter::new(),
            db_servers,
            user_servers,
            connector,
            scram_keys: Mutex::new(None),
            welcome: Mutex::new(None),
            stats: StatsShards::new(workers),
            cross: CrossWorkerCounts::default(),
            servers_book: book.unwrap_or_default(),
            close_upto: AtomicU64::new(0),
            readers: ArcSwap::from_pointee(Vec::new()),
            readers_made: Mutex::new(()),
            is_reader,
        })
    }

    pub fn settings(&self) -> Arc<PoolSettings> {
        self.settings.load_full()
    }

    /// Servers (idle or in use) whose socket lives on `worker`.
    pub fn homed(&self, worker: usize) -> usize {
        self.homes.get(worker).map_or(0, |c| c.current())
    }

    /// The count slot of a server whose socket lives on `worker`.
    fn home_slot(&self, worker: u16) -> Option<counter::Slot> {
        self.homes[usize::from(worker) % self.homes.len()].try_acquire(0)
    }

    /// The current settings, to be kept by the caller and passed to `refresh_settings`.
    pub fn settings_snapshot(&self) -> SettingsSnapshot {
        let version = self.settings_version.load(Ordering::Acquire);
        SettingsSnapshot {
            version,
            current: self.settings.load_full(),
        }
    }

    /// Bring `snap` up to date: one atomic load when no reload happened since it was taken.
    pub fn refresh_settings(&self, snap: &mut SettingsSnapshot) {
        // Acquire pairs with the Release bump after the store: a version seen here means its
        // settings (or newer ones) are what the load below returns.
        let version = self.settings_version.load(Ordering::Acquire);
        if version != snap.version {
            *snap = SettingsSnapshot {
                version,
                current: self.settings.load_full(),
            };
        }
    }

    /// Install new settings (reload). Servers of an older generation close when next released.
    pub fn update_settings(self: &Arc<Self>, new: PoolSettings) {
        let old_generation = self.settings.load().generation;
        let changed = new.generation != old_generation;
        if let (Some(book), Some(_)) = (self.connector.host_book(), &new.target.failover) {
            let keys = self.scram_keys();
            book.adopt(&new.target, keys.as_ref(), &new.connect);
        }
        self.settings.store(Arc::new(new));
        self.settings_version.fetch_add(1, Ordering::Release);
        self.drop_readers(false);
        if changed {
            *self.welcome.lock() = None;
            let log = &self.settings().connect.log;
            for conn in self.drain_idle() {
                log.closing_conn(&conn, reason::CONFIG_CHANGED);
            }
        }
        self.trim_surplus(&self.settings());
        self.kick();
    }

    /// The SCRAM pass-through keys its servers log in with, if any.
    pub fn scram_keys(&self) -> Option<ScramKeys> {
        self.scram_keys.lock().clone()
    }

    pub fn set_scram_keys(&self, keys: ScramKeys) {
        *self.scram_keys.lock() = Some(keys);
    }

    pub fn welcome(&self) -> Option<Arc<Welcome>> {
        self.welcome.lock().clone()
    }

    /// SHOW POOLS' figures. Servers handed out are derived (open - idle - connecting), so no
    /// count is kept per hand-out and none can drift.
    pub fn counts(&self) -> PoolCounts {
        let check_delay = self.settings.load().check_delay;
        let now = Instant::now();
        let (mut idle, mut used, mut waiting) = (0, 0, 0);
        let mut oldest: Option<Instant> = None;
        for shard in self.shards.iter() {
            let l = shard.lock();
            let n_used = l
                .idle
                .iter()
                .filter(|c| rules::needs_check(now - c.last_used, check_delay, true))
                .count();
            used += n_used;
            idle += l.idle.len() - n_used;
            waiting += l.waiters.len();
            if let Some(w) = l.waiters.front() {
                oldest = Some(oldest.map_or(w.since, |o| o.min(w.since)));
            }
        }
        let (clients, connecting) = {
            let st = self.state.lock();
            (st.clients, st.connecting)
        };
        let total = self.servers.current();
        let mine = PoolCounts {
            clients,
            waiting,
            max_wait: oldest
                .map(|o| now.saturating_duration_since(o))
                .unwrap_or_default(),
            active: total.saturating_sub(idle + used + connecting),
            idle,
            used,
            tested: self.testing.load(Ordering::Relaxed),
            being_canceled: self.being_canceled.load(Ordering::Relaxed),
            connecting,
            total,
        };
        // Read routing's standby servers count in the pool's one row (clients log in here).
        self.readers_now().iter().fold(mine, |a, (_, r)| {
            let b = r.counts();
            PoolCounts {
                clients: a.clients,
                waiting: a.waiting + b.waiting,
                max_wait: a.max_wait.max(b.max_wait),
                active: a.active + b.active,
                idle: a.idle + b.idle,
                used: a.used + b.used,
                tested: a.tested + b.tested,
                being_canceled: a.being_canceled + b.being_canceled,
                connecting: a.connecting + b.connecting,
                total: a.total + b.total,
            }
        })
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// A server that must not be reused: its pool's login changed, or RECONNECT asked for it.
    pub fn close_needed(
        &self,
        id: crate::ids::ServerId,
        generation: u64,
        settings: &PoolSettings,
    ) -> bool {
        generation != settings.generation || id.0 <= self.close_upto.load(Ordering::Relaxed)
    }

    /// Servers still open that are due to close (WAIT_CLOSE waits for none).
    pub fn close_needed_count(&self) -> usize {
        let settings = self.settings();
        self.servers_book
            .all()
            .iter()
            .filter(|r| self.close_needed(r.seen.id, r.seen.generation, &settings))
            .count()
    }

    /// RECONNECT (and KILL): every current server closes when it is next released; idle ones
    /// close now, logged with `why`.
    pub fn reconnect(self: &Arc<Self>, why: &str) {
        self.close_upto
            .fetch_max(self.servers_book.max_id(), Ordering::Relaxed);
        for (_, r) in self.readers_now().iter() {
            r.reconnect(why);
        }
        self.close_idle(why);
    }

    /// Close every idle server (PAUSE, KILL, RECONNECT, a takeover), logged with `why`
    /// (`server::log::reason`).
    pub fn close_idle(self: &Arc<Self>, why: &str) {
        for (_, r) in self.readers_now().iter() {
            r.close_idle(why);
        }
        let closing = self.drain_idle();
        if !closing.is_empty() {
            let log = &self.settings().connect.log;
            for conn in &closing {
                log.closing_conn(conn, why);
            }
        }
        drop(closing);
        self.kick();
    }

    /// Take every shard's idle servers (the caller drops them, outside the locks; boxed as they
    /// are kept).
    #[allow(clippy::vec_box)]
    fn drain_idle(&self) -> Vec<Box<ServerConn>> {
        self.drain_each(|l| l.idle.drain(..).collect())
    }

    /// Take every shard's waiters.
    fn drain_waiters(&self) -> Vec<Waiter> {
        self.drain_each(|l| l.waiters.drain(..).collect())
    }

    /// Take the waiters that joined at or before `cutoff` (each line is ordered by `since`).
    fn drain_waiters_since(&self, cutoff: Instant) -> Vec<Waiter> {
        self.drain_each(|l| {
            let n = l.waiters.iter().take_while(|w| w.since <= cutoff).count();
            l.waiters.drain(..n).collect()
        })
    }

    /// Clients waiting for a server now.
    pub fn waiting(&self) -> usize {
        self.shards.iter().map(|s| s.waiting_hint()).sum()
    }

    fn drain_each<T>(&self, take: impl Fn(&mut shard::Lists) -> Vec<T>) -> Vec<T> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut l = shard.lock();
            out.extend(take(&mut l));
            shard.publish(&l, self.born);
        }
        out
    }

    /// After a flag that checkouts read under a shard lock was set: wait until no checkout that
    /// read the old value is still inside its shard's lock.
    fn barrier(&self) {
        for shard in self.shards.iter() {
            drop(shard.lock());
        }
    }

    /// Clients currently pinned to their server by session state.
    pub fn pinned_clients(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Client `client` became pinned by `by` (`Some`) or unpinned (`None`).
    pub fn pin_changed(&self, client: crate::ids::ClientId, by: Option<Feature>) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut kinds = self.pinned_by.lock();
        match by {
            Some(f) => {
                if kinds.insert(client, f).is_none() {
                    self.pinned.fetch_add(1, Relaxed);
                }
            }
            None => {
                if kinds.remove(&client).is_some() {
                    let _ = self
                        .pinned
                        .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
                }
            }
        }
    }

    /// Pinned clients per feature that pinned them, in `Feature::ALL` order, zeros left out.
    pub fn pinned_by_feature(&self) -> Vec<(Feature, usize)> {
        let kinds = self.pinned_by.lock();
        Feature::ALL
            .iter()
            .map(|&f| (f, kinds.values().filter(|&&k| k == f).count()))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    pub fn client_joined(&self) {
        self.state.lock().clients += 1;
    }

    pub fn client_left(&self) {
        let mut st = self.state.lock();
        st.clients = st.clients.saturating_sub(1);
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }

    /// The database was dropped from the config: fail waiters, close idle servers, refuse new work.
    pub fn mark_removed(&self) {
        self.drop_readers(true);
        self.removed.store(true, Ordering::Relaxed);
        self.barrier();
        drop(self.drain_idle());
        for w in self.drain_waiters() {
            let _ = w.tx.send(Err(PoolError::DatabaseRemoved));
        }
    }

    /// autodb_idle_timeout: retire the pool when it has no clients and no servers. Checked and
    /// marked under the lock a joining client takes (`client_joined`), so that a login that got
    /// this pool either is counted first and keeps it, or sees it removed and takes a new one.
    pub fn retire_if_unused(&self) -> bool {
        {
            let st = self.state.lock();
            if st.clients > 0 || st.connecting > 0 || self.servers.current() > 0 {
                return false;
            }
            self.removed.store(true, Ordering::Relaxed);
        }
        self.drop_readers(true);
        self.barrier();
        drop(self.drain_idle());
        for w in self.drain_waiters() {
            let _ = w.tx.send(Err(PoolError::DatabaseRemoved));
        }
        true
    }

    /// Stop (or allow) opening servers and handing them out (PAUSE / shutdown).
    pub fn set_paused(self: &Arc<Self>, paused: bool) {
        for (_, r) in self.readers_now().iter() {
            r.set_paused(paused);
        }
        self.paused.store(paused, Ordering::Relaxed);
        self.barrier();
        if !paused {
            self.kick();
        }
    }

    /// Fail every waiting client (shutdown).
    pub fn fail_waiters(&self, make: impl Fn() -> PoolError) {
        self.fail_waiters_dyn(&make);
    }

    fn fail_waiters_dyn(&self, make: &dyn Fn() -> PoolError) {
        for (_, r) in self.readers_now().iter() {
            r.fail_waiters_dyn(make);
        }
        for w in self.drain_waiters() {
            let _ = w.tx.send(Err(make()));
        }
    }

    /// Janitor work: fail waiters past query_timeout or query_wait_timeout, close idle servers past
    /// server_idle_timeout / server_lifetime, and grow for waiters and min_pool_size (this is also
    /// how a failed login is retried after server_login_retry).
    pub fn maintain(self: &Arc<Self>) {
        for (_, r) in self.readers_now().iter() {
            r.maintain();
        }
        let settings = self.settings();
        let now = Instant::now();
        let mut total = self.servers.current();
        let mut closing: Vec<(Box<ServerConn>, Option<rules::IdleClose>)> = Vec::new();
        let mut expired: Vec<(Waiter, PoolError)> = Vec::new();
        let query_timeout = settings.relay.query_timeout;
        for shard in self.shards.iter() {
            let mut l = shard.lock();
            // Oldest first: each shard's line is ordered by `since`.
            while let Some(w) = l.waiters.front() {
                let waited = now.saturating_duration_since(w.since);
                let Some(e) =
                    rules::wait_expired(waited, query_timeout, settings.query_wait_timeout)
                else {
                    break;
                };
                expired.extend(l.waiters.pop_front().map(|w| (w, e.into())));
            }
            let mut i = 0;
            while i < l.idle.len() {
                let conn = &l.idle[i];
                // A server PostgreSQL closed while it idled goes now, as PgBouncer drops one when
                // its socket says so, rather than at its next hand-out (which never hands it out):
                // SHOW SERVERS and SHOW POOLS do not count it meanwhile. One load per idle server
                // (tokio's readiness); the kernel is asked only when that shows something.
                let why = rules::close_idle(
                    conn.last_used.elapsed(),
                    conn.created.elapsed(),
                    conn.served,
                    total,
                    settings.limits.min_pool_size,
                    &settings.timeouts,
                )
                .or_else(|| (!conn.stream.is_quiet(false)).then_some(rules::IdleClose::HungUp));
                if why.is_some()
                    || self.close_needed(conn.id, conn.generation, &settings)
                    || conn.host_retired()
                {
                    total = total.saturating_sub(1);
                    closing.extend(l.idle.remove(i).map(|c| (c, why)));
                } else {
                    i += 1;
                }
            }
            shard.publish(&l, self.born);
        }
        // (PgBouncer fails queued clients in its maintenance pass too: query_wait_timeout is as
        // precise as the janitor's period, and no timer is armed per wait.)
        for (w, e) in expired {
            let _ = w.tx.send(Err(e));
        }
        for (c, why) in &closing {
            match why {
                Some(rules::IdleClose::Lifetime) => {
                    settings.connect.log.closing_conn(c, reason::LIFETIME)
                }
                Some(rules::IdleClose::IdleTimeout) => {
                    settings.connect.log.closing_conn(c, reason::IDLE_TIMEOUT)
                }
                Some(rules::IdleClose::HungUp) => {
                    settings.connect.log.closing_conn(c, reason::CRASHED)
                }
                None if c.host_retired() => settings.connect.log.closing_conn(c, reason::HOST_OUT),
                None if self.close_needed(c.id, c.generation, &settings) => {
                    settings.connect.log.closing_conn(c, reason::CONFIG_CHANGED)
                }
                None => tracing::debug!("S-{}: {} closing idle server", c.id, self.key),
            }
        }
        drop(closing);
        self.trim_surplus(&settings);
        self.kick();
    }

    /// Close one idle server to make room for another pool under a shared limit. True if one closed.
    pub fn evict_one_idle(&self) -> bool {
        for shard in self.shards.iter() {
            let mut l = shard.lock();
            if let Some(conn) = l.idle.pop_front() {
                shard.publish(&l, self.born);
                drop(l);
                self.settings()
                    .connect
                    .log
                    .closing_conn(&conn, reason::EVICTED);
                drop(conn);
                return true;
            }
        }
        false
    }

    /// Clients are queued and the pool cannot grow because a database/user-wide limit is reached.
    pub fn starved_by_shared_limit(&self) -> bool {
        let waiting = self.shards.iter().any(|s| s.waiting_hint() > 0);
        let st = self.state.lock();
        waiting && st.limit_blocked && st.connecting == 0
    }
}

#[cfg(test)]
mod tests;
