//! Smoke test of the harness itself: the private PostgreSQL cluster, its roles and the helpers.

use std::time::Duration;

use sluice_e2e::{error_fields, free_port, psql_cmd, PgCluster, RawConn};
use tokio_postgres::{error::SqlState, NoTls};

async fn direct(
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let pg = PgCluster::get();
    let (client, conn) =
        tokio_postgres::connect(&pg.direct_conn_str(user, password, "app"), NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

#[tokio::test]
async fn every_role_logs_in_with_its_password() {
    for (user, password) in [
        ("md5_user", "md5_pass"),
        ("scram_user", "scram_pass"),
        ("plain_user", "plain_pass"),
        ("trust_user", ""),
        ("bench_user", "bench_pass"),
        ("postgres", ""),
    ] {
        let client = direct(user, password)
            .await
            .unwrap_or_else(|e| panic!("{user} cannot log in: {e:?}"));
        let row = client
            .query_one("SELECT current_user::text, 1 + 1", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), user);
        assert_eq!(row.get::<_, i32>(1), 2);
    }
}

#[tokio::test]
async fn wrong_password_is_refused() {
    for user in ["md5_user", "scram_user", "plain_user"] {
        let err = match direct(user, "wrong").await {
            Ok(_) => panic!("{user} logged in with a wrong password"),
            Err(e) => e,
        };
        assert_eq!(
            err.code(),
            Some(&SqlState::INVALID_PASSWORD),
            "{user}: {err:?}"
        );
    }
}

#[test]
fn stored_secrets_have_the_expected_format() {
    let pg = PgCluster::get();
    assert!(pg.stored_secret("scram_user").starts_with("SCRAM-SHA-256$"));
    assert!(pg.stored_secret("bench_user").starts_with("SCRAM-SHA-256$"));
    let md5 = pg.stored_secret("md5_user");
    assert!(md5.starts_with("md5") && md5.len() == 35, "{md5}");
}

#[test]
fn psql_helpers_and_databases() {
    let pg = PgCluster::get();
    assert_eq!(pg.psql("other", "SELECT current_database()"), "other");
    let (st, out, err) = psql_cmd(
        &pg.direct_conn_str("scram_user", "scram_pass", "app"),
        "SELECT 40 + 2",
    );
    assert!(st.success(), "{err}");
    assert_eq!(out.trim(), "42");
    // Every role may create in `app`.
    let (st, _, err) = psql_cmd(
        &pg.direct_conn_str("trust_user", "", "app"),
        "CREATE TEMP TABLE t(x int); CREATE TABLE IF NOT EXISTS harness_t(x int)",
    );
    assert!(st.success(), "{err}");
}

#[test]
fn free_ports_are_distinct() {
    let a = free_port();
    let b = free_port();
    assert_ne!(a, b);
}

#[tokio::test]
async fn raw_conn_reads_messages_and_errors() {
    let pg = PgCluster::get();
    let mut c = RawConn::connect(pg.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    let (tag, body) = c
        .read_message(Duration::from_secs(5))
        .await
        .expect("auth message");
    assert_eq!(
        (tag, body.as_slice()),
        (b'R', &[0u8, 0, 0, 0][..]),
        "AuthenticationOk"
    );
    loop {
        let (tag, _) = c
            .read_message(Duration::from_secs(5))
            .await
            .expect("message");
        if tag == b'Z' {
            break;
        }
    }
    c.send(&RawConn::message(b'X', &[])).await;
    let (_, closed) = c.read_until_close(Duration::from_secs(5)).await;
    assert!(closed);

    let mut c = RawConn::connect(pg.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "no_such_db"),
    ]))
    .await;
    // trust auth succeeds first ('R' AuthenticationOk), then the database check fails.
    let body = loop {
        let (tag, body) = c.read_message(Duration::from_secs(5)).await.expect("error");
        if tag == b'E' {
            break body;
        }
        assert_eq!(tag, b'R');
    };
    let f = error_fields(&body);
    assert_eq!(f.get(&b'C').map(String::as_str), Some("3D000"), "{f:?}");
    assert!(f[&b'M'].contains("no_such_db"), "{f:?}");
}
