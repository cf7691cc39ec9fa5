//! auth_user / auth_query / auth_dbname side by side: users that only PostgreSQL knows (md5_user
//! with an md5 secret, scram_user with a SCRAM verifier; neither in the auth file) log in through
//! auth_query with auth_user set globally or in the `[databases]` entry, under a database with a
//! forced `user=`, with auth_type trust and no auth file, with auth_dbname set globally, in the
//! entry, naming a missing database or a disabled one, and in a statement-mode pool. An
//! auth_query that fails is a configuration error for the client; an unknown user gets the answer
//! of a wrong password.

use std::sync::Once;

use sluice_e2e::PgCluster;

use super::{pair_with, report};

/// The auth file: auth_user (a superuser, so the default auth_query may read pg_authid), the
/// console's admin and trust_user (a forced user's server login). md5_user and scram_user are not
/// in it.
const USERS: &str = "\"pq_auth\" \"pq_auth_pass\"\n\"pq_badpw\" \"not_its_password\"\n\
                     \"admin\" \"admin_pass\"\n\"trust_user\" \"\"\n";
const DB: &str = "host={pg_host} port={pg_port}";

fn roles() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        PgCluster::get().psql(
            "postgres",
            "SET password_encryption = 'scram-sha-256'; \
             CREATE ROLE pq_auth LOGIN SUPERUSER PASSWORD 'pq_auth_pass'; \
             CREATE ROLE pq_badpw LOGIN SUPERUSER PASSWORD 'pq_badpw_pass';",
        );
    });
}

/// Log in and ask who the server session is: "ok <current_user>", or the error's SQLSTATE and
/// message.
async fn who(port: u16, user: &str, password: &str, db: &str) -> String {
    let cs = format!(
        "host=127.0.0.1 port={port} user={user} password='{password}' dbname={db} \
         connect_timeout=5"
    );
    let err = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(d) => format!("{} {}", d.code().code(), d.message()),
        None => format!("error: {e}"),
    };
    let (c, conn) = match tokio_postgres::connect(&cs, tokio_postgres::NoTls).await {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    tokio::spawn(conn);
    match c.simple_query("SELECT current_user").await {
        Ok(rows) => {
            let name = rows.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            });
            format!("ok {}", name.unwrap_or_default())
        }
        Err(e) => err(e),
    }
}

/// A step: (user, password, database).
type Step<'a> = (&'a str, &'a str, &'a str);

const USUAL: &[Step] = &[
    ("md5_user", "md5_pass", "app"),
    ("scram_user", "scram_pass", "app"),
    ("md5_user", "wrong", "app"),
    ("scram_user", "wrong", "app"),
    ("ghost", "x", "app"),
];

/// One configuration, the same steps on both; `disable` databases are disabled on both consoles
/// first.
async fn run(
    results: &mut Vec<(String, String, String)>,
    config: &str,
    extra: &str,
    dbs: &str,
    disable: &[&str],
    steps: &[Step<'_>],
) {
    roles();
    let dbs = dbs.replace("{db}", DB);
    let Some(p) = pair_with(
        &format!("admin_users = admin\nserver_connect_timeout = 3\n{extra}"),
        &dbs,
        USERS,
        &[],
    ) else {
        return;
    };
    for d in disable {
        for port in [p.pgb.port, p.sl.port] {
            let cs = format!(
                "host=127.0.0.1 port={port} user=admin password=admin_pass dbname=pgbouncer"
            );
            let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            c.simple_query(&format!("DISABLE {d}")).await.unwrap();
        }
    }
    for (user, pw, db) in steps {
        let label = if *pw == "wrong" { "!" } else { "" };
        results.push((
            format!("{config}: {user}{label}@{db}"),
            who(p.pgb.port, user, pw, db).await,
            who(p.sl.port, user, pw, db).await,
        ));
    }
    // Where an operator greps the log for the cause.
    for needle in LOG_LINES
        .iter()
        .filter(|(c, _)| *c == config)
        .map(|(_, n)| n)
    {
        let has = |log: String| format!("log has {needle:?}: {}", log.contains(needle));
        results.push((format!("{config}: log"), has(p.pgb.log()), has(p.sl.log())));
    }
}

/// (configuration, what its log says about the failure).
const LOG_LINES: &[(&str, &str)] = &[
    (
        "auth_query error",
        "error in auth_query: ERROR: column \"nosuchcolumn\" does not exist",
    ),
    (
        "auth_dbname missing",
        "authentication database \"nosuchdb\" is not configured",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_query_configurations_match_pgbouncer() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    let mut r = Vec::new();
    let md5 = "auth_type = md5\n";
    run(
        &mut r,
        "global auth_user",
        &format!("{md5}auth_user = pq_auth"),
        "app = {db} dbname=app",
        &[],
        USUAL,
    )
    .await;
    run(
        &mut r,
        "auth_user in [databases]",
        md5,
        "app = {db} dbname=app auth_user=pq_auth\nother = {db} dbname=other",
        &[],
        &[USUAL, &[("md5_user", "md5_pass", "other")]].concat(),
    )
    .await;
    run(
        &mut r,
        "forced user",
        &format!("{md5}auth_user = pq_auth"),
        "app = {db} dbname=app user=trust_user",
        &[],
        USUAL,
    )
    .await;
    run(
        &mut r,
        "forced user, auth_user in [databases]",
        md5,
        "app = {db} dbname=app user=trust_user auth_user=pq_auth",
        &[],
        USUAL,
    )
    .await;
    run(
        &mut r,
        "trust without auth_file",
        "auth_type = trust\nauth_file =\nauth_user = postgres",
        "app = {db} dbname=app",
        &[],
        &[
            ("md5_user", "", "app"),
            ("scram_user", "", "app"),
            ("ghost", "", "app"),
        ],
    )
    .await;
    run(
        &mut r,
        "global auth_dbname",
        &format!("{md5}auth_user = pq_auth\nauth_dbname = authdb"),
        "app = {db} dbname=app\nauthdb = {db} dbname=postgres",
        &[],
        USUAL,
    )
    .await;
    run(
        &mut r,
        "auth_dbname in [databases]",
        &format!("{md5}auth_user = pq_auth"),
        "app = {db} dbname=app auth_dbname=authdb\nauthdb = {db} dbname=postgres",
        &[],
        USUAL,
    )
    .await;
    run(
        &mut r,
        "auth_dbname missing",
        &format!("{md5}auth_user = pq_auth\nauth_dbname = nosuchdb"),
        "app = {db} dbname=app",
        &[],
        &USUAL[..2],
    )
    .await;
    run(
        &mut r,
        "auth_dbname disabled",
        &format!("{md5}auth_user = pq_auth\nauth_dbname = authdb"),
        "app = {db} dbname=app\nauthdb = {db} dbname=postgres",
        &["authdb"],
        &USUAL[..2],
    )
    .await;
    run(
        &mut r,
        "statement pooling",
        &format!("{md5}auth_user = pq_auth\npool_mode = statement"),
        "app = {db} dbname=app",
        &[],
        USUAL,
    )
    .await;
    run(
        &mut r,
        "auth_query error",
        &format!(
            "{md5}auth_user = pq_auth\n\
             auth_query = SELECT usename, nosuchcolumn FROM pg_shadow WHERE usename=$1"
        ),
        "app = {db} dbname=app",
        &[],
        &USUAL[..1],
    )
    .await;
    run(
        &mut r,
        "auth_query of one column",
        &format!(
            "{md5}auth_user = pq_auth\n\
             auth_query = SELECT rolname FROM pg_authid WHERE rolname=$1"
        ),
        "app = {db} dbname=app",
        &[],
        &USUAL[..1],
    )
    .await;
    run(
        &mut r,
        "auth_user's server login fails",
        &format!("{md5}auth_user = pq_badpw"),
        "app = {db} dbname=app",
        &[],
        &USUAL[..1],
    )
    .await;
    run(
        &mut r,
        "auth database's server down",
        &format!("{md5}auth_user = pq_auth\nauth_dbname = authdb\nquery_wait_timeout = 3"),
        "app = {db} dbname=app\nauthdb = host={pg_host} port=1 dbname=postgres",
        &[],
        &USUAL[..1],
    )
    .await;
    // The fourteen configurations' steps (5 + 6 + 5 + 5 + 3 + 5 + 5 + 2 + 2 + 5 + 1 + 1 + 1 + 1)
    // and their two log lines.
    report(&r, 47 + 2);
}
