//! The advisor's rules: pure functions from a pool's figures over the last stats periods to
//! findings, each naming the pool, the evidence and the pgbouncer.ini line to change.
//!
//! Two averages carry most of the weight, both by Little's law over a window of `secs` seconds:
//! servers busy = Σ transaction time / secs (the servers held by transactions, on average), and
//! clients queued = Σ wait time / secs (the clients waiting for a server, on average).

/// One stats period of one pool.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    pub secs: f64,
    pub xacts: u64,
    pub xact_time_us: u64,
    pub wait_time_us: u64,
    /// Servers open at the end of the period.
    pub open: usize,
    /// Clients logged in to the pool at the end of the period.
    pub clients: usize,
    pub queries: u64,
    /// Statements the per-server prepared-statement caches closed to make room.
    pub evictions: u64,
    /// Requests reading currval() / lastval() sent behind a DISCARD SEQUENCES.
    pub sequence_discards: u64,
}

impl Window {
    /// Servers held by transactions, on average.
    pub fn busy(&self) -> f64 {
        per_second(self.xact_time_us, self.secs)
    }

    /// Clients waiting for a server, on average.
    pub fn queued(&self) -> f64 {
        per_second(self.wait_time_us, self.secs)
    }
}

fn per_second(us: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        us as f64 / 1e6 / secs
    } else {
        0.0
    }
}

/// Where a pool's size comes from: the line to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeFrom {
    /// `pool_size=` of the `[databases]` entry (its name).
    Database(String),
    /// `pool_size=` of the `[users]` entry (its name).
    User(String),
    /// `default_pool_size` in `[pgbouncer]`.
    Default,
}

impl SizeFrom {
    /// The pgbouncer.ini line that sets the size to `n`.
    pub fn line(&self, n: u64) -> String {
        match self {
            SizeFrom::Database(db) => format!("[databases] {db} = ... pool_size={n}"),
            SizeFrom::User(u) => format!("[users] {u} = pool_size={n}"),
            SizeFrom::Default => format!("[pgbouncer] default_pool_size = {n}"),
        }
    }
}

/// What the rules know of a pool besides its windows.
#[derive(Debug, Clone)]
pub struct PoolFacts {
    pub database: String,
    pub user: String,
    pub pool_size: u32,
    pub size_from: SizeFrom,
    pub min_pool_size: u32,
    /// max_db_connections of the pool's database (0 = none).
    pub max_db_connections: u32,
    /// Transaction or statement pooling.
    pub pooled: bool,
    /// server_reset_query_always with a non-empty server_reset_query.
    pub reset_always: bool,
    /// Clients pinned to their servers by session state now.
    pub pinned: usize,
    /// Of those, how many each kind of statement pinned (its description, the count).
    pub pinned_by: Vec<(&'static str, usize)>,
    /// max_prepared_statements (0 = prepared statements pass through).
    pub max_prepared: u32,
    /// PostgreSQL's room for this pool, when its server's max_connections is known.
    pub room: Option<Room>,
    /// What one of its idle backends costs PostgreSQL.
    pub backend: BackendCost,
}

/// The connections PostgreSQL leaves to a pool: max_connections less reserved slots less what the
/// other pools on the same server may open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub max_connections: u32,
    /// max_connections less superuser_reserved_connections and reserved_connections.
    pub headroom: u32,
    /// headroom less the other pools' pool_size + reserve_pool_size.
    pub left: u64,
}

use super::backend_cost::BackendCost;

/// One piece of advice.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Empty for process-wide findings.
    pub database: String,
    pub user: String,
    pub rule: &'static str,
    pub evidence: String,
    pub change: String,
}

/// Windows (of the last three) in which `cond` held.
fn held(windows: &[Window], cond: impl Fn(&Window) -> bool) -> usize {
    windows.iter().rev().take(3).filter(|w| cond(w)).count()
}

/// Every finding for one pool. `windows`: oldest first.
pub fn pool_findings(f: &PoolFacts, windows: &[Window]) -> Vec<Finding> {
    let mut out = Vec::new();
    let finding = |rule, evidence: String, change: String| Finding {
        database: f.database.clone(),
        user: f.user.clone(),
        rule,
        evidence,
        change,
    };
    let recent: Vec<&Window> = windows.iter().rev().take(3).collect();
    let n = recent.len().max(1) as f64;
    let avg = |g: fn(&Window) -> f64| recent.iter().map(|w| g(w)).sum::<f64>() / n;
    let size = f.pool_size as usize;

    // Too small: the pool is at its size, its servers are all busy, and clients queue.
    let starved =
        |w: &Window| w.open >= size && w.busy() >= 0.8 * w.open as f64 && w.queued() >= 0.5;
    if windows.len() >= 2 && held(windows, starved) >= 2 {
        let (busy, queued) = (avg(Window::busy), avg(Window::queued));
        let clients = recent.first().map_or(0, |w| w.clients) as u64;
        let need = ((busy + queued) * 1.1).ceil() as u64;
        let mut want = need.min(clients.max(f.pool_size as u64 + 1));
        if f.max_db_connections > 0 {
            want = want.min(f.max_db_connections as u64);
        }
        let mut cap_note = String::new();
        if let Some(r) = f.room {
            cap_note = format!(
                "; PostgreSQL accepts {} (max_connections {}, less reserved slots), of which {} \
                 are not claimed by the other pools on that server",
                r.headroom, r.max_connections, r.left
            );
            want = want.min(r.left);
        }
        let evidence = format!(
            "over the last {} stats periods: {busy:.1} of {} servers busy on average, \
             {queued:.1} clients waiting on average; servers needed = busy + waiting = {:.1} \
             (+10%){cap_note}",
            recent.len(),
            f.pool_size,
            busy + queued
        );
        if want > f.pool_size as u64 {
            out.push(finding("pool_too_small", evidence, f.size_from.line(want)));
        } else if let Some(r) = f.room.filter(|r| r.left <= u64::from(f.pool_size)) {
            out.push(finding(
                "pool_too_small",
                evidence,
                format!(
                    "postgresql.conf max_connections = {} (no room left for a larger pool)",
                    u64::from(r.max_connections) + need.saturating_sub(r.left)
                ),
            ));
        }
    }

    // Too large: many servers open, few ever busy, nobody waits.
    let idle = |w: &Window| w.open >= 4 && w.busy() < 0.25 * w.open as f64 && w.queued() < 0.05;
    if windows.len() >= 3 && held(windows, idle) >= 3 {
        let busy = avg(Window::busy);
        let open = recent.first().map_or(0, |w| w.open);
        let want = ((busy * 2.0).ceil() as u64)
            .max(u64::from(f.min_pool_size))
            .max(1);
        if want < f.pool_size as u64 {
            out.push(finding(
                "pool_too_large",
                format!(
                    "over the last {} stats periods: {open} servers open, {busy:.2} busy on \
                     average, no client waiting; every idle server is a PostgreSQL backend \
                     holding a max_connections slot and {}; {:.0} idle: {:.0} MB",
                    recent.len(),
                    f.backend.describe(),
                    open as f64 - busy,
                    (open as f64 - busy).max(0.0) * f.backend.bytes as f64 / (1024.0 * 1024.0)
                ),
                f.size_from.line(want),
            ));
        }
    }

    // The reserve pool serves regular load, not bursts.
    let reserve = |w: &Window| w.open > size;
    if windows.len() >= 2 && held(windows, reserve) >= 2 {
        let open = recent.iter().map(|w| w.open).max().unwrap_or(0);
        out.push(finding(
            "reserve_pool_in_use",
            format!(
                "{open} servers open against pool_size {} in {} of the last {} stats periods: the \
                 reserve pool is regular capacity",
                f.pool_size,
                held(windows, reserve),
                recent.len()
            ),
            f.size_from.line(open as u64),
        ));
    }

    // min_pool_size above what is ever busy.
    if f.min_pool_size >= 2 && windows.len() >= 3 {
        let busy = avg(Window::busy);
        if busy * 2.0 < f64::from(f.min_pool_size) {
            out.push(finding(
                "min_pool_size_above_load",
                format!(
                    "min_pool_size {} keeps servers open while {busy:.2} are busy on average",
                    f.min_pool_size
                ),
                format!("[pgbouncer] min_pool_size = {}", (busy * 2.0).ceil() as u64),
            ));
        }
    }

    // DISCARD ALL after every transaction.
    if f.pooled && f.reset_always {
        let rate = avg(|w| {
            if w.secs > 0.0 {
                w.xacts as f64 / w.secs
            } else {
                0.0
            }
        });
        out.push(finding(
            "reset_query_in_transaction_mode",
            format!(
                "server_reset_query runs after every transaction ({rate:.0} per second now): one \
                 more round trip each, and it throws away the prepared plans transaction pooling \
                 keeps"
            ),
            "[pgbouncer] server_reset_query_always = 0".to_string(),
        ));
    }

    // Prepared-statement cache churn: statements closed to make room, then prepared again.
    let churn = |w: &Window| w.evictions >= 5 && w.evictions * 10 >= w.queries;
    if f.max_prepared > 0 && windows.len() >= 2 && held(windows, churn) >= 2 {
        let per_sec = avg(|w| per_second(w.evictions * 1_000_000, w.secs));
        let per_query = {
            let (e, q) = recent
                .iter()
                .fold((0, 0), |(e, q), w| (e + w.evictions, q + w.queries));
            e as f64 / q.max(1) as f64
        };
        out.push(finding(
            "prepared_statement_cache_churn",
            format!(
                "the per-server prepared-statement cache (max_prepared_statements {}) closed \
                 {per_sec:.0} statements per second over the last {} stats periods, {:.0}% of \
                 queries: each is prepared again when next used, one more Parse on the server",
                f.max_prepared,
                recent.len(),
                per_query * 100.0
            ),
            format!(
                "[pgbouncer] max_prepared_statements = {}",
                u64::from(f.max_prepared) * 2
            ),
        ));
    }

    // Inserted ids read back in a transaction of their own, on servers other clients used since.
    let discards: u64 = recent.iter().map(|w| w.sequence_discards).sum();
    if f.pooled && discards > 0 {
        out.push(finding(
            "sequence_reads_discarded",
            format!(
                "{discards} requests over the last {} stats periods read currval() or lastval() \
                 on a server whose sequence values were another client's: they were sent \
                 behind DISCARD SEQUENCES, and get the client's own value only when the request \
                 made one, else 55000 (\"not yet defined in this session\")",
                recent.len()
            ),
            "(the application: read an inserted id with INSERT ... RETURNING, or in the \
             insert's transaction; or use a session-mode pool for these clients)"
                .to_string(),
        ));
    }

    if f.pinned > 0 {
        let kinds: Vec<String> = f
            .pinned_by
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        out.push(finding(
            "clients_pinned",
            format!(
                "{} clients are pinned to their servers by session state ({}): each holds a \
                 server for its whole session",
                f.pinned,
                if kinds.is_empty() {
                    "kinds unknown".to_string()
                } else {
                    kinds.join(", ")
                }
            ),
            "(the application: keep that state inside transactions, or use a session-mode pool \
             for these clients)"
                .to_string(),
        ));
    }
    out
}

/// Process-wide findings.
pub fn global_findings(clients: usize, max_client_conn: u32) -> Vec<Finding> {
    let mut out = Vec::new();
    if max_client_conn > 0 && clients as f64 >= 0.9 * f64::from(max_client_conn) {
        out.push(Finding {
            database: String::new(),
            user: String::new(),
            rule: "max_client_conn_near_limit",
            evidence: format!("{clients} client connections of max_client_conn {max_client_conn}"),
            change: format!(
                "[pgbouncer] max_client_conn = {}",
                u64::from(max_client_conn) * 2
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(pool_size: u32) -> PoolFacts {
        PoolFacts {
            database: "app".into(),
            user: "u".into(),
            pool_size,
            size_from: SizeFrom::Default,
            min_pool_size: 0,
            max_db_connections: 0,
            pooled: true,
            reset_always: false,
            pinned: 0,
            pinned_by: Vec::new(),
            max_prepared: 0,
            room: None,
            backend: BackendCost::estimate(None),
        }
    }

    fn w(busy: f64, queued: f64, open: usize, clients: usize) -> Window {
        Window {
            secs: 1.0,
            xacts: 100,
            xact_time_us: (busy * 1e6) as u64,
            wait_time_us: (queued * 1e6) as u64,
            open,
            clients,
            queries: 100,
            evictions: 0,
            sequence_discards: 0,
        }
    }

    #[test]
    fn a_saturated_pool_is_too_small_and_the_size_follows_littles_law() {
        let f = pool_findings(
            &facts(2),
            &[w(1.9, 8.0, 2, 12), w(2.0, 9.0, 2, 12), w(1.95, 10.0, 2, 12)],
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, "pool_too_small");
        // (1.95 + 9) * 1.1 = 12.05 -> 13, capped by the 12 clients.
        assert_eq!(f[0].change, "[pgbouncer] default_pool_size = 12");
    }

    #[test]
    fn a_healthy_pool_gets_no_advice() {
        let f = pool_findings(
            &facts(5),
            &[w(1.0, 0.0, 2, 2), w(1.2, 0.01, 2, 2), w(0.9, 0.0, 2, 2)],
        );
        assert!(f.is_empty(), "{f:?}");
        // One window is not enough to call a pool too small.
        assert!(pool_findings(&facts(2), &[w(2.0, 9.0, 2, 12)]).is_empty());
    }

    #[test]
    fn sequence_reads_on_other_clients_servers_are_found() {
        let mut windows = [w(1.0, 0.0, 2, 2), w(1.2, 0.01, 2, 2), w(0.9, 0.0, 2, 2)];
        windows[1].sequence_discards = 4;
        windows[2].sequence_discards = 3;
        let found = pool_findings(&facts(5), &windows);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, "sequence_reads_discarded");
        assert!(found[0]
            .evidence
            .starts_with("7 requests over the last 3 stats periods"));
        assert!(found[0].change.contains("INSERT ... RETURNING"));
        // Session pooling keeps the session: the counter stays 0 there, and no finding is made.
        let mut session = facts(5);
        session.pooled = false;
        assert!(pool_findings(&session, &windows).is_empty());
    }

    #[test]
    fn idle_servers_reserve_use_and_reset_queries_are_found() {
        let mut f = facts(10);
        f.size_from = SizeFrom::Database("app".into());
        let found = pool_findings(&f, &[w(0.1, 0.0, 8, 8); 3]);
        assert_eq!(found[0].rule, "pool_too_large");
        assert_eq!(found[0].change, "[databases] app = ... pool_size=1");
        let found = pool_findings(&facts(2), &[w(2.0, 0.2, 4, 8); 3]);
        assert!(found
            .iter()
            .any(|x| x.rule == "reserve_pool_in_use" && x.change.ends_with("= 4")));
        let mut f = facts(5);
        f.reset_always = true;
        f.pinned = 3;
        let rules: Vec<_> = pool_findings(&f, &[w(1.0, 0.0, 2, 2)])
            .iter()
            .map(|x| x.rule)
            .collect();
        assert_eq!(rules, ["reset_query_in_transaction_mode", "clients_pinned"]);
        assert_eq!(
            global_findings(95, 100)[0].change,
            "[pgbouncer] max_client_conn = 200"
        );
        assert!(global_findings(50, 100).is_empty());
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;

    fn facts() -> PoolFacts {
        PoolFacts {
            database: "app".into(),
            user: "u".into(),
            pool_size: 2,
            size_from: SizeFrom::Default,
            min_pool_size: 0,
            max_db_connections: 0,
            pooled: true,
            reset_always: false,
            pinned: 0,
            pinned_by: Vec::new(),
            max_prepared: 0,
            room: None,
            backend: BackendCost::estimate(None),
        }
    }

    fn w(busy: f64, queued: f64, open: usize, evictions: u64) -> Window {
        Window {
            secs: 1.0,
            xacts: 100,
            xact_time_us: (busy * 1e6) as u64,
            wait_time_us: (queued * 1e6) as u64,
            open,
            clients: 40,
            queries: 100,
            evictions,
            sequence_discards: 0,
        }
    }

    #[test]
    fn the_suggested_size_is_capped_by_postgresqls_room() {
        let mut f = facts();
        f.room = Some(Room {
            max_connections: 100,
            headroom: 97,
            left: 6,
        });
        let found = pool_findings(&f, &[w(2.0, 20.0, 2, 0); 3]);
        assert_eq!(found[0].change, "[pgbouncer] default_pool_size = 6");
        assert!(found[0].evidence.contains("max_connections 100"));
        // No room at all: raise max_connections instead (need ⌈22 × 1.1⌉ = 25, 1 left).
        f.room = Some(Room {
            max_connections: 100,
            headroom: 97,
            left: 1,
        });
        let found = pool_findings(&f, &[w(2.0, 20.0, 2, 0); 3]);
        assert_eq!(
            found[0].change,
            "postgresql.conf max_connections = 124 (no room left for a larger pool)"
        );
    }

    #[test]
    fn cache_churn_and_pin_kinds_are_reported() {
        let mut f = facts();
        f.pool_size = 10;
        assert!(pool_findings(&f, &[w(1.0, 0.0, 2, 50); 3]).is_empty());
        f.max_prepared = 2;
        let found = pool_findings(&f, &[w(1.0, 0.0, 2, 50); 3]);
        assert_eq!(found[0].rule, "prepared_statement_cache_churn");
        assert_eq!(found[0].change, "[pgbouncer] max_prepared_statements = 4");
        assert!(found[0].evidence.contains("50%"), "{}", found[0].evidence);
        // A few evictions among many queries are no churn.
        assert!(pool_findings(&f, &[w(1.0, 0.0, 2, 4); 3]).is_empty());
        f.max_prepared = 0;
        f.pinned = 3;
        f.pinned_by = vec![("LISTEN", 2), ("session advisory locks", 1)];
        let found = pool_findings(&f, &[w(1.0, 0.0, 2, 0)]);
        assert!(
            found[0]
                .evidence
                .starts_with("3 clients are pinned to their servers by session state (LISTEN: 2, session advisory locks: 1)"),
            "{}",
            found[0].evidence
        );
    }

    #[test]
    fn idle_backends_are_priced() {
        let mut f = facts();
        f.pool_size = 10;
        f.backend = BackendCost {
            bytes: 10 << 20,
            measured: 3,
            work_mem: Some(4 << 20),
        };
        let found = pool_findings(&f, &[w(0.0, 0.0, 8, 0); 3]);
        assert_eq!(found[0].rule, "pool_too_large");
        assert!(
            found[0].evidence.contains(
                "10.0 MB private memory per idle backend (measured: Private_Dirty of 3 of its \
                 backends in /proc), plus up to work_mem 4 MB per sort or hash while busy; 8 \
                 idle: 80 MB"
            ),
            "{}",
            found[0].evidence
        );
    }
}
