//! `[databases]` entries: the libpq-like connect string of one pooled database (or the '*' fallback).

use std::fmt;

use crate::connstr::{opt_u32, parse_pairs, pool_mode, port};
use crate::error::ConfigError;
use crate::modes::{LoadBalanceHosts, PoolMode, RouteReads, TargetSessionAttrs};
use crate::value::SettingValue;

/// One `[databases]` line. `None` fields inherit the global setting (or the documented default).
#[derive(Clone, PartialEq, Default)]
pub struct DatabaseEntry {
    /// Key in [databases] ("*" for the fallback).
    pub name: String,
    pub line: usize,
    pub file: String,
    /// Target database; `None` = same as `name`.
    pub dbname: Option<String>,
    /// `None` = Unix socket in unix_socket_dir; may be a comma list of hosts.
    pub host: Option<String>,
    /// `None` = 5432. The first of `ports` when `port=` is a list.
    pub port: Option<u16>,
    /// Every port of `port=`: one for all hosts, or one per host of a `host=` list (in order).
    pub ports: Vec<u16>,
    /// Forced user: all clients log in to the server as this user.
    pub user: Option<String>,
    pub password: Option<String>,
    pub auth_user: Option<String>,
    pub auth_query: Option<String>,
    pub auth_dbname: Option<String>,
    pub pool_size: Option<u32>,
    pub min_pool_size: Option<u32>,
    /// Also accepted as `reserve_pool`.
    pub reserve_pool_size: Option<u32>,
    pub max_db_connections: Option<u32>,
    pub max_db_client_connections: Option<u32>,
    /// Whole seconds.
    pub server_lifetime: Option<u32>,
    /// Whole seconds.
    pub query_wait_timeout: Option<u32>,
    pub pool_mode: Option<PoolMode>,
    /// Which transactions may go to a standby; `None` = off. Parsed only for now: the pooler
    /// routes nothing until host roles land (docs/architecture.md, "Read routing").
    pub route_reads: Option<RouteReads>,
    pub load_balance_hosts: Option<LoadBalanceHosts>,
    /// libpq's target_session_attrs (Sluice only): the role a server of this entry must have.
    pub target_session_attrs: Option<TargetSessionAttrs>,
    pub connect_query: Option<String>,
    pub client_encoding: Option<String>,
    pub datestyle: Option<String>,
    pub timezone: Option<String>,
    pub application_name: Option<String>,
}

impl DatabaseEntry {
    /// Parse `name = value` from [databases]. Unknown key, empty value or bad number gives a
    /// `ConfigError::Key` naming the database (e.g. "mydb: unknown parameter 'foo'").
    /// The name "pgbouncer" is reserved for the admin console.
    pub fn parse(name: &str, value: &str, file: &str, line: usize) -> Result<Self, ConfigError> {
        let err = |reason: String| ConfigError::key(file, line, name, reason);
        if name == "pgbouncer" {
            return Err(err("database name 'pgbouncer' is reserved".to_string()));
        }
        let mut db = DatabaseEntry {
            name: name.to_string(),
            line,
            file: file.to_string(),
            ..DatabaseEntry::default()
        };
        for (key, val) in parse_pairs(value).map_err(err)? {
            db.apply(&key, val).map_err(err)?;
        }
        let hosts = db.host_count();
        if db.ports.len() > 1 && db.ports.len() != hosts {
            return Err(err(format!(
                "{} ports for {hosts} hosts: give one port for all hosts, or one per host",
                db.ports.len()
            )));
        }
        Ok(db)
    }

    fn apply(&mut self, key: &str, val: String) -> Result<(), String> {
        match key {
            "dbname" => self.dbname = Some(val),
            "host" => self.host = Some(val),
            "port" => {
                self.ports = val
                    .split(',')
                    .map(|p| port(p.trim()))
                    .collect::<Result<_, _>>()?;
                self.port = self.ports.first().copied();
            }
            "user" => self.user = Some(val),
            "password" => self.password = Some(val),
            "auth_user" => self.auth_user = Some(val),
            "auth_query" => self.auth_query = Some(val),
            "auth_dbname" => self.auth_dbname = Some(val),
            "pool_size" => self.pool_size = opt_u32(key, &val)?,
            "min_pool_size" => self.min_pool_size = opt_u32(key, &val)?,
            "reserve_pool_size" | "reserve_pool" => self.reserve_pool_size = opt_u32(key, &val)?,
            "max_db_connections" => self.max_db_connections = opt_u32(key, &val)?,
            "max_db_client_connections" => self.max_db_client_connections = opt_u32(key, &val)?,
            "server_lifetime" => self.server_lifetime = opt_u32(key, &val)?,
            "query_wait_timeout" => self.query_wait_timeout = opt_u32(key, &val)?,
            "pool_mode" => self.pool_mode = Some(pool_mode(&val)?),
            "route_reads" => self.route_reads = Some(RouteReads::parse(&val)?),
            "load_balance_hosts" => self.load_balance_hosts = Some(LoadBalanceHosts::parse(&val)?),
            "target_session_attrs" => {
                self.target_session_attrs = Some(TargetSessionAttrs::parse(&val)?)
            }
            "connect_query" => self.connect_query = Some(val),
            "client_encoding" => self.client_encoding = Some(val),
            "datestyle" => self.datestyle = Some(val),
            "timezone" => self.timezone = Some(val),
            "application_name" => self.application_name = Some(val),
            _ => return Err(format!("unknown parameter '{key}'")),
        }
        Ok(())
    }

    /// For the '*' fallback: a copy named `dbname`, with its dbname defaulted to that name.
    pub fn instantiate_auto(&self, dbname: &str) -> DatabaseEntry {
        let mut db = self.clone();
        db.name = dbname.to_string();
        if db.dbname.is_none() {
            db.dbname = Some(dbname.to_string());
        }
        db
    }

    /// How many hosts `host=` names (a comma list; unset = the one Unix socket).
    pub fn host_count(&self) -> usize {
        self.host
            .as_deref()
            .map_or(1, |h| h.split(',').filter(|h| !h.trim().is_empty()).count())
    }

    /// The database name to request from the server.
    pub fn target_dbname(&self) -> &str {
        self.dbname.as_deref().unwrap_or(&self.name)
    }

    /// True when a field changed whose change means existing servers must be replaced on reload.
    pub fn connection_differs(&self, other: &DatabaseEntry) -> bool {
        self.target_dbname() != other.target_dbname()
            || self.host != other.host
            || self.ports != other.ports
            || self.user != other.user
            || self.password != other.password
            || self.connect_query != other.connect_query
            || self.auth_dbname != other.auth_dbname
            || self.auth_query != other.auth_query
            || self.auth_user != other.auth_user
            || self.load_balance_hosts != other.load_balance_hosts
            || self.target_session_attrs != other.target_session_attrs
            || self.client_encoding != other.client_encoding
            || self.datestyle != other.datestyle
            || self.timezone != other.timezone
            || self.application_name != other.application_name
    }
}

/// Hand-written so the password never reaches a log line.
impl fmt::Debug for DatabaseEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseEntry")
            .field("name", &self.name)
            .field("line", &self.line)
            .field("file", &self.file)
            .field("dbname", &self.dbname)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("ports", &self.ports)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("auth_user", &self.auth_user)
            .field("auth_query", &self.auth_query)
            .field("auth_dbname", &self.auth_dbname)
            .field("pool_size", &self.pool_size)
            .field("min_pool_size", &self.min_pool_size)
            .field("reserve_pool_size", &self.reserve_pool_size)
            .field("max_db_connections", &self.max_db_connections)
            .field("max_db_client_connections", &self.max_db_client_connections)
            .field("server_lifetime", &self.server_lifetime)
            .field("query_wait_timeout", &self.query_wait_timeout)
            .field("pool_mode", &self.pool_mode)
            .field("route_reads", &self.route_reads)
            .field("load_balance_hosts", &self.load_balance_hosts)
            .field("target_session_attrs", &self.target_session_attrs)
            .field("connect_query", &self.connect_query)
            .field("client_encoding", &self.client_encoding)
            .field("datestyle", &self.datestyle)
            .field("timezone", &self.timezone)
            .field("application_name", &self.application_name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, value: &str) -> Result<DatabaseEntry, ConfigError> {
        DatabaseEntry::parse(name, value, "p.ini", 7)
    }

    #[test]
    fn all_keys() {
        let db = parse(
            "app",
            "dbname=real host=h1,h2 port=5433 user=u password='p w' auth_user=au \
             auth_query='SELECT usename, passwd FROM pg_shadow WHERE usename=$1' auth_dbname=authdb \
             pool_size=10 min_pool_size=2 reserve_pool=3 max_db_connections=40 \
             max_db_client_connections=50 server_lifetime=60 query_wait_timeout=5 \
             pool_mode=transaction route_reads=auto load_balance_hosts=disable connect_query='SET search_path=x' \
             client_encoding=UTF8 datestyle=ISO timezone=UTC application_name=app1",
        )
        .unwrap();
        assert_eq!(db.name, "app");
        assert_eq!((db.file.as_str(), db.line), ("p.ini", 7));
        assert_eq!(db.dbname.as_deref(), Some("real"));
        assert_eq!(db.host.as_deref(), Some("h1,h2"));
        assert_eq!(db.port, Some(5433));
        assert_eq!(db.user.as_deref(), Some("u"));
        assert_eq!(db.password.as_deref(), Some("p w"));
        assert_eq!(db.auth_user.as_deref(), Some("au"));
        assert_eq!(
            db.auth_query.as_deref(),
            Some("SELECT usename, passwd FROM pg_shadow WHERE usename=$1")
        );
        assert_eq!(db.auth_dbname.as_deref(), Some("authdb"));
        assert_eq!(db.pool_size, Some(10));
        assert_eq!(db.min_pool_size, Some(2));
        assert_eq!(db.reserve_pool_size, Some(3));
        assert_eq!(db.max_db_connections, Some(40));
        assert_eq!(db.max_db_client_connections, Some(50));
        assert_eq!(db.server_lifetime, Some(60));
        assert_eq!(db.query_wait_timeout, Some(5));
        assert_eq!(db.pool_mode, Some(PoolMode::Transaction));
        assert_eq!(db.route_reads, Some(RouteReads::Auto));
        assert_eq!(db.load_balance_hosts, Some(LoadBalanceHosts::Disable));
        assert_eq!(db.connect_query.as_deref(), Some("SET search_path=x"));
        assert_eq!(db.client_encoding.as_deref(), Some("UTF8"));
        assert_eq!(db.datestyle.as_deref(), Some("ISO"));
        assert_eq!(db.timezone.as_deref(), Some("UTC"));
        assert_eq!(db.application_name.as_deref(), Some("app1"));
        let db = parse("x", "reserve_pool_size=4 query_wait_timeout=-1").unwrap();
        assert_eq!(db.reserve_pool_size, Some(4));
        assert_eq!(db.query_wait_timeout, None);
    }

    #[test]
    fn empty_value_means_defaults() {
        let db = parse("plain", "").unwrap();
        assert_eq!(db.target_dbname(), "plain");
        assert_eq!(db.host, None);
        assert_eq!(db.port, None);
        assert_eq!(db.route_reads, None);
    }

    #[test]
    fn route_reads_values() {
        for (v, want) in [
            ("off", RouteReads::Off),
            ("explicit", RouteReads::Explicit),
            ("Auto", RouteReads::Auto),
        ] {
            assert_eq!(
                parse("d", &format!("route_reads={v}")).unwrap().route_reads,
                Some(want)
            );
        }
        // Changing it needs no new servers.
        let a = parse("d", "host=a").unwrap();
        assert!(!a.connection_differs(&parse("d", "host=a route_reads=auto").unwrap()));
    }

    #[test]
    fn errors_name_file_line_and_db() {
        let cases = [
            ("mydb", "foo=1", "p.ini:7: mydb: unknown parameter 'foo'"),
            ("mydb", "host=", "p.ini:7: mydb: empty value for 'host'"),
            ("mydb", "port=abc", "p.ini:7: mydb: invalid port: 'abc'"),
            ("mydb", "port=0", "p.ini:7: mydb: invalid port: '0'"),
            ("mydb", "host=a,b port=1,x", "p.ini:7: mydb: invalid port: 'x'"),
            (
                "mydb",
                "host=a,b port=1,2,3",
                "p.ini:7: mydb: 3 ports for 2 hosts: give one port for all hosts, or one per host",
            ),
            (
                "mydb",
                "pool_size=many",
                "p.ini:7: mydb: invalid integer for 'pool_size': 'many'",
            ),
            (
                "mydb",
                "pool_mode=tx",
                "p.ini:7: mydb: invalid pool mode 'tx' (expected one of: session, transaction, statement)",
            ),
            (
                "mydb",
                "route_reads=yes",
                "p.ini:7: mydb: invalid route_reads 'yes' (expected one of: off, explicit, auto)",
            ),
            ("mydb", "host='x", "p.ini:7: mydb: unterminated quoted value for 'host'"),
            ("mydb", "Host=x", "p.ini:7: mydb: unknown parameter 'Host'"),
            (
                "pgbouncer",
                "host=x",
                "p.ini:7: pgbouncer: database name 'pgbouncer' is reserved",
            ),
        ];
        for (name, value, want) in cases {
            assert_eq!(parse(name, value).unwrap_err().to_string(), want, "{value}");
        }
    }

    #[test]
    fn a_port_per_host() {
        let db = parse("d", "host=a,b port=5433,5434").unwrap();
        assert_eq!(
            (db.port, db.ports.as_slice()),
            (Some(5433), &[5433, 5434][..])
        );
        assert_eq!(db.host_count(), 2);
        let one = parse("d", "host=a,b port=5433").unwrap();
        assert_eq!(one.ports, [5433]);
        assert!(db.connection_differs(&parse("d", "host=a,b port=5433,5435").unwrap()));
    }

    #[test]
    fn debug_hides_password() {
        let db = parse("d", "user=u password=hunter2").unwrap();
        let dbg = format!("{db:?}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        let dbg = format!("{:#?}", db);
        assert!(!dbg.contains("hunter2"));
    }

    #[test]
    fn auto_instantiation() {
        let star = parse("*", "host=localhost port=5432").unwrap();
        let x = star.instantiate_auto("sales");
        assert_eq!(x.name, "sales");
        assert_eq!(x.dbname.as_deref(), Some("sales"));
        assert_eq!(x.host.as_deref(), Some("localhost"));
        let fixed = parse("*", "host=h dbname=fixed").unwrap();
        assert_eq!(fixed.instantiate_auto("y").dbname.as_deref(), Some("fixed"));
    }

    #[test]
    fn target_session_attrs() {
        let db = parse("d", "host=a,b target_session_attrs=prefer-standby").unwrap();
        assert_eq!(
            db.target_session_attrs,
            Some(TargetSessionAttrs::PreferStandby)
        );
        assert_eq!(parse("d", "host=a").unwrap().target_session_attrs, None);
        let e = parse("d", "host=a target_session_attrs=master")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.ini") && e.contains('7') && e.contains("target_session_attrs"),
            "{e}"
        );
    }

    #[test]
    fn connection_difference() {
        let a = parse("d", "host=a pool_size=5").unwrap();
        let b = parse("d", "host=a pool_size=50 pool_mode=statement").unwrap();
        assert!(!a.connection_differs(&b));
        for change in [
            "host=b",
            "host=a port=5433",
            "host=a dbname=other",
            "host=a user=u",
            "host=a password=p",
            "host=a connect_query='select 1'",
            "host=a auth_dbname=x",
            "host=a auth_query=x",
            "host=a auth_user=x",
            "host=a load_balance_hosts=disable",
            "host=a target_session_attrs=read-write",
            "host=a client_encoding=LATIN1",
            "host=a datestyle=ISO",
            "host=a timezone=UTC",
            "host=a application_name=z",
        ] {
            assert!(
                a.connection_differs(&parse("d", change).unwrap()),
                "{change}"
            );
        }
        // dbname=d is the same target as the implicit name.
        assert!(!a.connection_differs(&parse("d", "host=a dbname=d").unwrap()));
    }
}
