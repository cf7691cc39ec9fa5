//! The process's ties to what runs it, which the pooler itself does not use: the logfile handle
//! (reopened on SIGHUP and RELOAD, so logrotate can move the file away), the pidfile (written only
//! by a process that got its listeners, never over a running instance's) and systemd's readiness
//! protocol (sd_notify: READY=1, RELOADING=1, STOPPING=1 and STATUS= datagrams to
//! `$NOTIFY_SOCKET`, for `Type=notify` units as PgBouncer's packaged unit is).

pub mod logging;
pub mod syslog;

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use crate::process::logging::LogHandle;

/// What `main` hands the app once it runs.
pub struct ProcessHooks {
    pub log: LogHandle,
    pub notify: Notifier,
}

/// sd_notify: a datagram socket towards `$NOTIFY_SOCKET`, or nothing when it is not set.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace); none when unset or
    /// unusable (logged).
    pub fn from_env() -> Self {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|v| {
            let v = v.to_string_lossy().into_owned();
            match Self::open(&v) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!("NOTIFY_SOCKET {v}: {e}; no service-manager notifications");
                    None
                }
            }
        });
        Notifier { target }
    }

    fn open(spec: &str) -> io::Result<(UnixDatagram, SocketAddr)> {
        let addr = match spec.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name.as_bytes())?
            }
            None => SocketAddr::from_pathname(spec)?,
        };
        Ok((UnixDatagram::unbound()?, addr))
    }

    /// A notifier that sends nothing (tests, embedders).
    pub fn none() -> Self {
        Notifier { target: None }
    }

    /// Send `state` (newline-separated `KEY=value` lines); failures are logged at debug level
    /// only: the service manager may be gone at shutdown.
    pub fn send(&self, state: &str) {
        if let Some((sock, addr)) = &self.target {
            if let Err(e) = sock.send_to_addr(state.as_bytes(), addr) {
                tracing::debug!("sd_notify {state:?}: {e}");
            }
        }
    }
}

/// Refuse to start over a running instance's pidfile (PgBouncer: "pidfile exists, another
/// instance running?"). A pidfile naming no live process is stale and is left to be replaced.
pub fn check_pidfile(path: &str) -> Result<(), String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return Ok(());
    };
    if pid <= 0 || pid as u32 == std::process::id() {
        return Ok(());
    }
    // SAFETY: signal 0 only checks that the process exists; no memory is passed.
    let alive = unsafe { libc::kill(pid, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if alive {
        Err(format!(
            "pidfile {path} exists and process {pid} is running: another instance running?"
        ))
    } else {
        Ok(())
    }
}

/// Write this process's pid to `path` as a whole: into a file beside it, then renamed over it, so
/// that a reader (a second instance's `check_pidfile`, a service manager, a runbook's `kill $(cat
/// ...)`) never sees the file empty or half-written, as it could between `write`'s truncation and
/// its data. Where no file can be made beside it (a pidfile that exists in a directory this user
/// cannot write), the file itself is overwritten.
pub fn write_pidfile(path: &str) -> io::Result<()> {
    let text = format!("{}\n", std::process::id());
    let beside = format!("{path}.{}.tmp", std::process::id());
    match std::fs::write(&beside, &text) {
        Ok(()) => std::fs::rename(&beside, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&beside);
        }),
        Err(_) => std::fs::write(path, text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed by the caller.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-process-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_live_pid_in_the_pidfile_refuses_a_stale_one_does_not() {
        let dir = scratch("pid");
        let p = dir.join("x.pid");
        let p = p.to_str().unwrap();
        assert!(check_pidfile(p).is_ok(), "no pidfile");
        // pid 1 is always alive (EPERM for non-root counts as alive).
        std::fs::write(p, "1\n").unwrap();
        assert!(check_pidfile(p).unwrap_err().contains("another instance"));
        std::fs::write(p, format!("{}\n", std::process::id())).unwrap();
        assert!(check_pidfile(p).is_ok(), "our own pid");
        std::fs::write(p, "garbage").unwrap();
        assert!(check_pidfile(p).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn notifications_reach_the_socket() {
        let dir = scratch("notify");
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            target: Some(Notifier::open(path.to_str().unwrap()).unwrap()),
        };
        n.send("READY=1");
        let mut buf = [0u8; 64];
        let len = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
        Notifier::none().send("READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_pidfile_is_written_whole_and_nothing_is_left_beside_it() {
        let d = scratch("write");
        let p = d.join("sluice.pid");
        std::fs::write(&p, "stale text that is longer than a pid\n").unwrap();
        write_pidfile(p.to_str().unwrap()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("{}\n", std::process::id())
        );
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("sluice.pid")]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
