//! Pool rules: when a pool may open a server, when an idle one must close. Pure functions, no IO,
//! no clock (callers pass ages), so every rule is unit-tested in isolation.

use std::time::Duration;

/// Sizing limits of one pool after user > database > global precedence was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// 0 = unlimited.
    pub pool_size: u32,
    pub min_pool_size: u32,
    pub reserve_pool_size: u32,
    pub reserve_pool_timeout: Duration,
}

/// What the rules need to know about a pool at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolSnapshot {
    /// Every live server of the pool: idle, checked out, testing and still logging in.
    pub total: usize,
    /// Servers still connecting / logging in.
    pub connecting: usize,
    /// Clients queued for a server.
    pub waiters: usize,
    /// How long the first queued client has waited.
    pub oldest_wait: Duration,
    /// Whether any client is logged in to this pool (min_pool_size only applies then, or with a forced user).
    pub has_clients: bool,
    /// The last login failed and started less than server_login_retry ago.
    pub retry_blocked: bool,
    /// A client refused with the cached login error asks for one new attempt.
    pub retry_wanted: bool,
    /// The pool is paused or being shut down: no new servers.
    pub frozen: bool,
}

/// Decision about opening one more server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    No,
    Open { from_reserve: bool },
}

/// Largest number of servers the pool may hold right now: pool_size, plus reserve_pool_size once the
/// oldest waiter has waited reserve_pool_timeout.
pub fn capacity(s: &PoolSnapshot, l: &PoolLimits) -> usize {
    if l.pool_size == 0 {
        return usize::MAX;
    }
    let base = l.pool_size as usize;
    if l.reserve_pool_size > 0 && s.waiters > 0 && s.oldest_wait >= l.reserve_pool_timeout {
        base + l.reserve_pool_size as usize
    } else {
        base
    }
}

/// Most servers the pool may keep open (PgBouncer's janitor closes the rest): pool_size plus
/// reserve_pool_size; None = unlimited. A lowered pool size therefore shrinks the pool as its
/// servers come back, not only when they are next opened.
pub fn keep_cap(l: &PoolLimits) -> Option<usize> {
    (l.pool_size != 0).then(|| l.pool_size as usize + l.reserve_pool_size as usize)
}

/// Is a count of servers above a limit (0 = unlimited)? Such a server closes instead of being
/// reused (max_db_connections / max_user_connections lowered by a reload).
pub fn over_limit(count: usize, limit: usize) -> bool {
    limit != 0 && count > limit
}

/// Should the pool open one more server? Demand is a waiting client that no connecting server
/// will serve yet, the pool being below min_pool_size, or a retry after failed logins that a
/// refused client asked for.
///
/// A pool with no logged-in server opens one at a time, as PgBouncer opens every server: the
/// first login shows whether the host answers (a host that is down, or the first of a host list
/// that does not resolve, costs one failed connect, not one per waiting client); once a server
/// is in, the rest open side by side.
pub fn plan_growth(s: &PoolSnapshot, l: &PoolLimits) -> Growth {
    if s.retry_blocked || s.frozen {
        return Growth::No;
    }
    if s.connecting > 0 && s.total <= s.connecting {
        return Growth::No;
    }
    let cap = capacity(s, l);
    if s.total >= cap {
        return Growth::No;
    }
    let uncovered_waiters = s.waiters > s.connecting;
    let min = if l.pool_size == 0 {
        l.min_pool_size as usize
    } else {
        l.min_pool_size.min(l.pool_size) as usize
    };
    let below_min = s.has_clients && s.total < min && s.connecting == 0;
    let retry = s.retry_wanted && s.total == 0 && s.connecting == 0;
    if uncovered_waiters || below_min || retry {
        Growth::Open {
            from_reserve: l.pool_size != 0 && s.total >= l.pool_size as usize,
        }
    } else {
        Growth::No
    }
}

/// Timing rules for servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerTimeouts {
    /// None = never close for age. Some(ZERO) = use once.
    pub lifetime: Option<Duration>,
    /// None = never close for idleness.
    pub idle_timeout: Option<Duration>,
}

/// May a server be used (again)? One past server_lifetime closes instead. A lifetime of 0 means
/// "use once": a server that no client has used yet is good (a new one, or one whose parameters
/// only greeted a new pool's first client), one that served a client is not.
pub fn within_lifetime(age: Duration, served: bool, t: &ServerTimeouts) -> bool {
    match t.lifetime {
        None => true,
        Some(Duration::ZERO) => !served,
        Some(l) => age < l,
    }
}

/// Why the janitor closes an idle server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleClose {
    Lifetime,
    IdleTimeout,
    /// Its socket is no longer quiet: PostgreSQL closed it (pg_terminate_backend, a restart) or
    /// sent something while it idled. (Not `close_idle`'s: the socket's state, not a time.)
    HungUp,
}

/// Should the janitor close this idle server? `total` is the pool's server count, which may not fall
/// below min_pool_size because of idleness (lifetime still applies).
pub fn close_idle(
    idle_for: Duration,
    age: Duration,
    served: bool,
    total: usize,
    min_pool_size: u32,
    t: &ServerTimeouts,
) -> Option<IdleClose> {
    if !within_lifetime(age, served, t) {
        return Some(IdleClose::Lifetime);
    }
    match t.idle_timeout {
        Some(limit) if idle_for >= limit && total > min_pool_size as usize => {
            Some(IdleClose::IdleTimeout)
        }
        _ => None,
    }
}

/// Which timeout a client waiting for a server has run out of, if any. As PgBouncer's janitor,
/// query_timeout is looked at first: a queued request counts against it as well.
pub fn wait_expired(
    waited: Duration,
    query_timeout: Option<Duration>,
    query_wait_timeout: Option<Duration>,
) -> Option<WaitExpired> {
    if query_timeout.is_some_and(|l| waited >= l) {
        Some(WaitExpired::QueryTimeout)
    } else if query_wait_timeout.is_some_and(|l| waited >= l) {
        Some(WaitExpired::QueryWaitTimeout)
    } else {
        None
    }
}

/// The timeout a waiting client ran out of (`wait_expired`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitExpired {
    QueryTimeout,
    QueryWaitTimeout,
}

impl From<WaitExpired> for crate::error::PoolError {
    fn from(e: WaitExpired) -> Self {
        match e {
            WaitExpired::QueryTimeout => crate::error::PoolError::QueryTimeout,
            WaitExpired::QueryWaitTimeout => crate::error::PoolError::WaitTimeout,
        }
    }
}

/// Does an idle server need server_check_query before it is handed out?
pub fn needs_check(idle_for: Duration, check_delay: Duration, check_enabled: bool) -> bool {
    check_enabled && idle_for >= check_delay
}

/// How long a server that no client has used yet counts as checked by its own login. PgBouncer
/// parks a new server idle, not "used": server_check_query runs on it only once its janitor found
/// it idle past server_check_delay, never on one handed out straight from its login (with
/// server_check_delay = 0 too, which checks every server a client released).
pub const FRESH_TRUST: Duration = Duration::from_secs(1);

/// `needs_check` for a server handed out now: `served` = a client has used it since its login.
pub fn check_due(
    idle_for: Duration,
    check_delay: Duration,
    check_enabled: bool,
    served: bool,
) -> bool {
    needs_check(idle_for, check_delay, check_enabled) && (served || idle_for >= FRESH_TRUST)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(size: u32, reserve: u32) -> PoolLimits {
        PoolLimits {
            pool_size: size,
            min_pool_size: 0,
            reserve_pool_size: reserve,
            reserve_pool_timeout: Duration::from_secs(3),
        }
    }

    #[test]
    fn keep_cap_is_pool_size_plus_reserve() {
        assert_eq!(keep_cap(&limits(5, 0)), Some(5));
        assert_eq!(keep_cap(&limits(5, 3)), Some(8));
        assert_eq!(keep_cap(&limits(0, 3)), None, "0 = unlimited");
        assert!(over_limit(6, 5));
        assert!(!over_limit(5, 5));
        assert!(!over_limit(500, 0), "0 = unlimited");
    }

    #[test]
    fn opens_for_uncovered_waiter_below_size() {
        let s = PoolSnapshot {
            total: 1,
            waiters: 1,
            ..Default::default()
        };
        assert_eq!(
            plan_growth(&s, &limits(2, 0)),
            Growth::Open {
                from_reserve: false
            }
        );
    }

    #[test]
    fn a_pool_without_a_server_opens_one_at_a_time() {
        let mut s = PoolSnapshot {
            total: 1,
            connecting: 1,
            waiters: 10,
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &limits(5, 0)), Growth::No);
        // Once one is in, the other waiters get servers side by side.
        s.total = 2;
        assert_eq!(
            plan_growth(&s, &limits(5, 0)),
            Growth::Open {
                from_reserve: false
            }
        );
    }

    #[test]
    fn does_not_open_when_connecting_covers_waiters() {
        let s = PoolSnapshot {
            total: 1,
            connecting: 1,
            waiters: 1,
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &limits(5, 0)), Growth::No);
    }

    #[test]
    fn pool_size_is_a_hard_cap_without_reserve() {
        let s = PoolSnapshot {
            total: 2,
            waiters: 10,
            oldest_wait: Duration::from_secs(60),
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &limits(2, 0)), Growth::No);
    }

    #[test]
    fn reserve_only_after_reserve_pool_timeout() {
        let mut s = PoolSnapshot {
            total: 2,
            waiters: 1,
            oldest_wait: Duration::from_millis(2999),
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &limits(2, 1)), Growth::No);
        s.oldest_wait = Duration::from_secs(3);
        assert_eq!(
            plan_growth(&s, &limits(2, 1)),
            Growth::Open { from_reserve: true }
        );
        s.total = 3;
        assert_eq!(plan_growth(&s, &limits(2, 1)), Growth::No);
    }

    #[test]
    fn zero_pool_size_is_unlimited() {
        let s = PoolSnapshot {
            total: 10_000,
            waiters: 1,
            ..Default::default()
        };
        assert_eq!(
            plan_growth(&s, &limits(0, 0)),
            Growth::Open {
                from_reserve: false
            }
        );
    }

    #[test]
    fn min_pool_size_needs_clients_and_is_capped_by_pool_size() {
        let mut l = limits(3, 0);
        l.min_pool_size = 5;
        let mut s = PoolSnapshot {
            total: 0,
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &l), Growth::No);
        s.has_clients = true;
        assert_eq!(
            plan_growth(&s, &l),
            Growth::Open {
                from_reserve: false
            }
        );
        s.total = 3;
        assert_eq!(plan_growth(&s, &l), Growth::No);
    }

    #[test]
    fn min_pool_size_opens_one_at_a_time() {
        let mut l = limits(10, 0);
        l.min_pool_size = 5;
        let s = PoolSnapshot {
            total: 1,
            connecting: 1,
            has_clients: true,
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &l), Growth::No);
    }

    #[test]
    fn login_retry_and_pause_block_growth() {
        let s = PoolSnapshot {
            waiters: 1,
            retry_blocked: true,
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &limits(2, 0)), Growth::No);
        let s = PoolSnapshot {
            waiters: 1,
            frozen: true,
            ..Default::default()
        };
        assert_eq!(plan_growth(&s, &limits(2, 0)), Growth::No);
    }

    #[test]
    fn a_wanted_retry_opens_one_server_when_none_is_open() {
        let mut s = PoolSnapshot {
            retry_wanted: true,
            ..Default::default()
        };
        assert_eq!(
            plan_growth(&s, &limits(2, 0)),
            Growth::Open {
                from_reserve: false
            }
        );
        s.connecting = 1;
        s.total = 1;
        assert_eq!(plan_growth(&s, &limits(2, 0)), Growth::No);
        s.connecting = 0;
        assert_eq!(plan_growth(&s, &limits(2, 0)), Growth::No, "one is open");
        s.total = 0;
        s.retry_blocked = true;
        assert_eq!(plan_growth(&s, &limits(2, 0)), Growth::No);
    }

    #[test]
    fn lifetime_and_idle_timeout() {
        let t = ServerTimeouts {
            lifetime: Some(Duration::from_secs(3600)),
            idle_timeout: Some(Duration::from_secs(600)),
        };
        let secs = Duration::from_secs;
        assert!(within_lifetime(secs(10), true, &t));
        assert!(!within_lifetime(secs(3600), true, &t));
        assert!(!within_lifetime(secs(3600), false, &t), "age, used or not");
        assert_eq!(
            close_idle(secs(600), secs(700), true, 3, 0, &t),
            Some(IdleClose::IdleTimeout)
        );
        assert_eq!(close_idle(secs(599), secs(700), true, 3, 0, &t), None);
        // min_pool_size protects against idle closing, not against lifetime
        assert_eq!(close_idle(secs(900), secs(900), true, 2, 2, &t), None);
        assert_eq!(
            close_idle(secs(900), secs(4000), true, 2, 2, &t),
            Some(IdleClose::Lifetime)
        );
    }

    #[test]
    fn zero_lifetime_means_use_once() {
        let use_once = ServerTimeouts {
            lifetime: Some(Duration::ZERO),
            idle_timeout: None,
        };
        assert!(!within_lifetime(Duration::from_millis(1), true, &use_once));
        // A new server, or one that only greeted a pool's first client, is still to be used.
        assert!(within_lifetime(Duration::from_secs(60), false, &use_once));
        assert_eq!(
            close_idle(
                Duration::from_secs(60),
                Duration::from_secs(60),
                false,
                1,
                0,
                &use_once
            ),
            None
        );
        assert_eq!(
            close_idle(Duration::ZERO, Duration::ZERO, true, 1, 0, &use_once),
            Some(IdleClose::Lifetime)
        );
        let forever = ServerTimeouts {
            lifetime: None,
            idle_timeout: None,
        };
        assert!(within_lifetime(
            Duration::from_secs(1 << 30),
            true,
            &forever
        ));
    }

    #[test]
    fn a_wait_runs_out_of_query_timeout_first() {
        let secs = Duration::from_secs;
        assert_eq!(wait_expired(secs(2), Some(secs(3)), Some(secs(120))), None);
        assert_eq!(
            wait_expired(secs(3), Some(secs(3)), Some(secs(120))),
            Some(WaitExpired::QueryTimeout)
        );
        assert_eq!(
            wait_expired(secs(5), Some(secs(5)), Some(secs(5))),
            Some(WaitExpired::QueryTimeout)
        );
        assert_eq!(
            wait_expired(secs(5), Some(secs(10)), Some(secs(5))),
            Some(WaitExpired::QueryWaitTimeout)
        );
        assert_eq!(
            wait_expired(secs(5), None, Some(secs(5))),
            Some(WaitExpired::QueryWaitTimeout)
        );
        assert_eq!(wait_expired(secs(1 << 20), None, None), None);
    }

    #[test]
    fn check_after_delay() {
        assert!(!needs_check(
            Duration::from_secs(29),
            Duration::from_secs(30),
            true
        ));
        assert!(needs_check(
            Duration::from_secs(30),
            Duration::from_secs(30),
            true
        ));
        assert!(!needs_check(
            Duration::from_secs(300),
            Duration::from_secs(30),
            false
        ));
        assert!(needs_check(Duration::ZERO, Duration::ZERO, true));
    }

    #[test]
    fn a_server_no_client_used_yet_is_vouched_for_by_its_login() {
        let zero = Duration::ZERO;
        assert!(check_due(zero, zero, true, true), "delay 0: every reuse");
        assert!(
            !check_due(zero, zero, true, false),
            "straight from its login"
        );
        assert!(!check_due(FRESH_TRUST / 2, zero, true, false));
        assert!(
            check_due(FRESH_TRUST, zero, true, false),
            "idled since its login"
        );
        let delay = Duration::from_secs(30);
        assert!(!check_due(Duration::from_secs(29), delay, true, true));
        assert!(check_due(delay, delay, true, false));
        assert!(!check_due(delay, delay, false, true));
    }
}
