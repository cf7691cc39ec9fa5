//! What the health checker last learned of one host: a plain value, swapped whole on each check,
//! that pools, SHOW HOSTS, /metrics and read routing read without a lock.

use std::time::{Duration, Instant, SystemTime};

/// A host's role as its last check (or a login) saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Never checked, or never reached.
    #[default]
    Unknown,
    Primary,
    Standby,
}

impl Role {
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Primary => "primary",
            Role::Standby => "standby",
        }
    }
}

/// One host's state. `role`, `timeline` and the WAL positions keep their last known values while
/// the host is unreachable (a stale primary is recognised by its peers' last known timelines).
#[derive(Debug, Clone, Default)]
pub struct HostView {
    pub role: Role,
    /// transaction_read_only is on (a standby, or a primary with default_transaction_read_only):
    /// libpq's read-only.
    pub read_only: bool,
    /// Checked (or connected to) at least once.
    pub checked: bool,
    /// In rotation: reachable, its check passed, within max_replica_lag, not a stale primary.
    pub healthy: bool,
    /// Why it is out of rotation (None while healthy).
    pub out_reason: Option<String>,
    /// A primary's pg_current_wal_insert_lsn(), a standby's pg_last_wal_replay_lsn().
    pub wal_lsn: Option<u64>,
    /// A standby's pg_last_wal_receive_lsn().
    pub receive_lsn: Option<u64>,
    /// A standby's replay lag in time while WAL is pending replay (else zero).
    pub lag_time: Option<Duration>,
    /// A standby's replay position behind the primary's current one (from the peers' views).
    pub lag_bytes: Option<u64>,
    /// timeline_id of pg_control_checkpoint() (None where not permitted).
    pub timeline: Option<u32>,
    /// When this view was recorded, on one sequence shared by every host of the `HostBook`: of
    /// two views (of any hosts), the one with the lower number was recorded first, so a WAL
    /// position it holds was polled before the other's.
    pub poll_seq: u64,
    /// The sequence number taken just before the check that read `wal_lsn` was sent (0 before
    /// the first check): read routing's `polled_at`.
    pub polled_at: u64,
    /// The host's epoch when this view was recorded: it changes when the host leaves rotation
    /// (a lost checker connection, a restart) or changes role (read routing's incarnation).
    pub incarnation: u64,
    /// Checks of this host completed, failed ones included.
    pub checks: u64,
    pub last_check: Option<SystemTime>,
    /// Since when this host has been a primary in rotation without a break (split brain: of two
    /// primaries on one timeline, the one that was first stays).
    pub primary_since: Option<Instant>,
}

/// `0/3000060` -> 0x0_03000060.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.trim().split_once('/')?;
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    (hi <= u32::MAX as u64 && lo <= u32::MAX as u64).then_some(hi << 32 | lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn() {
        assert_eq!(parse_lsn("0/3000060"), Some(0x3000060));
        assert_eq!(parse_lsn("1/0"), Some(1 << 32));
        assert_eq!(parse_lsn("x"), None);
        assert_eq!(parse_lsn("1/"), None);
        assert_eq!(parse_lsn("1FFFFFFFF/0"), None);
    }
}
