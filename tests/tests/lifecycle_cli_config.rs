//! Process lifecycle, command line and config loading through the real `sluice` binary: version and
//! help flags, config errors naming file/line/key, `%include`, unsupported-but-known keys and a
//! real-world pgbouncer.ini.

mod lifecycle_common;

use std::time::{Duration, Instant};

use sluice_e2e::Sluice;

use lifecycle_common::{db_line, line_of, one, reload, run_cli, MD5_USERLIST};

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[test]
fn version_flags_print_a_version_line() {
    for flag in ["-V", "--version"] {
        let (st, out, err) = run_cli(&[flag]);
        assert!(st.success(), "{flag}: {st} {out} {err}");
        let first = out.lines().next().unwrap_or_default();
        // As the console's SHOW VERSION: PgBouncer's release (tools pick columns by it), then
        // Sluice's.
        assert!(
            first.starts_with("PgBouncer 1.") && first.contains("(Sluice "),
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
        "client_tls_sslmode = disable\ndns_zone_check_period = 30\nresolv_conf = /etc/resolv.conf",
        &db_line("app", "app"),
    );
    let s = Sluice::builder(&ini).userlist(MD5_USERLIST).start();
    let c = s.connect("md5_user", "md5_pass", "app").await.unwrap();
    assert_eq!(one(&c, "SELECT 'ok'::text").await, "ok");
    // Once more after a reload: still logged only once.
    assert!(reload(&s, &ini).await, "reload failed:\n{}", s.log());
    let log = s.log();
    for key in ["dns_zone_check_period", "resolv_conf"] {
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

/// As PgBouncer: Sluice refuses to run as root unless it switches to another user (-u or `user`,
/// once its listeners are bound) or SLUICE_ALLOW_ROOT=1 says root is confined.
#[test]
fn root_is_refused_unless_it_switches_user() {
    if !nix::unistd::geteuid().is_root() {
        // CI and scripts/test.sh run as root.
        sluice_e2e::missing_tool("root: this test starts sluice as root to see it refuse");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = sluice_e2e::free_port();
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(&userlist, "\"u\" \"p\"\n").unwrap();
    let ini = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\napp = host=127.0.0.1 port=1\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\n",
            userlist.display()
        ),
    )
    .unwrap();
    let ini = ini.to_str().unwrap();
    let (st, _, err) = lifecycle_common::run_cli_env(&[ini], &[]);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("Sluice should not run as root"), "{err}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens"
    );

    // -u nobody: it binds as root, then serves as nobody.
    let mut child = std::process::Command::new(lifecycle_common::sluice_bin())
        .args(["-u", "nobody", ini])
        .env_remove("SLUICE_ALLOW_ROOT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "sluice -u nobody did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The port answers once the socket listens, which is before the switch (it binds as root);
    // the accept loops start after it. Wait for the switch rather than read the uid once.
    let effective_uid = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap()
            .to_string()
    };
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid;
    let mut uid = effective_uid();
    while uid != nobody.to_string() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        uid = effective_uid();
    }
    assert_eq!(uid, nobody.to_string(), "effective uid after -u nobody");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let _ = child.wait();
}
