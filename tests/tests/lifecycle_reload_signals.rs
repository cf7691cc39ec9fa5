//! Process lifecycle under signals through the real `sluice` binary: daemon mode with pidfile,
//! SIGHUP reload and the shutdown signals (TERM / INT / QUIT / second TERM).

mod lifecycle_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::{free_port, PgCluster, Sluice};

use lifecycle_common::{
    connect_refused, db_line, one, reload, run_cli, wait_exit, wait_log, MD5_USERLIST,
};

// ---------------------------------------------------------------------------------------------
// Daemon mode
// ---------------------------------------------------------------------------------------------

/// Kills a daemonized sluice (identified by its config path) if the test ends early.
struct DaemonGuard {
    pid: Option<i32>,
    config: PathBuf,
}

fn pid_is_ours_and_alive(pid: i32, config: &Path) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 3 (after the parenthesised comm) is the state; a zombie has exited.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("");
    String::from_utf8_lossy(&cmdline).contains(&*config.to_string_lossy()) && state != "Z"
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            if pid_is_ours_and_alive(pid, &self.config) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

#[tokio::test]
async fn daemon_mode_writes_pidfile_serves_and_stops_on_sigterm() {
    let pg = PgCluster::get();
    let dir = tempfile::Builder::new()
        .prefix("sluice-e2e-daemon-")
        .tempdir()
        .unwrap();
    let d = dir.path().display().to_string();
    let port = free_port();
    let pidfile = dir.path().join("sluice.pid");
    let logfile = dir.path().join("sluice.log");
    let config = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &config,
        format!(
            "[databases]\napp = host=127.0.0.1 port={pg} dbname=app\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {d}\n\
             auth_file = {d}/userlist.txt\npidfile = {pidf}\nlogfile = {logf}\n",
            pg = pg.port,
            pidf = pidfile.display(),
            logf = logfile.display(),
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("userlist.txt"), MD5_USERLIST).unwrap();
    let mut guard = DaemonGuard {
        pid: None,
        config: config.clone(),
    };
    let log = || std::fs::read_to_string(&logfile).unwrap_or_default();

    // The command itself returns promptly with success.
    let started = Instant::now();
    let (st, out, err) = run_cli(&["-d", &config.display().to_string()]);
    assert!(st.success(), "sluice -d: {st}\n{out}\n{err}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The pidfile names a live process that is not the one we started (it forked).
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "no pidfile; log:\n{}", log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    guard.pid = Some(pid);
    assert!(
        pid_is_ours_and_alive(pid, &config),
        "pidfile pid {pid} is not a running sluice; log:\n{}",
        log()
    );

    // It serves.
    let deadline = Instant::now() + Duration::from_secs(10);
    while connect_refused(port) {
        assert!(
            Instant::now() < deadline,
            "daemon not listening; log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let cs = format!("host=127.0.0.1 port={port} user=md5_user password=md5_pass dbname=app");
    let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{e:?}; log:\n{}", log()));
    tokio::spawn(conn);
    assert_eq!(one(&c, "SELECT current_database()::text").await, "app");
    drop(c);

    // SIGTERM: exits (no clients left) and removes the pidfile.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_is_ours_and_alive(pid, &config) {
        assert!(
            Instant::now() < deadline,
            "daemon still running 10 s after SIGTERM; log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while pidfile.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        !pidfile.exists(),
        "pidfile left behind after exit; log:\n{}",
        log()
    );
    assert!(connect_refused(port), "port still open after exit");
}

#[test]
fn daemon_mode_without_pidfile_is_refused() {
    let ini = Sluice::basic_ini("", &db_line("app", "app"));
    let (st, out) = Sluice::builder(&ini)
        .userlist(MD5_USERLIST)
        .arg("-d")
        .run_expect_exit(Duration::from_secs(10));
    assert!(!st.success(), "-d without pidfile exited {st}:\n{out}");
    assert!(out.contains("pidfile"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// SIGHUP reload
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reload_applies_new_default_pool_size() {
    let ini = |size: u32| {
        Sluice::basic_ini(
            &format!("pool_mode = session\ndefault_pool_size = {size}\nquery_wait_timeout = 10"),
            &db_line("app", "app"),
        )
    };
    let s = Sluice::builder(&ini(1)).userlist(MD5_USERLIST).start();
    // A holds the only server (session mode).
    let a = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    a.simple_query("SELECT 1").await.unwrap();
    // B has to wait for it.
    let b = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    let waiting = tokio::spawn(async move {
        let r = one(&b, "SELECT '2'").await;
        (b, r)
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !waiting.is_finished(),
        "B got a server although default_pool_size = 1 and A holds it"
    );
    assert!(reload(&s, &ini(2)).await, "reload failed:\n{}", s.log());
    // With 2 servers allowed, B is served while A still holds its server.
    let (b, r) = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .unwrap_or_else(|_| panic!("B still waiting after pool size 1 -> 2; log:\n{}", s.log()))
        .unwrap();
    assert_eq!(r, "2");
    // And the new limit holds: a third client waits.
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    let third = tokio::spawn(async move { c.simple_query("SELECT 3").await.map(|_| c) });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !third.is_finished(),
        "third client got a server with default_pool_size = 2"
    );
    drop(b);
    let c = tokio::time::timeout(Duration::from_secs(3), third)
        .await
        .expect("third client served once B left")
        .unwrap()
        .unwrap();
    drop((a, c));
}

/// A RELOAD from session to transaction pooling applies to new clients; a client logged in under
/// session pooling keeps its server, and the session state it set there, until it leaves.
/// (PgBouncer 1.25.2 moves it to transaction pooling at its next transaction's end, where its
/// SETs are silently lost; docs/compat.md.)
#[tokio::test]
async fn reload_to_transaction_mode_leaves_session_clients_their_server() {
    let ini = |mode: &str| {
        Sluice::basic_ini(
            &format!("pool_mode = {mode}\ndefault_pool_size = 1\nquery_wait_timeout = 10"),
            &db_line("app", "app"),
        )
    };
    let s = Sluice::builder(&ini("session"))
        .userlist(MD5_USERLIST)
        .start();
    let a = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    let pid = one(&a, "SELECT pg_backend_pid()::text").await;
    a.simple_query("SET work_mem = '3MB'").await.unwrap();
    assert!(reload(&s, &ini("transaction")).await, "{}", s.log());
    // B, a new client, is under transaction pooling: it waits for the one server A holds.
    let b = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    let waiting = tokio::spawn(async move {
        let r = one(&b, "SELECT '2'").await;
        (b, r)
    });
    for _ in 0..3 {
        assert_eq!(one(&a, "SELECT pg_backend_pid()::text").await, pid);
        assert_eq!(one(&a, "SHOW work_mem").await, "3MB");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!waiting.is_finished(), "A's server went to B");
    drop(a);
    let (_b, r) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("B served once A left")
        .unwrap();
    assert_eq!(r, "2");
}

#[tokio::test]
async fn reload_changed_dbname_replaces_servers() {
    let ini =
        |dbname: &str| Sluice::basic_ini("pool_mode = transaction", &db_line("appdb", dbname));
    let s = Sluice::builder(&ini("app")).userlist(MD5_USERLIST).start();
    let old_client = s.connect("md5_user", "md5_pass", "appdb").await.unwrap();
    assert_eq!(
        one(&old_client, "SELECT current_database()::text").await,
        "app"
    );
    assert!(
        reload(&s, &ini("other")).await,
        "reload failed:\n{}",
        s.log()
    );
    let c = s.connect("md5_user", "md5_pass", "appdb").await.unwrap();
    assert_eq!(
        one(&c, "SELECT current_database()::text").await,
        "other",
        "new client still served by the old database; log:\n{}",
        s.log()
    );
    // The already connected client's next transaction also lands in the new database.
    assert_eq!(
        one(&old_client, "SELECT current_database()::text").await,
        "other",
        "log:\n{}",
        s.log()
    );
}

#[tokio::test]
async fn reload_removed_database_refuses_new_connections() {
    let both = Sluice::basic_ini(
        "",
        &format!("{}\n{}", db_line("app", "app"), db_line("gone", "other")),
    );
    let s = Sluice::builder(&both).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "gone").await.unwrap();
    assert_eq!(one(&c, "SELECT current_database()::text").await, "other");
    drop(c);
    let only_app = Sluice::basic_ini("", &db_line("app", "app"));
    assert!(reload(&s, &only_app).await, "reload failed:\n{}", s.log());
    let err = match s.connect("md5_user", "md5_pass", "gone").await {
        Ok(_) => panic!("connected to a removed database; log:\n{}", s.log()),
        Err(e) => e,
    };
    let msg = err
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| format!("{err:?}"));
    assert!(msg.contains("no such database"), "{msg}");
    // The remaining database still works.
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT current_database()::text").await, "app");
}

#[tokio::test]
async fn reload_of_broken_config_keeps_the_old_one() {
    let good = Sluice::basic_ini("default_pool_size = 3", &db_line("app", "app"));
    let mut s = Sluice::builder(&good).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    // Broken: a bad value and the database renamed; neither may take effect.
    let broken = Sluice::basic_ini("default_pool_size = lots", &db_line("renamed", "other"));
    assert!(
        !reload(&s, &broken).await,
        "a broken config was reloaded:\n{}",
        s.log()
    );
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("RELOAD failed"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("default_pool_size") && line.contains("pgbouncer.ini"),
        "reload error does not name the file and key: {line}"
    );
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "sluice exited:\n{log}"
    );
    // Old config still in force: the existing client and new clients of `app` work, `renamed` does not exist.
    assert_eq!(one(&c, "SELECT current_database()::text").await, "app");
    let c2 = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c2, "SELECT current_database()::text").await, "app");
    assert!(s.connect("md5_user", "md5_pass", "renamed").await.is_err());
}

#[tokio::test]
async fn reload_applies_changed_userlist_password() {
    // The client user exists only in the userlist; servers log in as the forced trust_user.
    let ini = Sluice::basic_ini(
        "auth_type = md5",
        "app = host={pg_host} port={pg_port} dbname=app user=trust_user",
    );
    let s = Sluice::builder(&ini)
        .userlist("\"lc_rotating\" \"first_Pw_1\"\n")
        .start();
    let c = s.connect("lc_rotating", "first_Pw_1", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT current_user::text").await, "trust_user");
    assert!(s
        .connect("lc_rotating", "second_Pw_2", "app")
        .await
        .is_err());

    s.write_file("userlist.txt", "\"lc_rotating\" \"second_Pw_2\"\n");
    assert!(reload(&s, &ini).await, "reload failed:\n{}", s.log());
    let c2 = s
        .connect("lc_rotating", "second_Pw_2", "app")
        .await
        .unwrap_or_else(|e| panic!("new password refused after reload: {e:?}\n{}", s.log()));
    assert_eq!(one(&c2, "SELECT 'ok'::text").await, "ok");
    let err = match s.connect("lc_rotating", "first_Pw_1", "app").await {
        Ok(_) => panic!("old password still accepted after reload"),
        Err(e) => e,
    };
    // PgBouncer's answer to a wrong password (08P01, the user not named).
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::PROTOCOL_VIOLATION),
        "{err:?}"
    );
    // Already logged-in clients are unaffected.
    assert_eq!(one(&c, "SELECT 'still'::text").await, "still");
}

// ---------------------------------------------------------------------------------------------
// Shutdown signals
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn sigterm_refuses_new_connections_and_waits_for_clients() {
    let ini = Sluice::basic_ini("pool_mode = transaction", &db_line("app", "app"));
    let mut s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT 'x'::text").await, "x");
    let unix = s.socket_dir.join(format!(".s.PGSQL.{}", s.port));
    assert!(std::os::unix::net::UnixStream::connect(&unix).is_ok());
    s.signal(Signal::SIGTERM);
    // New TCP connections are refused soon.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !connect_refused(s.port) {
        assert!(
            Instant::now() < deadline,
            "still accepting TCP after SIGTERM; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The Unix socket still accepts (as PgBouncer's: the admin console stays reachable), but a
    // pool login there is refused.
    assert!(std::os::unix::net::UnixStream::connect(&unix).is_ok());
    assert_pool_login_refused_on_unix(&s).await;
    // The existing client keeps working, also across transactions.
    for i in 0..3 {
        assert_eq!(one(&c, &format!("SELECT '{i}'::text")).await, i.to_string());
        c.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "exited while a client was connected; log:\n{}",
        s.log()
    );
    assert_eq!(one(&c, "SELECT 'y'::text").await, "y");
    drop(c);
    let st = wait_exit(&mut s, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| {
            panic!(
                "still running after the last client left; log:\n{}",
                s.log()
            )
        });
    assert!(st.success(), "exit status {st}; log:\n{}", s.log());
    assert!(
        std::os::unix::net::UnixStream::connect(&unix).is_err(),
        "Unix socket still accepting after exit"
    );
}

/// A pool login over the Unix socket during a shutdown: `08P01 pooler is shutting down`.
async fn assert_pool_login_refused_on_unix(s: &Sluice) {
    let dsn = format!(
        "host={} port={} user=md5_user password=md5_pass dbname=app",
        s.socket_dir.display(),
        s.port
    );
    let err = match tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await {
        Ok(_) => panic!("pool login accepted during shutdown; log:\n{}", s.log()),
        Err(e) => e,
    };
    let db = err
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {err:?}; log:\n{}", s.log()));
    assert_eq!(
        (db.code().code(), db.message()),
        ("08P01", "pooler is shutting down")
    );
}

#[tokio::test]
async fn sigint_waits_for_servers_then_exits_and_tells_idle_clients_at_their_next_query() {
    let ini = Sluice::basic_ini("pool_mode = transaction", &db_line("app", "app"));
    let mut s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let idle = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&idle, "SELECT 'i'::text").await, "i");
    let busy = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    busy.batch_execute("BEGIN").await.unwrap();
    assert_eq!(one(&busy, "SELECT 'b'::text").await, "b");

    s.signal(Signal::SIGINT);
    // New connections are no longer accepted.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !connect_refused(s.port) {
        assert!(
            Instant::now() < deadline,
            "TCP still accepting after SIGINT; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_pool_login_refused_on_unix(&s).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "exited while a server was in use; log:\n{}",
        s.log()
    );
    // The idle client is not let go at once (as PgBouncer's): its next query is refused.
    assert!(
        !idle.is_closed(),
        "idle client let go at once during WAIT_FOR_SERVERS; log:\n{}",
        s.log()
    );
    let err = idle.simple_query("SELECT 1").await.unwrap_err();
    let db = err.as_db_error().expect("a FATAL from the pooler");
    assert_eq!(
        (db.code().code(), db.message()),
        ("57P01", "server shutting down")
    );
    // The client in a transaction can finish it.
    assert_eq!(one(&busy, "SELECT 'still'::text").await, "still");
    busy.batch_execute("COMMIT").await.unwrap();
    // Server released -> exit, although the idle client is still connected.
    let st = wait_exit(&mut s, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| {
            panic!(
                "still running after the last server was released; log:\n{}",
                s.log()
            )
        });
    assert!(st.success(), "exit status {st}; log:\n{}", s.log());
}

/// A service script takes the pooler for started once its pidfile names it, or once its port
/// answers (this harness's `start`), and both happen as soon as the listeners are bound: a SIGHUP
/// at that moment must reload, not meet the signal's default action (exit) because the handlers
/// came later. The pidfile is watched every millisecond and signalled the moment it appears;
/// several rounds, as the window was a few milliseconds wide.
#[tokio::test]
async fn a_sighup_as_soon_as_the_pidfile_appears_reloads() {
    let ini = Sluice::basic_ini("pidfile = {dir}/sluice.pid", &db_line("app", "app"));
    for round in 0..6 {
        let mut s = Sluice::builder(&ini).userlist(MD5_USERLIST).spawn_unready();
        let pidfile = s.socket_dir.join("sluice.pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pidfile.exists() {
            assert!(Instant::now() < deadline, "no pidfile; log:\n{}", s.log());
            std::thread::sleep(Duration::from_millis(1));
        }
        s.signal(Signal::SIGHUP);
        assert!(
            wait_log(&s, "got SIGHUP", Duration::from_secs(5)).await,
            "round {round}: no reload after a SIGHUP right at start (exit: {:?}); log:\n{}",
            s.wait_exit(Duration::from_millis(10)),
            s.log()
        );
        let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
        assert_eq!(one(&c, "SELECT 'up'").await, "up", "round {round}");
    }
}

#[tokio::test]
async fn sigquit_exits_immediately() {
    let ini = Sluice::basic_ini("", &db_line("app", "app"));
    let mut s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    c.batch_execute("BEGIN; SELECT 1").await.unwrap();
    s.signal(Signal::SIGQUIT);
    assert!(
        wait_exit(&mut s, Duration::from_secs(2)).await.is_some(),
        "SIGQUIT did not exit promptly with a client in a transaction; log:\n{}",
        s.log()
    );
}

#[tokio::test]
async fn second_sigterm_exits_immediately() {
    let ini = Sluice::basic_ini("", &db_line("app", "app"));
    let mut s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT 'x'::text").await, "x");
    s.signal(Signal::SIGTERM);
    assert!(
        wait_log(&s, "SIGTERM", Duration::from_secs(3)).await,
        "{}",
        s.log()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "exited on the first SIGTERM with a client connected"
    );
    s.signal(Signal::SIGTERM);
    assert!(
        wait_exit(&mut s, Duration::from_secs(2)).await.is_some(),
        "second SIGTERM did not exit promptly; log:\n{}",
        s.log()
    );
    drop(c);
}

/// A RELOAD that changes a setting only a restart can apply keeps its running value, in [sluice]
/// as in [pgbouncer]: SHOW CONFIG shows what runs, and the log says why.
#[tokio::test]
async fn reload_keeps_running_values_of_keys_that_need_a_restart() {
    let ini = |workers: u32| {
        Sluice::basic_ini("admin_users = md5_user", &db_line("app", "app"))
            + &format!("\n[sluice]\nworkers = {workers}\n")
    };
    let s = Sluice::builder(&ini(2)).userlist(MD5_USERLIST).start();
    assert!(reload(&s, &ini(3)).await, "reload failed:\n{}", s.log());
    assert!(
        s.log()
            .contains("reload: workers cannot be changed without a restart"),
        "{}",
        s.log()
    );
    let con = s
        .connect("md5_user", "md5_pass", "pgbouncer")
        .await
        .unwrap();
    let workers = con
        .simple_query("SHOW CONFIG")
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("workers") => {
                r.get(1).map(str::to_string)
            }
            _ => None,
        });
    assert_eq!(workers.as_deref(), Some("2"));
}
