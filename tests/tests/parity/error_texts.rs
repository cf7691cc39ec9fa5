//! Error texts side by side, beyond the logins of parity.rs: trust and hba logins of users the
//! auth file does not list, a SASL exchange naming a mechanism nobody offered, an empty cleartext
//! password, query_timeout and query_wait_timeout. The SQLSTATE and message a client sees.

use std::time::Duration;

use sluice_e2e::{error_fields, RawConn};

use super::{bad_input_common::read_until_ready, login, pair, pair_with, report, DB, USERS};

/// The first ErrorResponse of `msgs`, as "SQLSTATE message", or what came instead.
fn first_error(msgs: &[(u8, Vec<u8>)]) -> String {
    match msgs.iter().find(|(t, _)| *t == b'E') {
        Some((_, body)) => {
            let f = error_fields(body);
            format!("{} {}", f[&b'C'], f[&b'M'])
        }
        None => format!(
            "no error: {:?}",
            msgs.iter().map(|(t, _)| *t as char).collect::<String>()
        ),
    }
}

/// A SCRAM login that answers the SASL request with a mechanism that was not offered.
async fn bogus_mechanism(port: u16) -> String {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "md5_user"),
        ("database", "app"),
    ]))
    .await;
    match c.read_message(Duration::from_secs(3)).await {
        Some((b'R', body)) if body[..4] == [0, 0, 0, 10] => {}
        other => return format!("no SASL request: {other:?}"),
    }
    let mut body = b"BOGUS-MECH\0".to_vec();
    body.extend_from_slice(&4i32.to_be_bytes());
    body.extend_from_slice(b"abcd");
    c.send(&RawConn::message(b'p', &body)).await;
    match c.read_message(Duration::from_secs(3)).await {
        Some((b'E', body)) => {
            let f = error_fields(&body);
            format!("{} {}", f[&b'C'], f[&b'M'])
        }
        other => format!("{other:?}"),
    }
}

/// A cleartext login that sends an empty password.
async fn empty_password(port: u16, user: &str) -> String {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", user),
        ("database", "app"),
    ]))
    .await;
    match c.read_message(Duration::from_secs(3)).await {
        Some((b'R', body)) if body[..4] == [0, 0, 0, 3] => {}
        other => return format!("no cleartext request: {other:?}"),
    }
    c.send(&RawConn::message(b'p', b"\0")).await;
    match c.read_message(Duration::from_secs(3)).await {
        Some((b'E', body)) => {
            let f = error_fields(&body);
            format!("{} {}", f[&b'C'], f[&b'M'])
        }
        other => format!("{other:?}"),
    }
}

/// Log in as trust_user and run `steps` (simple protocol; "sleep N" waits N seconds instead):
/// the first error a step brings, or "no error".
async fn run_sql(port: u16, steps: &[&str]) -> String {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    read_until_ready(&mut c).await;
    let mut msgs = Vec::new();
    for sql in steps {
        if let Some(secs) = sql.strip_prefix("sleep ") {
            tokio::time::sleep(Duration::from_secs(secs.parse().unwrap())).await;
            continue;
        }
        let mut q = sql.as_bytes().to_vec();
        q.push(0);
        c.send(&RawConn::message(b'Q', &q)).await;
        while let Some((tag, body)) = c.read_message(Duration::from_secs(6)).await {
            let end = matches!(tag, b'E' | b'Z');
            msgs.push((tag, body));
            if end {
                break;
            }
        }
        if msgs.iter().any(|(t, _)| *t == b'E') {
            break;
        }
    }
    first_error(&msgs)
}

/// query_wait_timeout: one server, held in a transaction; a second client's query waits.
async fn wait_timeout(port: u16) -> String {
    let mut holder = RawConn::connect(port).await;
    holder
        .send(&RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
        ]))
        .await;
    read_until_ready(&mut holder).await;
    holder.send(&RawConn::message(b'Q', b"BEGIN\0")).await;
    read_until_ready(&mut holder).await;
    run_sql(port, &["SELECT 1"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_texts_match_pgbouncer() {
    let mut r = Vec::new();
    let Some(p) = pair("auth_type = trust") else {
        return;
    };
    // trust: a user the auth file does not list.
    r.push((
        "trust: unknown user".to_string(),
        login(p.pgb.port, "ghost", "x", "app").await,
        login(p.sl.port, "ghost", "x", "app").await,
    ));
    drop(p);
    // hba: a trust line for a user the auth file does not list, and no line at all.
    let hba = "host all ghost 127.0.0.1/32 trust\nhost all md5_user 127.0.0.1/32 md5\n\
               host all plain_user 127.0.0.1/32 reject\n";
    let p = pair_with(
        "auth_type = hba\nauth_hba_file = {hba}",
        DB,
        USERS,
        &[("hba.conf", hba)],
    )
    .unwrap();
    for (case, user) in [
        ("hba trust: unknown user", "ghost"),
        ("hba: no line for the user", "trust_user"),
        ("hba: a reject line", "plain_user"),
    ] {
        r.push((
            case.to_string(),
            login(p.pgb.port, user, "x", "app").await,
            login(p.sl.port, user, "x", "app").await,
        ));
    }
    drop(p);
    let p = pair("auth_type = scram-sha-256").unwrap();
    r.push((
        "scram: a mechanism not offered".to_string(),
        bogus_mechanism(p.pgb.port).await,
        bogus_mechanism(p.sl.port).await,
    ));
    drop(p);
    let p = pair("auth_type = plain").unwrap();
    for user in ["md5_user", "ghost"] {
        r.push((
            format!("plain: empty password of {user}"),
            empty_password(p.pgb.port, user).await,
            empty_password(p.sl.port, user).await,
        ));
    }
    drop(p);
    // The relay's timeouts: the client is told and closed.
    for (case, extra, steps) in [
        (
            "query_timeout",
            "query_timeout = 1",
            &["SELECT pg_sleep(3)"][..],
        ),
        (
            "idle_transaction_timeout",
            "idle_transaction_timeout = 1",
            &["BEGIN", "sleep 2", "SELECT 1"][..],
        ),
        (
            "transaction_timeout",
            "transaction_timeout = 1",
            &["BEGIN", "SELECT pg_sleep(2)", "SELECT 1"][..],
        ),
        (
            "client_idle_timeout",
            "client_idle_timeout = 1",
            &["sleep 2", "SELECT 1"][..],
        ),
    ] {
        let p = pair(&format!("auth_type = trust\n{extra}")).unwrap();
        r.push((
            case.to_string(),
            run_sql(p.pgb.port, steps).await,
            run_sql(p.sl.port, steps).await,
        ));
    }
    let p = pair("auth_type = trust\ndefault_pool_size = 1\nquery_wait_timeout = 1").unwrap();
    r.push((
        "query_wait_timeout".to_string(),
        wait_timeout(p.pgb.port).await,
        wait_timeout(p.sl.port).await,
    ));
    report(&r, 1 + 3 + 1 + 2 + 4 + 1);
}
