//! Helpers shared by the lifecycle_* tests: running the `sluice` binary, polling its log, waiting
//! for its exit, SIGHUP reloads and one-row queries.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::Sluice;

pub const MD5_USERLIST: &str = "\"md5_user\" \"md5_pass\"\n";

/// `name = host=127.0.0.1 port=<pg> dbname=<dbname>` for `[databases]`.
pub fn db_line(name: &str, dbname: &str) -> String {
    format!("{name} = host={{pg_host}} port={{pg_port}} dbname={dbname}")
}

/// The sluice binary, found like the harness does (SLUICE_BIN, else next to the test executable).
pub fn sluice_bin() -> PathBuf {
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
pub fn run_cli(args: &[&str]) -> (ExitStatus, String, String) {
    run_cli_env(args, &[("SLUICE_ALLOW_ROOT", "1")])
}

/// `run_cli` with exactly these variables added to the environment (the tests run as root, which
/// Sluice refuses unless SLUICE_ALLOW_ROOT=1 or it switches user).
pub fn run_cli_env(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String, String) {
    let mut child = Command::new(sluice_bin())
        .args(args)
        .env_remove("SLUICE_ALLOW_ROOT")
        .envs(env.iter().copied())
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
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in config"))
        + 1
}

/// Poll the log until `needle` appears `n` times or `timeout` passes.
pub async fn wait_log_count(s: &Sluice, needle: &str, n: usize, timeout: Duration) -> bool {
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

pub async fn wait_log(s: &Sluice, needle: &str, timeout: Duration) -> bool {
    wait_log_count(s, needle, 1, timeout).await
}

/// Poll the log until `n` lines contain every one of `needles` or `timeout` passes.
pub async fn wait_lines(s: &Sluice, needles: &[&str], n: usize, timeout: Duration) -> bool {
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
pub async fn wait_exit(s: &mut Sluice, timeout: Duration) -> Option<ExitStatus> {
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
pub async fn reload(s: &Sluice, ini: &str) -> bool {
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

pub async fn one(c: &tokio_postgres::Client, sql: &str) -> String {
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

pub fn connect_refused(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_err()
}
