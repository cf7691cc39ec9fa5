//! PgBouncer 1.25.2 (the reference binary in `../shared/anchors/` beside the repository, or
//! `$PGBOUNCER_ANCHOR`) run beside Sluice on the same configuration, for the parity tests.
//! PgBouncer refuses to run as root, so it runs as `postgres` from a copy in its own temp dir.
//! An absent binary fails the test (`missing_tool`; `SLUICE_ALLOW_MISSING_TOOLS=1` turns that into
//! a loud line and None); a PgBouncer that does not start fails it with its log.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::cluster::PgCluster;
use crate::missing::missing_tool;
use crate::ports::free_port;
use crate::util::{chmod_755, chown_postgres, is_executable, pg_command};

/// PgBouncer did not start: its log, what it printed (a loader error for a missing library lands
/// there) and the pgbouncer.ini it was given.
#[derive(Debug)]
pub struct AnchorRefused {
    pub log: String,
    pub output: String,
    pub ini: String,
}

pub struct Anchor {
    pub port: u16,
    pub dir: TempDir,
    child: Child,
}

impl Anchor {
    /// Where the reference binary is looked for: `$PGBOUNCER_ANCHOR`, else
    /// `../shared/anchors/pgbouncer-1.25.2` beside the repository root.
    pub fn expected_path() -> PathBuf {
        match std::env::var_os("PGBOUNCER_ANCHOR") {
            Some(p) => PathBuf::from(p),
            None => {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/anchors/pgbouncer-1.25.2")
            }
        }
    }

    /// The reference binary, when present (a plain question: nothing printed, nothing failed).
    pub fn binary() -> Option<PathBuf> {
        Some(Self::expected_path()).filter(|p| is_executable(p))
    }

    /// Whether the reference binary is here. When it is not, the test fails (`missing_tool`);
    /// false only under `SLUICE_ALLOW_MISSING_TOOLS=1`, for the caller to return on.
    #[track_caller]
    pub fn available() -> bool {
        if Self::binary().is_some() {
            return true;
        }
        missing_tool(&format!(
            "the PgBouncer 1.25.2 reference binary is not at {} (set PGBOUNCER_ANCHOR, or keep \
             ../shared/anchors/pgbouncer-1.25.2 beside the repository; it needs libevent-2.1-7 \
             and libssl3)",
            Self::expected_path().display()
        ));
        false
    }

    /// Start PgBouncer with `[pgbouncer]` lines `extra` (listen address, port, socket dir, auth
    /// file and logfile are set here) and `databases` (`{pg_port}` / `{pg_host}` replaced);
    /// `userlist` is the auth file. A PgBouncer that does not start fails the test with its log;
    /// an absent binary fails it too (`available`). None only under the opt-out.
    #[track_caller]
    pub fn start(extra: &str, databases: &str, userlist: &str) -> Option<Anchor> {
        Self::start_with(extra, databases, userlist, &[])
    }

    /// `start`, with more files in its directory (an HBA file...); `{dir}` and `{hba}`
    /// (`{dir}/hba.conf`) in `extra` and `databases` name them, as in `Sluice::builder`.
    #[track_caller]
    pub fn start_with(
        extra: &str,
        databases: &str,
        userlist: &str,
        files: &[(&str, &str)],
    ) -> Option<Anchor> {
        match Self::try_start_with(extra, databases, userlist, files)? {
            Ok(a) => Some(a),
            Err(e) => panic!(
                "the PgBouncer 1.25.2 reference did not start\n--- its log:\n{}\n--- its output:\n{}\n--- its pgbouncer.ini:\n{}",
                e.log, e.output, e.ini
            ),
        }
    }

    /// `start_with` for a configuration PgBouncer may refuse: Err with its log and pgbouncer.ini
    /// when it exits (or does not listen within 10 s). An absent binary fails the test
    /// (`available`); None only under the opt-out.
    #[track_caller]
    pub fn try_start_with(
        extra: &str,
        databases: &str,
        userlist: &str,
        files: &[(&str, &str)],
    ) -> Option<Result<Anchor, AnchorRefused>> {
        if !Self::available() {
            return None;
        }
        let bin = Self::expected_path();
        let pg = PgCluster::get();
        let dir = tempfile::Builder::new()
            .prefix("sluice-anchor-")
            .tempdir()
            .expect("a temp dir for the reference PgBouncer");
        chmod_755(dir.path());
        chown_postgres(dir.path());
        let port = free_port();
        let d = dir.path().display().to_string();
        let copy = dir.path().join("pgbouncer");
        fs::copy(&bin, &copy)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", bin.display(), copy.display()));
        let places = |t: &str| {
            t.replace("{pg_port}", &pg.port.to_string())
                .replace("{pg_host}", "127.0.0.1")
                .replace("{hba}", &format!("{d}/hba.conf"))
                .replace("{dir}", &d)
        };
        let (dbs, extra) = (places(databases), places(extra));
        let ini = format!(
            "[databases]\n{dbs}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir = {d}\nauth_file = {d}/userlist.txt\nlogfile = {d}/pgbouncer.log\n\
             pidfile = {d}/pgbouncer.pid\n{extra}\n"
        );
        let own = [("pgbouncer.ini", ini.as_str()), ("userlist.txt", userlist)];
        for &(name, text) in own.iter().chain(files) {
            let p = dir.path().join(name);
            fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
            chown_postgres(&p);
        }
        chown_postgres(&copy);
        // What it prints before its logfile is open (a library the loader cannot find, a
        // refused option) goes to a file of its own, for the failure message.
        let out_path = dir.path().join("pgbouncer.out");
        let out = fs::File::create(&out_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", out_path.display()));
        let child = pg_command(&copy)
            .arg(dir.path().join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup the output file"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", copy.display()));
        let mut a = Anchor { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Ok(a));
            }
            let exited = a.child.try_wait().ok().flatten();
            if Instant::now() > deadline || exited.is_some() {
                let how = match exited {
                    Some(st) => format!("({st})"),
                    None => "(running, not listening after 10 s)".to_string(),
                };
                let out = fs::read_to_string(&out_path).unwrap_or_default();
                return Some(Err(AnchorRefused {
                    log: a.log(),
                    output: format!("{how}\n{out}"),
                    ini: a.config(),
                }));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }

    /// Rewrite a file of its directory (for RELOAD cases).
    pub fn write_file(&self, name: &str, text: &str) {
        let p = self.dir.path().join(name);
        fs::write(&p, text).unwrap();
        chown_postgres(&p);
    }

    pub fn config(&self) -> String {
        fs::read_to_string(self.dir.path().join("pgbouncer.ini")).unwrap_or_default()
    }

    /// PgBouncer's own process id (its pidfile; runuser is the child), for /proc figures.
    /// PgBouncer's pid from its pidfile, waiting up to 5 s for it: PgBouncer may accept on its
    /// port a moment before the pidfile is written (seen on a loaded 2-core machine).
    pub fn pid(&self) -> Option<u32> {
        let path = self.dir.path().join("pgbouncer.pid");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let pid = fs::read_to_string(&path)
                .ok()
                .and_then(|p| p.trim().parse().ok());
            if pid.is_some() || std::time::Instant::now() >= deadline {
                return pid;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Anchor {
    fn drop(&mut self) {
        // PgBouncer itself (its pidfile), not only runuser around it: SIGKILL to runuser is not
        // passed on, so PgBouncer would outlive the test. While runuser still runs, PgBouncer
        // does too, and may not have written its pidfile yet (it listens a moment before):
        // `pid` waits for it.
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let running = matches!(self.child.try_wait(), Ok(None));
        let pid = if running { self.pid() } else { None };
        if let Some(pid) = pid {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
