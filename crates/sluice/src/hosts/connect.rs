//! A new server for a database with failover: the hosts its target_session_attrs allows, in the
//! checker's order; a login of the wrong role is closed and the next host tried; while no host
//! fits (a failover under way) the connect, and so the clients waiting for it, is held until one
//! does or failover_timeout passes.

use std::sync::Arc;
use std::time::Duration;

use sluice_protocol::ScramKeys;
use tokio::time::Instant;

use super::health::HostHealth;
use super::{role, select, HostBook};
use crate::error::ServerError;
use crate::server::connect::{self, ConnectOptions};
use crate::server::target::FailoverSettings;
use crate::server::{ServerConn, ServerTarget};

/// How long a first connect waits for every host's first check (so that a stale primary is known
/// before anything is written to it).
const FIRST_CHECK_WAIT: Duration = Duration::from_secs(2);
/// While held: look at the views again at least this often.
const HOLD_POLL: Duration = Duration::from_millis(250);

impl HostBook {
    pub async fn connect(
        &self,
        id: crate::ids::ServerId,
        target: &Arc<ServerTarget>,
        keys: Option<&ScramKeys>,
        opts: &ConnectOptions,
        f: &FailoverSettings,
    ) -> Result<ServerConn, ServerError> {
        let members = self.members(target, keys, opts);
        self.first_checks(&members, FIRST_CHECK_WAIT.min(opts.connect_timeout))
            .await;
        let attrs = target.attrs;
        let started = Instant::now();
        let deadline = started + f.failover_timeout;
        let mut held = false;
        loop {
            let changed = self.changed.notified();
            let views: Vec<_> = members.iter().map(|m| m.view()).collect();
            let refs: Vec<&super::HostView> = views.iter().map(|v| &**v).collect();
            let mut why: Vec<String> = Vec::new();
            for (i, v) in refs.iter().enumerate() {
                if let Some(r) = select::passed_over(attrs, v) {
                    why.push(format!("{} {r}", members[i].addr));
                }
            }
            for i in select::candidates(&refs, attrs, target.rotation_start()) {
                let m = &members[i];
                let epoch = m.epoch();
                match connect::open_addr(id, &m.addr, target, keys, opts, &self.dns, &self.cpu)
                    .await
                {
                    Ok(mut conn) => match role::learn(&mut conn, opts.max_packet_size).await {
                        Ok(facts) if role::accepts(attrs, facts) => {
                            conn.host = Some(m.ticket(epoch, held.then(|| started.elapsed())));
                            return Ok(conn);
                        }
                        Ok(facts) => {
                            let r = format!("is {}", role::describe(facts));
                            opts.log.closing_conn(
                                &conn,
                                &format!("target_session_attrs={attrs}: server {r}"),
                            );
                            why.push(format!("{} {r}", m.addr));
                            m.wake();
                        }
                        Err(e) => {
                            opts.log.closing_conn(&conn, &e.close_reason());
                            why.push(format!("{} {}", m.addr, e.close_reason()));
                            m.suspect(&e.close_reason());
                        }
                    },
                    Err(e) if e.is_login_rejection() => return Err(e),
                    Err(e) => {
                        why.push(format!("{} {}", m.addr, e.close_reason()));
                        m.suspect(&e.close_reason());
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ServerError::NoHost(no_host_message(
                    attrs,
                    f.failover_timeout,
                    &why,
                )));
            }
            if !held {
                held = true;
                // One line per held connect: the host's "failover began" and the pool's
                // "failover ended" are the operator's lines.
                tracing::debug!(
                    "{}: no host with target_session_attrs={attrs} in rotation ({}); holding clients up to failover_timeout",
                    opts.log.pool,
                    why.join("; ")
                );
            }
            let wait = HOLD_POLL.min(deadline - now);
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Wait (at most `limit`) until every member has been checked once.
    async fn first_checks(&self, members: &[Arc<HostHealth>], limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            if members.iter().all(|m| m.view().checked) {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(deadline - now) => {}
            }
        }
    }
}

/// The client's error when failover_timeout passed with no host of the role.
fn no_host_message(
    attrs: sluice_config::TargetSessionAttrs,
    timeout: Duration,
    why: &[String],
) -> String {
    format!(
        "no server with target_session_attrs={attrs} available after failover_timeout ({}s): {}",
        sluice_config::format_g(timeout.as_secs_f64()),
        if why.is_empty() {
            "no host in rotation".to_string()
        } else {
            why.join("; ")
        }
    )
}
