//! A primary and streaming standbys (pg_basebackup -R) of their own, per test, for the failover
//! tests: each node can be stopped, promoted, restarted or turned into a standby of another.
//! PostgreSQL runs as the unprivileged `postgres` user as in `cluster.rs`; every node's directory
//! is removed by a watchdog when the test process exits, and by `Drop`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::cluster::find_bin_dir;
use crate::ports::free_port;
use crate::util::{chmod_755, chown_postgres, is_root, pg_command, spawn_detached};

const HBA: &str = "\
local   all          all                 trust
host    all          all   127.0.0.1/32  trust
local   replication  all                 trust
host    replication  all   127.0.0.1/32  trust
";

/// One PostgreSQL instance of a replica set.
#[derive(Debug)]
pub struct PgNode {
    pub port: u16,
    pub data_dir: PathBuf,
    pub socket_dir: PathBuf,
    bin_dir: PathBuf,
}

/// A primary (`nodes[0]` at creation) and its standbys.
#[derive(Debug)]
pub struct ReplicaSet {
    pub nodes: Vec<PgNode>,
    base: PathBuf,
}

fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An initdb'd data directory, made once per test process and copied for each primary.
fn template() -> &'static PathBuf {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| {
        let base = tempfile::Builder::new()
            .prefix("sluice-replica-tpl-")
            .tempdir()
            .expect("temp dir")
            .keep();
        chmod_755(&base);
        let data = base.join("data");
        fs::create_dir(&data).expect("mkdir");
        chown_postgres(&data);
        spawn_detached(&format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; rm -rf '{}'",
            std::process::id(),
            base.display()
        ));
        let mut initdb = pg_command(&find_bin_dir().join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        run(initdb, "initdb");
        write_as_postgres(&data.join("pg_hba.conf"), HBA);
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        use std::io::Write;
        writeln!(conf, "include_if_exists = 'node.conf'").expect("append");
        data
    })
}

fn write_as_postgres(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    chown_postgres(path);
}

impl ReplicaSet {
    /// A running primary with `standbys` streaming standbys.
    pub fn new(standbys: usize) -> ReplicaSet {
        let bin_dir = find_bin_dir();
        let base = tempfile::Builder::new()
            .prefix("sluice-replica-")
            .tempdir()
            .expect("temp dir")
            .keep();
        chmod_755(&base);
        let mut nodes = Vec::new();
        for i in 0..=standbys {
            let dir = base.join(format!("n{i}"));
            fs::create_dir(&dir).expect("mkdir");
            chmod_755(&dir);
            let socket_dir = dir.join("sock");
            fs::create_dir(&socket_dir).expect("mkdir");
            chown_postgres(&socket_dir);
            let node = PgNode {
                port: free_port(),
                data_dir: dir.join("data"),
                socket_dir,
                bin_dir: bin_dir.clone(),
            };
            spawn_detached(&format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; {}'{}' -D '{}' stop -m immediate; rm -rf '{}'",
                std::process::id(),
                if is_root() { "runuser -u postgres -- " } else { "" },
                bin_dir.join("pg_ctl").display(),
                node.data_dir.display(),
                dir.display()
            ));
            nodes.push(node);
        }
        let mut cp = Command::new("cp");
        cp.arg("-a").arg(template()).arg(&nodes[0].data_dir);
        run(cp, "copy the template cluster");
        nodes[0].write_conf();
        nodes[0].start();
        for n in &nodes[1..] {
            fs::create_dir(&n.data_dir).expect("mkdir");
            fs::set_permissions(&n.data_dir, fs::Permissions::from_mode(0o700)).expect("chmod");
            chown_postgres(&n.data_dir);
            let mut bb = pg_command(&bin_dir.join("pg_basebackup"));
            bb.arg("-D")
                .arg(&n.data_dir)
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-X",
                    "stream",
                    "-R",
                    "-c",
                    "fast",
                ])
                .args(["-p", &nodes[0].port.to_string()]);
            run(bb, "pg_basebackup");
            n.write_conf();
            n.start();
        }
        ReplicaSet { nodes, base }
    }
}

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        for n in &self.nodes {
            n.stop("immediate");
        }
        let _ = fs::remove_dir_all(&self.base);
    }
}

impl PgNode {
    fn write_conf(&self) {
        write_as_postgres(
            &self.data_dir.join("node.conf"),
            &format!(
                "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 max_connections = 60\nfsync = off\nfull_page_writes = off\nshared_buffers = 16MB\n\
                 wal_level = replica\nmax_wal_senders = 10\nhot_standby = on\n\
                 wal_receiver_status_interval = 1s\nlog_min_messages = warning\n",
                self.port,
                self.socket_dir.display()
            ),
        );
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut c = pg_command(&self.bin_dir.join("pg_ctl"));
        c.arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(self.data_dir.join("postgres.log"))
            .args(args);
        c
    }

    pub fn start(&self) {
        run(self.pg_ctl(&["-w", "-t", "60", "start"]), "pg_ctl start");
    }

    /// `pg_ctl stop -m <mode>` (immediate: a crash; fast: a clean shutdown); a node already
    /// stopped is left so.
    pub fn stop(&self, mode: &str) {
        let _ = self
            .pg_ctl(&["-w", "-t", "60", "-m", mode, "stop"])
            .stdin(Stdio::null())
            .output();
    }

    pub fn promote(&self) {
        run(
            self.pg_ctl(&["-w", "-t", "60", "promote"]),
            "pg_ctl promote",
        );
    }

    /// Turn this stopped node into a streaming standby of `primary` and start it (a planned
    /// switchover's old primary).
    pub fn start_as_standby_of(&self, primary: &PgNode) {
        write_as_postgres(&self.data_dir.join("standby.signal"), "");
        let auto = self.data_dir.join("postgresql.auto.conf");
        let mut text = fs::read_to_string(&auto).unwrap_or_default();
        text.push_str(&format!(
            "\nprimary_conninfo = 'host=127.0.0.1 port={} user=postgres'\n",
            primary.port
        ));
        write_as_postgres(&auto, &text);
        self.start();
    }

    /// Run SQL as superuser over the Unix socket; stdout trimmed. Panics on failure.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let mut c = Command::new(self.bin_dir.join("psql"));
        c.arg("-X")
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db])
            .args(["-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        run(c, &format!("psql -c {sql:?}"))
    }
}

/// A [databases] connect string naming `nodes` on 127.0.0.1 in order (`host=a,b port=p,q
/// dbname=postgres`), for a failover or read-routing entry to add its keys to.
pub fn host_list(nodes: &[&PgNode]) -> String {
    let h: Vec<&str> = nodes.iter().map(|_| "127.0.0.1").collect();
    let p: Vec<String> = nodes.iter().map(|n| n.port.to_string()).collect();
    format!("host={} port={} dbname=postgres", h.join(","), p.join(","))
}

/// Sluice in transaction mode over `databases` (trust, admin user postgres, pools of 4, a health
/// check every 0.2 s), with `sluice_lines` added to [sluice].
pub fn start_over_replicas(databases: &str, sluice_lines: &str) -> crate::Sluice {
    let ini = format!(
        "[databases]\n{databases}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {{port}}\n\
         unix_socket_dir = {{dir}}\nauth_file = {{userlist}}\nauth_type = trust\n\
         admin_users = postgres\npool_mode = transaction\ndefault_pool_size = 4\n\
         server_login_retry = 1\n\n[sluice]\nhost_check_interval = 0.2\n{sluice_lines}\n"
    );
    crate::Sluice::builder(&ini)
        .userlist("\"postgres\" \"\"\n")
        .start()
}
