//! A private PostgreSQL cluster per test binary, started once and torn down by a watchdog.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::ports::free_port;
use crate::util::{chmod_755, chown_postgres, conn_str, is_executable, pg_command, which};

/// A private PostgreSQL cluster for one test binary (shared by all tests in it), started once.
#[derive(Debug)]
pub struct PgCluster {
    pub port: u16,
    pub socket_dir: PathBuf,
    pub data_dir: PathBuf,
    pub bin_dir: PathBuf,
}

static CLUSTER: OnceLock<PgCluster> = OnceLock::new();

const HBA: &str = "\
# TYPE  DATABASE USER        ADDRESS       METHOD
local   all      all                       trust
local   replication all                    trust
host    replication repl_user 127.0.0.1/32 trust
host    all      postgres    127.0.0.1/32  trust
host    all      md5_user    127.0.0.1/32  md5
host    all      scram_user  127.0.0.1/32  scram-sha-256
host    all      plain_user  127.0.0.1/32  password
host    all      trust_user  127.0.0.1/32  trust
host    all      bench_user  127.0.0.1/32  scram-sha-256
host    all      repl_user   127.0.0.1/32  trust
host    all      all         127.0.0.1/32  scram-sha-256
";

const SETUP_SQL: &str = "\
SET password_encryption = 'md5';
CREATE ROLE md5_user LOGIN PASSWORD 'md5_pass';
SET password_encryption = 'scram-sha-256';
CREATE ROLE scram_user LOGIN PASSWORD 'scram_pass';
CREATE ROLE plain_user LOGIN PASSWORD 'plain_pass';
CREATE ROLE trust_user LOGIN;
CREATE ROLE bench_user LOGIN PASSWORD 'bench_pass';
CREATE ROLE repl_user LOGIN REPLICATION;
CREATE DATABASE app OWNER postgres;
CREATE DATABASE other OWNER postgres;
GRANT CONNECT, CREATE, TEMPORARY ON DATABASE app TO PUBLIC;
GRANT CONNECT, CREATE, TEMPORARY ON DATABASE other TO PUBLIC;
\\connect app
GRANT ALL ON SCHEMA public TO PUBLIC;
\\connect other
GRANT ALL ON SCHEMA public TO PUBLIC;
";

/// Directory with initdb/pg_ctl/postgres: `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin.
pub(crate) fn find_bin_dir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if is_executable(&dir.join("initdb")) {
                return dir;
            }
        }
    }
    let mut best: Option<(u32, PathBuf)> = None;
    if let Ok(rd) = fs::read_dir("/usr/lib/postgresql") {
        for e in rd.flatten() {
            let ver = e.file_name().to_string_lossy().parse::<u32>().unwrap_or(0);
            let bin = e.path().join("bin");
            if is_executable(&bin.join("initdb"))
                && best.as_ref().map(|(v, _)| ver > *v).unwrap_or(true)
            {
                best = Some((ver, bin));
            }
        }
    }
    if let Some((_, bin)) = best {
        return bin;
    }
    if let Some(initdb) = which("initdb") {
        return initdb.parent().unwrap().to_path_buf();
    }
    panic!("PostgreSQL server binaries not found (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)");
}

fn run_checked(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl PgCluster {
    /// The cluster of this test process, started on first call.
    pub fn get() -> &'static PgCluster {
        CLUSTER.get_or_init(PgCluster::start)
    }

    fn start() -> PgCluster {
        let bin_dir = find_bin_dir();
        let base = tempfile::Builder::new()
            .prefix("sluice-pg-")
            .tempdir()
            .expect("create temp dir")
            .keep();
        chmod_755(&base);
        let data_dir = base.join("data");
        let socket_dir = base.join("sock");
        for d in [&data_dir, &socket_dir] {
            fs::create_dir(d).expect("create cluster dir");
            chown_postgres(d);
        }
        // Watchdog first, so even a failed start is cleaned up when the test process exits.
        spawn_watchdog(&bin_dir, &base, &data_dir);

        let mut initdb = pg_command(&bin_dir.join("initdb"));
        initdb.arg("-D").arg(&data_dir).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        run_checked(initdb, "initdb");
        fs::write(data_dir.join("pg_hba.conf"), HBA).expect("write pg_hba.conf");

        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(data_dir.join("postgresql.conf"))
            .expect("open postgresql.conf");
        writeln!(f, "include_if_exists = 'sluice-e2e.conf'").expect("append include");
        drop(f);

        let mut last_err = String::new();
        for _ in 0..3 {
            let port = free_port();
            let conf = format!(
                "\n# sluice-e2e\nport = {port}\nlisten_addresses = '127.0.0.1'\n\
                 unix_socket_directories = '{}'\nmax_connections = 200\nfsync = off\n\
                 synchronous_commit = off\nfull_page_writes = off\nshared_buffers = 32MB\n\
                 log_min_messages = warning\nlog_connections = off\n\
                 wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n",
                socket_dir.display()
            );
            fs::write(data_dir.join("sluice-e2e.conf"), conf).expect("write conf");
            let mut pg_ctl = pg_command(&bin_dir.join("pg_ctl"));
            pg_ctl
                .arg("-D")
                .arg(&data_dir)
                .arg("-l")
                .arg(data_dir.join("postgres.log"))
                .args(["-w", "-t", "60", "start"])
                .stdin(Stdio::null());
            let out = pg_ctl.output().expect("run pg_ctl start");
            if out.status.success() {
                let cluster = PgCluster {
                    port,
                    socket_dir: socket_dir.clone(),
                    data_dir: data_dir.clone(),
                    bin_dir: bin_dir.clone(),
                };
                cluster.setup();
                return cluster;
            }
            last_err = format!(
                "pg_ctl start failed ({}): {}{}\nlog:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                fs::read_to_string(data_dir.join("postgres.log")).unwrap_or_default()
            );
        }
        panic!("{last_err}");
    }

    fn setup(&self) {
        let mut psql = self.psql_base("postgres");
        psql.args(["-q", "-v", "ON_ERROR_STOP=1", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = psql.spawn().expect("spawn psql");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(SETUP_SQL.as_bytes())
            .expect("write setup sql");
        let out = child.wait_with_output().expect("wait psql");
        assert!(
            out.status.success(),
            "cluster setup SQL failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn psql_base(&self, db: &str) -> Command {
        let mut c = Command::new(self.bin_dir.join("psql"));
        c.arg("-X")
            .arg("-h")
            .arg(&self.socket_dir)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-d", db]);
        c
    }

    /// libpq-ish connection string for a direct TCP connection (host=127.0.0.1).
    pub fn direct_conn_str(&self, user: &str, password: &str, db: &str) -> String {
        conn_str("127.0.0.1", self.port, user, password, db)
    }

    /// Secret exactly as pg_authid stores it for `role`.
    pub fn stored_secret(&self, role: &str) -> String {
        let sql = format!(
            "SELECT rolpassword FROM pg_authid WHERE rolname = '{}'",
            role.replace('\'', "''")
        );
        let s = self.psql("postgres", &sql);
        assert!(!s.is_empty(), "role {role} has no stored password");
        s
    }

    /// Stop PostgreSQL with a fast shutdown (clients disconnected, a clean checkpoint) and start
    /// it again on the same port, waiting until it accepts connections. Only for a test process
    /// whose other tests do not run meanwhile (the fault suite's restart file).
    pub fn restart_fast(&self) {
        let mut pg_ctl = pg_command(&self.bin_dir.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(self.data_dir.join("postgres.log"))
            .args(["-w", "-t", "60", "-m", "fast", "restart"]);
        run_checked(pg_ctl, "pg_ctl restart");
    }

    /// Run SQL as superuser over the unix socket (psql -X -A -t -c); stdout trimmed. Panics on failure.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let mut c = self.psql_base(db);
        c.args(["-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        run_checked(c, &format!("psql -c {sql:?}"))
            .trim()
            .to_string()
    }
}

/// Detached shell loop: once the test process is gone, stop postgres and delete the temp dir.
fn spawn_watchdog(bin_dir: &Path, base: &Path, data_dir: &Path) {
    let runas = if crate::util::is_root() {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         {runas}'{pg_ctl}' -D '{data}' stop -m immediate >/dev/null 2>&1; rm -rf '{base}'",
        pid = std::process::id(),
        pg_ctl = bin_dir.join("pg_ctl").display(),
        data = data_dir.display(),
        base = base.display(),
    );
    crate::util::spawn_detached(&script);
}
