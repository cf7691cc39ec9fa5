//! One pool per (database, user): idle servers, waiting clients and server accounting under a sync
//! mutex that is never held across `.await`. Servers leave the pool as `PooledServer`, which puts
//! them back or closes them on drop.

mod affinity;
mod checks;
pub mod connector;
pub mod counter;
mod growth;
pub mod janitor;
mod pooled;
pub mod registry;
pub mod resolve;
pub mod rules;
pub mod servers;
pub mod settings;
mod shrink;

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sluice_protocol::ScramKeys;
use tokio::sync::oneshot;

use crate::error::PoolError;
use crate::server::welcome::Welcome;
use crate::server::ServerConn;
use crate::stats::{PoolStats, StatsShards};
use crate::workers::cross::{CrossEvent, CrossWorkerCounts};
use affinity::{pick_waiter, pop_most_recent_local};
use connector::Connector;
use counter::{ConnCounter, ServerSlots};
pub use pooled::PooledServer;
use servers::{ServerBook, ServerState};
pub use settings::{PoolSettings, RelayTimeouts, SessionKnobs, SettingsSnapshot};

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

// Short-lived on the stack between the lock and the hand-out; boxing would allocate per checkout.
#[allow(clippy::large_enum_variant)]
enum Ticket {
    /// An idle server and how long it idled.
    Idle(Box<ServerConn>, Duration),
    Queued(oneshot::Receiver<WaiterReply>, Vec<ServerSlots>),
}

/// A request in line for a server (see `Pool::try_checkout_now`).
pub struct Queued(oneshot::Receiver<WaiterReply>);

struct Waiter {
    since: Instant,
    /// The worker the waiting client runs on (see `pick_waiter`).
    worker: u16,
    tx: oneshot::Sender<WaiterReply>,
}

struct LoginFailure {
    at: Instant,
    message: String,
}

#[derive(Default)]
struct PoolState {
    /// Boxed so that hand-outs and returns move a pointer, not the whole connection.
    idle: VecDeque<Box<ServerConn>>,
    /// Servers handed out (linked to a client or being tested).
    active: usize,
    connecting: usize,
    waiters: VecDeque<Waiter>,
    failure: Option<LoginFailure>,
    /// Logged-in clients of this pool.
    clients: usize,
    removed: bool,
    paused: bool,
    /// Handed-out servers running server_check_query (sv_tested).
    testing: usize,
    /// The last growth attempt hit max_db_connections or max_user_connections.
    limit_blocked: bool,
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
    pub connecting: usize,
    pub total: usize,
}

pub struct Pool {
    pub key: PoolKey,
    /// Clients whose session state pins them to their server (transaction/statement mode).
    pinned: std::sync::atomic::AtomicUsize,
    settings: ArcSwap<PoolSettings>,
    /// Bumped after every `update_settings` store (`refresh_settings`).
    settings_version: AtomicU64,
    state: Mutex<PoolState>,
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
}

impl Pool {
    pub fn new(
        key: PoolKey,
        settings: PoolSettings,
        db_servers: Arc<ConnCounter>,
        user_servers: Arc<ConnCounter>,
        connector: Arc<dyn Connector>,
        stat_shards: usize,
    ) -> Arc<Self> {
        Arc::new(Pool {
            key,
            pinned: std::sync::atomic::AtomicUsize::new(0),
            settings: ArcSwap::from_pointee(settings),
            settings_version: AtomicU64::new(0),
            state: Mutex::new(PoolState::default()),
            servers: ConnCounter::new(),
            db_servers,
            user_servers,
            connector,
            scram_keys: Mutex::new(None),
            welcome: Mutex::new(None),
            stats: StatsShards::new(stat_shards),
            cross: CrossWorkerCounts::default(),
            servers_book: Arc::new(ServerBook::default()),
            close_upto: AtomicU64::new(0),
        })
    }

    pub fn settings(&self) -> Arc<PoolSettings> {
        self.settings.load_full()
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
        self.settings.store(Arc::new(new));
        self.settings_version.fetch_add(1, Ordering::Release);
        if changed {
            *self.welcome.lock() = None;
            let stale: Vec<Box<ServerConn>> = self.state.lock().idle.drain(..).collect();
            drop(stale);
        }
        self.trim_surplus(&self.settings());
        self.kick();
    }

    pub fn set_scram_keys(&self, keys: ScramKeys) {
        *self.scram_keys.lock() = Some(keys);
    }

    pub fn welcome(&self) -> Option<Arc<Welcome>> {
        self.welcome.lock().clone()
    }

    pub fn counts(&self) -> PoolCounts {
        let check_delay = self.settings.load().check_delay;
        let st = self.state.lock();
        let now = Instant::now();
        let used = st
            .idle
            .iter()
            .filter(|c| rules::needs_check(now - c.last_used, check_delay, true))
            .count();
        PoolCounts {
            clients: st.clients,
            waiting: st.waiters.len(),
            max_wait: st
                .waiters
                .front()
                .map(|w| now - w.since)
                .unwrap_or_default(),
            active: st.active,
            idle: st.idle.len() - used,
            used,
            tested: st.testing,
            connecting: st.connecting,
            total: self.servers.current(),
        }
    }

    pub fn is_paused(&self) -> bool {
        self.state.lock().paused
    }

    /// A server that must not be reused: its pool's login changed, or RECONNECT asked for it.
    pub fn close_needed(&self, id: u64, generation: u64, settings: &PoolSettings) -> bool {
        generation != settings.generation || id <= self.close_upto.load(Ordering::Relaxed)
    }

    /// Servers still open that are due to close (WAIT_CLOSE waits for none).
    pub fn close_needed_count(&self) -> usize {
        let settings = self.settings();
        self.servers_book
            .all()
            .iter()
            .filter(|r| self.close_needed(r.id, r.generation, &settings))
            .count()
    }

    /// RECONNECT: every current server closes when it is next released; idle ones close now.
    pub fn reconnect(self: &Arc<Self>) {
        self.close_upto
            .fetch_max(self.servers_book.max_id(), Ordering::Relaxed);
        self.close_idle();
    }

    /// Close every idle server (PAUSE, KILL, RECONNECT).
    pub fn close_idle(self: &Arc<Self>) {
        let idle: Vec<Box<ServerConn>> = self.state.lock().idle.drain(..).collect();
        drop(idle);
        self.kick();
    }

    /// Clients currently pinned to their server by session state.
    pub fn pinned_clients(&self) -> usize {
        self.pinned.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A client became pinned (`true`) or unpinned (`false`).
    pub fn pin_changed(&self, pinned: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if pinned {
            self.pinned.fetch_add(1, Relaxed);
        } else {
            let _ = self
                .pinned
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
    }

    pub fn client_joined(&self) {
        self.state.lock().clients += 1;
    }

    pub fn client_left(&self) {
        let mut st = self.state.lock();
        st.clients = st.clients.saturating_sub(1);
    }

    pub fn is_removed(&self) -> bool {
        self.state.lock().removed
    }

    /// The database was dropped from the config: fail waiters, close idle servers, refuse new work.
    pub fn mark_removed(&self) {
        let (idle, waiters) = {
            let mut st = self.state.lock();
            st.removed = true;
            (
                st.idle.drain(..).collect::<Vec<_>>(),
                st.waiters.drain(..).collect::<Vec<_>>(),
            )
        };
        drop(idle);
        for w in waiters {
            let _ = w.tx.send(Err(PoolError::DatabaseRemoved));
        }
    }

    /// Stop (or allow) opening servers and handing them out (PAUSE / shutdown).
    pub fn set_paused(self: &Arc<Self>, paused: bool) {
        self.state.lock().paused = paused;
        if !paused {
            self.kick();
        }
    }

    /// Fail every waiting client (shutdown).
    pub fn fail_waiters(&self, make: impl Fn() -> PoolError) {
        let waiters: Vec<Waiter> = self.state.lock().waiters.drain(..).collect();
        for w in waiters {
            let _ = w.tx.send(Err(make()));
        }
    }

    /// Get a server: an idle one if any (checked with server_check_query when it idled too long), else
    /// wait in line while the pool opens one, up to query_wait_timeout.
    pub async fn checkout(self: &Arc<Self>) -> Result<PooledServer, PoolError> {
        self.checkout_at(Instant::now(), &self.settings(), None)
            .await
            .map(|(s, _)| s)
    }

    /// `checkout` for a request that arrived at `started` (the session's one clock reading for
    /// it), which also serves the idle checks and, when a server is handed out at once, the wait
    /// (none); the clock is read again only after an actual wait or server check. Returns the
    /// server and when it was handed over (`started` when at once). `settings`: the caller's
    /// snapshot of this pool's (a reload during the wait applies from the next request).
    /// `queued`: the request's place in line from `try_checkout_now`, if it took one.
    pub async fn checkout_at(
        self: &Arc<Self>,
        started: Instant,
        settings: &Arc<PoolSettings>,
        mut queued: Option<Queued>,
    ) -> Result<(PooledServer, Instant), PoolError> {
        let mut now = started;
        loop {
            let ticket = match queued.take() {
                Some(Queued(rx)) => Ticket::Queued(rx, Vec::new()),
                None => self.take_or_queue(settings, now)?,
            };
            let (mut server, idle_for) = match ticket {
                Ticket::Idle(conn, idle_for) => (PooledServer::new(conn, self.clone()), idle_for),
                Ticket::Queued(rx, slots) => {
                    self.spawn_connects(slots, settings);
                    let s = Self::wait(rx).await?;
                    now = Instant::now();
                    // Usually handed over by a release just now; after RESUME, maybe an old idle one.
                    let idle_for = now.saturating_duration_since(s.last_used);
                    (s, idle_for)
                }
            };
            if !Self::settle_here(&mut server) {
                now = Instant::now();
                continue;
            }
            let checked = rules::needs_check(
                idle_for,
                settings.check_delay,
                settings.check_query.is_some(),
            );
            // Boxed and only when a check runs: the query's future would otherwise size every
            // queued client's checkout (and the session frame that holds it) for a rare step.
            let ready = if checked {
                Box::pin(self.check_server(server, settings)).await
            } else {
                Some(server)
            };
            if let Some(s) = ready {
                if now == started && !checked {
                    self.note_assignment(Duration::ZERO);
                    return Ok((s, started));
                }
                let handed_at = Instant::now();
                self.note_assignment(handed_at - started);
                return Ok((s, handed_at));
            }
            now = Instant::now();
        }
    }

    /// The common hand-out without a future to poll: an idle server that needs no check, at
    /// `started`. Otherwise `Err`, for `checkout_at` to go on with: `Some(queued)` when nothing
    /// was idle and the request is already in line (under the same lock: at many clients every
    /// request queues, and a second pass through the lock found the same empty pool); `None` when
    /// the pool is paused, removed or failing logins, a server is due for server_check_query (left
    /// idle for that path), or one could not move to this worker (closed).
    pub fn try_checkout_now(
        self: &Arc<Self>,
        started: Instant,
        settings: &Arc<PoolSettings>,
    ) -> Result<PooledServer, Option<Queued>> {
        let conn = {
            let mut st = self.state.lock();
            if st.removed || st.paused {
                return Err(None);
            }
            let Some((conn, idle_for)) = self.take_idle(&mut st, settings, started) else {
                if self.login_failing(&st, settings).is_some() {
                    return Err(None);
                }
                let (rx, slots) = self.queue_locked(&mut st, settings);
                drop(st);
                self.spawn_connects(slots, settings);
                return Err(Some(Queued(rx)));
            };
            if rules::needs_check(
                idle_for,
                settings.check_delay,
                settings.check_query.is_some(),
            ) {
                st.idle.push_back(conn);
                return Err(None);
            }
            st.active += 1;
            conn.set_book_state(ServerState::Active, started);
            self.note_taken(&conn);
            conn
        };
        let mut server = PooledServer::new(conn, self.clone());
        if !Self::settle_here(&mut server) {
            return Err(None);
        }
        self.note_assignment(Duration::ZERO);
        Ok(server)
    }

    /// A server from another worker's client (or connect task) moves to this worker, once,
    /// rather than waking it through the other worker's driver for every reply. False when it
    /// cannot (the caller drops it, which closes it).
    fn settle_here(server: &mut PooledServer) -> bool {
        let here = crate::workers::current();
        if server.home != here {
            server.pool().cross.note(CrossEvent::SocketMove);
            if let Err(e) = server.stream.move_to_current_worker() {
                tracing::warn!("S-{}: cannot move to this worker, closing: {e}", server.id);
                return false;
            }
            server.home = here;
        }
        true
    }

    /// Under the lock: take an idle server, or join the queue (planning growth for it).
    fn take_or_queue(
        self: &Arc<Self>,
        settings: &PoolSettings,
        now: Instant,
    ) -> Result<Ticket, PoolError> {
        let mut st = self.state.lock();
        if st.removed {
            return Err(PoolError::DatabaseRemoved);
        }
        if !st.paused {
            if let Some((conn, idle_for)) = self.take_idle(&mut st, settings, now) {
                st.active += 1;
                conn.set_book_state(ServerState::Active, now);
                self.note_taken(&conn);
                return Ok(Ticket::Idle(conn, idle_for));
            }
            if let Some(f) = self.login_failing(&st, settings) {
                return Err(PoolError::LoginFailing(f.message.clone()));
            }
        }
        let (rx, slots) = self.queue_locked(&mut st, settings);
        Ok(Ticket::Queued(rx, slots))
    }

    /// The last server login failure while no server is open, for login_retry after it: new
    /// requests fail at once with its message instead of waiting for a server that will not come.
    fn login_failing<'a>(
        &self,
        st: &'a PoolState,
        settings: &PoolSettings,
    ) -> Option<&'a LoginFailure> {
        st.failure
            .as_ref()
            .filter(|f| self.servers.current() == 0 && f.at.elapsed() < settings.login_retry)
    }

    /// Put a request in line (under the pool's lock) and plan the connections to open for it.
    fn queue_locked(
        self: &Arc<Self>,
        st: &mut PoolState,
        settings: &PoolSettings,
    ) -> (oneshot::Receiver<WaiterReply>, Vec<ServerSlots>) {
        let (tx, rx) = oneshot::channel();
        st.waiters.push_back(Waiter {
            // Read under the lock, not the caller's `now`: waiters stay ordered by `since`, which
            // `pick_waiter` relies on.
            since: Instant::now(),
            worker: crate::workers::current(),
            tx,
        });
        (rx, self.plan_locked(st, settings))
    }

    fn note_assignment(&self, waited: Duration) {
        PoolStats::add(&self.stats.server_assignments, 1);
        PoolStats::add(&self.stats.wait_time_us, waited.as_micros() as u64);
    }

    /// Wait for a server, or for the janitor to give up on query_wait_timeout (`expire_waiters`).
    /// No timer per wait: at many clients every checkout waits, and a timer registered and
    /// removed per transaction was ~7% of a transaction's instructions at 1,000 clients.
    async fn wait(rx: oneshot::Receiver<WaiterReply>) -> Result<PooledServer, PoolError> {
        rx.await.map_err(|_| PoolError::ShuttingDown)?
    }

    /// Fail the waiters queued for query_wait_timeout or longer (janitor, PgBouncer does the same
    /// in its maintenance pass, so the timeout is as precise as the janitor's period).
    fn expire_waiters(st: &mut PoolState, limit: Option<Duration>, now: Instant) {
        let Some(limit) = limit else { return };
        // Oldest first: the queue is ordered by `since`.
        while st
            .waiters
            .front()
            .is_some_and(|w| now.saturating_duration_since(w.since) >= limit)
        {
            if let Some(w) = st.waiters.pop_front() {
                let _ = w.tx.send(Err(PoolError::WaitTimeout));
            }
        }
    }

    /// Pop an idle server that may be used now, with how long it idled (its callers' check for
    /// server_check_delay uses the same figure); stale ones are dropped (closed) on the way.
    fn take_idle(
        &self,
        st: &mut PoolState,
        settings: &PoolSettings,
        now: Instant,
    ) -> Option<(Box<ServerConn>, Duration)> {
        loop {
            let conn = if settings.round_robin {
                st.idle.pop_front()
            } else {
                pop_most_recent_local(&mut st.idle)
            }?;
            let idle_for = now.saturating_duration_since(conn.last_used);
            if !self.close_needed(conn.id, conn.generation, settings)
                && rules::reusable_on_release(
                    now.saturating_duration_since(conn.created),
                    &settings.timeouts,
                )
                && conn.stream.is_quiet(idle_for >= ASK_KERNEL_AFTER_IDLE)
            {
                return Some((conn, idle_for));
            }
        }
    }

    /// Return a server. `reusable` = the caller knows it is clean (idle, nothing pending).
    pub fn release(self: &Arc<Self>, server: PooledServer, reusable: bool) {
        self.release_at(server, reusable, Instant::now(), &self.settings());
    }

    /// `release` with the caller's clock reading (the session's, taken at the server's last
    /// reply) and settings snapshot: no clock read or settings load of its own on the hot path.
    pub fn release_at(
        self: &Arc<Self>,
        mut server: PooledServer,
        reusable: bool,
        now: Instant,
        settings: &PoolSettings,
    ) {
        let Some(mut conn) = server.conn.take() else {
            return;
        };
        conn.last_used = now;
        let keep = reusable
            && conn.is_clean()
            && !self.close_needed(conn.id, conn.generation, settings)
            && rules::reusable_on_release(now - conn.created, &settings.timeouts)
            && !self.over_limits(settings);
        let mut st = self.state.lock();
        st.active = st.active.saturating_sub(1);
        // A paused pool gives its servers up (PAUSE returns once none is left in use).
        if !keep || st.removed || st.paused {
            drop(st);
            drop(conn);
            self.kick();
            return;
        }
        if !st.paused {
            loop {
                let next = pick_waiter(&st.waiters, conn.home, now);
                let Some(w) = st.waiters.remove(next) else {
                    break;
                };
                self.note_hand_to(&w, conn.home);
                st.active += 1;
                conn.set_book_state(ServerState::Active, now);
                match w.tx.send(Ok(PooledServer::new(conn, self.clone()))) {
                    Ok(()) => return,
                    Err(back) => {
                        st.active -= 1;
                        conn = match back {
                            Ok(mut s) => match s.conn.take() {
                                Some(c) => c,
                                None => return,
                            },
                            Err(_) => return,
                        };
                    }
                }
            }
        }
        conn.set_book_state(ServerState::Idle, now);
        st.idle.push_back(conn);
    }

    /// A handed-out server was dropped without release: it is closed.
    fn forget(self: &Arc<Self>) {
        {
            let mut st = self.state.lock();
            st.active = st.active.saturating_sub(1);
        }
        self.kick();
    }

    /// Re-evaluate growth (after a close, a config change, a retry window ending).
    pub fn kick(self: &Arc<Self>) {
        let settings = self.settings();
        let slots = {
            let mut st = self.state.lock();
            self.serve_waiters_locked(&mut st, &settings);
            self.plan_locked(&mut st, &settings)
        };
        self.spawn_connects(slots, &settings);
    }

    /// Hand idle servers to queued clients (after RESUME, or when a server went idle unseen).
    fn serve_waiters_locked(self: &Arc<Self>, st: &mut PoolState, settings: &PoolSettings) {
        while !st.paused && !st.waiters.is_empty() {
            let now = Instant::now();
            let Some((mut conn, _)) = self.take_idle(st, settings, now) else {
                return;
            };
            loop {
                let next = pick_waiter(&st.waiters, conn.home, now);
                let Some(w) = st.waiters.remove(next) else {
                    st.idle.push_back(conn);
                    return;
                };
                self.note_hand_to(&w, conn.home);
                st.active += 1;
                conn.set_book_state(ServerState::Active, now);
                match w.tx.send(Ok(PooledServer::new(conn, self.clone()))) {
                    Ok(()) => break,
                    Err(back) => {
                        st.active -= 1;
                        match back.ok().and_then(|mut s| s.conn.take()) {
                            Some(c) => conn = c,
                            None => return,
                        }
                    }
                }
            }
        }
    }

    /// Janitor work: close idle servers past server_idle_timeout / server_lifetime, and grow for
    /// waiters and min_pool_size (this is also how a failed login is retried after server_login_retry).
    pub fn maintain(self: &Arc<Self>) {
        let settings = self.settings();
        let closing: Vec<Box<ServerConn>> = {
            let mut st = self.state.lock();
            Self::expire_waiters(&mut st, settings.query_wait_timeout, Instant::now());
            let mut total = self.servers.current();
            let mut keep = VecDeque::with_capacity(st.idle.len());
            let mut closing = Vec::new();
            for conn in st.idle.drain(..) {
                let close = self.close_needed(conn.id, conn.generation, &settings)
                    || rules::close_idle(
                        conn.last_used.elapsed(),
                        conn.created.elapsed(),
                        total,
                        settings.limits.min_pool_size,
                        &settings.timeouts,
                    );
                if close {
                    total = total.saturating_sub(1);
                    closing.push(conn);
                } else {
                    keep.push_back(conn);
                }
            }
            st.idle = keep;
            closing
        };
        for c in &closing {
            tracing::debug!("S-{}: {} closing idle server", c.id, self.key);
        }
        drop(closing);
        self.trim_surplus(&settings);
        self.kick();
    }

    /// Close one idle server to make room for another pool under a shared limit. True if one closed.
    pub fn evict_one_idle(&self) -> bool {
        let conn = self.state.lock().idle.pop_front();
        conn.is_some()
    }

    /// Clients are queued and the pool cannot grow because a database/user-wide limit is reached.
    pub fn starved_by_shared_limit(&self) -> bool {
        let st = self.state.lock();
        !st.waiters.is_empty() && st.limit_blocked && st.connecting == 0
    }
}

#[cfg(test)]
mod tests;
