//! Client-connection limits side by side: max_db_client_connections (global and per database),
//! max_user_client_connections (global and per user in [users], the user's value overriding the
//! global one), counted across users, databases and auth methods, and given back when a client
//! leaves. PgBouncer 1.25.2 refuses the client over a limit with `08P01 client connections
//! exceeded (max_db_client_connections)` (or `..._user_...`), before authenticating it; Sluice
//! authenticates first (`user!` steps: a wrong password; deliberate, see `DELIBERATE`).

use std::time::Duration;

use super::{pair_with, report};

const DBS: &str = "app = host={pg_host} port={pg_port} dbname=app\n\
                   other = host={pg_host} port={pg_port} dbname=other";
const USERS: &str = "\"trust_user\" \"\"\n\"md5_user\" \"md5_pass\"\n\
                     \"plain_user\" \"plain_pass\"\n\"admin\" \"\"\n";
/// trust_user logs in without a password, every other user with md5: two auth methods.
const HBA: &str = "host all trust_user 127.0.0.1/32 trust\n\
                   host all admin 127.0.0.1/32 trust\n\
                   host all all 127.0.0.1/32 md5\n";
const BASE: &str = "auth_type = hba\nauth_hba_file = {hba}\nadmin_users = admin";

/// Held connections of one process, and what each attempt observed.
struct Clients {
    port: u16,
    held: Vec<(String, tokio_postgres::Client)>,
}

impl Clients {
    /// Log in as `user` to `db` and keep the connection; "ok" or the error's SQLSTATE and text.
    async fn open(&mut self, user: &str, db: &str) -> String {
        // `user!`: the user with a wrong password.
        let (user, pw) = match user {
            "md5_user" => (user, "md5_pass"),
            "plain_user" => (user, "plain_pass"),
            u => (
                u.trim_end_matches('!'),
                if u.ends_with('!') { "wrong" } else { "" },
            ),
        };
        let cs = format!(
            "host=127.0.0.1 port={} user={user} password='{pw}' dbname={db} connect_timeout=5",
            self.port
        );
        match tokio_postgres::connect(&cs, tokio_postgres::NoTls).await {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                // The console answers its own commands only.
                let probe = if db == "pgbouncer" {
                    "SHOW VERSION"
                } else {
                    "SELECT 1"
                };
                match c.simple_query(probe).await {
                    Ok(_) => {
                        self.held.push((format!("{user}@{db}"), c));
                        "ok".into()
                    }
                    Err(e) => match e.as_db_error() {
                        Some(d) => format!("{} {}", d.code().code(), d.message()),
                        None => format!("error: {e}"),
                    },
                }
            }
            Err(e) => match e.as_db_error() {
                Some(d) => format!("{} {}", d.code().code(), d.message()),
                None => format!("error: {e}"),
            },
        }
    }

    /// Close the first held connection of `user@db`, and give both poolers time to notice.
    async fn close(&mut self, who: &str) {
        if let Some(i) = self.held.iter().position(|(w, _)| w == who) {
            drop(self.held.remove(i));
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

/// One configuration, the same steps on both: each step is (label, action) where the action
/// is `+user@db` (connect and hold) or `-user@db` (disconnect).
async fn run(
    results: &mut Vec<(String, String, String)>,
    config: &str,
    extra: &str,
    dbs: &str,
    steps: &[&str],
) {
    let Some(p) = pair_with(
        &format!("{BASE}\n{extra}"),
        dbs,
        USERS,
        &[("hba.conf", HBA)],
    ) else {
        return;
    };
    let mut a = Clients {
        port: p.pgb.port,
        held: Vec::new(),
    };
    let mut b = Clients {
        port: p.sl.port,
        held: Vec::new(),
    };
    for (i, step) in steps.iter().enumerate() {
        let (op, who) = step.split_at(1);
        if op == "-" {
            a.close(who).await;
            b.close(who).await;
            continue;
        }
        let (user, db) = who.split_once('@').unwrap();
        results.push((
            format!("{config}: step {i} {who}"),
            a.open(user, db).await,
            b.open(user, db).await,
        ));
    }
    // What the console reports afterwards (the counts and limits of databases and users).
    let mut ca = super::console(p.pgb.port).await;
    let mut cb = super::console(p.sl.port).await;
    // (The console's own row counts this console client too, on both sides.)
    let dbs: &[&str] = &["app", "other", "pgbouncer"];
    let users: &[&str] = &["md5_user", "trust_user"];
    for (what, key_col, names) in [
        ("DATABASES", "current_client_connections", dbs),
        ("DATABASES", "max_client_connections", dbs),
        ("USERS", "current_client_connections", users),
        ("USERS", "max_user_client_connections", users),
    ] {
        let ra = ca.query(&format!("SHOW {what}")).await.unwrap();
        let rb = cb.query(&format!("SHOW {what}")).await.unwrap();
        for &n in names {
            results.push((
                format!("{config}: SHOW {what} {n} {key_col}"),
                ra.get(n, key_col).unwrap_or_default(),
                rb.get(n, key_col).unwrap_or_default(),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connection_limits_match_pgbouncer() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    let mut results = Vec::new();
    // Global max_db_client_connections: two clients of app, whatever their user and auth method;
    // the third is refused (either user), other is not limited by app's count; a leaving client
    // makes room.
    run(
        &mut results,
        "global max_db_client_connections=2",
        "max_db_client_connections = 2",
        DBS,
        &[
            "+trust_user@app",
            "+md5_user@app",
            "+md5_user@app",
            "+trust_user@app",
            "+md5_user!@app",
            "+trust_user@other",
            "+md5_user@other",
            "+plain_user@other",
            "-trust_user@app",
            "+plain_user@app",
            "+trust_user@app",
        ],
    )
    .await;
    // max_db_client_connections in the database entry: only app is limited (to 1).
    run(
        &mut results,
        "max_db_client_connections=1 in [databases]",
        "",
        "app = host={pg_host} port={pg_port} dbname=app max_db_client_connections=1\n\
         other = host={pg_host} port={pg_port} dbname=other",
        &[
            "+md5_user@app",
            "+trust_user@app",
            "+trust_user@other",
            "+trust_user@other",
            "-md5_user@app",
            "+trust_user@app",
        ],
    )
    .await;
    // The entry's value overrides the global one (both directions).
    run(
        &mut results,
        "[databases] value over the global one",
        "max_db_client_connections = 1",
        "app = host={pg_host} port={pg_port} dbname=app max_db_client_connections=3\n\
         other = host={pg_host} port={pg_port} dbname=other",
        &[
            "+md5_user@app",
            "+trust_user@app",
            "+plain_user@app",
            "+plain_user@app",
            "+trust_user@other",
            "+md5_user@other",
        ],
    )
    .await;
    // Global max_user_client_connections: per user across databases.
    run(
        &mut results,
        "global max_user_client_connections=1",
        "max_user_client_connections = 1",
        DBS,
        &[
            "+md5_user@app",
            "+md5_user!@other",
            "+md5_user@other",
            "+trust_user@other",
            "+trust_user@app",
            "-md5_user@app",
            "+md5_user@other",
        ],
    )
    .await;
    // [users] max_user_client_connections overrides the global value for that user only.
    run(
        &mut results,
        "[users] value over the global one",
        "max_user_client_connections = 1\n\n[users]\nmd5_user = max_user_client_connections=2",
        DBS,
        &[
            "+md5_user@app",
            "+md5_user@other",
            "+md5_user@app",
            "+trust_user@app",
            "+trust_user@app",
        ],
    )
    .await;
    // An explicit 0 in [users] and [databases] (PgBouncer: "not set", the global value applies).
    run(
        &mut results,
        "0 in [users] and [databases]",
        "max_user_client_connections = 1\nmax_db_client_connections = 2\n\n[users]\n\
         md5_user = max_user_client_connections=0",
        "app = host={pg_host} port={pg_port} dbname=app max_db_client_connections=0\n\
         other = host={pg_host} port={pg_port} dbname=other",
        &[
            "+md5_user@app",
            "+md5_user@app",
            "+trust_user@app",
            "+plain_user@app",
        ],
    )
    .await;
    // Both limits at once: the database's is checked as PgBouncer checks it.
    run(
        &mut results,
        "both limits",
        "max_db_client_connections = 2\nmax_user_client_connections = 1",
        DBS,
        &[
            "+md5_user@app",
            "+md5_user@app",
            "+trust_user@app",
            "+plain_user@app",
        ],
    )
    .await;
    // The console counts as database pgbouncer (the global limit) and its users as any others';
    // admin_users pass both limits.
    run(
        &mut results,
        "the console",
        "max_db_client_connections = 2\nmax_user_client_connections = 1\n\
         stats_users = trust_user, md5_user",
        DBS,
        &[
            "+trust_user@pgbouncer",
            "+trust_user@pgbouncer",
            "+md5_user@pgbouncer",
            "+md5_user@app",
            "+admin@pgbouncer",
            "+plain_user@pgbouncer",
            "-trust_user@pgbouncer",
            "+md5_user@pgbouncer",
            "+admin@pgbouncer",
        ],
    )
    .await;
    // A database with a forced user: the limit counts the users clients log in as.
    run(
        &mut results,
        "forced user",
        "max_user_client_connections = 1",
        "app = host={pg_host} port={pg_port} dbname=app user=md5_user password=md5_pass\n\
         other = host={pg_host} port={pg_port} dbname=other",
        &[
            "+trust_user@app",
            "+plain_user@app",
            "+plain_user@app",
            "+md5_user@other",
            "+md5_user@app",
        ],
    )
    .await;
    // 53 `+` steps in the nine configurations, and ten console figures after each (three
    // databases and two users, two columns each).
    report(&results, 53 + 9 * 10);
}
