//! Process lifecycle log output of the real `sluice` binary: the periodic stats line, the
//! login/disconnect lines, log_connections = 0, passwords never being logged.

mod lifecycle_common;

use std::time::{Duration, Instant};

use sluice_e2e::Sluice;

use lifecycle_common::{db_line, one, wait_lines, wait_log, wait_log_count, MD5_USERLIST};

// ---------------------------------------------------------------------------------------------
// Log output
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_line_is_logged_every_stats_period() {
    let ini = Sluice::basic_ini("stats_period = 1", &db_line("app", "app"));
    let s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    let until = Instant::now() + Duration::from_millis(2200);
    while Instant::now() < until {
        c.simple_query("SELECT 1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        wait_log_count(&s, "xacts/s", 2, Duration::from_secs(3)).await,
        "fewer than 2 stats lines in ~4 s with stats_period = 1:\n{}",
        s.log()
    );
    let log = s.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("stats: ")).collect();
    for l in &lines {
        assert!(l.contains(" LOG stats: ") && l.contains("queries/s"), "{l}");
    }
    let busy = lines.iter().any(|l| {
        l.split("stats: ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    });
    assert!(busy, "no stats line counts the queries run:\n{log}");
}

#[tokio::test]
async fn login_and_disconnect_lines_are_logged() {
    let ini = Sluice::basic_ini("", &db_line("app", "app"));
    let s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT 'x'::text").await, "x");
    assert!(
        wait_log(&s, "login attempt", Duration::from_secs(3)).await,
        "{}",
        s.log()
    );
    let log = s.log();
    let login = log.lines().find(|l| l.contains("login attempt")).unwrap();
    // PgBouncer 1.25.2's line, word for word after the client's label.
    assert!(
        login.ends_with("login attempt: db=app user=md5_user tls=no replication=no"),
        "{login}"
    );
    // The new server too, in PgBouncer's words (its local address when over TCP).
    let server = log
        .lines()
        .find(|l| l.contains("new connection to server"))
        .unwrap_or_else(|| panic!("no server line:\n{log}"));
    assert!(server.contains("app/md5_user@"), "{server}");
    drop(c);
    // (The harness's readiness probe also leaves a "closing because" line, without db/user.)
    let mine = ["app/md5_user@", "closing because: client close request"];
    assert!(
        wait_lines(&s, &mine, 1, Duration::from_secs(3)).await,
        "no disconnect line for the client:\n{}",
        s.log()
    );
    // A refused login is logged with its reason too.
    assert!(s.connect("md5_user", "bad_pw", "app").await.is_err());
    assert!(
        wait_lines(
            &s,
            &[
                "md5_user@",
                "closing because: password authentication failed"
            ],
            1,
            Duration::from_secs(3)
        )
        .await,
        "no disconnect line for a failed login:\n{}",
        s.log()
    );
    // Written before authentication, as PgBouncer does: the failed attempt is in the log too.
    let attempts = s
        .log()
        .lines()
        .filter(|l| l.contains("login attempt: db=app user=md5_user"))
        .count();
    assert_eq!(attempts, 2, "{}", s.log());
}

#[tokio::test]
async fn log_connections_0_suppresses_the_login_line() {
    let ini = Sluice::basic_ini("log_connections = 0", &db_line("app", "app"));
    let s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT 'x'::text").await, "x");
    drop(c);
    // The disconnect line still comes (log_disconnections = 1), so the log is being written.
    assert!(
        wait_lines(
            &s,
            &["app/md5_user@", "closing because"],
            1,
            Duration::from_secs(3)
        )
        .await,
        "{}",
        s.log()
    );
    assert!(
        !s.log().contains("login attempt") && !s.log().contains("new connection to server"),
        "login line despite log_connections = 0:\n{}",
        s.log()
    );
}

#[tokio::test]
async fn passwords_never_appear_in_the_log() {
    // Most verbose logging; md5 and cleartext client auth, server logins with md5 and cleartext.
    for (auth_type, user, pw) in [
        ("md5", "md5_user", "md5_pass"),
        ("plain", "plain_user", "plain_pass"),
    ] {
        let ini = Sluice::basic_ini(
            &format!("auth_type = {auth_type}\nlog_pooler_errors = 1"),
            &db_line("app", "app"),
        );
        let s = Sluice::builder(&ini)
            .userlist(&format!("\"{user}\" \"{pw}\"\n"))
            .arg("-v")
            .arg("-v")
            .start();
        let c = s.connect(user, pw, "app").await.unwrap();
        assert_eq!(one(&c, "SELECT current_user::text").await, user);
        drop(c);
        let wrong = "Wr0ng_Secret_zz9";
        assert!(s.connect(user, wrong, "app").await.is_err());
        assert!(
            wait_lines(
                &s,
                &[
                    &format!("{user}@"),
                    "closing because: password authentication failed"
                ],
                1,
                Duration::from_secs(3)
            )
            .await,
            "{}",
            s.log()
        );
        let log = s.log();
        assert!(!log.is_empty());
        for secret in [pw, wrong] {
            assert!(
                !log.contains(secret),
                "{auth_type}: password {secret:?} in the log:\n{log}"
            );
        }
    }
}

/// A server's closing reasons in PgBouncer 1.25.2's words (compared side by side, 2026-11-29): a
/// host name that does not resolve is `server DNS lookup failed` (not a crash); RELOAD of a changed
/// entry closes an idle server with `database configuration changed`, and one in use when its
/// client lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_close_with_pgbouncers_reasons() {
    let dbs = format!(
        "{}\nnowhere = host=no-such-host.invalid port=5432 dbname=app",
        db_line("app", "app")
    );
    let ini = Sluice::basic_ini("server_login_retry = 1\npool_mode = transaction", &dbs);
    let s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let _ = tokio::time::timeout(
        Duration::from_secs(3),
        s.connect("md5_user", "md5_pass", "nowhere"),
    )
    .await;
    let dns = [
        "nowhere/md5_user@",
        "closing because: server DNS lookup failed",
    ];
    assert!(
        wait_lines(&s, &dns, 1, Duration::from_secs(5)).await,
        "{}",
        s.log()
    );
    assert!(!s.log().contains(
        "nowhere/md5_user@no-such-host.invalid:5432 closing because: server conn crashed?"
    ));

    // One server idle, one in a transaction, then the entry changes under them.
    let idle = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    let busy = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    busy.batch_execute("BEGIN").await.unwrap();
    assert_eq!(one(&idle, "SELECT 'x'::text").await, "x");
    let path = s.dir.path().join("pgbouncer.ini");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("dbname=app", "dbname=app connect_query='SELECT 1'"),
    )
    .unwrap();
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let changed = [
        "app/md5_user@",
        "closing because: database configuration changed",
    ];
    assert!(
        wait_lines(&s, &changed, 1, Duration::from_secs(5)).await,
        "{}",
        s.log()
    );
    busy.batch_execute("COMMIT").await.unwrap();
    assert!(
        wait_lines(&s, &changed, 2, Duration::from_secs(5)).await
            || wait_lines(
                &s,
                &["app/md5_user@", "closing because: close_needed"],
                1,
                Duration::from_secs(1)
            )
            .await,
        "{}",
        s.log()
    );
    assert_eq!(one(&busy, "SELECT 'y'::text").await, "y");
}
