//! Process lifecycle through the real `sluice` binary: command line, config loading errors,
//! `%include`, unsupported-but-known keys, daemon mode with pidfile, SIGHUP reload, the shutdown
//! signals (TERM / INT / QUIT / second TERM), the periodic stats line and the login/disconnect log lines.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::{free_port, PgCluster, Sluice};

const MD5_USERLIST: &str = "\"md5_user\" \"md5_pass\"\n";

/// `name = host=127.0.0.1 port=<pg> dbname=<dbname>` for `[databases]`.
fn db_line(name: &str, dbname: &str) -> String {
    format!("{name} = host={{pg_host}} port={{pg_port}} dbname={dbname}")
}

/// The sluice binary, found like the harness does (SLUICE_BIN, else next to the test executable).
fn sluice_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe dir");
    for c in [dir.join("../sluice"), dir.join("sluice")] {
        if c.is_file() {
            return c;
        }
    }
    panic!("sluice binary not found; run `cargo build -p sluice` first");
}

/// Run the binary with `args`, wait (bounded) and return (status, stdout, stderr).
fn run_cli(args: &[&str]) -> (ExitStatus, String, String) {
    let mut child = Command::new(sluice_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice {args:?} did not exit within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// 1-based line number of the first line of `text` that contains `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in config"))
        + 1
}

/// Poll the log until `needle` appears `n` times or `timeout` passes.
async fn wait_log_count(s: &Sluice, needle: &str, n: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if s.log().matches(needle).count() >= n {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_log(s: &Sluice, needle: &str, timeout: Duration) -> bool {
    wait_log_count(s, needle, 1, timeout).await
}

/// Poll the log until `n` lines contain every one of `needles` or `timeout` passes.
async fn wait_lines(s: &Sluice, needles: &[&str], n: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let count = s
            .log()
            .lines()
            .filter(|l| needles.iter().all(|nd| l.contains(nd)))
            .count();
        if count >= n {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait for the process to exit without blocking the runtime (client tasks keep running).
async fn wait_exit(s: &mut Sluice, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = s.child.try_wait() {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rewrite the config, send SIGHUP and wait for the reload outcome; true when it succeeded.
async fn reload(s: &Sluice, ini: &str) -> bool {
    const OK: &str = "configuration reloaded";
    const FAIL: &str = "RELOAD failed";
    let (ok0, fail0) = (s.log().matches(OK).count(), s.log().matches(FAIL).count());
    s.rewrite_config(ini);
    s.signal(Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = s.log();
        if log.matches(OK).count() > ok0 {
            return true;
        }
        if log.matches(FAIL).count() > fail0 {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "no reload outcome logged after SIGHUP; log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn one(c: &tokio_postgres::Client, sql: &str) -> String {
    // Simple protocol: named prepared statements do not survive transaction pooling.
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    msgs.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

fn connect_refused(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_err()
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[test]
fn version_flags_print_a_version_line() {
    for flag in ["-V", "--version"] {
        let (st, out, err) = run_cli(&[flag]);
        assert!(st.success(), "{flag}: {st} {out} {err}");
        let first = out.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("Sluice ") && first.chars().any(|c| c.is_ascii_digit()),
            "{flag}: version line {first:?} (stderr {err:?})"
        );
    }
}

#[test]
fn help_flags_print_usage_with_the_options() {
    for flag in ["-h", "--help"] {
        let (st, out, err) = run_cli(&[flag]);
        assert!(st.success(), "{flag}: {st} {err}");
        assert!(out.to_lowercase().contains("usage"), "{flag}: {out}");
        for opt in ["-d", "-q", "-v", "-u"] {
            assert!(out.contains(opt), "{flag}: usage lacks {opt}:\n{out}");
        }
    }
}

#[test]
fn no_config_argument_fails_with_usage() {
    let (st, out, err) = run_cli(&[]);
    assert!(!st.success(), "exit {st}");
    let all = format!("{out}{err}");
    assert!(all.to_lowercase().contains("usage"), "{all}");
}

// ---------------------------------------------------------------------------------------------
// Config loading
// ---------------------------------------------------------------------------------------------

/// Start with `ini`, expect a non-zero exit whose output names pgbouncer.ini, `line` and `needle`.
fn expect_config_error(ini: &str, line: usize, needle: &str) {
    let (st, out) = Sluice::builder(ini)
        .userlist(MD5_USERLIST)
        .run_expect_exit(Duration::from_secs(10));
    assert!(
        !st.success(),
        "sluice accepted a bad config ({st}):\n{ini}\n{out}"
    );
    assert!(
        out.contains(&format!("pgbouncer.ini:{line}")),
        "error does not name pgbouncer.ini:{line}:\n{out}"
    );
    assert!(
        out.contains(needle),
        "error does not name {needle:?}:\n{out}"
    );
}

#[test]
fn unknown_pgbouncer_key_is_an_error_naming_file_line_and_key() {
    let ini = Sluice::basic_ini(
        "max_client_conn = 10\nno_such_setting_xyz = 1",
        &db_line("app", "app"),
    );
    let line = line_of(&ini, "no_such_setting_xyz");
    expect_config_error(&ini, line, "no_such_setting_xyz");
}

#[test]
fn bad_value_is_an_error_naming_file_line_and_key() {
    let ini = Sluice::basic_ini("default_pool_size = abc", &db_line("app", "app"));
    let line = line_of(&ini, "default_pool_size");
    expect_config_error(&ini, line, "default_pool_size");
}

#[test]
fn unknown_section_is_an_error() {
    let ini = format!(
        "{}\n[no_such_section]\nfoo = bar\n",
        Sluice::basic_ini("", &db_line("app", "app"))
    );
    let line = line_of(&ini, "[no_such_section]");
    expect_config_error(&ini, line, "no_such_section");
}

#[test]
fn broken_database_connect_string_is_an_error() {
    for entry in [
        "brokendb = host={pg_host} port=notaport dbname=app",
        "brokendb = host={pg_host} dbname",
        "brokendb = host={pg_host} dbname='app",
    ] {
        let ini = Sluice::basic_ini("", &format!("{}\n{entry}", db_line("app", "app")));
        let line = line_of(&ini, "brokendb");
        expect_config_error(&ini, line, "brokendb");
    }
}

#[tokio::test]
async fn include_file_sets_listen_port() {
    let ini = format!(
        "[databases]\n{}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nunix_socket_dir = {{dir}}\n\
         auth_file = {{userlist}}\n%include {{dir}}/included.ini\n",
        db_line("app", "app")
    );
    // start() only returns once {port} accepts: the port came from the included file.
    let s = Sluice::builder(&ini)
        .userlist(MD5_USERLIST)
        .file(
            "included.ini",
            "listen_port = {port}\nmax_client_conn = 50\n",
        )
        .start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT current_database()::text").await, "app");
}

#[tokio::test]
async fn known_but_unimplemented_keys_are_accepted_and_logged_once() {
    let ini = Sluice::basic_ini(
        "client_tls_sslmode = disable\nsyslog = 1\nsyslog_ident = sluice_lc_test",
        &db_line("app", "app"),
    );
    let s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT 'ok'::text").await, "ok");
    // Once more after a reload: still logged only once.
    assert!(reload(&s, &ini).await, "reload failed:\n{}", s.log());
    let log = s.log();
    for key in ["syslog", "syslog_ident"] {
        let n = log
            .lines()
            .filter(|l| l.contains(&format!(" {key} is not supported")))
            .count();
        assert_eq!(n, 1, "{key} logged {n} times:\n{log}");
    }
    // client_tls_sslmode = disable is the default and behaves as Sluice does: accepted, at most
    // one line about it.
    let n = log
        .lines()
        .filter(|l| l.contains("client_tls_sslmode"))
        .count();
    assert!(n <= 1, "client_tls_sslmode logged {n} times:\n{log}");
}

/// The content-platform pgbouncer.ini from a real-world article (auth_type md5 instead of hba,
/// ports and paths adapted).
const REAL_WORLD_INI: &str = "\
; /etc/pgbouncer/pgbouncer.ini
[databases]
; Read traffic through pooler
content_read = host=127.0.0.1 port={pg_port} dbname=app pool_size=20 pool_mode=transaction
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {dir}
auth_type = md5
auth_file = {userlist}
; Pool sizing
default_pool_size = 20
min_pool_size = 5
reserve_pool_size = 5
reserve_pool_timeout = 3
; Client limits
max_client_conn = 1000
max_db_connections = 25
; Timeouts
server_idle_timeout = 300
client_idle_timeout = 0
query_timeout = 30
client_login_timeout = 15
; Transaction mode settings
pool_mode = transaction
server_reset_query = DISCARD ALL
server_check_query = SELECT 1
server_check_delay = 30
; Performance
tcp_keepalive = 1
tcp_keepidle = 60
tcp_keepintvl = 10
tcp_keepcnt = 3
; Logging
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 60
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_world_pgbouncer_ini_starts_and_serves() {
    let s = Sluice::builder(REAL_WORLD_INI)
        .userlist(MD5_USERLIST)
        .start();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let cs = s.conn_str("md5_user", "md5_pass", "content_read");
        tasks.push(tokio::spawn(async move {
            let (c, conn) = tokio_postgres::connect(&cs, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("client {i}: {e:?}"));
            tokio::spawn(conn);
            for j in 0..10 {
                let got = one(
                    &c,
                    &format!("SELECT current_database() || ':' || ({j} + 1)"),
                )
                .await;
                assert_eq!(got, format!("app:{}", j + 1));
            }
            // Transactions work in transaction mode.
            c.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        s.connect("md5_user", "wrong", "content_read")
            .await
            .is_err(),
        "md5 auth accepted a wrong password"
    );
}

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
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD),
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
    s.signal(Signal::SIGTERM);
    // New TCP connections are refused soon.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !connect_refused(s.port) {
        assert!(
            Instant::now() < deadline,
            "TCP still accepting after SIGTERM; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
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
}

#[tokio::test]
async fn sigint_waits_for_servers_then_exits_and_drops_idle_clients() {
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "exited while a server was in use; log:\n{}",
        s.log()
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
    // The idle client has been disconnected.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !idle.is_closed() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        idle.is_closed() || idle.simple_query("SELECT 1").await.is_err(),
        "idle client still connected"
    );
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
    assert!(
        login.contains("db=app") && login.contains("user=md5_user"),
        "{login}"
    );
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
        !s.log().contains("login attempt"),
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
