//! A checked-out server held by the pooler on its way back: pooler-run queries while it counts as
//! sv_tested (server_reset_query and session cleanup before it goes back, server_check_query
//! before an idle one is reused), and the wait for its client's cancels while it counts as
//! sv_being_canceled.

use std::sync::Arc;

use super::states::{BeingCanceled, Testing};
use super::{Pool, PoolSettings, PooledServer};
use crate::server::query;

impl Pool {
    /// Keep a server its client has let go of out of the pool until `landed` (the client's
    /// cancels in flight have reached PostgreSQL), counted as sv_being_canceled meanwhile. Each
    /// cancel ends within cancel_wait_timeout, so this wait is bounded by it.
    pub async fn hold_while_canceled(
        self: &Arc<Self>,
        server: &PooledServer,
        landed: impl std::future::Future<Output = ()>,
    ) {
        let held = BeingCanceled::begin(self, server);
        landed.await;
        held.end(server);
    }

    /// Run pooler queries (server_reset_query, session cleanup) on a server while it counts as
    /// sv_tested, then return it; a failing query closes it instead.
    pub async fn reset_and_release(self: &Arc<Self>, mut server: PooledServer, queries: &[&str]) {
        if !queries.is_empty() {
            // What the queries reset is not known here (server_reset_query is the operator's):
            // the server no longer carries its last client's parameters as that client left
            // them, so that client gets them replayed too, and any other client still gets the
            // RESET (`gucs_dirty` stays).
            server.gucs_owner = None;
            let max = self.settings().connect.max_packet_size;
            let testing = Testing::begin(self, &server);
            let mut result = Ok(());
            for q in queries {
                result = query::run_simple(&mut server, q, max).await;
                if result.is_err() {
                    break;
                }
            }
            testing.end(&server);
            if let Err(e) = result {
                tracing::warn!(
                    "S-{}: {} server reset failed, closing: {e}",
                    server.id,
                    self.key
                );
                self.discard(server);
                return;
            }
        }
        self.release(server, true);
    }

    /// Run server_check_query on a server that idled past server_check_delay. None = it failed
    /// and was closed.
    pub(super) async fn check_server(
        &self,
        mut server: PooledServer,
        settings: &PoolSettings,
    ) -> Option<PooledServer> {
        let Some(q) = &settings.check_query else {
            return Some(server);
        };
        let testing = Testing::begin(self, &server);
        let checked = query::run_simple(&mut server, q, settings.connect.max_packet_size).await;
        testing.end(&server);
        if let Err(e) = checked {
            tracing::warn!(
                "S-{}: {} server check failed, closing: {}",
                server.id,
                self.key,
                e
            );
            return None;
        }
        Some(server)
    }
}
