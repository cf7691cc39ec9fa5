//! Growing a pool: deciding under the state lock how many servers to open (the pure rules are in
//! `rules.rs`), reserving their slots, and the connect tasks that log them in and hand them to the
//! waiters (or record a failed login for server_login_retry).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use super::counter::{LimitHit, ServerSlots};
use super::rules::{self, Growth, PoolSnapshot};
use super::states::Connecting;
use super::{LoginFailure, Pool, PoolSettings, PoolState, PooledServer, Waiter};
use crate::error::{ClientNotice, PoolError, ServerError};
use crate::server::welcome::Welcome;

impl Pool {
    fn snapshot(&self, st: &PoolState, settings: &PoolSettings) -> PoolSnapshot {
        let now = Instant::now();
        PoolSnapshot {
            total: self.servers.current(),
            connecting: st.connecting,
            waiters: self.shards.iter().map(|s| s.waiting_hint()).sum(),
            oldest_wait: self
                .shards
                .iter()
                .filter_map(|s| s.head_wait(self.born, now))
                .max()
                .unwrap_or_default(),
            has_clients: st.clients > 0 || settings.forced_user,
            retry_blocked: st
                .failure
                .as_ref()
                .is_some_and(|f| f.started.elapsed() < settings.login_retry),
            retry_wanted: st.retry_wanted,
            frozen: self.is_paused() || self.is_removed(),
        }
    }

    /// Decide how many servers to open now and reserve their slots (under the state lock).
    pub(super) fn plan_locked(
        &self,
        st: &mut PoolState,
        settings: &PoolSettings,
    ) -> Vec<ServerSlots> {
        let mut out = Vec::new();
        loop {
            let snap = self.snapshot(st, settings);
            let Growth::Open { from_reserve } = rules::plan_growth(&snap, &settings.limits) else {
                break;
            };
            let cap = rules::capacity(&snap, &settings.limits);
            let cap = if cap == usize::MAX { 0 } else { cap };
            match ServerSlots::acquire(
                &self.servers,
                cap,
                &self.db_servers,
                settings.max_db_connections,
                &self.user_servers,
                settings.max_user_connections,
            ) {
                Ok(slots) => {
                    st.limit_blocked = false;
                    st.retry_wanted = false;
                    if from_reserve {
                        tracing::info!("{}: taking connection from reserve_pool", self.key);
                    }
                    st.connecting += 1;
                    out.push(slots);
                }
                Err(LimitHit::Pool) => break,
                Err(hit) => {
                    st.limit_blocked = true;
                    tracing::debug!("{}: server limit reached ({hit:?}), client waits", self.key);
                    break;
                }
            }
        }
        out
    }

    pub(super) fn spawn_connects(
        self: &Arc<Self>,
        slots: Vec<ServerSlots>,
        settings: &Arc<PoolSettings>,
    ) {
        if slots.is_empty() {
            return;
        }
        // Each slot was counted as connecting by the plan: the guard gives the count back
        // however the connect ends (dropped with the task when there is no runtime or it stops).
        let guards: Vec<Connecting> = slots.iter().map(|_| Connecting::adopt(self)).collect();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (s, connecting) in slots.into_iter().zip(guards) {
            let pool = self.clone();
            let settings = settings.clone();
            handle.spawn(async move { pool.open_server(s, settings, connecting).await });
        }
    }

    async fn open_server(
        self: Arc<Self>,
        slots: ServerSlots,
        settings: Arc<PoolSettings>,
        connecting: Connecting,
    ) {
        let keys = self.scram_keys.lock().clone();
        let started = Instant::now();
        let result = self
            .connector
            .connect(settings.target.clone(), keys, settings.connect.clone())
            .await;
        match result {
            Ok(conn) => {
                let mut conn = Box::new(conn);
                self.stats
                    .connect_time
                    .observe_us(started.elapsed().as_micros() as u64);
                let mut slots = slots;
                conn.generation = settings.generation;
                slots.tracker = Some(self.servers_book.track(conn.seen()));
                slots.home = self.home_slot(conn.home);
                conn.slots = Some(slots);
                {
                    let mut w = self.welcome.lock();
                    if w.is_none() {
                        *w = Some(Arc::new(Welcome::new(conn.params.clone())));
                    }
                }
                {
                    let mut st = self.state.lock();
                    connecting.finish(&mut st);
                    st.failure = None;
                    st.retry_wanted = false;
                    self.failing.store(false, Ordering::Relaxed);
                }
                if let Some(held) = conn.host.as_ref().and_then(|t| t.held) {
                    self.log_failover_ended(&conn, held);
                }
                // Handed to a waiter or parked idle; never used yet, so server_lifetime does not
                // close it (a lifetime of 0 means "used once").
                self.give_back_unused(PooledServer::new(conn));
            }
            Err(e) => {
                drop(slots);
                self.login_failed(e, connecting, started);
            }
        }
    }

    fn login_failed(self: &Arc<Self>, e: ServerError, connecting: Connecting, started: Instant) {
        if let ServerError::NoHost(_) = &e {
            return self.failover_timed_out(e, connecting, started);
        }
        // A server's own refusal was logged with the server's id where it came (`ServerLog`).
        if !matches!(e, ServerError::Login(_)) {
            tracing::warn!("{}: server login failed: {}", self.key, e);
        }
        let rejected = e.is_login_rejection();
        let notice: Option<ClientNotice> = rejected.then(|| e.client_notice());
        // Servers RECONNECT (or a changed login) marked to close do not count as working ones,
        // as PgBouncer's dirty pool does not: their waiters would wait for nothing.
        let closing = self.close_needed_count();
        let none_logged_in = {
            let mut st = self.state.lock();
            connecting.finish(&mut st);
            st.failure = Some(LoginFailure {
                started,
                message: e.close_reason(),
            });
            self.failing.store(true, Ordering::Relaxed);
            self.servers.current().saturating_sub(closing) <= st.connecting
        };
        // While other servers of the pool work (another host of a list), the waiters stay in line
        // for them, as PgBouncer's do; with none, they get the server's refusal.
        let waiters: Vec<Waiter> = if notice.is_some() && none_logged_in {
            self.drain_waiters()
        } else {
            Vec::new()
        };
        if let Some(n) = notice {
            for w in waiters {
                let _ = w.tx.send(Err(PoolError::Rejected(Box::new(n.clone()))));
            }
        }
    }

    /// A held connect gave up after failover_timeout: the clients that waited that long get the
    /// reason (08006); later ones stay in line for the next attempt, which holds again. No login
    /// failure is cached: the next client is held too, not refused at once.
    fn failover_timed_out(
        self: &Arc<Self>,
        e: ServerError,
        connecting: Connecting,
        started: Instant,
    ) {
        tracing::warn!("{}: {}", self.key, e);
        {
            let mut st = self.state.lock();
            connecting.finish(&mut st);
        }
        let notice = e.client_notice();
        let expired = self.drain_waiters_since(started);
        tracing::warn!(
            "{}: failover did not end within failover_timeout: {} held clients get an error",
            self.key,
            expired.len()
        );
        for w in expired {
            let _ =
                w.tx.send(Err(PoolError::Rejected(Box::new(notice.clone()))));
        }
        self.kick();
    }

    /// The first server of a failover's held connects: one line per failover, with the wait and
    /// how many clients were held.
    fn log_failover_ended(&self, conn: &crate::server::ServerConn, held: std::time::Duration) {
        let now = Instant::now();
        {
            let mut st = self.state.lock();
            if st.failover_logged.is_some_and(|t| now - t < held) {
                return;
            }
            st.failover_logged = Some(now);
        }
        tracing::info!(
            "{}: failover ended: new server on {} after {:.1}s, {} clients were held",
            self.key,
            conn.addr,
            held.as_secs_f64(),
            self.waiting()
        );
    }
}
