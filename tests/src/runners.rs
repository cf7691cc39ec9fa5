//! Runners for the Debian PostgreSQL client programs (pgbench, psql).

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use crate::cluster::find_bin_dir;
use crate::util::which;

/// `name` (a PostgreSQL client program: pg_basebackup, pg_receivewal...) from PATH, else from
/// the PostgreSQL bin dir.
pub fn client_bin(name: &str) -> PathBuf {
    which(name).unwrap_or_else(|| find_bin_dir().join(name))
}

fn run(mut cmd: Command) -> (ExitStatus, String, String) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `pgbench <args>` with PGPASSWORD=`password`; returns (status, stdout, stderr).
pub fn pgbench(args: &[&str], password: &str) -> (ExitStatus, String, String) {
    let mut c = Command::new(client_bin("pgbench"));
    c.args(args).env("PGPASSWORD", password);
    run(c)
}

/// Run `psql -X -A -t -v ON_ERROR_STOP=1 -d <conn_str> -c <sql>`; returns (status, stdout, stderr).
pub fn psql_cmd(conn_str: &str, sql: &str) -> (ExitStatus, String, String) {
    let mut c = Command::new(client_bin("psql"));
    c.args([
        "-X",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        conn_str,
        "-c",
        sql,
    ]);
    run(c)
}

/// pgbench with `sql` as its one-script (written to `dir`), no vacuum, as `user` (trust, no
/// password) on database `db` through 127.0.0.1:`port`: `clients` clients on 2 threads for
/// `secs` seconds, run off the async runtime. (exit status, stdout, stderr).
pub async fn pgbench_script(
    dir: PathBuf,
    sql: &str,
    port: u16,
    user: &str,
    db: &str,
    clients: u32,
    secs: u32,
) -> (ExitStatus, String, String) {
    let script = dir.join(format!("script-{port}-{clients}-{secs}.sql"));
    std::fs::write(&script, format!("{sql}\n")).expect("write the pgbench script");
    let args: Vec<String> = [
        "-n",
        "-f",
        &script.display().to_string(),
        "-c",
        &clients.to_string(),
        "-j",
        "2",
        "-T",
        &secs.to_string(),
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        user,
        db,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        pgbench(&refs, "")
    })
    .await
    .expect("pgbench task")
}
