//! Where and as whom a pool logs in to PostgreSQL, derived from a [databases] entry and the user.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use parking_lot::Mutex;
use sluice_config::{LoadBalanceHosts, ReplicaLag, TargetSessionAttrs};
use sluice_protocol::{ScramKeys, ServerSalt, StoredSecret};

/// A server address: TCP host:port or a Unix socket path (`<dir>/.s.PGSQL.<port>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
        Self::parse_host_list(host, &[port], unix_socket_dir)
    }

    /// `parse_hosts` with `ports` from `port=`: one for every host, or one per host in order
    /// (the config loader checks the counts; a missing one falls back to the last).
    pub fn parse_host_list(
        host: Option<&str>,
        ports: &[u16],
        unix_socket_dir: &str,
    ) -> Vec<ServerAddr> {
        let port_of = |i: usize| ports.get(i).or(ports.last()).copied().unwrap_or(5432);
        let unix = |dir: &str, i: usize| ServerAddr::Unix {
            path: PathBuf::from(dir).join(format!(".s.PGSQL.{}", port_of(i))),
        };
        match host {
            None => vec![unix(
                if unix_socket_dir.is_empty() {
                    "/tmp"
                } else {
                    unix_socket_dir
                },
                0,
            )],
            Some(h) => h
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .enumerate()
                .map(|(i, h)| {
                    if h.starts_with('/') {
                        unix(h, i)
                    } else {
                        ServerAddr::Tcp {
                            host: h.to_string(),
                            port: port_of(i),
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
    /// load_balance_hosts: the next host for each new server (round-robin), or the same host
    /// until a connect to it fails (disable).
    pub balance: LoadBalanceHosts,
    /// Round-robin: the next pick; disable: the host in use.
    next_addr: AtomicUsize,
    /// libpq's target_session_attrs of the [databases] entry.
    pub attrs: TargetSessionAttrs,
    /// Set for a host list or a target_session_attrs other than `any`: hosts are health-checked
    /// and chosen by role (`hosts/`); unset, a server connects as before.
    pub failover: Option<FailoverSettings>,
    /// SCRAM keys of `secret` (a plaintext password) for the salt and iteration count the server
    /// last sent: its next logins skip the PBKDF2 (the server's salt changes only with the role's
    /// password). One entry: a target is one role on one database.
    login_keys: Mutex<Option<(ServerSalt, ScramKeys)>>,
}

/// The [sluice] settings of host health and failover, as of the pool's last settings refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverSettings {
    pub failover_timeout: Duration,
    pub check_interval: Duration,
    pub max_lag: ReplicaLag,
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
            balance: LoadBalanceHosts::RoundRobin,
            next_addr: AtomicUsize::new(0),
            attrs: TargetSessionAttrs::Any,
            failover: None,
            login_keys: Mutex::new(None),
        }
    }

    /// target_session_attrs (None: not in the entry) and the failover settings: health checks and
    /// role-aware host choice when the entry sets it, for a host list or a role other than `any`.
    /// An entry without it connects as PgBouncer's does, host list or not (an unchanged
    /// pgbouncer.ini gets no extra connection to any host).
    pub fn with_failover(
        mut self,
        attrs: Option<TargetSessionAttrs>,
        settings: FailoverSettings,
    ) -> Self {
        self.attrs = attrs.unwrap_or_default();
        self.failover = attrs
            .is_some_and(|a| self.addrs.len() > 1 || a != TargetSessionAttrs::Any)
            .then_some(settings);
        self
    }

    /// The target of read routing's servers on standby `addr` of `of`'s host list: the same
    /// login, that host alone, which must be a standby.
    pub fn standby_of(of: &ServerTarget, addr: &ServerAddr) -> Self {
        ServerTarget {
            addrs: vec![addr.clone()],
            dbname: of.dbname.clone(),
            user: of.user.clone(),
            secret: of.secret.clone(),
            startup_params: of.startup_params.clone(),
            connect_query: of.connect_query.clone(),
            balance: of.balance,
            next_addr: AtomicUsize::new(0),
            attrs: TargetSessionAttrs::Standby,
            failover: of.failover,
            login_keys: Mutex::new(None),
        }
    }

    /// Where a round-robin pass over the hosts starts (failover's host choice).
    pub fn rotation_start(&self) -> usize {
        match self.balance {
            LoadBalanceHosts::RoundRobin => self.next_addr.fetch_add(1, Ordering::Relaxed),
            LoadBalanceHosts::Disable => 0,
        }
    }

    /// The keys kept for this salt and iteration count (`keep_login_keys`), if any.
    pub fn cached_login_keys(&self, salt: &ServerSalt) -> Option<ScramKeys> {
        match &*self.login_keys.lock() {
            Some((s, k)) if s == salt => Some(k.clone()),
            _ => None,
        }
    }

    /// Keep the keys derived from `secret` for this salt and iteration count.
    pub fn keep_login_keys(&self, salt: ServerSalt, keys: &ScramKeys) {
        *self.login_keys.lock() = Some((salt, keys.clone()));
    }

    pub fn with_balance(mut self, balance: LoadBalanceHosts) -> Self {
        self.balance = balance;
        self
    }

    /// The host for a new server: the next one of the list (round-robin), or the one in use
    /// (disable). Its index goes back to `connect_failed` when the connect fails.
    pub fn pick_addr(&self) -> Option<(usize, &ServerAddr)> {
        if self.addrs.is_empty() {
            return None;
        }
        let i = match self.balance {
            LoadBalanceHosts::RoundRobin => self.next_addr.fetch_add(1, Ordering::Relaxed),
            LoadBalanceHosts::Disable => self.next_addr.load(Ordering::Relaxed),
        } % self.addrs.len();
        Some((i, &self.addrs[i]))
    }

    /// A connect to host `i` failed: with load_balance_hosts=disable the next one is used from
    /// now on (unless another failure moved on already).
    pub fn connect_failed(&self, i: usize) {
        if self.balance == LoadBalanceHosts::Disable && self.addrs.len() > 1 {
            let next = (i + 1) % self.addrs.len();
            let _ = self
                .next_addr
                .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Same server, same login: used by reload to decide whether existing servers must be replaced.
    pub fn same_login(&self, other: &ServerTarget) -> bool {
        self.addrs == other.addrs
            && self.dbname == other.dbname
            && self.user == other.user
            && self.secret == other.secret
            && self.startup_params == other.startup_params
            && self.connect_query == other.connect_query
            && self.balance == other.balance
            && self.attrs == other.attrs
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
        let a = t.pick_addr().unwrap().1.to_string();
        let b = t.pick_addr().unwrap().1.to_string();
        assert_ne!(a, b);
    }

    #[test]
    fn failover_only_where_the_entry_asks_for_it() {
        let f = FailoverSettings {
            failover_timeout: Duration::from_secs(1),
            check_interval: Duration::from_secs(1),
            max_lag: ReplicaLag::Unlimited,
        };
        let t = |hosts: &str, attrs| {
            ServerTarget::new(
                ServerAddr::parse_hosts(Some(hosts), 1, "/tmp"),
                "d".into(),
                "u".into(),
                None,
                vec![],
                None,
            )
            .with_failover(attrs, f)
            .failover
            .is_some()
        };
        assert!(!t("a,b", None), "a plain host list connects as PgBouncer's");
        assert!(!t("a", Some(TargetSessionAttrs::Any)));
        assert!(t("a,b", Some(TargetSessionAttrs::Any)));
        assert!(t("a", Some(TargetSessionAttrs::ReadWrite)));
    }

    #[test]
    fn a_port_per_host() {
        let two = ServerAddr::parse_host_list(Some("a,b"), &[5433, 5434], "/tmp");
        assert_eq!(two[0].to_string(), "a:5433");
        assert_eq!(two[1].to_string(), "b:5434");
        let one = ServerAddr::parse_host_list(Some("a,/sock"), &[6000], "/tmp");
        assert_eq!(one[0].to_string(), "a:6000");
        assert_eq!(one[1].to_string(), "unix:/sock/.s.PGSQL.6000");
    }

    #[test]
    fn disable_sticks_to_a_host_until_it_fails() {
        let t = ServerTarget::new(
            ServerAddr::parse_hosts(Some("a,b,c"), 1, "/tmp"),
            "d".into(),
            "u".into(),
            None,
            vec![],
            None,
        )
        .with_balance(LoadBalanceHosts::Disable);
        let host = |t: &ServerTarget| t.pick_addr().unwrap().1.to_string();
        assert_eq!([host(&t), host(&t)], ["a:1", "a:1"]);
        t.connect_failed(0);
        assert_eq!(host(&t), "b:1");
        // A late failure of the host left before does not move on again.
        t.connect_failed(0);
        assert_eq!(host(&t), "b:1");
        t.connect_failed(1);
        t.connect_failed(2);
        assert_eq!(host(&t), "a:1", "round the list");
    }
}
