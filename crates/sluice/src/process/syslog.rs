//! `syslog = 1`: every log line also goes to the system's syslog socket (`/dev/log`), as
//! `<PRI>ident[pid]: LEVEL message` with `syslog_facility` and `syslog_ident`, as PgBouncer's
//! lines do. A datagram per line, never blocking: a syslog daemon that is gone or slow loses
//! lines, never the pooler's time.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use tracing::Level;

/// Where the system's syslog daemon listens.
pub const SYSTEM_SOCKET: &str = "/dev/log";

/// The environment variable that names another socket than `SYSTEM_SOCKET` (the tests play the
/// daemon on a private path instead of taking over the machine's /dev/log, which every other
/// process on it, PAM's runuser included, writes to).
pub const SOCKET_ENV: &str = "SLUICE_SYSLOG_SOCKET";

/// The syslog socket to send to: `SLUICE_SYSLOG_SOCKET` when set, else `/dev/log`.
pub fn socket_path() -> std::path::PathBuf {
    std::env::var_os(SOCKET_ENV).map_or_else(|| SYSTEM_SOCKET.into(), Into::into)
}

/// Facility codes by name (PgBouncer accepts the same names).
pub fn facility_code(name: &str) -> Option<u8> {
    Some(match name.to_ascii_lowercase().as_str() {
        "kern" => 0,
        "user" => 1,
        "mail" => 2,
        "daemon" => 3,
        "auth" => 4,
        "syslog" => 5,
        "lpr" => 6,
        "news" => 7,
        "uucp" => 8,
        "cron" => 9,
        "authpriv" => 10,
        "ftp" => 11,
        "local0" => 16,
        "local1" => 17,
        "local2" => 18,
        "local3" => 19,
        "local4" => 20,
        "local5" => 21,
        "local6" => 22,
        "local7" => 23,
        _ => return None,
    })
}

fn severity(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// A connected syslog socket with the facility and ident to write with.
pub struct Syslog {
    sock: UnixDatagram,
    facility: u8,
    ident: String,
    pid: u32,
}

impl Syslog {
    pub fn connect(path: &Path, facility: &str, ident: &str) -> io::Result<Syslog> {
        let facility = facility_code(facility).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown syslog_facility '{facility}'"),
            )
        })?;
        let sock = UnixDatagram::unbound()?;
        sock.connect(path)?;
        sock.set_nonblocking(true)?;
        Ok(Syslog {
            sock,
            facility,
            ident: ident.to_string(),
            pid: std::process::id(),
        })
    }

    /// Send one formatted line (its timestamp and pid prefix are dropped: syslog adds its own).
    pub fn send(&self, level: Level, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\n');
        let body = match text.find("] ") {
            Some(i) => &text[i + 2..],
            None => text,
        };
        let pri = self.facility * 8 + severity(level);
        let msg = format!("<{pri}>{}[{}]: {body}", self.ident, self.pid);
        let _ = self.sock.send(msg.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_the_socket_with_priority_and_ident() {
        let dir = std::env::temp_dir().join(format!("sluice-syslog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let s = Syslog::connect(&path, "local3", "pgb").unwrap();
        s.send(
            Level::WARN,
            b"2026-01-01 00:00:00.000 UTC [42] WARNING something odd\n",
        );
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        // local3 = 19: 19 * 8 + 4 = 156.
        assert_eq!(
            got,
            format!("<156>pgb[{}]: WARNING something odd", std::process::id())
        );
        assert!(Syslog::connect(&path, "nonsense", "x").is_err());
        assert_eq!(facility_code("DAEMON"), Some(3));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
