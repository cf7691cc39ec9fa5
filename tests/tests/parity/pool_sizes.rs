//! min_pool_size side by side, counted where it matters: the server connections PostgreSQL sees
//! (pg_stat_activity). Each side logs in to a database of its own, one side after the other, so
//! that a count is one pooler's. PgBouncer 1.25.2's janitor opens servers one at a time until a
//! pool holds min_pool_size (never more than its pool size), for a pool with a client or with a
//! forced user (whose pool it makes at start, without clients), within max_db_connections and
//! max_user_connections; server_idle_timeout never closes one below it. pool_idle_timeout frees a
//! pool without clients and servers (SHOW POOLS).

use std::time::Duration;

use sluice_e2e::{Anchor, PgCluster, Sluice};

use super::{report, USERS};

/// The database of one side (made once per test process).
fn own_database(name: &str) -> String {
    let pg = PgCluster::get();
    let found = pg.psql(
        "postgres",
        &format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"),
    );
    if found.is_empty() {
        pg.psql("postgres", &format!("CREATE DATABASE {name}"));
    }
    name.to_string()
}

/// Client backends PostgreSQL has for `db`, by user: `trust_user=3 md5_user=1`.
fn servers_seen(db: &str) -> String {
    PgCluster::get().psql(
        "postgres",
        &format!(
            "SELECT coalesce(string_agg(u || '=' || n, ' ' ORDER BY u), 'none') FROM \
             (SELECT usename AS u, count(*) AS n FROM pg_stat_activity \
              WHERE datname = '{db}' AND backend_type = 'client backend' GROUP BY usename) s"
        ),
    )
}

/// The pools SHOW POOLS lists, but the console's: `app/trust_user`.
async fn pools_shown(port: u16) -> String {
    let mut c = super::console(port).await;
    let r = c.query("SHOW POOLS").await.unwrap();
    let (d, u) = (r.col("database"), r.col("user"));
    let mut v: Vec<String> = r
        .rows
        .iter()
        .filter(|row| row[d].as_deref() != Some("pgbouncer"))
        .map(|row| format!("{}/{}", row[d].clone().unwrap(), row[u].clone().unwrap()))
        .collect();
    v.sort();
    v.join(" ")
}

/// One pooler running, whichever it is.
pub(super) enum Side {
    Pgb(Anchor),
    Sl(Sluice),
}

impl Side {
    pub(super) fn port(&self) -> u16 {
        match self {
            Side::Pgb(a) => a.port,
            Side::Sl(s) => s.port,
        }
    }

    /// Start PgBouncer (`pgb`) or Sluice on `extra` and `dbs` (placeholders as in `pair_with`).
    pub(super) fn start(pgb: bool, extra: &str, dbs: &str) -> Option<Side> {
        if pgb {
            return Anchor::start_with(extra, dbs, USERS, &[]).map(Side::Pgb);
        }
        let ini = Sluice::basic_ini(extra, &dbs.replace("{pg_host}", "127.0.0.1"));
        Some(Side::Sl(Sluice::builder(&ini).userlist(USERS).start()))
    }
}

/// Log in as each of `clients` (`user@db`) and keep the connections.
async fn hold(port: u16, clients: &[&str]) -> Vec<tokio_postgres::Client> {
    let mut held = Vec::new();
    for who in clients {
        let (user, db) = who.split_once('@').unwrap();
        let pw = if user == "md5_user" { "md5_pass" } else { "" };
        let cs = format!(
            "host=127.0.0.1 port={port} user={user} password='{pw}' dbname={db} connect_timeout=5"
        );
        let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("{who}: {e}"));
        tokio::spawn(conn);
        c.simple_query("SELECT 1").await.unwrap();
        held.push(c);
    }
    held
}

/// One configuration on both sides: `dbs` names `{own}` for the side's own database; the
/// clients log in and stay; what PostgreSQL sees after `wait` (and once more after `again`,
/// when set, with the clients still there).
async fn run(
    results: &mut Vec<(String, String, String)>,
    label: &str,
    extra: &str,
    dbs: &str,
    clients: &[&str],
    again: Option<Duration>,
) {
    let mut seen = Vec::new();
    for (pgb, own) in [(true, "pool_sizes_pgb"), (false, "pool_sizes_sl")] {
        let own = own_database(own);
        let dbs = dbs.replace("{own}", &own);
        let base = "auth_type = trust\nadmin_users = admin";
        let Some(side) = Side::start(pgb, &format!("{base}\n{extra}"), &dbs) else {
            return;
        };
        let held = hold(side.port(), clients).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // Several users' pools under one limit: which pool got how many is a race on both.
        let seen_now = || {
            let s = servers_seen(&own);
            if clients.len() > 1 {
                let n: u32 = s
                    .split(' ')
                    .filter_map(|p| p.split_once('=')?.1.parse::<u32>().ok())
                    .sum();
                format!("{n} in all")
            } else {
                s
            }
        };
        let mut s = vec![seen_now(), pools_shown(side.port()).await];
        if let Some(again) = again {
            tokio::time::sleep(again).await;
            s.push(seen_now());
        }
        drop(held);
        drop(side);
        // The side's servers gone before the next one counts.
        for _ in 0..50 {
            if servers_seen(&own) == "none" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen.push(s);
    }
    let (a, b) = (&seen[0], &seen[1]);
    for (i, (a, b)) in a.iter().zip(b).enumerate() {
        let when = ["", " SHOW POOLS", " later"][i];
        results.push((format!("{label}{when}"), a.clone(), b.clone()));
    }
}

const ONE: &str = "app = host={pg_host} port={pg_port} dbname={own}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_is_kept_as_pgbouncer_keeps_it() {
    if !Anchor::available() {
        return;
    }
    let mut results = Vec::new();
    let r = &mut results;
    // A pool with one client: filled to min_pool_size.
    run(
        r,
        "min_pool_size=3, one client",
        "min_pool_size = 3",
        ONE,
        &["trust_user@app"],
        None,
    )
    .await;
    // Transaction mode: the client is not linked between transactions; still 3.
    run(
        r,
        "min_pool_size=3, transaction mode",
        "min_pool_size = 3\npool_mode = transaction",
        ONE,
        &["trust_user@app"],
        None,
    )
    .await;
    // No client (and no forced user): nothing opened.
    run(
        r,
        "min_pool_size=3, no client",
        "min_pool_size = 3",
        ONE,
        &[],
        None,
    )
    .await;
    // A forced user: filled without clients.
    run(
        r,
        "min_pool_size=3, forced user, no client",
        "min_pool_size = 3",
        "app = host={pg_host} port={pg_port} dbname={own} user=trust_user",
        &[],
        None,
    )
    .await;
    // A forced user without min_pool_size: no pool until a client comes.
    run(
        r,
        "forced user, no min_pool_size, no client",
        "",
        "app = host={pg_host} port={pg_port} dbname={own} user=trust_user",
        &[],
        None,
    )
    .await;
    // A forced user with min_pool_size in its entry, capped by max_db_connections.
    run(
        r,
        "forced user, min_pool_size=3 in [databases], max_db_connections=2",
        "max_db_connections = 2",
        "app = host={pg_host} port={pg_port} dbname={own} user=trust_user min_pool_size=3",
        &[],
        None,
    )
    .await;
    // min_pool_size in the database entry.
    run(
        r,
        "min_pool_size=2 in [databases]",
        "",
        "app = host={pg_host} port={pg_port} dbname={own} min_pool_size=2",
        &["trust_user@app"],
        None,
    )
    .await;
    // Never above the pool size.
    run(
        r,
        "min_pool_size=3 over default_pool_size=2",
        "min_pool_size = 3\ndefault_pool_size = 2",
        ONE,
        &["trust_user@app"],
        None,
    )
    .await;
    // Capped by a lower max_user_connections.
    run(
        r,
        "min_pool_size=3, max_user_connections=2",
        "min_pool_size = 3\nmax_user_connections = 2",
        ONE,
        &["trust_user@app"],
        None,
    )
    .await;
    // Capped by a lower max_db_connections, two users' pools sharing it.
    run(
        r,
        "min_pool_size=2 per pool, max_db_connections=3",
        "min_pool_size = 2\nmax_db_connections = 3",
        ONE,
        &["trust_user@app", "md5_user@app"],
        None,
    )
    .await;
    // server_idle_timeout does not close servers below min_pool_size.
    run(
        r,
        "min_pool_size=2, server_idle_timeout=1",
        "min_pool_size = 2\nserver_idle_timeout = 1",
        ONE,
        &["trust_user@app"],
        Some(Duration::from_secs(2)),
    )
    .await;
    // Eleven configurations, two observations each, and the last one's `again`.
    report(&results, 11 * 2 + 1);
}

/// Pools SHOW POOLS lists after a client of `app` came and went, at once and after `wait`; then
/// with a new client.
async fn pools_after_a_client(port: u16, wait: Duration) -> (String, String, String) {
    drop(hold(port, &["trust_user@app"]).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = pools_shown(port).await;
    tokio::time::sleep(wait).await;
    let later = pools_shown(port).await;
    let _again = hold(port, &["trust_user@app"]).await;
    (now, later, pools_shown(port).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_pools_are_freed_as_pgbouncer_frees_them() {
    let mut results = Vec::new();
    for (label, extra) in [
        // No clients and no servers (server_idle_timeout closed it) for pool_idle_timeout.
        (
            "pool_idle_timeout=1",
            "pool_idle_timeout = 1\nserver_idle_timeout = 1",
        ),
        // An idle server still open keeps the pool.
        ("pool_idle_timeout=1, server kept", "pool_idle_timeout = 1"),
        // Off by default.
        ("pool_idle_timeout unset", "server_idle_timeout = 1"),
    ] {
        let Some(p) = super::pair_with(
            &format!("auth_type = trust\nadmin_users = admin\n{extra}"),
            super::DB,
            USERS,
            &[],
        ) else {
            return;
        };
        let wait = Duration::from_secs(4);
        let ((a1, a2, a3), (b1, b2, b3)) = tokio::join!(
            pools_after_a_client(p.pgb.port, wait),
            pools_after_a_client(p.sl.port, wait)
        );
        results.push((format!("{label}: at once"), a1, b1));
        results.push((format!("{label}: after {wait:?}"), a2, b2));
        results.push((format!("{label}: a new client"), a3, b3));
    }
    report(&results, 3 * 3);
}
