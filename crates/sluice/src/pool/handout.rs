//! Checkout and release over the pool's per-worker shards.
//!
//! A checkout takes an idle server of its own worker's shard, else steals one from another
//! worker's (which then moves over), else joins its own shard's line. A release hands the server
//! to its worker's oldest waiter, or lends it to another worker's when that one waited clearly
//! longer (`affinity::choose`), or parks it idle. No lock is held while another is taken.
//!
//! A waiter that joins while a server goes idle elsewhere must not be missed: both sides publish
//! their change (the shard's waiting or idle count), issue a SeqCst fence, then look at the other
//! side's counts, so at least one of them sees the other and matches them (`match_waiters`).

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::affinity::{choose, short_of_servers, Homed, Target, FAIRNESS_EVERY};
use super::counter::ServerSlots;
use super::servers::ServerState;
use super::shard::{here, longest_waiting_other, Lists};
use super::{rules, Pool, PoolSettings, PooledServer, Waiter, WaiterReply, ASK_KERNEL_AFTER_IDLE};
use crate::error::PoolError;
use crate::server::log::reason;
use crate::server::ServerConn;
use crate::stats::PoolStats;
use crate::workers::cross::CrossEvent;

/// A request in line for a server (see `Pool::try_checkout_now`).
pub struct Queued(oneshot::Receiver<WaiterReply>);

// Short-lived on the stack between the lock and the hand-out; boxing would allocate per checkout.
#[allow(clippy::large_enum_variant)]
enum Ticket {
    /// An idle server and how long it idled.
    Idle(Box<ServerConn>, Duration),
    Queued(oneshot::Receiver<WaiterReply>, Vec<ServerSlots>),
}

/// How many times `match_waiters` pairs a server with a waiter before it leaves the rest to the
/// next release or janitor pass (each pass moves one server; this bounds a call, not the pool).
const MATCH_ROUNDS: usize = 64;

impl Pool {
    /// Get a server: an idle one if any (checked with server_check_query when it idled too long), else
    /// wait in line while the pool opens one, up to query_wait_timeout.
    pub async fn checkout(self: &Arc<Self>) -> Result<PooledServer, PoolError> {
        self.checkout_at(Instant::now(), &self.settings(), None)
            .await
            .map(|(s, _)| s)
    }

    /// `checkout` for the pooler's own use (a new pool's first server, whose parameters greet
    /// its clients): not a client's server assignment, so SHOW STATS does not count it (PgBouncer
    /// counts one assignment for a session-mode client's whole session). The count was made on
    /// this worker's copy of the statistics, in this same task, and is taken back there.
    pub async fn checkout_for_pooler(self: &Arc<Self>) -> Result<PooledServer, PoolError> {
        let server = self.checkout().await?;
        self.stats
            .server_assignments
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        Ok(server)
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
                Ticket::Idle(conn, idle_for) => (PooledServer::new(conn), idle_for),
                Ticket::Queued(rx, slots) => {
                    self.spawn_connects(slots, settings);
                    let s = rx.await.map_err(|_| PoolError::ShuttingDown)??;
                    now = Instant::now();
                    // Usually handed over by a release just now; after RESUME, maybe an old idle one.
                    let idle_for = now.saturating_duration_since(s.last_used);
                    (s, idle_for)
                }
            };
            if !self.settle_here(&mut server) {
                self.discard(server);
                now = Instant::now();
                continue;
            }
            let checked = rules::check_due(
                idle_for,
                settings.check_delay,
                settings.check_query.is_some(),
                server.served,
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
            self.kick();
            now = Instant::now();
        }
    }

    /// The common hand-out without a future to poll: an idle server that needs no check, at
    /// `started`. Otherwise `Err`, for `checkout_at` to go on with: `Some(queued)` when nothing
    /// was idle and the request is already in line (at many clients every request queues, and a
    /// second pass through the lists would find the same empty pool); `None` when the pool is
    /// paused, removed or failing logins, a server is due for server_check_query (left idle for
    /// that path), or one could not move to this worker (closed).
    pub fn try_checkout_now(
        self: &Arc<Self>,
        started: Instant,
        settings: &Arc<PoolSettings>,
    ) -> Result<PooledServer, Option<Queued>> {
        if self.failing.load(Ordering::Relaxed) {
            return Err(None);
        }
        let me = here(self.shards.len());
        let conn = {
            let mut l = self.shards[me].lock();
            if self.frozen() {
                return Err(None);
            }
            match self.take_idle(&mut l, settings, started) {
                Some((conn, idle_for)) => {
                    if rules::check_due(
                        idle_for,
                        settings.check_delay,
                        settings.check_query.is_some(),
                        conn.served,
                    ) {
                        l.idle.push_back(conn);
                        self.shards[me].publish(&l, self.born);
                        return Err(None);
                    }
                    self.shards[me].publish(&l, self.born);
                    conn
                }
                None => {
                    self.shards[me].publish(&l, self.born);
                    drop(l);
                    match self.steal(me, settings, started) {
                        Some((conn, idle_for)) => {
                            if rules::check_due(
                                idle_for,
                                settings.check_delay,
                                settings.check_query.is_some(),
                                conn.served,
                            ) {
                                // Back to this worker's idle list for `checkout_at`'s path.
                                self.park_idle(me, conn);
                                return Err(None);
                            }
                            conn
                        }
                        None => {
                            let (rx, slots) = self.queue(me, settings);
                            self.spawn_connects(slots, settings);
                            return Err(Some(Queued(rx)));
                        }
                    }
                }
            }
        };
        conn.set_book_state(ServerState::Active, started);
        self.note_taken(&conn);
        let mut server = PooledServer::new(conn);
        if !self.settle_here(&mut server) {
            self.discard(server);
            return Err(None);
        }
        self.note_assignment(Duration::ZERO);
        Ok(server)
    }

    /// Paused (hand nothing out) or removed (refuse). Read under a shard's lock (see `barrier`).
    fn frozen(&self) -> bool {
        self.paused.load(Ordering::Relaxed) || self.removed.load(Ordering::Relaxed)
    }

    /// A server from another worker's client (or connect task) moves to this worker, once,
    /// rather than waking it through the other worker's driver for every reply. False when it
    /// cannot (the caller discards it, which closes it).
    fn settle_here(&self, server: &mut PooledServer) -> bool {
        let here = crate::workers::current();
        if server.home != here {
            self.cross.note(CrossEvent::SocketMove);
            if let Err(e) = server.stream.move_to_current_worker() {
                tracing::warn!("S-{}: cannot move to this worker, closing: {e}", server.id);
                return false;
            }
            server.home = here;
            let home = self.home_slot(here);
            if let Some(slots) = server.slots.as_mut() {
                slots.home = home;
            }
        }
        true
    }

    /// Take an idle server (this worker's, else another's), or join this worker's line and plan
    /// growth for it.
    fn take_or_queue(
        self: &Arc<Self>,
        settings: &PoolSettings,
        now: Instant,
    ) -> Result<Ticket, PoolError> {
        if self.removed.load(Ordering::Relaxed) {
            return Err(PoolError::DatabaseRemoved);
        }
        let me = here(self.shards.len());
        if !self.paused.load(Ordering::Relaxed) {
            let local = {
                let mut l = self.shards[me].lock();
                let got = if self.frozen() {
                    None
                } else {
                    self.take_idle(&mut l, settings, now)
                };
                self.shards[me].publish(&l, self.born);
                got
            };
            if let Some((conn, idle_for)) = local.or_else(|| self.steal(me, settings, now)) {
                conn.set_book_state(ServerState::Active, now);
                self.note_taken(&conn);
                return Ok(Ticket::Idle(conn, idle_for));
            }
            if let Some(message) = self.login_failing(settings) {
                self.kick();
                return Err(PoolError::LoginFailing(message));
            }
        }
        let (rx, slots) = self.queue(me, settings);
        Ok(Ticket::Queued(rx, slots))
    }

    /// Another worker's idle server, when this worker has none ("lending when a worker runs
    /// dry"); it moves over at `settle_here`.
    fn steal(
        &self,
        me: usize,
        settings: &PoolSettings,
        now: Instant,
    ) -> Option<(Box<ServerConn>, Duration)> {
        for (i, shard) in self.shards.iter().enumerate() {
            if i == me || shard.idle_hint() == 0 {
                continue;
            }
            let mut l = shard.lock();
            if self.frozen() {
                return None;
            }
            let got = self.take_idle(&mut l, settings, now);
            shard.publish(&l, self.born);
            if got.is_some() {
                return got;
            }
        }
        None
    }

    /// The last server login failed and no server is logged in: as PgBouncer, a client of a pool that
    /// has had a server fails at once with that failure's message, until a login succeeds; once
    /// server_login_retry has passed since that attempt started, its request also starts the
    /// next attempt (`retry_wanted`, for the caller's `kick`). A client still logging in to a pool
    /// that never had a server waits for one instead.
    fn login_failing(&self, settings: &PoolSettings) -> Option<String> {
        if !self.failing.load(Ordering::Relaxed) || self.welcome.lock().is_none() {
            return None;
        }
        let mut st = self.state.lock();
        let f = st.failure.as_ref()?;
        // Servers still logging in do not count: a client does not wait for another try.
        if self.servers.current() > st.connecting {
            return None;
        }
        let message = f.message.clone();
        // Asked for now or not at all (a try in flight answers it), as PgBouncer's launches.
        if st.connecting == 0 && f.started.elapsed() >= settings.login_retry {
            st.retry_wanted = true;
        }
        Some(message)
    }

    /// Put a request in worker `me`'s line and plan the connections to open for it.
    fn queue(
        &self,
        me: usize,
        settings: &PoolSettings,
    ) -> (oneshot::Receiver<WaiterReply>, Vec<ServerSlots>) {
        let (tx, rx) = oneshot::channel();
        {
            let shard = &self.shards[me];
            let mut l = shard.lock();
            l.waiters.push_back(Waiter {
                // Read under the lock, not the caller's `now`: each line stays ordered by `since`.
                since: Instant::now(),
                worker: crate::workers::current(),
                tx,
            });
            shard.publish(&l, self.born);
        }
        // Pairs with the fence in `park_idle`: a server parked meanwhile is seen here, or this
        // waiter is seen there.
        fence(Ordering::SeqCst);
        if self.shards.iter().any(|s| s.idle_hint() > 0) {
            self.match_waiters(settings);
        }
        (rx, self.plan(settings))
    }

    /// Plan growth unless the pool is as large as it may ever get (the saturated common case:
    /// no pool-wide lock per queued request).
    fn plan(&self, settings: &PoolSettings) -> Vec<ServerSlots> {
        if rules::keep_cap(&settings.limits).is_some_and(|cap| self.servers.current() >= cap) {
            return Vec::new();
        }
        let mut st = self.state.lock();
        self.plan_locked(&mut st, settings)
    }

    fn note_assignment(&self, waited: Duration) {
        PoolStats::add(&self.stats.server_assignments, 1);
        PoolStats::add(&self.stats.wait_time_us, waited.as_micros() as u64);
    }

    /// Pop an idle server that may be used now, with how long it idled (its callers' check for
    /// server_check_delay uses the same figure); stale ones are dropped (closed) on the way.
    fn take_idle(
        &self,
        l: &mut Lists,
        settings: &PoolSettings,
        now: Instant,
    ) -> Option<(Box<ServerConn>, Duration)> {
        loop {
            // LIFO keeps the busiest servers warm (and the rest free to time out) unless
            // server_round_robin asks for FIFO.
            let conn = if settings.round_robin {
                l.idle.pop_front()
            } else {
                l.idle.pop_back()
            }?;
            let idle_for = now.saturating_duration_since(conn.last_used);
            if self.close_needed(conn.id, conn.generation, settings) {
                settings
                    .connect
                    .log
                    .closing_conn(&conn, reason::CONFIG_CHANGED);
                continue;
            }
            if conn.host_retired() {
                settings.connect.log.closing_conn(&conn, reason::HOST_OUT);
                continue;
            }
            let age = now.saturating_duration_since(conn.created);
            if !rules::within_lifetime(age, conn.served, &settings.timeouts) {
                settings.connect.log.closing_conn(&conn, reason::LIFETIME);
                continue;
            }
            if conn.stream.is_quiet(idle_for >= ASK_KERNEL_AFTER_IDLE) {
                return Some((conn, idle_for));
            }
        }
    }

    /// Return a server a client used. `reusable` = the caller knows it is clean (idle, nothing
    /// pending).
    pub fn release(self: &Arc<Self>, server: PooledServer, reusable: bool) {
        self.release_at(server, reusable, Instant::now(), &self.settings());
    }

    /// Return a server no client used: a new one from a connect task, or the one whose parameters
    /// greeted a new pool's first client. Its lifetime is not looked at (PgBouncer does not at the
    /// end of a server's login either), so a server_lifetime of 0 still lets one client use it.
    pub fn give_back_unused(self: &Arc<Self>, server: PooledServer) {
        self.put_back(server, true, false, Instant::now(), &self.settings());
    }

    /// `release` with the caller's clock reading (the session's, taken at the server's last
    /// reply) and settings snapshot: no clock read or settings load of its own on the hot path.
    pub fn release_at(
        self: &Arc<Self>,
        server: PooledServer,
        reusable: bool,
        now: Instant,
        settings: &PoolSettings,
    ) {
        self.put_back(server, reusable, true, now, settings);
    }

    /// A server comes back: to a waiter, idle, or closed. `served`: a client used it.
    fn put_back(
        self: &Arc<Self>,
        mut server: PooledServer,
        reusable: bool,
        served: bool,
        now: Instant,
        settings: &PoolSettings,
    ) {
        let Some(mut conn) = server.conn.take() else {
            return;
        };
        conn.last_used = now;
        conn.served |= served;
        let clean = reusable
            && conn.is_clean()
            && !self.close_needed(conn.id, conn.generation, settings)
            && !conn.host_retired();
        let expired = clean
            && conn.served
            && !rules::within_lifetime(now - conn.created, true, &settings.timeouts);
        if expired {
            settings.connect.log.closing_conn(&conn, reason::LIFETIME);
        }
        if !clean || expired || self.over_limits(settings) {
            if !clean && reusable && conn.is_clean() {
                if self.close_needed(conn.id, conn.generation, settings) {
                    settings
                        .connect
                        .log
                        .closing_conn(&conn, reason::CLOSE_NEEDED);
                } else if conn.host_retired() {
                    settings.connect.log.closing_conn(&conn, reason::HOST_OUT);
                }
            }
            drop(conn);
            self.kick();
            return;
        }
        let me = here(self.shards.len());
        if let Some(conn) = self.hand_to_waiter(me, conn, now) {
            self.park_idle(me, conn);
        }
    }

    /// Give `conn` (on worker shard `me`) to a waiter by `affinity::choose`: None when it went
    /// to one (or was closed because the pool is paused or removed), back when nobody waits.
    fn hand_to_waiter(
        &self,
        me: usize,
        mut conn: Box<ServerConn>,
        now: Instant,
    ) -> Option<Box<ServerConn>> {
        loop {
            let shard = &self.shards[me];
            let mut l = shard.lock();
            // A paused pool gives its servers up (PAUSE returns once none is left in use); a
            // removed one closes them.
            if self.frozen() {
                drop(l);
                let why = if self.removed.load(Ordering::Relaxed) {
                    reason::DB_REMOVED
                } else {
                    reason::PAUSE_MODE
                };
                self.settings().connect.log.closing_conn(&conn, why);
                drop(conn);
                return None;
            }
            let local = l
                .waiters
                .front()
                .map(|w| now.saturating_duration_since(w.since));
            // Look at the other workers when this one has nobody waiting, and every
            // FAIRNESS_EVERY releases otherwise.
            let look = match local {
                None => true,
                Some(_) => {
                    l.local_releases += 1;
                    l.local_releases >= FAIRNESS_EVERY
                }
            };
            let other = if look {
                l.local_releases = 0;
                // With a waiter here, only a worker short of servers can be lent one: the wait
                // stamps (lines their workers write per transaction) of the others go unread.
                let here_n = self.homed(me);
                let eligible = |o: usize| {
                    local.is_none()
                        || short_of_servers(Homed {
                            here: here_n,
                            there: self.homed(o),
                        })
                };
                longest_waiting_other(&self.shards, me, self.born, now, eligible)
            } else {
                None
            };
            let homed = |o: usize| Homed {
                here: self.homed(me),
                there: self.homed(o),
            };
            let w = match choose(local, other, homed) {
                Target::Idle => return Some(conn),
                Target::Local => {
                    let w = l.waiters.pop_front();
                    shard.publish(&l, self.born);
                    w
                }
                Target::Other(o) => {
                    drop(l);
                    let other = &self.shards[o];
                    let mut ol = other.lock();
                    let w = ol.waiters.pop_front();
                    other.publish(&ol, self.born);
                    w
                }
            };
            // Another release or the janitor took that waiter first: look again.
            let Some(w) = w else { continue };
            self.note_hand_to(&w, conn.home);
            conn.set_book_state(ServerState::Active, now);
            match w.tx.send(Ok(PooledServer::new(conn))) {
                Ok(()) => return None,
                // The waiter gave up (its client left): the server is still ours.
                Err(back) => match back.ok().and_then(|mut s| s.conn.take()) {
                    Some(c) => conn = c,
                    None => return None,
                },
            }
        }
    }

    /// Park a server idle on shard `me`, then make sure no waiter that joined meanwhile is left
    /// waiting beside it.
    fn park_idle(&self, me: usize, conn: Box<ServerConn>) {
        {
            let shard = &self.shards[me];
            let mut l = shard.lock();
            if self.frozen() {
                drop(l);
                drop(conn);
                return;
            }
            conn.set_book_state(ServerState::Idle, conn.last_used);
            l.idle.push_back(conn);
            shard.publish(&l, self.born);
        }
        // Pairs with the fence in `queue`.
        fence(Ordering::SeqCst);
        if self.shards.iter().any(|s| s.waiting_hint() > 0) {
            self.match_waiters(&self.settings());
        }
    }

    /// Pair idle servers with waiters, whichever shards they are on (after RESUME, a reload,
    /// or when a waiter and a parked server crossed).
    fn match_waiters(&self, settings: &PoolSettings) {
        for _ in 0..MATCH_ROUNDS {
            if !self.shards.iter().any(|s| s.waiting_hint() > 0) {
                return;
            }
            let now = Instant::now();
            // An idle server, preferably from a shard whose own clients wait.
            let mut taken = None;
            let waits = |i: &usize| self.shards[*i].waiting_hint() > 0;
            let n = self.shards.len();
            let order = (0..n).filter(waits).chain((0..n).filter(|i| !waits(i)));
            for i in order {
                let shard = &self.shards[i];
                if shard.idle_hint() == 0 {
                    continue;
                }
                let mut l = shard.lock();
                if self.frozen() {
                    return;
                }
                let got = self.take_idle(&mut l, settings, now);
                shard.publish(&l, self.born);
                if let Some((conn, _)) = got {
                    taken = Some((i, conn));
                    break;
                }
            }
            let Some((i, conn)) = taken else { return };
            if let Some(conn) = self.hand_to_waiter(i, conn, now) {
                // Nobody waits after all: back where it came from. A waiter that joined while
                // the server was out of the list is seen by the loop's first check (same fence
                // pairing as `park_idle`).
                let shard = &self.shards[i];
                let mut l = shard.lock();
                if !self.frozen() {
                    l.idle.push_back(conn);
                }
                shard.publish(&l, self.born);
                drop(l);
                fence(Ordering::SeqCst);
            }
        }
    }

    /// A checked-out server that must not be reused: closed, and growth looked at again (a
    /// waiter may need a new one).
    pub fn discard(self: &Arc<Self>, server: PooledServer) {
        drop(server);
        self.kick();
    }

    /// Re-evaluate growth (after a close, a config change, a retry window ending) and pair idle
    /// servers with waiters.
    pub fn kick(self: &Arc<Self>) {
        let settings = self.settings();
        if !self.frozen() {
            self.match_waiters(&settings);
        }
        let slots = {
            let mut st = self.state.lock();
            self.plan_locked(&mut st, &settings)
        };
        self.spawn_connects(slots, &settings);
    }
}
