//! A server login PostgreSQL refuses, after RECONNECT: the pool's only server is one RECONNECT
//! marked to close, so the waiting clients get the server's refusal at once (PgBouncer's dirty
//! pool) rather than waiting out query_wait_timeout for a server that will never be reused.

use std::time::{Duration, Instant};

use sluice_e2e::{Console, PgCluster, Sluice};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_refusal_when_only_closing_servers_remain() {
    let pg = PgCluster::get();
    pg.psql(
        "postgres",
        "DROP ROLE IF EXISTS slr_user; \
         SET password_encryption = 'scram-sha-256'; \
         CREATE ROLE slr_user LOGIN PASSWORD 'slr_old';",
    );
    let ini = Sluice::basic_ini(
        "auth_type = hba\nauth_hba_file = {hba}\npool_mode = transaction\ndefault_pool_size = 1\n\
         query_wait_timeout = 30\nadmin_users = trust_user",
        "app = host={pg_host} port={pg_port} dbname=app\n",
    );
    let s = Sluice::builder(&ini)
        .userlist("\"slr_user\" \"slr_old\"\n\"trust_user\" \"\"\n")
        // The console's admin logs in without a password (the harness's console speaks no md5).
        .file(
            "hba.conf",
            "host all trust_user 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 md5\n",
        )
        .start();
    // A holds the pool's only server in a transaction.
    let a = s.connect("slr_user", "slr_old", "app").await.unwrap();
    a.batch_execute("BEGIN; SELECT 1").await.unwrap();
    pg.psql("postgres", "ALTER ROLE slr_user PASSWORD 'slr_new'");
    // B is greeted (the pool has its welcome) and waits for a server.
    let b = s.connect("slr_user", "slr_old", "app").await.unwrap();
    let mut console = Console::connect(s.port, "trust_user", "").await.unwrap();
    console.query("RECONNECT").await.unwrap();
    console.query("SET default_pool_size = 2").await.unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), b.simple_query("SELECT 1"))
        .await
        .expect("the waiting client hung")
        .expect_err("the server login must fail");
    let msg = err.as_db_error().map(|d| d.message().to_string());
    assert!(
        msg.as_deref()
            .is_some_and(|m| m.contains("password authentication failed for user \"slr_user\"")),
        "{err:?}\n{}",
        s.log()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        s.log().contains(
            "closing because: password authentication failed for user \"slr_user\" (age="
        ),
        "{}",
        s.log()
    );
    // A's transaction was not disturbed.
    a.batch_execute("COMMIT").await.unwrap();
    pg.psql("postgres", "ALTER ROLE slr_user PASSWORD 'slr_old'");
}
