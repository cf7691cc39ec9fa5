//! Shared pieces of the admin console tests: a Sluice with a console and an app database, and the
//! console helpers.

#![allow(dead_code)]

use sluice_e2e::{Console, ConsoleResult, PgCluster, Sluice};

pub const USERLIST: &str = "\"admin\" \"adminpw\"\n\"watcher\" \"watchpw\"\n\"app\" \"apppw\"\n";

/// Sluice with a transaction-mode database `app` (forced server user trust_user), admin_users=admin,
/// stats_users=watcher, cleartext client auth (the raw console client answers it).
pub fn start(extra: &str, pool_size: u32) -> Sluice {
    let pg = PgCluster::get();
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = plain\nadmin_users = admin\nstats_users = watcher\npool_mode = transaction\n\
             default_pool_size = {pool_size}\nstats_period = 1\n{extra}"
        ),
        &format!("app = host=127.0.0.1 port={} dbname=app user=trust_user", pg.port),
    );
    Sluice::builder(&ini).userlist(USERLIST).start()
}

pub async fn admin(s: &Sluice) -> Console {
    Console::connect(s.port, "admin", "adminpw")
        .await
        .expect("admin login")
}

pub async fn show(c: &mut Console, what: &str) -> ConsoleResult {
    c.query(&format!("SHOW {what}"))
        .await
        .unwrap_or_else(|e| panic!("SHOW {what}: {e:?}"))
}

/// SHOW STATE's `paused` value ("yes"/"no").
pub async fn paused(c: &mut Console) -> Option<String> {
    show(c, "state").await.get("paused", "value")
}

pub fn num(r: &ConsoleResult, key: &str, col: &str) -> i64 {
    r.get(key, col)
        .unwrap_or_else(|| panic!("no {col} for {key}"))
        .trim()
        .parse()
        .unwrap()
}
