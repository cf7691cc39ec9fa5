//! Reads that never go back in time: which standby (if any) may serve a client's read-only
//! transaction so that it sees its own writes and nothing older than what it saw before.
//!
//! The health checker polls each host: the primary's `pg_current_wal_insert_lsn()` (the insert
//! position, which bounds even an asynchronous commit's record from above) and each standby's
//! `pg_last_wal_replay_lsn()`. A polled position is a lower bound of the truth at the time the
//! answer arrives, and an upper bound of it at the time the poll started. So a client's
//! watermark is resolved from the first poll that *started after* its last transaction ended:
//!
//! * on the primary: the primary's position then bounds whatever the client wrote or read;
//! * on a standby that has not restarted since (same incarnation): its replay position then
//!   bounds what the client read there (replay only moves forward within one incarnation);
//! * else from the primary's poll, which bounds every standby too.
//!
//! While that poll has not completed, the client reads on the primary, or on the very standby it
//! used last if that one has not restarted (its replay position only moved forward since). After
//! it, any healthy standby whose polled replay position is at or past the watermark will do.
//! The watermark only grows: it is the maximum of every resolved bound.
//!
//! Cost: a client of a database with `route_reads = off` never touches this module. A routing
//! client keeps one `Copy` struct ([`Freshness`]), reads [`PollClock::now`] (one atomic load) when
//! a transaction ends, and scans the host views when one starts: no allocation, no atomic write.

use std::sync::atomic::{AtomicU64, Ordering};

use super::lsn::Lsn;

/// The role of a host for routing, as of its last poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The primary the pool writes to (one host at most).
    Primary,
    Standby,
    /// Neither read from nor trusted for positions: a host that says it is a primary but is not
    /// the one the pool writes to (an old primary back after a failover: split brain), or a host
    /// whose role is not known.
    Excluded,
}

/// What the health checker knows of one host of a database's host list, as of its last poll.
/// The checker (one per host) fills it; routing only reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostView {
    pub role: Role,
    /// In rotation: reachable, passing its check, within `max_replica_lag`.
    pub healthy: bool,
    /// Primary: `pg_current_wal_insert_lsn()`; standby: `pg_last_wal_replay_lsn()`.
    pub lsn: Lsn,
    /// [`PollClock`] value from [`PollClock::start_poll`] for the poll that measured `lsn`;
    /// 0 before the first poll completes.
    pub polled_at: u64,
    /// Changes whenever the host may have lost replayed state or its identity: a restart (the
    /// postmaster start time changed), a re-clone (system identifier or timeline changed), a role
    /// change, or a lost connection to it. Never reused for the same host.
    pub incarnation: u64,
}

/// Orders poll starts against transaction ends: the checker takes a tick before it sends each
/// poll; a client reads the clock after its transaction's last ReadyForQuery. A poll whose tick
/// is greater than a client's reading started after that transaction ended. One per pooler
/// instance, shared by the checkers and the clients (no global).
#[derive(Debug, Default)]
pub struct PollClock(AtomicU64);

impl PollClock {
    pub fn new() -> Self {
        PollClock(AtomicU64::new(0))
    }

    /// Call just before sending a poll; store the result in the host's view with the answer.
    pub fn start_poll(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Call when a transaction has ended (after its ReadyForQuery 'I' came from the server).
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A host at one incarnation: where a transaction ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostKey {
    /// Index in the database's host list (the same order as `hosts` given to [`Freshness::choose`]).
    pub index: usize,
    pub incarnation: u64,
}

/// Per-client read-your-writes and monotonic-reads state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Freshness {
    /// Where the client's last transaction ran and the clock when it ended.
    last: Option<(HostKey, u64)>,
    /// Every WAL position the client has written or read is at or below this one, as far as
    /// the transactions before the last one go (and the last one too unless `pending`).
    watermark: Option<Lsn>,
    /// The last transaction is not bounded yet: no poll that started after it has answered.
    pending: bool,
}

/// Where a read-only transaction goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Primary,
    /// This standby, through a server connection opened in this incarnation of it. A polled
    /// position is only a lower bound of a host's state within one incarnation: a standby that
    /// crashed and restarted (or was re-cloned) may be behind its last poll until the checker
    /// sees it again. So the pool must not use a server of another incarnation (its login learns
    /// it the way the checker does); when it has none and cannot open one of this incarnation,
    /// the transaction runs on the primary instead.
    Standby(HostKey),
}

/// Why [`Freshness::choose`] chose what it chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fresh {
    /// The standby the client used last, not restarted since.
    SameStandby,
    /// A standby whose replay position is at or past the client's watermark.
    CaughtUp,
    /// The client has not run anything yet: any healthy standby.
    FirstRead,
    /// Primary: the poll that bounds the last transaction has not completed yet.
    WatermarkPending,
    /// Primary: no healthy standby has replayed up to the watermark.
    NoStandbyCaughtUp,
    /// Primary: no healthy standby at all.
    NoHealthyStandby,
}

impl Freshness {
    /// A transaction of this client ended on `host`; `now` is [`PollClock::now`] read after its
    /// last ReadyForQuery. Called for every transaction of a routing client, writes included.
    pub fn finished(&mut self, host: HostKey, now: u64) {
        self.last = Some((host, now));
        self.pending = true;
    }

    /// Like [`Freshness::finished`], when the pool also knows an upper bound of the state the
    /// transaction saw: the primary's `pg_current_wal_insert_lsn()` read on the same server
    /// after the transaction ended. The watermark is resolved at once, so the next read need
    /// not wait for a poll. It costs a round trip per transaction: worth it for a client that
    /// keeps landing on the primary because its transactions come faster than the polls.
    pub fn finished_bounded(&mut self, host: HostKey, now: u64, bound: Lsn) {
        self.last = Some((host, now));
        self.watermark = Some(self.watermark.map_or(bound, |w| w.max(bound)));
        self.pending = false;
    }

    /// The watermark once resolved (for SHOW and logs).
    pub fn watermark(&self) -> Option<Lsn> {
        self.watermark
    }

    /// Raise the watermark from a poll that started after the last transaction ended, if one
    /// has completed.
    fn resolve(&mut self, hosts: &[HostView]) {
        let Some((host, ended)) = self.last else {
            return;
        };
        if !self.pending {
            return;
        }
        let same = hosts
            .get(host.index)
            .filter(|h| h.incarnation == host.incarnation && h.polled_at > ended);
        let bound = match same {
            Some(h) => Some(h.lsn),
            None => hosts
                .iter()
                .find(|h| h.role == Role::Primary && h.polled_at > ended)
                .map(|h| h.lsn),
        };
        if let Some(lsn) = bound {
            self.watermark = Some(self.watermark.map_or(lsn, |w| w.max(lsn)));
            self.pending = false;
        }
    }

    /// Where a read-only transaction may run. `spread` picks among equally good standbys
    /// (e.g. the client id) so that clients spread over them.
    pub fn choose(&mut self, hosts: &[HostView], spread: usize) -> (Target, Fresh) {
        self.resolve(hosts);
        let standby = |i: usize| {
            hosts
                .get(i)
                .filter(|h| h.role == Role::Standby && h.healthy)
        };
        // The standby used last, if it has not restarted, is at least as fresh as anything the
        // client has seen (it was fresh enough when chosen, and replay only moves forward).
        if let Some((last, _)) = self.last {
            if standby(last.index).is_some_and(|h| h.incarnation == last.incarnation) {
                return (Target::Standby(last), Fresh::SameStandby);
            }
        }
        if self.pending {
            return (Target::Primary, Fresh::WatermarkPending);
        }
        let n = hosts.len();
        let mut any_healthy = false;
        for k in 0..n {
            let index = spread.wrapping_add(k) % n;
            let Some(h) = standby(index) else { continue };
            any_healthy = true;
            let key = HostKey {
                index,
                incarnation: h.incarnation,
            };
            match self.watermark {
                None => return (Target::Standby(key), Fresh::FirstRead),
                Some(w) if h.polled_at > 0 && h.lsn >= w => {
                    return (Target::Standby(key), Fresh::CaughtUp)
                }
                Some(_) => {}
            }
        }
        if any_healthy {
            (Target::Primary, Fresh::NoStandbyCaughtUp)
        } else {
            (Target::Primary, Fresh::NoHealthyStandby)
        }
    }
}
