//! The background check of one host: one task per distinct host, shared by every pool whose
//! [databases] entry lists it. It keeps one connection open (logged in as the pool that first
//! used the host), and every host_check_interval, or at once when woken, reads the host's role,
//! WAL position, replay lag and timeline.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::health::{HostHealth, Probe};
use super::view::parse_lsn;
use crate::auth::cpu::AuthCpu;
use crate::error::ServerError;
use crate::net::dns::DnsCache;
use crate::server::log::ServerLog;
use crate::server::{connect, query, ServerConn};

/// The least time between two checks of a host, however often it is woken.
const MIN_GAP: Duration = Duration::from_millis(100);
/// A check that takes longer counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

const CHECK_SQL: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
    pg_catalog.current_setting('transaction_read_only'), \
    CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() \
         ELSE pg_catalog.pg_current_wal_insert_lsn() END, \
    pg_catalog.pg_last_wal_receive_lsn(), \
    CASE WHEN pg_catalog.pg_is_in_recovery() THEN \
         CASE WHEN pg_catalog.pg_last_wal_receive_lsn() > pg_catalog.pg_last_wal_replay_lsn() \
              THEN extract(epoch FROM now() - pg_catalog.pg_last_xact_replay_timestamp()) \
              ELSE 0 END END";

/// Why a check did not read the host.
enum Check {
    /// The host did not answer, or answered the check with an error: out of rotation.
    Failed(String),
    /// The host refused the checker's login (credentials): not the host's fault.
    Refused(String),
}

const TIMELINE_SQL: &str = "SELECT timeline_id FROM pg_catalog.pg_control_checkpoint()";

/// Run until no pool has a login for this host any more.
pub(super) async fn run(h: Arc<HostHealth>, dns: Arc<DnsCache>, cpu: AuthCpu) {
    let mut conn: Option<ServerConn> = None;
    loop {
        let login = {
            let l = h.login.lock();
            l.as_ref().and_then(|l| {
                l.target
                    .upgrade()
                    .map(|t| (t, l.keys.clone(), l.opts.clone()))
            })
        };
        let Some((target, keys, mut opts)) = login else {
            h.running.store(false, Ordering::Release);
            // A pool that registered meanwhile found the task still running: go on for it.
            let again = h
                .login
                .lock()
                .as_ref()
                .is_some_and(|l| l.target.strong_count() > 0);
            if again && !h.running.swap(true, Ordering::AcqRel) {
                continue;
            }
            return;
        };
        let Some(f) = target.failover else {
            h.running.store(false, Ordering::Release);
            return;
        };
        opts.log = ServerLog {
            pool: opts.log.pool.clone(),
            connections: false,
            disconnections: false,
        };
        let outcome = match tokio::time::timeout(
            CHECK_TIMEOUT.min(opts.connect_timeout),
            probe(&mut conn, &h, &target, keys.as_ref(), &opts, &dns, &cpu),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(Check::Failed("check timed out".to_string())),
        };
        match outcome {
            Err(Check::Refused(why)) => {
                // This pool's login no longer works (its password changed, its role was
                // dropped): that says nothing of the host. The next pool to connect checks it.
                tracing::warn!("host {}: health check login refused: {why}", h.addr);
                conn = None;
                let mut l = h.login.lock();
                if l.as_ref()
                    .is_some_and(|l| std::ptr::eq(l.target.as_ptr(), Arc::as_ptr(&target)))
                {
                    *l = None;
                }
            }
            Err(Check::Failed(why)) => {
                conn = None;
                h.record(Err(why), f.max_lag);
            }
            Ok(p) => h.record(Ok(p), f.max_lag),
        }
        drop(target);
        tokio::time::sleep(MIN_GAP).await;
        tokio::select! {
            _ = h.wake.notified() => {}
            _ = tokio::time::sleep(f.check_interval.saturating_sub(MIN_GAP)) => {}
        }
    }
}

async fn probe(
    conn: &mut Option<ServerConn>,
    h: &HostHealth,
    target: &crate::server::ServerTarget,
    keys: Option<&sluice_protocol::ScramKeys>,
    opts: &connect::ConnectOptions,
    dns: &DnsCache,
    cpu: &AuthCpu,
) -> Result<Probe, Check> {
    if conn.is_none() {
        let c = connect::open_addr(
            crate::ids::ServerId(0),
            &h.addr,
            target,
            keys,
            opts,
            dns,
            cpu,
        )
        .await
        .map_err(|e| match e {
            ServerError::Login(f) if e.is_login_rejection() && f.code != "57P03" => {
                Check::Refused(f.message.clone())
            }
            e @ (ServerError::Auth(_) | ServerError::WrongPasswordType(_)) => {
                Check::Refused(e.to_string())
            }
            e => Check::Failed(e.close_reason()),
        })?;
        *conn = Some(c);
    }
    let Some(c) = conn.as_mut() else {
        return Err(Check::Failed("no connection".into()));
    };
    let max = opts.max_packet_size;
    let polled_at = h.start_poll();
    let row = query::run_row(c, CHECK_SQL, max)
        .await
        .map_err(|e| Check::Failed(format!("check failed: {e}")))?;
    let col = |i: usize| row.get(i).and_then(|v| v.as_deref());
    let in_recovery = col(0) == Some("t");
    let timeline = match query::run_row(c, TIMELINE_SQL, max).await {
        Ok(r) => r
            .first()
            .and_then(|v| v.as_deref())
            .and_then(|v| v.parse().ok()),
        // Not permitted to this user: split brain is then judged by who was primary first.
        Err(ServerError::Query(_)) => None,
        Err(e) => return Err(Check::Failed(format!("check failed: {e}"))),
    };
    Ok(Probe {
        in_recovery,
        read_only: in_recovery || col(1) == Some("on"),
        wal_lsn: col(2).and_then(parse_lsn),
        receive_lsn: col(3).and_then(parse_lsn),
        lag_time: col(4)
            .and_then(|v| v.parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s.max(0.0)).ok()),
        timeline,
        polled_at,
    })
}
