//! The advisor's rule over one PostgreSQL server: the connections its pools may open together
//! against what the server accepts (max_connections less its reserved slots), and the share of
//! that room each pool may count on (which caps the "pool too small" suggestion).

use std::collections::BTreeMap;

use super::rules::{Finding, SizeFrom};
use crate::server::facts::ServerFacts;

/// What one pool may open on a server.
#[derive(Debug, Clone)]
pub struct PoolClaim {
    pub database: String,
    pub user: String,
    /// pool_size (0 = unlimited).
    pub pool_size: u32,
    pub reserve_pool_size: u32,
    pub size_from: SizeFrom,
    /// Where reserve_pool_size comes from.
    pub reserve_from: SizeFrom,
    /// max_db_connections of its database (0 = none).
    pub max_db_connections: u32,
}

impl PoolClaim {
    /// pool_size + reserve_pool_size; None when unlimited.
    pub fn most(&self) -> Option<u64> {
        (self.pool_size > 0).then(|| u64::from(self.pool_size) + u64::from(self.reserve_pool_size))
    }
}

/// The most connections `pools` (all on one server) may open together: per database the sum of
/// its pools' pool_size + reserve_pool_size, at most its max_db_connections. None = unlimited.
pub fn total_claim(pools: &[&PoolClaim]) -> Option<u64> {
    let mut per_db: BTreeMap<&str, (Option<u64>, u32)> = BTreeMap::new();
    for p in pools {
        let e = per_db.entry(&p.database).or_insert((Some(0), 0));
        e.0 = e.0.zip(p.most()).map(|(a, b)| a + b);
        e.1 = p.max_db_connections;
    }
    per_db
        .values()
        .map(|&(sum, cap)| match (sum, cap) {
            (Some(s), 0) => Some(s),
            (Some(s), c) => Some(s.min(u64::from(c))),
            (None, 0) => None,
            (None, c) => Some(u64::from(c)),
        })
        .try_fold(0u64, |acc, c| c.map(|c| acc + c))
}

/// The room on the server left to `me` by the other pools' claims (for the "too small" cap).
pub fn room_for(facts: &ServerFacts, me: &PoolClaim, pools: &[&PoolClaim]) -> u64 {
    let others: Vec<&PoolClaim> = pools
        .iter()
        .copied()
        .filter(|p| !(p.database == me.database && p.user == me.user))
        .collect();
    let taken = total_claim(&others).unwrap_or(u64::MAX);
    u64::from(facts.headroom()).saturating_sub(taken)
}

/// The finding for server `addr` when its pools may open more than it accepts.
pub fn oversubscribed(addr: &str, facts: &ServerFacts, pools: &[&PoolClaim]) -> Option<Finding> {
    let headroom = u64::from(facts.headroom());
    let total = total_claim(pools);
    if total.is_some_and(|t| t <= headroom) || pools.is_empty() {
        return None;
    }
    let names: Vec<String> = pools
        .iter()
        .map(|p| match p.most() {
            Some(n) => format!("{}/{} {n}", p.database, p.user),
            None => format!("{}/{} unlimited", p.database, p.user),
        })
        .collect();
    let total_text = total.map_or("no limit".to_string(), |t| t.to_string());
    let evidence = format!(
        "the pools on server {addr} may open {total_text} connections together (pool_size + \
         reserve_pool_size per pool, max_db_connections per database: {}), but PostgreSQL \
         accepts {headroom} (max_connections {} - superuser_reserved_connections {} - \
         reserved_connections {}); past that, logins fail with \"too many clients\"",
        names.join(", "),
        facts.max_connections,
        facts.superuser_reserved,
        facts.reserved
    );
    // Scale every size (and reserve) that feeds these pools by headroom / total.
    let scale = |n: u32| -> u64 {
        match total {
            Some(t) if t > 0 => (u64::from(n) * headroom / t).max(1),
            _ => u64::from(n).min(headroom / pools.len() as u64).max(1),
        }
    };
    let mut lines: Vec<String> = Vec::new();
    for p in pools {
        let size = if p.pool_size == 0 {
            SizeFrom::line(&p.size_from, (headroom / pools.len() as u64).max(1))
        } else {
            p.size_from.line(scale(p.pool_size))
        };
        if !lines.contains(&size) {
            lines.push(size);
        }
        if p.reserve_pool_size > 0 {
            let r = reserve_line(&p.reserve_from, scale(p.reserve_pool_size));
            if !lines.contains(&r) {
                lines.push(r);
            }
        }
    }
    let need = total.map_or(String::new(), |t| {
        format!(
            "; or postgresql.conf max_connections = {}",
            t + u64::from(facts.superuser_reserved) + u64::from(facts.reserved)
        )
    });
    Some(Finding {
        database: String::new(),
        user: String::new(),
        rule: "pool_sizes_exceed_max_connections",
        evidence,
        change: format!("{}{need}", lines.join("; ")),
    })
}

/// The pgbouncer.ini line that sets reserve_pool_size to `n` where it is set now.
fn reserve_line(from: &SizeFrom, n: u64) -> String {
    match from {
        SizeFrom::Database(db) => format!("[databases] {db} = ... reserve_pool_size={n}"),
        SizeFrom::User(u) => format!("[users] {u} = reserve_pool_size={n}"),
        SizeFrom::Default => format!("[pgbouncer] reserve_pool_size = {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(db: &str, size: u32, reserve: u32, cap: u32) -> PoolClaim {
        PoolClaim {
            database: db.into(),
            user: "u".into(),
            pool_size: size,
            reserve_pool_size: reserve,
            size_from: SizeFrom::Default,
            reserve_from: SizeFrom::Default,
            max_db_connections: cap,
        }
    }

    const FACTS: ServerFacts = ServerFacts {
        max_connections: 100,
        superuser_reserved: 3,
        reserved: 0,
        work_mem_bytes: 4 << 20,
    };

    #[test]
    fn pools_that_fit_get_no_finding_and_caps_count() {
        let (a, b) = (claim("a", 40, 5, 0), claim("b", 60, 0, 50));
        assert_eq!(total_claim(&[&a, &b]), Some(95));
        assert!(oversubscribed("h:5432", &FACTS, &[&a, &b]).is_none());
        assert_eq!(room_for(&FACTS, &a, &[&a, &b]), 47);
        assert_eq!(total_claim(&[&claim("c", 0, 0, 0)]), None);
        assert_eq!(total_claim(&[&claim("c", 0, 0, 20)]), Some(20));
    }

    #[test]
    fn pools_past_max_connections_are_found_with_scaled_sizes() {
        let (a, b) = (claim("a", 60, 10, 0), claim("b", 60, 10, 0));
        let f = oversubscribed("h:5432", &FACTS, &[&a, &b]).unwrap();
        assert_eq!(f.rule, "pool_sizes_exceed_max_connections");
        assert!(f.evidence.contains("140 connections"), "{}", f.evidence);
        assert!(f.evidence.contains("accepts 97"), "{}", f.evidence);
        // 60 * 97 / 140 = 41, 10 * 97 / 140 = 6.
        assert_eq!(
            f.change,
            "[pgbouncer] default_pool_size = 41; [pgbouncer] reserve_pool_size = 6; or \
             postgresql.conf max_connections = 143"
        );
        assert!(oversubscribed("h", &FACTS, &[&claim("c", 0, 0, 0)]).is_some());
    }
}
