//! What a service manager and logrotate expect of the process: the logfile reopened on SIGHUP and
//! RELOAD (after `mv`), a pidfile left alone by a second instance that cannot start, and systemd's
//! readiness notifications (READY=1, RELOADING=1, STOPPING=1, STATUS=) when NOTIFY_SOCKET is set.

mod bad_input_common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::{Console, Sluice};

use bad_input_common::{assert_works, DB_LINE, USERLIST};

fn ini(extra: &str) -> String {
    Sluice::basic_ini(
        &format!("auth_type = trust\nadmin_users = trust_user\n{extra}"),
        DB_LINE,
    )
}

/// Poll `what` for up to 5 s.
async fn eventually(mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    what()
}

#[tokio::test]
async fn logfile_is_reopened_after_logrotate_moves_it() {
    let s = Sluice::builder(&ini("logfile = {dir}/pooler.log"))
        .userlist(USERLIST)
        .start();
    let log = s.socket_dir.join("pooler.log");
    let rotated = s.socket_dir.join("pooler.log.1");
    assert!(
        eventually(|| std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("started"))
        .await
    );
    std::fs::rename(&log, &rotated).unwrap();
    s.signal(Signal::SIGHUP);
    assert!(
        eventually(|| log.exists()).await,
        "SIGHUP did not reopen the logfile\n{}",
        s.log()
    );
    assert_works(&s).await;
    let fresh = std::fs::read_to_string(&log).unwrap();
    assert!(fresh.contains("login attempt"), "{fresh}");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(
        !old.contains("login attempt"),
        "lines still go to the moved file"
    );

    // The console's RELOAD does the same.
    std::fs::rename(&log, &rotated).unwrap();
    let mut c = Console::connect(s.port, "trust_user", "").await.unwrap();
    c.query("RELOAD").await.unwrap();
    assert!(
        eventually(|| log.exists()).await,
        "RELOAD did not reopen the logfile"
    );
}

#[tokio::test]
async fn a_second_instance_leaves_the_running_ones_pidfile_alone() {
    let first = Sluice::builder(&ini("pidfile = {dir}/sluice.pid"))
        .userlist(USERLIST)
        .start();
    let pidfile = first.socket_dir.join("sluice.pid");
    assert!(
        eventually(|| pidfile.exists()).await,
        "no pidfile\n{}",
        first.log()
    );
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(pid.trim(), first.pid().to_string());

    // Same pidfile (and the same port): refused before it touches anything.
    let second = format!(
        "pidfile = {}\nlisten_port = {}",
        pidfile.display(),
        first.port
    );
    let (status, out) = Sluice::builder(&ini(&second).replace("listen_port = {port}\n", ""))
        .userlist(USERLIST)
        .run_expect_exit(Duration::from_secs(10));
    assert!(!status.success(), "{out}");
    assert!(out.contains("another instance"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&pidfile).ok().as_deref(),
        Some(pid.as_str()),
        "the running instance's pidfile was touched"
    );
    assert_works(&first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_is_notified_when_ready_reloading_and_stopping() {
    let dir = tempfile::Builder::new()
        .prefix("sluice-e2e-notify-")
        .tempdir()
        .unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let recv = move || -> String {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).expect("no notification within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let mut s = Sluice::builder(&ini(""))
        .userlist(USERLIST)
        .env("NOTIFY_SOCKET", sock_path.to_str().unwrap())
        .start();
    let ready = tokio::task::block_in_place(&recv);
    assert!(ready.starts_with("READY=1\nSTATUS=clients: "), "{ready:?}");
    s.signal(Signal::SIGHUP);
    assert_eq!(tokio::task::block_in_place(&recv), "RELOADING=1");
    assert!(tokio::task::block_in_place(&recv).starts_with("READY=1\n"));
    s.signal(Signal::SIGTERM);
    assert_eq!(tokio::task::block_in_place(&recv), "STOPPING=1");
    assert!(tokio::task::block_in_place(|| s.wait_exit(Duration::from_secs(10))).is_some());
}

#[tokio::test]
async fn unix_socket_group_owns_the_socket_and_a_missing_group_is_refused() {
    use std::os::unix::fs::MetadataExt;
    let s = Sluice::builder(&ini("unix_socket_group = nogroup"))
        .userlist(USERLIST)
        .start();
    let sock = s.socket_dir.join(format!(".s.PGSQL.{}", s.port));
    let gid = std::fs::metadata(&sock).unwrap().gid();
    let want = nix::unistd::Group::from_name("nogroup")
        .unwrap()
        .expect("Debian has group nogroup")
        .gid
        .as_raw();
    assert_eq!(gid, want);

    let (status, out) = Sluice::builder(&ini("unix_socket_group = no_such_group_here"))
        .userlist(USERLIST)
        .run_expect_exit(Duration::from_secs(10));
    assert!(!status.success());
    assert!(
        out.contains("unix_socket_group no_such_group_here: no such group"),
        "{out}"
    );
}

/// syslog = 1 sends every line to the syslog socket with the facility and ident. The test plays
/// the daemon on a private socket (`SLUICE_SYSLOG_SOCKET`), never on the machine's /dev/log, which
/// other processes (runuser's PAM logging, for one) write to while tests run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syslog_lines_carry_the_facility_and_ident() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let daemon = UnixDatagram::bind(&path).unwrap();
    daemon
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let s = Sluice::builder(&ini(
        "syslog = 1\nsyslog_facility = local1\nsyslog_ident = sluice_e2e",
    ))
    .userlist(USERLIST)
    .env("SLUICE_SYSLOG_SOCKET", path.to_str().unwrap())
    .start();
    let pid = s.pid();
    let lines = tokio::task::block_in_place(|| {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let Ok(n) = daemon.recv(&mut buf) else { break };
            let line = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = line.contains("started");
            got.push(line);
            if done {
                break;
            }
        }
        got
    });
    // local1 = 17: LOG lines are info (6): 17 * 8 + 6 = 142.
    let want = format!("<142>sluice_e2e[{pid}]: LOG ");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&want) && l.contains("started")),
        "{lines:?}"
    );
    drop(s);
}
