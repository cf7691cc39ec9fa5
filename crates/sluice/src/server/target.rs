//! Where and as whom a pool logs in to PostgreSQL, derived from a [databases] entry and the user.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_protocol::StoredSecret;

/// A server address: TCP host:port or a Unix socket path (`<dir>/.s.PGSQL.<port>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    Tcp { host: String, port: u16 },
    Unix { path: PathBuf },
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            ServerAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            ServerAddr::Unix { path } => write!(f, "unix:{}", path.display()),
        }
    }
}

impl ServerAddr {
    /// From a [databases] `host` value: unset -> Unix socket in unix_socket_dir; `/dir` -> Unix socket
    /// there; comma lists give several hosts.
    pub fn parse_hosts(host: Option<&str>, port: u16, unix_socket_dir: &str) -> Vec<ServerAddr> {
        let unix = |dir: &str| ServerAddr::Unix {
            path: PathBuf::from(dir).join(format!(".s.PGSQL.{port}")),
        };
        match host {
            None => vec![unix(if unix_socket_dir.is_empty() {
                "/tmp"
            } else {
                unix_socket_dir
            })],
            Some(h) => h
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| {
                    if h.starts_with('/') {
                        unix(h)
                    } else {
                        ServerAddr::Tcp {
                            host: h.to_string(),
                            port,
                        }
                    }
                })
                .collect(),
        }
    }
}

/// Everything needed to open and log in a server connection for one pool.
pub struct ServerTarget {
    pub addrs: Vec<ServerAddr>,
    pub dbname: String,
    pub user: String,
    /// Password or secret used to log in: the db entry's password for forced users, else the user's
    /// auth_file secret. None when the server is expected to trust us.
    pub secret: Option<StoredSecret>,
    /// Extra startup parameters from the db entry (client_encoding, datestyle, timezone, application_name).
    pub startup_params: Vec<(String, String)>,
    pub connect_query: Option<String>,
    next_addr: AtomicUsize,
}

impl fmt::Debug for ServerTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTarget")
            .field("addrs", &self.addrs)
            .field("dbname", &self.dbname)
            .field("user", &self.user)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ServerTarget {
    pub fn new(
        addrs: Vec<ServerAddr>,
        dbname: String,
        user: String,
        secret: Option<StoredSecret>,
        startup_params: Vec<(String, String)>,
        connect_query: Option<String>,
    ) -> Self {
        ServerTarget {
            addrs,
            dbname,
            user,
            secret,
            startup_params,
            connect_query,
            next_addr: AtomicUsize::new(0),
        }
    }

    /// Next address, round-robin over the host list.
    pub fn pick_addr(&self) -> Option<&ServerAddr> {
        if self.addrs.is_empty() {
            return None;
        }
        let i = self.next_addr.fetch_add(1, Ordering::Relaxed) % self.addrs.len();
        self.addrs.get(i)
    }

    /// Same server, same login: used by reload to decide whether existing servers must be replaced.
    pub fn same_login(&self, other: &ServerTarget) -> bool {
        self.addrs == other.addrs
            && self.dbname == other.dbname
            && self.user == other.user
            && self.secret == other.secret
            && self.startup_params == other.startup_params
            && self.connect_query == other.connect_query
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_forms() {
        assert_eq!(
            ServerAddr::parse_hosts(None, 5432, "/var/run/postgresql"),
            vec![ServerAddr::Unix {
                path: "/var/run/postgresql/.s.PGSQL.5432".into()
            }]
        );
        assert_eq!(
            ServerAddr::parse_hosts(Some("/tmp"), 6000, "/x"),
            vec![ServerAddr::Unix {
                path: "/tmp/.s.PGSQL.6000".into()
            }]
        );
        let two = ServerAddr::parse_hosts(Some("a, b"), 5432, "/tmp");
        assert_eq!(two.len(), 2);
        assert_eq!(two[1].to_string(), "b:5432");
    }

    #[test]
    fn round_robin() {
        let t = ServerTarget::new(
            ServerAddr::parse_hosts(Some("a,b"), 1, "/tmp"),
            "d".into(),
            "u".into(),
            None,
            vec![],
            None,
        );
        let a = t.pick_addr().unwrap().to_string();
        let b = t.pick_addr().unwrap().to_string();
        assert_ne!(a, b);
    }
}
