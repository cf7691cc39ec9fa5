//! Small process/filesystem helpers shared by the cluster and sluice modules.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// True when the test process runs as root (PostgreSQL then has to run as `postgres`).
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A command that runs `program` as user `postgres` when we are root, directly otherwise.
pub(crate) fn pg_command(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// chmod a directory to 0755 so the `postgres` user can traverse/read it.
pub(crate) fn chmod_755(dir: &Path) {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod 0755 {}: {e}", dir.display()));
}

/// Give `path` to the `postgres` user when running as root (no-op otherwise).
pub(crate) fn chown_postgres(path: &Path) {
    if !is_root() {
        return;
    }
    let user = nix::unistd::User::from_name("postgres")
        .expect("look up user postgres")
        .expect("running as root but there is no `postgres` user (install postgresql)");
    nix::unistd::chown(path, Some(user.uid), Some(user.gid))
        .unwrap_or_else(|e| panic!("chown postgres {}: {e}", path.display()));
}

/// Find an executable named `name` on PATH.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Quote a value for a libpq-style `key=value` connection string.
pub(crate) fn conn_value(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// Build `host=.. port=.. user=.. [password=..] dbname=..`; an empty password is left out.
pub(crate) fn conn_str(host: &str, port: u16, user: &str, password: &str, db: &str) -> String {
    let mut s = format!("host={host} port={port} user={}", conn_value(user));
    if !password.is_empty() {
        s.push_str(&format!(" password={}", conn_value(password)));
    }
    s.push_str(&format!(" dbname={}", conn_value(db)));
    s
}

/// Run `script` in a background `sh` that is re-parented away from us (double fork, own process
/// group, no inherited stdio), so it neither becomes our zombie nor holds our output pipes open.
pub(crate) fn spawn_detached(script: &str) {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("( {script} ) </dev/null >/dev/null 2>&1 &"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .status()
        .expect("spawn watchdog shell");
    assert!(status.success(), "watchdog shell failed: {status}");
}

/// Raise this test process's soft open-files limit to its hard limit and return the new soft
/// limit. Children (pgbench with a thousand clients) inherit it.
pub fn raise_own_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
    lim.rlim_cur
}
