//! A pool's settings as `targets::pool_settings` makes them from a pgbouncer.ini: the
//! query_wait_timeout of a [users] entry over a [databases] entry's over the global one
//! (PgBouncer 1.26), and the server log switches.

use super::*;

fn pool_of(ini: &str, db: &str, user: &str) -> PoolSettings {
    let cfg = sluice_config::parse_str(ini, "t.ini").expect("config");
    let entry = cfg
        .databases
        .iter()
        .find(|d| d.name == db)
        .expect("database")
        .clone();
    crate::targets::pool_settings(
        &cfg,
        &entry,
        user,
        None,
        Arc::new(crate::tls::ServerTls::disabled()),
        |_| 1,
    )
}

const INI: &str = "[databases]\n\
                   plain = host=127.0.0.1 dbname=x\n\
                   own = host=127.0.0.1 dbname=x query_wait_timeout=7\n\
                   nolimit = host=127.0.0.1 dbname=x query_wait_timeout=0\n\
                   [pgbouncer]\n\
                   query_wait_timeout = 30\n\
                   log_disconnections = 0\n\
                   [users]\n\
                   alice = query_wait_timeout=3\n";

#[test]
fn query_wait_timeout_of_the_user_over_the_database_over_the_global() {
    let secs = |n| Some(Duration::from_secs(n));
    assert_eq!(pool_of(INI, "plain", "bob").query_wait_timeout, secs(30));
    assert_eq!(pool_of(INI, "own", "bob").query_wait_timeout, secs(7));
    assert_eq!(pool_of(INI, "nolimit", "bob").query_wait_timeout, None);
    assert_eq!(pool_of(INI, "plain", "alice").query_wait_timeout, secs(3));
    assert_eq!(pool_of(INI, "own", "alice").query_wait_timeout, secs(3));
}

#[test]
fn the_server_log_names_the_pool_and_follows_the_switches() {
    let log = pool_of(INI, "own", "alice").connect.log;
    assert_eq!(&*log.pool, "own/alice");
    assert!(log.connections);
    assert!(!log.disconnections);
}
