//! PgBouncer 1.25.2 (the reference binary in `../shared/anchors/`, or `$PGBOUNCER_ANCHOR`) run
//! beside Sluice on the same configuration, for the parity tests. PgBouncer refuses to run as root,
//! so it runs as `postgres` from a copy in its own temp dir. Absent binary: `None` (tests skip).

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::cluster::PgCluster;
use crate::ports::free_port;
use crate::util::{chmod_755, chown_postgres, is_executable, pg_command};

/// PgBouncer did not start: its log and the pgbouncer.ini it was given.
#[derive(Debug)]
pub struct AnchorRefused {
    pub log: String,
    pub ini: String,
}

pub struct Anchor {
    pub port: u16,
    pub dir: TempDir,
    child: Child,
}

impl Anchor {
    /// The reference binary, when present.
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("PGBOUNCER_ANCHOR") {
            return Some(PathBuf::from(p)).filter(|p| is_executable(p));
        }
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/anchors/pgbouncer-1.25.2");
        Some(p).filter(|p| is_executable(p))
    }

    /// Start PgBouncer with `[pgbouncer]` lines `extra` (listen address, port, socket dir, auth
    /// file and logfile are set here) and `databases` (`{pg_port}` / `{pg_host}` replaced);
    /// `userlist` is the auth file. None when the binary is absent or cannot start (printed).
    pub fn start(extra: &str, databases: &str, userlist: &str) -> Option<Anchor> {
        Self::start_with(extra, databases, userlist, &[])
    }

    /// `start`, with more files in its directory (an HBA file...); `{dir}` and `{hba}`
    /// (`{dir}/hba.conf`) in `extra` and `databases` name them, as in `Sluice::builder`.
    pub fn start_with(
        extra: &str,
        databases: &str,
        userlist: &str,
        files: &[(&str, &str)],
    ) -> Option<Anchor> {
        match Self::try_start_with(extra, databases, userlist, files)? {
            Ok(a) => Some(a),
            Err(e) => {
                eprintln!("SKIP: PgBouncer anchor did not start; its log:\n{}", e.log);
                None
            }
        }
    }

    /// `start_with` for a configuration PgBouncer may refuse: None when the binary is absent,
    /// Err with its log and pgbouncer.ini when it exits (or does not listen within 10 s).
    pub fn try_start_with(
        extra: &str,
        databases: &str,
        userlist: &str,
        files: &[(&str, &str)],
    ) -> Option<Result<Anchor, AnchorRefused>> {
        let bin = Self::binary()?;
        let pg = PgCluster::get();
        let dir = tempfile::Builder::new()
            .prefix("sluice-anchor-")
            .tempdir()
            .ok()?;
        chmod_755(dir.path());
        chown_postgres(dir.path());
        let port = free_port();
        let d = dir.path().display().to_string();
        let copy = dir.path().join("pgbouncer");
        fs::copy(&bin, &copy).ok()?;
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
            fs::write(&p, text).ok()?;
            chown_postgres(&p);
        }
        chown_postgres(&copy);
        let child = pg_command(&copy)
            .arg(dir.path().join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut a = Anchor { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Ok(a));
            }
            if Instant::now() > deadline || a.child.try_wait().ok().flatten().is_some() {
                return Some(Err(AnchorRefused {
                    log: a.log(),
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
    pub fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.dir.path().join("pgbouncer.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }
}

impl Drop for Anchor {
    fn drop(&mut self) {
        // PgBouncer itself (its pidfile), not only runuser around it.
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let pid = fs::read_to_string(self.dir.path().join("pgbouncer.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
