//! auth_user / auth_query / auth_dbname end to end (reference §5.3): md5 and SCRAM secrets fetched
//! with PgBouncer's default auth_query (pg_authid, so auth_user is a superuser), unknown users
//! refused like a wrong password, per-database auth_user and auth_dbname, the query run at every
//! login (a changed password holds at once), clear errors when the query or its server fails; and
//! the cache of SCRAM secrets derived from plaintext passwords, seen through /metrics.

mod auth_common;

use std::sync::Once;
use std::time::{Duration, Instant};

use auth_common::*;
use sluice_e2e::{free_port, PgCluster, Sluice};

const ADMIN: (&str, &str) = ("aq_admin", "aq_admin_pass");

/// Roles of this test binary's cluster (created once): the auth_user and SCRAM-stored users.
/// md5_user (md5 stored, hba md5 in the cluster) is the md5 case.
fn cluster() -> &'static PgCluster {
    static SETUP: Once = Once::new();
    let pg = PgCluster::get();
    SETUP.call_once(|| {
        pg.psql(
            "postgres",
            "SET password_encryption = 'scram-sha-256'; \
             CREATE ROLE aq_admin LOGIN SUPERUSER PASSWORD 'aq_admin_pass'; \
             CREATE ROLE aq_scram LOGIN PASSWORD 'aq_scram_pass'; \
             CREATE ROLE aq_rotate LOGIN PASSWORD 'rotate_old';",
        );
    });
    pg
}

fn app_db() -> String {
    "app = host={pg_host} port={pg_port} dbname=app\n".to_string()
}

fn start(auth_type: &str, extra: &str, databases: &str) -> Sluice {
    cluster();
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = {auth_type}\nquery_wait_timeout = 5\nserver_connect_timeout = 2\n\
             server_login_retry = 1\n{extra}"
        ),
        databases,
    );
    Sluice::builder(&ini).userlist(&userlist(&[ADMIN])).start()
}

#[tokio::test]
async fn md5_and_scram_secrets_and_unknown_users() {
    let s = start("md5", "auth_user = aq_admin\n", &app_db());
    // md5 secret: md5 exchange, and the md5 hash logs in to the server.
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await,
        Ok(AUTH_MD5)
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "md5_user", "md5_pass", "app").await,
        "md5_user"
    );
    // SCRAM verifier: SCRAM exchange, server login through pass-through keys.
    assert_eq!(
        first_auth_request(s.port, "aq_scram", "app").await,
        Ok(AUTH_SASL)
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "aq_scram", "aq_scram_pass", "app").await,
        "aq_scram"
    );
    assert_eq!(
        login_err(&s, Via::Tcp, "md5_user", "wrong", "app").await,
        pw_failed("md5_user")
    );
    assert_eq!(
        login_err(&s, Via::Tcp, "aq_nobody", "wrong", "app").await,
        pw_failed("aq_nobody")
    );
    // With SCRAM for everyone, an unknown user and a wrong password look the same on the wire.
    let s = start("scram-sha-256", "auth_user = aq_admin\n", &app_db());
    assert_eq!(
        login_ok(&s, Via::Tcp, "aq_scram", "aq_scram_pass", "app").await,
        "aq_scram"
    );
    for user in ["aq_scram", "aq_nobody"] {
        assert_eq!(first_auth_request(s.port, user, "app").await, Ok(AUTH_SASL));
        assert_eq!(
            login_err(&s, Via::Tcp, user, "wrong", "app").await,
            sasl_failed()
        );
    }
    assert!(!s.log().contains("aq_scram_pass"));
}

#[tokio::test]
async fn trust_admits_users_without_a_secret_and_names_unknown_ones() {
    // trust_user has no password in PostgreSQL: the default auth_query's row has a NULL secret.
    let s = start("trust", "auth_user = aq_admin\n", &app_db());
    assert_eq!(
        login_ok(&s, Via::Tcp, "trust_user", "", "app").await,
        "trust_user"
    );
    // No row: PgBouncer's answer (under trust a known user needs no secret at all, so the text
    // tells nothing a login attempt does not).
    assert_eq!(
        login_err(&s, Via::Tcp, "aq_nobody", "", "app").await,
        ("08P01".to_string(), "no such user".to_string())
    );
    // A password method: no password matches a NULL secret, and an unknown user is answered as
    // a wrong password.
    let s = start("md5", "auth_user = aq_admin\n", &app_db());
    assert_eq!(
        login_err(&s, Via::Tcp, "trust_user", "x", "app").await,
        pw_failed("trust_user")
    );
    assert_eq!(
        login_err(&s, Via::Tcp, "aq_nobody", "x", "app").await,
        pw_failed("aq_nobody")
    );
}

/// Run SHOW VERSION on the console of `s` as `user`: "ok" or the error's (SQLSTATE, message).
async fn console_as(s: &Sluice, user: &str, password: &str) -> Result<(), (String, String)> {
    let cs = format!(
        "host=127.0.0.1 port={} user={user} password={password} dbname=pgbouncer connect_timeout=5",
        s.port
    );
    let fields = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(d) => (d.code().code().to_string(), d.message().to_string()),
        None => ("".to_string(), e.to_string()),
    };
    let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
        .await
        .map_err(fields)?;
    tokio::spawn(conn);
    c.simple_query("SHOW VERSION").await.map_err(fields)?;
    Ok(())
}

#[tokio::test]
async fn console_users_through_the_global_auth_user() {
    let dbs = format!(
        "{}authdb = host={{pg_host}} port={{pg_port}} dbname=postgres\n",
        app_db()
    );
    // md5_user is only in PostgreSQL: the global auth_user looks it up in auth_dbname.
    let s = start(
        "md5",
        "auth_user = aq_admin\nauth_dbname = authdb\nstats_users = md5_user\n",
        &dbs,
    );
    assert_eq!(console_as(&s, "md5_user", "md5_pass").await, Ok(()));
    assert_eq!(
        console_as(&s, "md5_user", "wrong").await,
        Err(pw_failed("md5_user"))
    );
    // Without a global auth_dbname the console would be its own auth database: PgBouncer's
    // configuration error, the cause in the log.
    let s = start(
        "md5",
        "auth_user = aq_admin\nstats_users = md5_user\n",
        &dbs,
    );
    assert_eq!(
        console_as(&s, "md5_user", "md5_pass").await,
        Err(("08P01".to_string(), "bouncer config error".to_string()))
    );
    assert!(
        s.log()
            .contains("cannot use the reserved \"pgbouncer\" database as an auth_dbname"),
        "{}",
        s.log()
    );
}

#[tokio::test]
async fn per_database_auth_user_and_auth_dbname() {
    let pg = cluster();
    let dbs =
        "app = host={pg_host} port={pg_port} dbname=app auth_user=aq_admin auth_dbname=authdb\n\
               authdb = host={pg_host} port={pg_port} dbname=postgres\n\
               plain = host={pg_host} port={pg_port} dbname=app\n";
    let s = start("md5", "", dbs);
    assert_eq!(
        login_ok(&s, Via::Tcp, "md5_user", "md5_pass", "app").await,
        "md5_user"
    );
    // The query ran as aq_admin in database postgres (the auth pool keeps its server).
    let n = pg.psql(
        "postgres",
        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'aq_admin' AND datname = 'postgres'",
    );
    assert_ne!(n, "0", "no auth_query connection to database postgres");
    // A database without auth_user does not look users up.
    assert_eq!(
        login_err(&s, Via::Tcp, "md5_user", "md5_pass", "plain").await,
        pw_failed("md5_user")
    );
}

#[tokio::test]
async fn changed_password_holds_from_the_next_login() {
    let pg = cluster();
    let s = start("scram-sha-256", "auth_user = aq_admin\n", &app_db());
    assert_eq!(
        login_ok(&s, Via::Tcp, "aq_rotate", "rotate_old", "app").await,
        "aq_rotate"
    );
    // Let the server go back to the pool: the next login reuses it (its session is logged in).
    tokio::time::sleep(Duration::from_millis(500)).await;
    pg.psql(
        "postgres",
        "SET password_encryption = 'scram-sha-256'; ALTER ROLE aq_rotate PASSWORD 'rotate_new'",
    );
    // auth_query runs at every login, as in PgBouncer: no RELOAD needed.
    assert_eq!(
        login_err(&s, Via::Tcp, "aq_rotate", "rotate_old", "app").await,
        sasl_failed()
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "aq_rotate", "rotate_new", "app").await,
        "aq_rotate"
    );
}

#[tokio::test]
async fn failing_auth_query_is_a_clear_error_not_a_hang() {
    let s = start(
        "md5",
        "auth_user = aq_admin\nauth_query = SELECT usename, passwd FROM no_such_table WHERE usename = $1\n",
        &app_db(),
    );
    let (code, msg) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "app").await;
    // PgBouncer's answer (the server's message is in the log).
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("08P01", "bouncer config error")
    );
    assert!(
        s.log()
            .contains("error in auth_query: ERROR: relation \"no_such_table\" does not exist"),
        "{}",
        s.log()
    );
    // The auth database's server is down: the login fails after query_wait_timeout (5 s).
    let down = format!("app = host={{pg_host}} port={} dbname=app\n", free_port());
    let s = start("md5", "auth_user = aq_admin\n", &down);
    let started = Instant::now();
    let (code, msg) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "app").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("08P01", "query_wait_timeout")
    );
    assert!(
        s.log()
            .contains("could not get a server connection for auth_user \"aq_admin\""),
        "{}",
        s.log()
    );
}

#[tokio::test]
async fn scram_secrets_from_plaintext_are_derived_once() {
    cluster();
    let mport = free_port();
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = scram-sha-256\nscram_iterations = 8192\n\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n"
        ),
        &app_db(),
    );
    let s = Sluice::builder(&ini)
        .userlist(&userlist(&[("scram_user", "scram_pass")]))
        .start();
    for _ in 0..3 {
        assert_eq!(
            login_ok(&s, Via::Tcp, "scram_user", "scram_pass", "app").await,
            "scram_user"
        );
    }
    assert_eq!(
        login_err(&s, Via::Tcp, "scram_user", "wrong", "app").await,
        sasl_failed()
    );
    let m = metrics(mport).await;
    assert_eq!(sample(&m, "sluice_scram_cache_misses_total"), 1.0, "{m}");
    assert!(sample(&m, "sluice_scram_cache_hits_total") >= 3.0, "{m}");
    assert_eq!(sample(&m, "sluice_client_login_failures_total"), 1.0, "{m}");
    // The ad-hoc secret uses scram_iterations.
    let mut c = sluice_e2e::RawConn::connect(s.port).await;
    c.send(&sluice_e2e::RawConn::startup_packet(&[
        ("user", "scram_user"),
        ("database", "app"),
    ]))
    .await;
    let _ = c.read_message(IO_TIMEOUT).await.expect("SASL request");
    let first = b"n,,n=,r=e2eClientNonce0123456789abcd";
    let mut msg = b"SCRAM-SHA-256\0".to_vec();
    msg.extend_from_slice(&(first.len() as i32).to_be_bytes());
    msg.extend_from_slice(first);
    c.send(&sluice_e2e::RawConn::message(b'p', &msg)).await;
    let (tag, body) = c.read_message(IO_TIMEOUT).await.expect("SASLContinue");
    assert_eq!(tag, b'R');
    let server_first = String::from_utf8_lossy(&body[4..]).to_string();
    assert!(server_first.ends_with(",i=8192"), "{server_first}");
}

#[tokio::test]
async fn hba_methods_use_auth_query_secrets() {
    cluster();
    let ini = Sluice::basic_ini(
        "auth_type = hba\nauth_hba_file = {hba}\nauth_user = aq_admin\nquery_wait_timeout = 5\n\
         server_connect_timeout = 2\n",
        &app_db(),
    );
    let s = Sluice::builder(&ini)
        .userlist(&userlist(&[ADMIN]))
        .file(
            "hba.conf",
            "host all md5_user 127.0.0.1/32 md5\nhost all all 127.0.0.1/32 scram-sha-256\n",
        )
        .start();
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await,
        Ok(AUTH_MD5)
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "md5_user", "md5_pass", "app").await,
        "md5_user"
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "aq_scram", "aq_scram_pass", "app").await,
        "aq_scram"
    );
    for user in ["aq_scram", "aq_nobody"] {
        assert_eq!(first_auth_request(s.port, user, "app").await, Ok(AUTH_SASL));
        assert_eq!(
            login_err(&s, Via::Tcp, user, "wrong", "app").await,
            sasl_failed()
        );
    }
}
