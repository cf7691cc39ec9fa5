//! Authentication end to end: every client auth_type against every server auth method, userlists with
//! plaintext passwords and with secrets copied from pg_authid (SCRAM pass-through), the combinations
//! that cannot work, wrong passwords vs unknown users, unknown databases, forced users and server
//! login errors (reference §5, pgbouncer-compat.md).

use std::time::Duration;

use sluice_e2e::{error_fields, PgCluster, RawConn, Sluice};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Server-side roles of the cluster with their passwords, one per server auth method
/// (trust_user has no password on the server; the userlist gives it one for client auth).
const ROLES: [(&str, &str); 4] = [
    ("md5_user", "md5_pass"),
    ("scram_user", "scram_pass"),
    ("plain_user", "plain_pass"),
    ("trust_user", "trust_pass"),
];

const APP_DB: &str = "app = host={pg_host} port={pg_port} dbname=app";

/// Authentication request codes (AuthenticationXxx int32).
const AUTH_OK: u32 = 0;
const AUTH_CLEARTEXT: u32 = 3;
const AUTH_MD5: u32 = 5;
const AUTH_SASL: u32 = 10;

/// A config with the given auth_type, short timeouts and `databases`.
fn ini(auth_type: &str, databases: &str) -> String {
    Sluice::basic_ini(
        &format!(
            "auth_type = {auth_type}\nquery_wait_timeout = 3\nserver_connect_timeout = 3\n\
             server_login_retry = 1\n"
        ),
        databases,
    )
}

/// userlist.txt text: one `"user" "secret"` line per entry.
fn userlist(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(u, s)| {
            format!(
                "\"{}\" \"{}\"\n",
                u.replace('"', "\"\""),
                s.replace('"', "\"\"")
            )
        })
        .collect()
}

fn plaintext_userlist() -> String {
    userlist(&ROLES)
}

fn start(auth_type: &str, databases: &str, users: &str) -> Sluice {
    Sluice::builder(&ini(auth_type, databases))
        .userlist(users)
        .start()
}

/// Log in through sluice and return (current_user, current_database) as seen by the server.
async fn whoami(
    s: &Sluice,
    user: &str,
    password: &str,
    db: &str,
) -> Result<(String, String), tokio_postgres::Error> {
    let client = s.connect(user, password, db).await?;
    let row = client
        .query_one("SELECT current_user::text, current_database()::text", &[])
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Like [`whoami`] but panics with the error and the sluice log on failure.
async fn login_ok(s: &Sluice, user: &str, password: &str, db: &str) -> (String, String) {
    match whoami(s, user, password, db).await {
        Ok(v) => v,
        Err(e) => panic!(
            "login {user}@{db} through sluice failed: {e:?}\nsluice log:\n{}",
            s.log()
        ),
    }
}

/// The ErrorResponse a failed login got: (SQLSTATE, message). Panics if the login succeeded or the
/// failure is not a server-sent error.
async fn login_err(s: &Sluice, user: &str, password: &str, db: &str) -> (String, String) {
    let e = match whoami(s, user, password, db).await {
        Ok(v) => panic!("login {user}@{db} with password {password:?} succeeded: {v:?}"),
        Err(e) => e,
    };
    match e.as_db_error() {
        Some(d) => (d.code().code().to_string(), d.message().to_string()),
        None => panic!(
            "login {user}@{db}: expected an ErrorResponse, got {e:?}\nsluice log:\n{}",
            s.log()
        ),
    }
}

/// A client's failed password check, in PgBouncer's words (08P01; the user is not named).
fn pw_failed(_user: &str) -> String {
    "password authentication failed".to_string()
}

/// A client's failed SCRAM exchange, in PgBouncer's words (08P01).
fn sasl_failed() -> String {
    "SASL authentication failed".to_string()
}

/// PostgreSQL's own answer when the pooler's server login is refused (passed on as it is).
fn server_pw_failed(user: &str) -> String {
    format!("password authentication failed for user \"{user}\"")
}

/// Send a startup packet and return the first authentication request (code, body).
async fn first_auth_request(port: u16, user: &str, db: &str) -> (u32, Vec<u8>) {
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
    assert_eq!(
        tag,
        b'R',
        "expected an authentication request for {user}, got '{}' {:?}",
        tag as char,
        error_fields(&body)
    );
    (u32::from_be_bytes(body[..4].try_into().unwrap()), body)
}

/// Start a SCRAM exchange by hand and return the server-first-message (`r=..,s=..,i=..`).
async fn scram_server_first(port: u16, user: &str, db: &str) -> String {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", user),
        ("database", db),
    ]))
    .await;
    let (tag, body) = c.read_message(IO_TIMEOUT).await.expect("auth request");
    assert_eq!((tag, &body[..4]), (b'R', &AUTH_SASL.to_be_bytes()[..]));
    let first = b"n,,n=,r=e2eClientNonce0123456789abcd";
    let mut msg = b"SCRAM-SHA-256\0".to_vec();
    msg.extend_from_slice(&(first.len() as i32).to_be_bytes());
    msg.extend_from_slice(first);
    c.send(&RawConn::message(b'p', &msg)).await;
    let (tag, body) = c.read_message(IO_TIMEOUT).await.expect("SASLContinue");
    assert_eq!(tag, b'R', "{:?}", error_fields(&body));
    assert_eq!(
        &body[..4],
        &11u32.to_be_bytes(),
        "AuthenticationSASLContinue"
    );
    String::from_utf8(body[4..].to_vec()).unwrap()
}

fn scram_attr<'a>(msg: &'a str, key: &str) -> &'a str {
    msg.split(',')
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {msg:?}"))
}

/// Every role logs in through sluice and the server sees it as that user; the client was asked for
/// `expected_request`; a wrong password is refused (or ignored for trust).
async fn every_server_method(auth_type: &str, expected_request: u32) {
    let s = start(auth_type, APP_DB, &plaintext_userlist());
    for (user, password) in ROLES {
        assert_eq!(
            login_ok(&s, user, password, "app").await,
            (user.to_string(), "app".to_string()),
            "auth_type={auth_type} user={user}"
        );
        let (code, body) = first_auth_request(s.port, user, "app").await;
        assert_eq!(code, expected_request, "auth_type={auth_type} user={user}");
        if code == AUTH_SASL {
            let mechs = String::from_utf8_lossy(&body[4..]).to_string();
            assert!(mechs.contains("SCRAM-SHA-256\0"), "{mechs:?}");
            assert!(!mechs.contains("PLUS"), "no channel binding: {mechs:?}");
        }
        if auth_type == "trust" {
            // trust ignores the password entirely.
            assert_eq!(login_ok(&s, user, "wrong", "app").await.0, user);
        } else {
            let want = if expected_request == AUTH_SASL {
                sasl_failed()
            } else {
                pw_failed(user)
            };
            assert_eq!(
                login_err(&s, user, "wrong", "app").await,
                ("08P01".to_string(), want),
                "auth_type={auth_type}"
            );
        }
    }
}

#[tokio::test]
async fn trust_client_to_every_server_method() {
    every_server_method("trust", AUTH_OK).await;
}

#[tokio::test]
async fn plain_client_to_every_server_method() {
    every_server_method("plain", AUTH_CLEARTEXT).await;
}

#[tokio::test]
async fn md5_client_to_every_server_method() {
    every_server_method("md5", AUTH_MD5).await;
}

#[tokio::test]
async fn scram_client_to_every_server_method() {
    every_server_method("scram-sha-256", AUTH_SASL).await;
}

#[tokio::test]
async fn trust_rejects_a_user_missing_from_the_auth_file() {
    let s = start("trust", APP_DB, &plaintext_userlist());
    let (code, msg) = login_err(&s, "auth_rs_nobody", "", "app").await;
    // PgBouncer's answer.
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("08P01", "\"trust\" authentication failed")
    );
}

#[tokio::test]
async fn any_logs_in_as_the_forced_user_of_each_database() {
    let port = "host={pg_host} port={pg_port}";
    let dbs = format!(
        "f_md5 = {port} dbname=app user=md5_user password=md5_pass\n\
         f_scram = {port} dbname=app user=scram_user password=scram_pass\n\
         f_plain = {port} dbname=other user=plain_user password=plain_pass\n\
         f_trust = {port} dbname=app user=trust_user\n\
         f_file = {port} dbname=app user=scram_user\n\
         f_file_md5 = {port} dbname=other user=md5_user\n\
         {APP_DB}"
    );
    // The userlist only provides passwords for forced users without one in the db entry.
    let users = userlist(&[
        ("scram_user", "scram_pass"),
        ("md5_user", &PgCluster::get().stored_secret("md5_user")),
    ]);
    let s = start("any", &dbs, &users);
    for (db, user, dbname) in [
        ("f_md5", "md5_user", "app"),
        ("f_scram", "scram_user", "app"),
        ("f_plain", "plain_user", "other"),
        ("f_trust", "trust_user", "app"),
        ("f_file", "scram_user", "app"),
        ("f_file_md5", "md5_user", "other"),
    ] {
        // Any client name and password is accepted.
        assert_eq!(
            login_ok(&s, "whoever_connects", "anything", db).await,
            (user.to_string(), dbname.to_string()),
            "db {db}"
        );
    }
    assert_eq!(
        first_auth_request(s.port, "someone", "f_md5").await.0,
        AUTH_OK
    );
    // A database without a forced user cannot be used with auth_type=any.
    let (_, msg) = login_err(&s, "scram_user", "scram_pass", "app").await;
    assert!(msg.contains("bouncer config error"), "{msg}");
}

#[tokio::test]
async fn md5_secret_from_pg_authid_logs_in_to_the_md5_server() {
    let pg = PgCluster::get();
    let secret = pg.stored_secret("md5_user");
    assert!(secret.starts_with("md5"), "{secret}");
    let users = userlist(&[("md5_user", &secret)]);
    // md5 client auth: the client's md5 answer is checked against the stored hash, which then answers
    // the server's md5 challenge.
    let s = start("md5", APP_DB, &users);
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await.0,
        AUTH_MD5
    );
    assert_eq!(
        login_ok(&s, "md5_user", "md5_pass", "app").await.0,
        "md5_user"
    );
    assert_eq!(
        login_err(&s, "md5_user", "md5_wrong", "app").await,
        ("08P01".to_string(), pw_failed("md5_user"))
    );
    // plain client auth: the cleartext password is hashed on the fly and compared.
    let s = start("plain", APP_DB, &users);
    assert_eq!(
        login_ok(&s, "md5_user", "md5_pass", "app").await.0,
        "md5_user"
    );
    assert_eq!(
        login_err(&s, "md5_user", "md5_wrong", "app").await,
        ("08P01".to_string(), pw_failed("md5_user"))
    );
}

/// The seed setup: `*` fallback to the cluster, userlist copied from pg_shadow, SCRAM pass-through.
fn passthrough_sluice(auth_type: &str) -> Sluice {
    let pg = PgCluster::get();
    let users = userlist(&[
        ("scram_user", &pg.stored_secret("scram_user")),
        ("bench_user", &pg.stored_secret("bench_user")),
        ("md5_user", &pg.stored_secret("md5_user")),
    ]);
    start(auth_type, "* = host={pg_host} port={pg_port}", &users)
}

/// Pass-through must work for every new server connection, not just the first one: keep one client
/// (and so, in session mode, its server) busy and log in a second one.
async fn passthrough_logins(s: &Sluice) {
    // A failed attempt first: it must not lock the user out (a known PgBouncer 1.25 pitfall).
    assert_eq!(
        login_err(s, "scram_user", "scram_wrong", "app").await,
        ("08P01".to_string(), sasl_failed())
    );
    let c1 = s
        .connect("scram_user", "scram_pass", "app")
        .await
        .unwrap_or_else(|e| panic!("pass-through login failed: {e:?}\nsluice log:\n{}", s.log()));
    let c2 = s
        .connect("scram_user", "scram_pass", "app")
        .await
        .unwrap_or_else(|e| {
            panic!(
                "second pass-through login failed: {e:?}\nsluice log:\n{}",
                s.log()
            )
        });
    let q = "SELECT current_user::text, pg_backend_pid()";
    let (r1, r2) = (
        c1.query_one(q, &[]).await.unwrap(),
        c2.query_one(q, &[]).await.unwrap(),
    );
    assert_eq!(r1.get::<_, String>(0), "scram_user");
    assert_eq!(r2.get::<_, String>(0), "scram_user");
    assert_ne!(
        r1.get::<_, i32>(1),
        r2.get::<_, i32>(1),
        "session mode: two clients need two server logins"
    );
    // Auto-databases through `*`, another user.
    assert_eq!(
        login_ok(s, "scram_user", "scram_pass", "other").await,
        ("scram_user".to_string(), "other".to_string())
    );
    assert_eq!(
        login_ok(s, "bench_user", "bench_pass", "app").await.0,
        "bench_user"
    );
    assert_eq!(
        login_err(s, "bench_user", "scram_pass", "app").await,
        ("08P01".to_string(), sasl_failed())
    );
}

#[tokio::test]
async fn scram_passthrough_with_auth_type_scram() {
    let s = passthrough_sluice("scram-sha-256");
    assert_eq!(
        first_auth_request(s.port, "scram_user", "app").await.0,
        AUTH_SASL
    );
    passthrough_logins(&s).await;
}

#[tokio::test]
async fn scram_passthrough_with_auth_type_md5_switches_to_scram() {
    let s = passthrough_sluice("md5");
    // The stored secret is SCRAM, so the client is asked for SCRAM instead of md5.
    assert_eq!(
        first_auth_request(s.port, "scram_user", "app").await.0,
        AUTH_SASL
    );
    // An md5-stored user in the same file still gets md5.
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await.0,
        AUTH_MD5
    );
    assert_eq!(
        login_ok(&s, "md5_user", "md5_pass", "app").await.0,
        "md5_user"
    );
    passthrough_logins(&s).await;
}

#[tokio::test]
async fn scram_exchange_uses_the_stored_salt_and_mocks_unknown_users() {
    let s = passthrough_sluice("scram-sha-256");
    let secret = PgCluster::get().stored_secret("scram_user");
    // SCRAM-SHA-256$<iter>:<salt>$<storedkey>:<serverkey>
    let (iter, salt) = secret["SCRAM-SHA-256$".len()..]
        .split('$')
        .next()
        .unwrap()
        .split_once(':')
        .unwrap();
    let known = scram_server_first(s.port, "scram_user", "app").await;
    assert_eq!(scram_attr(&known, "s"), salt, "{known}");
    assert_eq!(scram_attr(&known, "i"), iter, "{known}");
    assert!(scram_attr(&known, "r").starts_with("e2eClientNonce0123456789abcd"));
    // An unknown user gets a full-looking exchange with a fake salt that does not change between
    // attempts (a random one would reveal that the user does not exist).
    let a = scram_server_first(s.port, "auth_rs_ghost", "app").await;
    let b = scram_server_first(s.port, "auth_rs_ghost", "app").await;
    assert_eq!(scram_attr(&a, "s"), scram_attr(&b, "s"), "{a} / {b}");
    assert_eq!(scram_attr(&a, "i"), scram_attr(&b, "i"));
    assert_ne!(scram_attr(&a, "s"), salt);
    let c = scram_server_first(s.port, "auth_rs_ghost2", "app").await;
    assert_ne!(scram_attr(&a, "s"), scram_attr(&c, "s"), "salt per user");
}

#[tokio::test]
async fn plain_auth_type_verifies_a_scram_secret_and_logs_in_with_the_cleartext() {
    let pg = PgCluster::get();
    // plain_user's secret is SCRAM on the server, but its hba method is cleartext `password`.
    let users = userlist(&[
        ("plain_user", &pg.stored_secret("plain_user")),
        ("scram_user", &pg.stored_secret("scram_user")),
    ]);
    let s = start("plain", APP_DB, &users);
    assert_eq!(
        first_auth_request(s.port, "plain_user", "app").await.0,
        AUTH_CLEARTEXT
    );
    assert_eq!(
        login_ok(&s, "plain_user", "plain_pass", "app").await.0,
        "plain_user"
    );
    assert_eq!(
        login_ok(&s, "scram_user", "scram_pass", "app").await.0,
        "scram_user"
    );
    assert_eq!(
        login_err(&s, "plain_user", "plain_wrong", "app").await,
        ("08P01".to_string(), pw_failed("plain_user"))
    );
}

#[tokio::test]
async fn md5_secret_cannot_log_in_to_a_scram_server() {
    let pg = PgCluster::get();
    // An md5 hash of scram_user's real password: md5 client auth succeeds with it, but the server
    // (hba scram-sha-256) cannot be answered from an md5 hash.
    let md5 = pg.psql(
        "postgres",
        "SELECT 'md5' || md5('scram_pass' || 'scram_user')",
    );
    let s = start("md5", APP_DB, &userlist(&[("scram_user", &md5)]));
    let (code, msg) = login_err(&s, "scram_user", "scram_pass", "app").await;
    assert!(msg.contains("wrong password type"), "{code} {msg}");
}

#[tokio::test]
async fn scram_secret_cannot_log_in_to_an_md5_server() {
    let pg = PgCluster::get();
    // A SCRAM secret of md5_user's password (SCRAM secrets do not depend on the role name): SCRAM
    // client auth succeeds, but an md5 challenge cannot be answered from a SCRAM secret.
    pg.psql(
        "postgres",
        "DROP ROLE IF EXISTS auth_rs_scram_of_md5_pass; SET password_encryption = 'scram-sha-256'; \
         CREATE ROLE auth_rs_scram_of_md5_pass NOLOGIN PASSWORD 'md5_pass'",
    );
    let secret = pg.stored_secret("auth_rs_scram_of_md5_pass");
    assert!(secret.starts_with("SCRAM-SHA-256$"), "{secret}");
    let s = start("scram-sha-256", APP_DB, &userlist(&[("md5_user", &secret)]));
    let (code, msg) = login_err(&s, "md5_user", "md5_pass", "app").await;
    assert!(msg.contains("wrong password type"), "{code} {msg}");
}

#[tokio::test]

async fn scram_secret_without_client_scram_keys_fails_with_wrong_password_type() {
    let pg = PgCluster::get();
    let scram = pg.stored_secret("scram_user");
    let dbs =
        format!("{APP_DB}\nforced = host={{pg_host}} port={{pg_port}} dbname=app user=scram_user");
    // 1. trust client auth: no SCRAM exchange with the client, so no keys for the server login.
    let s = start("trust", &dbs, &userlist(&[("scram_user", &scram)]));
    let (code, msg) = login_err(&s, "scram_user", "", "app").await;
    assert!(msg.contains("wrong password type"), "{code} {msg}");
    // 2. forced user with a SCRAM secret: pass-through needs the client to be that user.
    let users = userlist(&[("scram_user", &scram), ("md5_user", "md5_pass")]);
    let s = start("md5", &dbs, &users);
    let (code, msg) = login_err(&s, "md5_user", "md5_pass", "forced").await;
    assert!(msg.contains("wrong password type"), "{code} {msg}");
}

#[tokio::test]
async fn scram_secret_without_client_scram_keys_is_refused() {
    let pg = PgCluster::get();
    let scram = pg.stored_secret("scram_user");
    let dbs =
        format!("{APP_DB}\nforced = host={{pg_host}} port={{pg_port}} dbname=app user=scram_user");
    // PgBouncer's SQLSTATE and words to the client (tests/tests/parity/auth_query.rs); the reason
    // in the log.
    let why = "password is SCRAM secret but client authentication did not provide SCRAM keys";
    let s = start("trust", &dbs, &userlist(&[("scram_user", &scram)]));
    let (code, msg) = login_err(&s, "scram_user", "", "app").await;
    assert_eq!((code.as_str(), msg.as_str()), (WRONG_TYPE.0, WRONG_TYPE.1));
    assert!(s.log().contains(why), "{}", s.log());
    let users = userlist(&[("scram_user", &scram), ("md5_user", "md5_pass")]);
    let s = start("md5", &dbs, &users);
    let (code, msg) = login_err(&s, "md5_user", "md5_pass", "forced").await;
    assert_eq!((code.as_str(), msg.as_str()), (WRONG_TYPE.0, WRONG_TYPE.1));
    assert!(s.log().contains(why), "{}", s.log());
    // The pass-through path to the same server still works for scram_user itself.
    let s = start("scram-sha-256", &dbs, &users);
    assert_eq!(
        login_ok(&s, "scram_user", "scram_pass", "app").await.0,
        "scram_user"
    );
}

#[tokio::test]
async fn scram_secret_cannot_answer_a_cleartext_server() {
    let pg = PgCluster::get();
    // plain_user: SCRAM secret, hba `password`. SCRAM client auth succeeds, the server then wants the
    // cleartext password, which a SCRAM secret cannot provide.
    let users = userlist(&[("plain_user", &pg.stored_secret("plain_user"))]);
    let s = start("scram-sha-256", APP_DB, &users);
    let (code, msg) = login_err(&s, "plain_user", "plain_pass", "app").await;
    assert_eq!((code.as_str(), msg.as_str()), (WRONG_TYPE.0, WRONG_TYPE.1));
}

/// What a client is told when the stored secret cannot answer the server's method (PgBouncer's).
const WRONG_TYPE: (&str, &str) = ("08P01", "server login failed: wrong password type");

#[tokio::test]
async fn md5_secret_with_scram_auth_type_fails_like_a_wrong_password() {
    let pg = PgCluster::get();
    let users = userlist(&[("md5_user", &pg.stored_secret("md5_user"))]);
    let s = start("scram-sha-256", APP_DB, &users);
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await.0,
        AUTH_SASL
    );
    assert_eq!(
        login_err(&s, "md5_user", "md5_pass", "app").await,
        ("08P01".to_string(), sasl_failed())
    );
    // The client hears what any failure says; the operator's log says why (as PgBouncer's
    // "user has MD5 secret").
    let why = "the user's stored secret is md5, which cannot verify SCRAM-SHA-256";
    let mut log = s.log();
    for _ in 0..50 {
        if log.contains(why) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        log = s.log();
    }
    assert!(log.contains(why), "{log}");
}

#[tokio::test]
async fn wrong_password_and_unknown_user_look_the_same() {
    let pg = PgCluster::get();
    for (auth_type, users, expected) in [
        ("md5", plaintext_userlist(), AUTH_MD5),
        ("scram-sha-256", plaintext_userlist(), AUTH_SASL),
        (
            "scram-sha-256",
            userlist(&[("scram_user", &pg.stored_secret("scram_user"))]),
            AUTH_SASL,
        ),
        ("plain", plaintext_userlist(), AUTH_CLEARTEXT),
    ] {
        let s = start(auth_type, APP_DB, &users);
        let ghost = "auth_rs_no_such_user";
        let failed = if expected == AUTH_SASL {
            sasl_failed()
        } else {
            pw_failed(ghost)
        };
        assert_eq!(
            login_err(&s, "scram_user", "wrong", "app").await,
            ("08P01".to_string(), failed.clone()),
            "auth_type={auth_type}"
        );
        assert_eq!(
            login_err(&s, ghost, "wrong", "app").await,
            ("08P01".to_string(), failed.clone()),
            "auth_type={auth_type}"
        );
        // Even with the password of an existing user.
        assert_eq!(
            login_err(&s, ghost, "scram_pass", "app").await,
            ("08P01".to_string(), failed),
            "auth_type={auth_type}"
        );
        // Same authentication request for known and unknown users.
        assert_eq!(
            first_auth_request(s.port, "scram_user", "app").await.0,
            expected
        );
        assert_eq!(first_auth_request(s.port, ghost, "app").await.0, expected);
    }
}

#[tokio::test]
async fn unknown_database_without_fallback() {
    let s = start("md5", APP_DB, &plaintext_userlist());
    let (code, msg) = login_err(&s, "scram_user", "scram_pass", "auth_rs_nodb").await;
    assert!(msg.contains("no such database"), "{code} {msg}");
    // A wrong password gets the password error first: databases cannot be probed without a login.
    assert_eq!(
        login_err(&s, "scram_user", "wrong", "auth_rs_nodb").await,
        ("08P01".to_string(), pw_failed("scram_user"))
    );
    // `other` exists on the server but not in [databases].
    let (code, msg) = login_err(&s, "scram_user", "scram_pass", "other").await;
    assert!(msg.contains("no such database"), "{code} {msg}");
    assert_eq!(
        login_ok(&s, "scram_user", "scram_pass", "app").await.1,
        "app"
    );
}

#[tokio::test]
async fn fallback_database_serves_any_database_name() {
    let dbs = format!("{APP_DB}\n* = host={{pg_host}} port={{pg_port}}");
    let s = start("md5", &dbs, &plaintext_userlist());
    for (user, password) in ROLES {
        assert_eq!(
            login_ok(&s, user, password, "other").await,
            (user.to_string(), "other".to_string())
        );
    }
    assert_eq!(login_ok(&s, "md5_user", "md5_pass", "app").await.1, "app");
    // An auto-database whose server database does not exist: the server's error is forwarded.
    let (code, msg) = login_err(&s, "md5_user", "md5_pass", "auth_rs_nodb").await;
    assert_eq!(code, "3D000", "{msg}");
    assert!(msg.contains("auth_rs_nodb"), "{msg}");
}

#[tokio::test]
async fn forced_users_and_explicit_entries() {
    let dbs = "forced_pw = host={pg_host} port={pg_port} dbname=app user=md5_user password=md5_pass\n\
               forced_file = host={pg_host} port={pg_port} dbname=other user=plain_user\n\
               forced_trust = host={pg_host} port={pg_port} dbname=app user=trust_user\n\
               content_read = host=127.0.0.1 port={pg_port} dbname=app pool_size=20 pool_mode=transaction";
    let s = start("md5", dbs, &plaintext_userlist());
    for (db, user, dbname) in [
        ("forced_pw", "md5_user", "app"),
        ("forced_file", "plain_user", "other"),
        ("forced_trust", "trust_user", "app"),
        ("content_read", "scram_user", "app"),
    ] {
        // The client is still authenticated as itself...
        assert_eq!(
            login_err(&s, "scram_user", "wrong", db).await,
            ("08P01".to_string(), pw_failed("scram_user"))
        );
        // ...and the server sees the forced user (or the client's own for content_read).
        assert_eq!(
            login_ok(&s, "scram_user", "scram_pass", db).await,
            (user.to_string(), dbname.to_string()),
            "db {db}"
        );
    }
    assert_eq!(
        login_ok(&s, "md5_user", "md5_pass", "content_read").await.0,
        "md5_user"
    );
    // content_read is transaction pooled: statements and transactions run fine in sequence.
    let c = s
        .connect("plain_user", "plain_pass", "content_read")
        .await
        .unwrap();
    for _ in 0..3 {
        c.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
        let u: String = c
            .query_one("SELECT current_user::text", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(u, "plain_user");
    }
}

#[tokio::test]
async fn server_login_errors_are_forwarded() {
    let dbs = "missing = host={pg_host} port={pg_port} dbname=auth_rs_no_such_db\n\
               badpw = host={pg_host} port={pg_port} dbname=app user=md5_user password=not_md5_pass\n\
               badpw_scram = host={pg_host} port={pg_port} dbname=app user=scram_user password=nope";
    let s = start("md5", dbs, &plaintext_userlist());
    let (code, msg) = login_err(&s, "scram_user", "scram_pass", "missing").await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("3D000", "database \"auth_rs_no_such_db\" does not exist")
    );
    assert_eq!(
        login_err(&s, "scram_user", "scram_pass", "badpw").await,
        ("28P01".to_string(), server_pw_failed("md5_user"))
    );
    assert_eq!(
        login_err(&s, "md5_user", "md5_pass", "badpw_scram").await,
        ("28P01".to_string(), server_pw_failed("scram_user"))
    );
}
