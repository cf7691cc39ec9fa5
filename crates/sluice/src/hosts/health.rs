//! One host's shared health: the view its checker keeps (`view.rs`), the epoch that retires its
//! servers when it leaves rotation or changes role, and the judgement of a check (lag, split
//! brain) against the views of the hosts listed beside it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sluice_config::ReplicaLag;
use sluice_protocol::ScramKeys;
use tokio::sync::Notify;

use super::ticket::{HostEpoch, HostTicket};
use super::view::{HostView, Role};
use crate::server::connect::ConnectOptions;
use crate::server::{ServerAddr, ServerTarget};

/// What one check read from a host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probe {
    pub in_recovery: bool,
    pub read_only: bool,
    pub wal_lsn: Option<u64>,
    pub receive_lsn: Option<u64>,
    pub lag_time: Option<Duration>,
    pub timeline: Option<u32>,
    /// The book's sequence number taken just before the check was sent
    /// (`HostHealth::start_poll`): `wal_lsn` bounds from above what the host had then.
    pub polled_at: u64,
}

/// Whose login the checker uses: the pool that first used the host (kept weakly: the checker
/// stops when no pool has this target any more, and starts again with the next one's connect).
pub(super) struct CheckLogin {
    pub target: Weak<ServerTarget>,
    pub keys: Option<ScramKeys>,
    pub opts: ConnectOptions,
}

pub struct HostHealth {
    pub addr: ServerAddr,
    view: ArcSwap<HostView>,
    /// Bumped when the host leaves rotation or changes role: servers that connected before close
    /// when next released (`HostTicket::retired`).
    epoch: Arc<HostEpoch>,
    /// Check now (a connect to it failed, or a login found another role than the checker's).
    pub(super) wake: Notify,
    pub(super) login: Mutex<Option<CheckLogin>>,
    /// Hosts listed beside it in some [databases] entry (lag in bytes, split brain).
    peers: Mutex<Vec<Weak<HostHealth>>>,
    /// The [databases] names whose host lists have it (SHOW HOSTS).
    pub(super) databases: Mutex<std::collections::BTreeSet<String>>,
    /// Its checker task runs.
    pub(super) running: AtomicBool,
    /// Any view of the book changed (connect tasks holding clients wait on it).
    changed: Arc<Notify>,
    /// The book's view sequence (`HostView::poll_seq`).
    seq: Arc<AtomicU64>,
    /// Read routing: transactions sent to this standby, and of those, reads it refused with
    /// 25006 that ran again on the primary (/metrics).
    pub routed_reads: AtomicU64,
    pub reads_replayed: AtomicU64,
}

impl std::fmt::Debug for HostHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHealth")
            .field("addr", &self.addr)
            .finish()
    }
}

impl HostHealth {
    pub(super) fn new(addr: ServerAddr, changed: Arc<Notify>, seq: Arc<AtomicU64>) -> Self {
        HostHealth {
            addr,
            view: ArcSwap::from_pointee(HostView::default()),
            epoch: Arc::default(),
            wake: Notify::new(),
            login: Mutex::new(None),
            peers: Mutex::new(Vec::new()),
            databases: Mutex::default(),
            running: AtomicBool::new(false),
            changed,
            seq,
            routed_reads: AtomicU64::new(0),
            reads_replayed: AtomicU64::new(0),
        }
    }

    /// A host of no book (pool tests).
    #[cfg(test)]
    pub fn standalone(addr: ServerAddr) -> Arc<Self> {
        Arc::new(Self::new(addr, Arc::default(), Arc::default()))
    }

    /// The last check's view: one atomic load, no lock.
    pub fn view(&self) -> Arc<HostView> {
        self.view.load_full()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.get()
    }

    /// A ticket for a server that connected to this host in `epoch`.
    pub fn ticket(&self, epoch: u64, held: Option<Duration>) -> HostTicket {
        HostTicket {
            host: self.epoch.clone(),
            epoch,
            held,
        }
    }

    /// Whether `ticket` is a server of this host.
    pub fn issued(&self, ticket: &HostTicket) -> bool {
        Arc::ptr_eq(&self.epoch, &ticket.host)
    }

    /// Take a tick of the book's sequence just before a check is sent (read routing's poll
    /// clock: a check whose tick is above a client's `clock_now` started after that client's
    /// transaction ended).
    pub(super) fn start_poll(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The book's sequence now: read by a routing client after its transaction's last
    /// ReadyForQuery (`route::Freshness::finished`).
    pub fn clock_now(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    pub fn databases(&self) -> Vec<String> {
        self.databases.lock().iter().cloned().collect()
    }

    pub(super) fn add_peers(&self, peers: &[Arc<HostHealth>]) {
        let mut mine = self.peers.lock();
        for p in peers {
            if std::ptr::eq(Arc::as_ptr(p), self) {
                continue;
            }
            if !mine
                .iter()
                .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(p)))
            {
                mine.push(Arc::downgrade(p));
            }
        }
    }

    fn peer_views(&self) -> Vec<(ServerAddr, Arc<HostView>)> {
        self.peers
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| (p.addr.clone(), p.view()))
            .collect()
    }

    /// Check at once (rate-limited by the checker).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A connect to it failed (`why`: PgBouncer's words for it, "connect failed", "connect
    /// timeout", ...): out of rotation until its checker finds it well again.
    pub fn suspect(&self, why: &str) {
        let old = self.view();
        if old.checked && !old.healthy {
            self.wake();
            return;
        }
        let mut v = (*old).clone();
        v.checked = true;
        v.healthy = false;
        v.out_reason = Some(why.to_string());
        v.primary_since = None;
        self.install(&old, v);
        self.wake();
    }

    /// Record a check's outcome, judged against the peers' views.
    pub(super) fn record(&self, outcome: Result<Probe, String>, max_lag: ReplicaLag) {
        let old = self.view();
        let peers = self.peer_views();
        let v = judge(&old, outcome, &peers, max_lag, Instant::now());
        self.install(&old, v);
    }

    fn install(&self, old: &HostView, mut v: HostView) {
        v.checks = old.checks + 1;
        v.poll_seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        v.last_check = Some(SystemTime::now());
        let was_primary = old.role == Role::Primary && old.healthy;
        let is_primary = v.role == Role::Primary && v.healthy;
        // A host never checked counts as in rotation here: servers may have connected to it.
        let was_in = old.healthy || !old.checked;
        if (was_in && !v.healthy) || (old.checked && old.role != v.role) {
            self.epoch.bump();
        }
        v.incarnation = self.epoch.get();
        if was_primary && !is_primary {
            let why = if v.healthy {
                "is a standby now".to_string()
            } else {
                format!(
                    "is out of rotation ({})",
                    v.out_reason.as_deref().unwrap_or("")
                )
            };
            tracing::warn!(
                "failover began: primary {} {why}; clients that need a primary are held up to failover_timeout",
                self.addr
            );
        } else if is_primary && !was_primary && old.checked {
            tracing::info!(
                "host {}: primary in rotation{}",
                self.addr,
                v.timeline
                    .map(|t| format!(" (timeline {t})"))
                    .unwrap_or_default()
            );
        } else if old.healthy && !v.healthy {
            tracing::warn!(
                "host {}: out of rotation: {}",
                self.addr,
                v.out_reason.as_deref().unwrap_or("")
            );
        } else if !old.healthy && v.healthy && old.checked {
            tracing::info!(
                "host {}: back in rotation as {}",
                self.addr,
                v.role.as_str()
            );
        }
        self.view.store(Arc::new(v));
        self.changed.notify_waiters();
    }
}

/// The view after a check: role and positions from the probe; out of rotation when the check
/// failed, when a standby replays more than `max_lag` behind, or when a primary is stale (a peer
/// is on a later timeline, or a peer on the same timeline has been primary longer: split brain).
pub fn judge(
    old: &HostView,
    outcome: Result<Probe, String>,
    peers: &[(ServerAddr, Arc<HostView>)],
    max_lag: ReplicaLag,
    now: Instant,
) -> HostView {
    let p = match outcome {
        Err(why) => {
            return HostView {
                checked: true,
                healthy: false,
                out_reason: Some(why),
                primary_since: None,
                ..old.clone()
            }
        }
        Ok(p) => p,
    };
    let role = if p.in_recovery {
        Role::Standby
    } else {
        Role::Primary
    };
    let primary_lsn = peers
        .iter()
        .filter(|(_, v)| v.role == Role::Primary && v.healthy)
        .filter_map(|(_, v)| v.wal_lsn)
        .max();
    let lag_bytes = match (role, primary_lsn, p.wal_lsn) {
        (Role::Standby, Some(primary), Some(mine)) => Some(primary.saturating_sub(mine)),
        _ => None,
    };
    let mut out: Option<String> = None;
    if role == Role::Standby {
        match max_lag {
            ReplicaLag::Time(max) if p.lag_time.is_some_and(|t| t > max) => {
                out = Some(format!(
                    "replay lag {:.1}s over max_replica_lag",
                    p.lag_time.unwrap_or_default().as_secs_f64()
                ))
            }
            ReplicaLag::Bytes(max) if lag_bytes.is_some_and(|b| b > max) => {
                out = Some(format!(
                    "replay lag {} bytes over max_replica_lag",
                    lag_bytes.unwrap_or_default()
                ))
            }
            _ => {}
        }
    }
    let was_primary = old.role == Role::Primary && old.healthy;
    let since = if was_primary {
        old.primary_since.unwrap_or(now)
    } else {
        now
    };
    if role == Role::Primary {
        if let Some(mine) = p.timeline {
            if let Some((addr, t)) = peers
                .iter()
                .filter_map(|(a, v)| v.timeline.map(|t| (a, t)))
                .find(|&(_, t)| t > mine)
            {
                out = Some(format!(
                    "stale primary: timeline {mine}, {addr} is on timeline {t}"
                ));
            }
        }
        if out.is_none() {
            if let Some((addr, _)) = peers.iter().find(|(_, v)| {
                v.role == Role::Primary
                    && v.healthy
                    && v.timeline.unwrap_or(0) >= p.timeline.unwrap_or(0)
                    && v.primary_since.is_some_and(|s| s < since)
            }) {
                out = Some(format!(
                    "stale primary: {addr} has been the primary since before it came back"
                ));
            }
        }
    }
    let healthy = out.is_none();
    HostView {
        role,
        read_only: p.read_only,
        checked: true,
        healthy,
        out_reason: out,
        wal_lsn: p.wal_lsn,
        receive_lsn: p.receive_lsn,
        lag_time: p.lag_time,
        lag_bytes,
        timeline: p.timeline.or(old.timeline),
        polled_at: p.polled_at,
        incarnation: old.incarnation,
        poll_seq: old.poll_seq,
        checks: old.checks,
        last_check: old.last_check,
        primary_since: (role == Role::Primary && healthy).then_some(since),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(h: &str) -> ServerAddr {
        ServerAddr::Tcp {
            host: h.into(),
            port: 5432,
        }
    }

    fn primary(tl: u32, lsn: u64) -> Probe {
        Probe {
            wal_lsn: Some(lsn),
            timeline: Some(tl),
            ..Probe::default()
        }
    }

    fn standby(lsn: u64, lag: Duration) -> Probe {
        Probe {
            in_recovery: true,
            read_only: true,
            wal_lsn: Some(lsn),
            lag_time: Some(lag),
            timeline: Some(1),
            ..Probe::default()
        }
    }

    #[test]
    fn lagging_standby_leaves_and_comes_back() {
        let now = Instant::now();
        let p = judge(
            &HostView::default(),
            Ok(primary(1, 1000)),
            &[],
            ReplicaLag::Unlimited,
            now,
        );
        assert!(p.healthy && p.role == Role::Primary);
        let peers = [(addr("p"), Arc::new(p))];
        let max = ReplicaLag::Time(Duration::from_secs(1));
        let s = judge(
            &HostView::default(),
            Ok(standby(400, Duration::from_secs(3))),
            &peers,
            max,
            now,
        );
        assert!(!s.healthy);
        assert!(s.out_reason.unwrap().contains("max_replica_lag"));
        assert_eq!(s.lag_bytes, Some(600));
        let s = judge(
            &HostView::default(),
            Ok(standby(1000, Duration::ZERO)),
            &peers,
            max,
            now,
        );
        assert!(s.healthy);
        let bytes = ReplicaLag::Bytes(100);
        let s = judge(
            &HostView::default(),
            Ok(standby(800, Duration::ZERO)),
            &peers,
            bytes,
            now,
        );
        assert!(!s.healthy, "200 bytes behind");
    }

    #[test]
    fn a_failed_check_keeps_what_was_known() {
        let now = Instant::now();
        let p = judge(
            &HostView::default(),
            Ok(primary(2, 1000)),
            &[],
            ReplicaLag::Unlimited,
            now,
        );
        let down = judge(
            &p,
            Err("connect failed".into()),
            &[],
            ReplicaLag::Unlimited,
            now,
        );
        assert!(!down.healthy);
        assert_eq!((down.role, down.timeline), (Role::Primary, Some(2)));
        assert_eq!(down.primary_since, None);
    }

    #[test]
    fn split_brain_stale_primary_stays_out() {
        let t0 = Instant::now();
        let new = judge(
            &HostView::default(),
            Ok(primary(2, 5000)),
            &[],
            ReplicaLag::Unlimited,
            t0,
        );
        // The old primary comes back as a primary on the old timeline.
        let peers = [(addr("new"), Arc::new(new.clone()))];
        let old = judge(
            &HostView::default(),
            Ok(primary(1, 4000)),
            &peers,
            ReplicaLag::Unlimited,
            t0,
        );
        assert!(!old.healthy);
        assert!(old.out_reason.unwrap().contains("timeline 1"));
        // Same timeline (the promotion's checkpoint not done yet): the one that was first stays.
        let later = t0 + Duration::from_secs(5);
        let new1 = judge(
            &HostView::default(),
            Ok(primary(1, 5000)),
            &[],
            ReplicaLag::Unlimited,
            t0,
        );
        let peers = [(addr("new"), Arc::new(new1))];
        let old = judge(
            &HostView::default(),
            Ok(primary(1, 4000)),
            &peers,
            ReplicaLag::Unlimited,
            later,
        );
        assert!(!old.healthy);
        // Even with the new primary down, its later timeline is remembered.
        let gone = judge(&new, Err("down".into()), &[], ReplicaLag::Unlimited, later);
        let peers = [(addr("new"), Arc::new(gone))];
        let old = judge(
            &HostView::default(),
            Ok(primary(1, 4000)),
            &peers,
            ReplicaLag::Unlimited,
            later,
        );
        assert!(!old.healthy);
    }
}
