//! A server of its own for a replication client (`replication=database|true`, PgBouncer 1.23+):
//! opened with the client's startup parameters, never pooled, closed when the client leaves.
//! It counts under the pool's pool_size and the database's and user's server limits like any
//! server of the pool (SHOW POOLS sv_active, SHOW SERVERS); an idle server of the pool is closed
//! to make room for it, as PgBouncer evicts one for pool_size; while the pool's servers are all in
//! use the client waits for one to come back, up to query_wait_timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::counter::{LimitHit, ServerSlots};
use super::Pool;
use crate::error::PoolError;
use crate::server::{ServerConn, ServerTarget};

/// How often a replication client waiting for room looks again (no queue of its own: these
/// clients are few and long-lived).
const RETRY_EVERY: Duration = Duration::from_millis(50);

impl Pool {
    /// Open the dedicated server: `extra` startup parameters after the pool's own (`kind`:
    /// `logical` or `physical` for SHOW SERVERS; `replication`, the client's tracked parameters and `options`). No connect_query and no facts query run on
    /// it (a physical replication connection accepts no SQL).
    pub async fn open_dedicated(
        self: &Arc<Self>,
        kind: &'static str,
        extra: &[(String, String)],
    ) -> Result<Box<ServerConn>, PoolError> {
        let settings = self.settings();
        let started = Instant::now();
        let slots = loop {
            if self.is_removed() {
                return Err(PoolError::DatabaseRemoved);
            }
            if !self.is_paused() {
                match self.dedicated_slots() {
                    Ok(s) => break s,
                    Err(LimitHit::Pool) if self.evict_one_idle() => {
                        tracing::info!(
                            "{}: closing an idle server: evicted for pool_size",
                            self.key
                        );
                        continue;
                    }
                    Err(_) => {}
                }
            }
            if settings
                .query_wait_timeout
                .is_some_and(|limit| started.elapsed() >= limit)
            {
                return Err(PoolError::WaitTimeout);
            }
            tokio::time::sleep(RETRY_EVERY).await;
        };
        let base = &settings.target;
        let mut params = base.startup_params.clone();
        for (k, v) in extra {
            params.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
            params.push((k.clone(), v.clone()));
        }
        let target = Arc::new(ServerTarget::new(
            base.addrs.clone(),
            base.dbname.clone(),
            base.user.clone(),
            base.secret.clone(),
            params,
            None,
        ));
        let keys = self.scram_keys.lock().clone();
        let mut conn = Box::new(
            self.connector
                .connect_dedicated(target, keys, settings.connect.clone())
                .await?,
        );
        self.stats
            .connect_time
            .observe_us(started.elapsed().as_micros() as u64);
        let mut slots = slots;
        conn.generation = settings.generation;
        let tracker = self.servers_book.track(conn.seen());
        let _ = tracker.record().replication.set(kind);
        slots.tracker = Some(tracker);
        slots.home = self.home_slot(conn.home);
        conn.slots = Some(slots);
        Ok(conn)
    }

    /// The pool's, database's and user's slots for one more server, under pool_size (not the
    /// reserve) and max_db_connections / max_user_connections.
    fn dedicated_slots(&self) -> Result<ServerSlots, LimitHit> {
        let settings = self.settings();
        ServerSlots::acquire(
            &self.servers,
            settings.limits.pool_size as usize,
            &self.db_servers,
            settings.max_db_connections,
            &self.user_servers,
            settings.max_user_connections,
        )
    }
}
