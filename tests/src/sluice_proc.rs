//! A running `sluice` binary with its own temp dir and config file.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::cluster::PgCluster;
use crate::ports::free_port;
use crate::util::{chmod_755, conn_str, is_executable};

const CONFIG_NAME: &str = "pgbouncer.ini";

/// A running `sluice` process. Killed (SIGKILL) and reaped on drop; its temp dir is removed.
#[derive(Debug)]
pub struct Sluice {
    pub port: u16,
    pub dir: TempDir,
    pub socket_dir: PathBuf,
    pub child: Child,
    pub log_path: PathBuf,
}

/// Prepares the temp dir, config and extra files of a [`Sluice`] before spawning it.
#[derive(Debug, Clone)]
pub struct SluiceBuilder {
    ini: String,
    userlist: Option<String>,
    files: Vec<(String, String)>,
    args: Vec<String>,
    nofile_soft: Option<u64>,
    envs: Vec<(String, String)>,
    port: Option<u16>,
}

/// Values substituted for the `{...}` placeholders of configs and extra files.
struct Placeholders {
    port: u16,
    dir: PathBuf,
}

impl Placeholders {
    fn apply(&self, text: &str) -> String {
        let dir = self.dir.display().to_string();
        let mut s = text
            .replace("{port}", &self.port.to_string())
            .replace("{dir}", &dir)
            .replace("{userlist}", &format!("{dir}/userlist.txt"))
            .replace("{hba}", &format!("{dir}/hba.conf"))
            .replace("{pg_host}", "127.0.0.1");
        // Only start the PostgreSQL cluster when the text actually refers to it.
        if s.contains("{pg_port}") || s.contains("{pg_socket_dir}") {
            let pg = PgCluster::get();
            s = s
                .replace("{pg_port}", &pg.port.to_string())
                .replace("{pg_socket_dir}", &pg.socket_dir.display().to_string());
        }
        s
    }
}

/// The sluice binary: env SLUICE_BIN, else `<test exe dir>/../sluice` (target/<profile>/sluice).
pub fn sluice_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe dir");
    let candidates = [dir.join("../sluice"), dir.join("sluice")];
    for c in &candidates {
        if is_executable(c) {
            return c.clone();
        }
    }
    panic!(
        "sluice binary not found at {} (build it first: `cargo build -p sluice`, or set SLUICE_BIN)",
        candidates[0].display()
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

impl Sluice {
    /// Start building a sluice instance from a full config text with placeholders
    /// (`{pg_port} {pg_host} {pg_socket_dir} {port} {dir} {userlist} {hba}`).
    pub fn builder(ini: &str) -> SluiceBuilder {
        SluiceBuilder {
            ini: ini.to_string(),
            userlist: None,
            files: Vec::new(),
            args: Vec::new(),
            nofile_soft: None,
            envs: Vec::new(),
            port: None,
        }
    }

    /// A typical config: `[databases]` with `databases` (lines such as
    /// `app = host={pg_host} port={pg_port} dbname=app`) and a `[pgbouncer]` section with
    /// listen_addr=127.0.0.1, listen_port={port}, unix_socket_dir={dir}, auth_file={userlist} plus
    /// `extra_pgbouncer_lines`. No logfile: stderr goes to {dir}/sluice.log.
    pub fn basic_ini(extra_pgbouncer_lines: &str, databases: &str) -> String {
        format!(
            "[databases]\n{databases}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {{port}}\n\
             unix_socket_dir = {{dir}}\nauth_file = {{userlist}}\n{extra_pgbouncer_lines}\n"
        )
    }

    fn placeholders(&self) -> Placeholders {
        Placeholders {
            port: self.port,
            dir: self.dir.path().to_path_buf(),
        }
    }

    /// `host=127.0.0.1 port=<sluice port> user=.. password=.. dbname=..`
    pub fn conn_str(&self, user: &str, password: &str, db: &str) -> String {
        conn_str("127.0.0.1", self.port, user, password, db)
    }

    /// Connect through sluice with tokio-postgres; the connection task is spawned on the current runtime.
    pub async fn connect(
        &self,
        user: &str,
        password: &str,
        db: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, conn) =
            tokio_postgres::connect(&self.conn_str(user, password, db), tokio_postgres::NoTls)
                .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(client)
    }

    /// Current contents of the log (stdout+stderr of the process).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig)
            .unwrap_or_else(|e| panic!("kill({}, {sig}): {e}", self.pid()));
    }

    /// Wait for the process to exit; `None` if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_timeout(&mut self.child, timeout)
    }

    /// Rewrite the config file (same placeholders, same port/dir), e.g. before SIGHUP / RELOAD.
    pub fn rewrite_config(&self, ini: &str) {
        write(
            self.dir.path(),
            CONFIG_NAME,
            &self.placeholders().apply(ini),
        );
    }

    /// Write a file into the temp dir (placeholders are substituted).
    pub fn write_file(&self, name: &str, text: &str) {
        write(self.dir.path(), name, &self.placeholders().apply(text));
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl SluiceBuilder {
    /// Contents of {dir}/userlist.txt (written verbatim; an empty file is written otherwise).
    pub fn userlist(mut self, text: &str) -> Self {
        self.userlist = Some(text.to_string());
        self
    }

    /// An extra file in {dir} (hba, includes); placeholders are substituted.
    pub fn file(mut self, name: &str, text: &str) -> Self {
        self.files.push((name.to_string(), text.to_string()));
        self
    }

    /// Extra command-line argument, placed before the config path.
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    /// Use this port for `{port}` instead of a free one (a second process on the same port with
    /// so_reuseport).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// An environment variable for the process (placeholders substituted), e.g. NOTIFY_SOCKET.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.to_string(), value.to_string()));
        self
    }

    /// Start the binary with this soft RLIMIT_NOFILE (the hard limit is inherited), e.g. a
    /// distribution's default of 1024, to check what sluice does with it.
    pub fn nofile_soft(mut self, n: u64) -> Self {
        self.nofile_soft = Some(n);
        self
    }

    /// Create the dir, write the files and spawn the binary; returns (dir, port, log path, child).
    fn spawn(self) -> (TempDir, u16, PathBuf, Child) {
        let dir = tempfile::Builder::new()
            .prefix("sluice-e2e-")
            .tempdir()
            .expect("create sluice temp dir");
        chmod_755(dir.path());
        let port = self.port.unwrap_or_else(free_port);
        let ph = Placeholders {
            port,
            dir: dir.path().to_path_buf(),
        };
        write(dir.path(), CONFIG_NAME, &ph.apply(&self.ini));
        write(
            dir.path(),
            "userlist.txt",
            self.userlist.as_deref().unwrap_or(""),
        );
        for (name, text) in &self.files {
            write(dir.path(), name, &ph.apply(text));
        }
        let log_path = dir.path().join("sluice.log");
        let log = fs::File::create(&log_path).expect("create sluice.log");
        let log2 = log.try_clone().expect("dup log fd");
        let bin = sluice_bin();
        let config = dir.path().join(CONFIG_NAME);
        let mut cmd = Command::new(&bin);
        // The tests run as root, which Sluice refuses without a user to switch to.
        cmd.env("SLUICE_ALLOW_ROOT", "1");
        if let Some(soft) = self.nofile_soft {
            use std::os::unix::process::CommandExt;
            // SAFETY: only async-signal-safe calls (getrlimit/setrlimit) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let mut lim = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    lim.rlim_cur = soft.min(lim.rlim_max);
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .args(&self.args)
            .arg(&config)
            .current_dir(dir.path())
            .env("RUST_BACKTRACE", "1")
            .envs(self.envs.iter().map(|(k, v)| (k.clone(), ph.apply(v))))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        spawn_reaper(child.id(), &config);
        (dir, port, log_path, child)
    }

    /// Spawn sluice and return at once, before it is ready (tests of what happens during startup).
    pub fn spawn_unready(self) -> Sluice {
        let (dir, port, log_path, child) = self.spawn();
        Sluice {
            port,
            socket_dir: dir.path().to_path_buf(),
            dir,
            child,
            log_path,
        }
    }

    /// Spawn sluice and wait (10 s) until its TCP port accepts connections; panics with the log otherwise.
    pub fn start(self) -> Sluice {
        let mut s = self.spawn_unready();
        let port = s.port;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("sluice exited during startup ({st}); log:\n{}", s.log());
            }
            if TcpStream::connect_timeout(
                &([127, 0, 0, 1], port).into(),
                Duration::from_millis(500),
            )
            .is_ok()
            {
                return s;
            }
            if Instant::now() >= deadline {
                panic!(
                    "sluice did not accept connections on 127.0.0.1:{port} within 10 s; log:\n{}",
                    s.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Spawn and wait for exit (config error tests): (exit status, combined stdout+stderr).
    /// Panics (after killing it) if the process is still running after `timeout`.
    pub fn run_expect_exit(self, timeout: Duration) -> (ExitStatus, String) {
        let (_dir, _port, log_path, mut child) = self.spawn();
        match wait_timeout(&mut child, timeout) {
            Some(st) => (st, fs::read_to_string(&log_path).unwrap_or_default()),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sluice still running after {timeout:?}; log:\n{}",
                    fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
        }
    }
}

/// Detached shell loop that SIGKILLs sluice if the test process goes away without dropping the
/// [`Sluice`] (e.g. one kept in a static). It quits as soon as that process is gone; the config path in
/// its command line guards against pid reuse.
fn spawn_reaper(pid: u32, config: &Path) {
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do \
           grep -qF '{cfg}' /proc/{pid}/cmdline 2>/dev/null || exit 0; sleep 1; done; \
         if grep -qF '{cfg}' /proc/{pid}/cmdline 2>/dev/null; then kill -9 {pid}; sleep 0.2; rm -rf '{dir}'; fi",
        me = std::process::id(),
        cfg = config.display(),
        dir = config.parent().unwrap().display(),
    );
    crate::util::spawn_detached(&script);
}
