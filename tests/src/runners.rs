//! Runners for the Debian PostgreSQL client programs (pgbench, psql).

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use crate::cluster::find_bin_dir;
use crate::util::which;

/// `name` from PATH, else from the PostgreSQL bin dir.
fn client_bin(name: &str) -> PathBuf {
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
