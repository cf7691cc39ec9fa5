//! Helpers shared by the hba and auth_query end-to-end tests: logins over TCP or the Unix socket,
//! the first authentication request, SIGHUP reloads and /metrics samples.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::{error_fields, RawConn, Sluice};

pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Authentication request codes (AuthenticationXxx int32).
pub const AUTH_OK: u32 = 0;
pub const AUTH_CLEARTEXT: u32 = 3;
pub const AUTH_MD5: u32 = 5;
pub const AUTH_SASL: u32 = 10;

/// userlist.txt text: one `"user" "secret"` line per entry.
pub fn userlist(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(u, s)| format!("\"{u}\" \"{s}\"\n"))
        .collect()
}

/// How a test client reaches sluice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Tcp,
    Unix,
}

fn conn_str(s: &Sluice, via: Via, user: &str, password: &str, db: &str) -> String {
    match via {
        Via::Tcp => s.conn_str(user, password, db),
        Via::Unix => format!(
            "host={} port={} user={user} password={password} dbname={db} connect_timeout=5",
            s.dir.path().display(),
            s.port
        ),
    }
}

/// Log in and return (current_user, current_database) as the server sees them.
pub async fn whoami(
    s: &Sluice,
    via: Via,
    user: &str,
    password: &str,
    db: &str,
) -> Result<(String, String), tokio_postgres::Error> {
    let (client, conn) =
        tokio_postgres::connect(&conn_str(s, via, user, password, db), tokio_postgres::NoTls)
            .await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let row = client
        .query_one("SELECT current_user::text, current_database()::text", &[])
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Like [`whoami`]; panics with the error and the sluice log on failure. Returns current_user.
pub async fn login_ok(s: &Sluice, via: Via, user: &str, password: &str, db: &str) -> String {
    match whoami(s, via, user, password, db).await {
        Ok((u, _)) => u,
        Err(e) => panic!(
            "login {user}@{db} ({via:?}) through sluice failed: {e:?}\nsluice log:\n{}",
            s.log()
        ),
    }
}

/// (SQLSTATE, message) of a refused login; panics when it succeeded.
pub async fn login_err(
    s: &Sluice,
    via: Via,
    user: &str,
    password: &str,
    db: &str,
) -> (String, String) {
    match whoami(s, via, user, password, db).await {
        Ok(v) => panic!(
            "login {user}@{db} ({via:?}) succeeded: {v:?}\nlog:\n{}",
            s.log()
        ),
        Err(e) => match e.as_db_error() {
            Some(d) => (d.code().code().to_string(), d.message().to_string()),
            None => panic!(
                "login {user}@{db}: expected an ErrorResponse, got {e:?}\nlog:\n{}",
                s.log()
            ),
        },
    }
}

/// A client's failed password check, as PgBouncer answers it (08P01, the user not named).
pub fn pw_failed(_user: &str) -> (String, String) {
    (
        "08P01".to_string(),
        "password authentication failed".to_string(),
    )
}

/// A client's failed SCRAM exchange, as PgBouncer answers it.
pub fn sasl_failed() -> (String, String) {
    (
        "08P01".to_string(),
        "SASL authentication failed".to_string(),
    )
}

/// The first authentication request over TCP: its code, or the error message when refused.
pub async fn first_auth_request(port: u16, user: &str, db: &str) -> Result<u32, String> {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", user),
        ("database", db),
    ]))
    .await;
    let (tag, body) = c
        .read_message(IO_TIMEOUT)
        .await
        .expect("no answer to the startup packet");
    match tag {
        b'R' => Ok(u32::from_be_bytes(body[..4].try_into().unwrap())),
        b'E' => Err(error_fields(&body).get(&b'M').cloned().unwrap_or_default()),
        other => panic!("unexpected message '{}'", other as char),
    }
}

/// Send SIGHUP and wait until the reload is logged (the config file is left as it is).
pub async fn sighup(s: &Sluice) {
    const OK: &str = "configuration reloaded";
    let before = s.log().matches(OK).count();
    s.signal(Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.log().matches(OK).count() == before {
        assert!(
            Instant::now() < deadline,
            "no reload logged after SIGHUP:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub use sluice_e2e::{metrics, sample};
