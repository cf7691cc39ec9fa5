//! Tests of whole-file loading: sections, error messages, includes, unsupported keys and the seed configs.

use crate::error::ConfigError;
use crate::load::{load, parse_str};
use crate::modes::{AuthType, PoolMode, ServerCheckQuery};
use crate::value::Seconds;

/// The configuration block of seed article 002 (content platform), verbatim.
const SEED_002: &str = "; /etc/pgbouncer/pgbouncer.ini
[databases]
; Read traffic through pooler
content_read = host=127.0.0.1 port=5432 dbname=content pool_size=20 pool_mode=transaction
[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
auth_type = hba
auth_file = /etc/pgbouncer/userlist.txt
auth_hba_file = /etc/pgbouncer/pg_hba.conf
; Pool sizing
default_pool_size = 20
min_pool_size = 5
reserve_pool_size = 5
reserve_pool_timeout = 3
; Client limits
max_client_conn = 1000
max_db_connections = 25
; Timeouts
server_idle_timeout = 300
client_idle_timeout = 0
query_timeout = 30
client_login_timeout = 15
; Transaction mode settings
pool_mode = transaction
server_reset_query = DISCARD ALL
server_check_query = SELECT 1
server_check_delay = 30
; Performance
tcp_keepalive = 1
tcp_keepidle = 60
tcp_keepintvl = 10
tcp_keepcnt = 3
; Logging
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
stats_period = 60
";

/// Seed articles 001 and 003: the settings they put into the stock pgbouncer.ini.
const SEED_001: &str = "[databases]
* = host=localhost port=5432

[pgbouncer]
;;;
;;; Pooler personality questions
;;;
;; When server connection is released back to pool:
;; session - after client disconnects (default)
;; transaction - after transaction finishes
;; statement - after statement finishes
pool_mode = transaction
;; Total number of clients that can connect
max_client_conn = 5000
;; any, trust, plain, md5, cert, hba, pam
auth_type = md5
auth_file = /etc/pgbouncer/userlist.txt
;; comma-separated list of users who are allowed to change settings
;admin_users = user2, someadmin, otheradmin
admin_users = my_db_user
";

const SEED_003: &str = "[databases]
* = host=localhost port=5432
[pgbouncer]
listen_port = 6432
auth_type = md5
auth_file = /etc/pgbouncer/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 5000
";

#[test]
fn seed_002_loads() {
    let cfg = parse_str(SEED_002, "/etc/pgbouncer/pgbouncer.ini").unwrap();
    let s = &cfg.settings;
    assert_eq!(s.listen_addr.as_deref(), Some("0.0.0.0"));
    assert_eq!(s.auth_type, AuthType::Hba);
    assert_eq!(s.min_pool_size, 5);
    assert_eq!(s.reserve_pool_timeout, Seconds(3.0));
    assert_eq!(s.max_db_connections, 25);
    assert_eq!(s.server_idle_timeout, Seconds(300.0));
    assert_eq!(
        s.query_timeout.as_duration(),
        Some(std::time::Duration::from_secs(30))
    );
    assert_eq!(s.pool_mode, PoolMode::Transaction);
    assert_eq!(
        s.server_check_query,
        ServerCheckQuery::Query("SELECT 1".into())
    );
    assert_eq!(
        (s.tcp_keepidle, s.tcp_keepintvl, s.tcp_keepcnt),
        (60, 10, 3)
    );
    assert!(!s.log_connections && !s.log_disconnections && s.log_pooler_errors);
    let db = cfg.database("content_read").unwrap();
    assert_eq!(db.host.as_deref(), Some("127.0.0.1"));
    assert_eq!(db.port, Some(5432));
    assert_eq!(db.dbname.as_deref(), Some("content"));
    assert_eq!(db.pool_size, Some(20));
    assert_eq!(db.pool_mode, Some(PoolMode::Transaction));
    assert_eq!(db.line, 4);
    assert!(cfg.fallback.is_none());
    // Every key of this config is implemented (auth_hba_file included).
    assert!(cfg.unsupported.is_empty(), "{:?}", cfg.unsupported);
}

#[test]
fn seeds_001_and_003_load() {
    for (text, admin) in [(SEED_001, "my_db_user"), (SEED_003, "postgres")] {
        let cfg = parse_str(text, "pgbouncer.ini").unwrap();
        assert_eq!(cfg.settings.pool_mode, PoolMode::Transaction);
        assert_eq!(cfg.settings.max_client_conn, 5000);
        assert_eq!(cfg.settings.auth_type, AuthType::Md5);
        assert_eq!(
            cfg.settings.auth_file.as_deref(),
            Some("/etc/pgbouncer/userlist.txt")
        );
        assert_eq!(cfg.settings.admin_users, vec![admin.to_string()]);
        let star = cfg.fallback.as_ref().unwrap();
        assert_eq!(star.name, "*");
        assert_eq!(star.host.as_deref(), Some("localhost"));
        assert!(cfg.databases.is_empty());
        assert!(cfg.unsupported.is_empty(), "{:?}", cfg.unsupported);
        let auto = star.instantiate_auto("demodb");
        assert_eq!(auto.dbname.as_deref(), Some("demodb"));
    }
}

#[test]
fn all_sections() {
    let text = "[PgBouncer]\nlisten_port = 7000\n[SLUICE]\nworkers = 3\n\
                [databases]\n\"my-db\" = host=h\nsame = host=a\nother = host=o\nsame = host=b\n\
                [users]\nalice = pool_mode=session pool_size=2\n\
                [peers]\n1 = host=/tmp/p1\n2 = host=10.0.0.2 port=6433\n\
                [pgbouncer]\nmax_prepared_statements = 0\ndns_zone_check_period = 30\n";
    let cfg = parse_str(text, "all.ini").unwrap();
    assert_eq!(cfg.settings.listen_port, 7000);
    assert_eq!(cfg.sluice.workers, 3);
    let names: Vec<_> = cfg.databases.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["my-db", "same", "other"]);
    assert_eq!(cfg.database("same").unwrap().host.as_deref(), Some("b"));
    assert!(cfg.database("SAME").is_none());
    assert_eq!(cfg.user("alice").unwrap().pool_size, Some(2));
    assert_eq!(cfg.peers.len(), 2);
    assert_eq!(cfg.peer(2).unwrap().port, 6433);
    assert_eq!(
        cfg.unsupported,
        vec![(
            "dns_zone_check_period".to_string(),
            "all.ini:17".to_string()
        )]
    );
}

#[test]
fn unsupported_only_when_not_default() {
    let cfg = parse_str(
        "[pgbouncer]\nserver_tls_sslmode = prefer\nsyslog_ident = pgbouncer\nsyslog = 0\n",
        "u.ini",
    )
    .unwrap();
    assert!(cfg.unsupported.is_empty());
    let cfg = parse_str(
        "[pgbouncer]\ndns_zone_check_period = 30\nclient_tls_dheparams = none\n",
        "u.ini",
    )
    .unwrap();
    let keys: Vec<_> = cfg.unsupported.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["dns_zone_check_period", "client_tls_dheparams"]);
}

#[test]
fn route_reads_is_a_supported_key() {
    let on = parse_str(
        "[databases]\na = host=h\nb = host=h route_reads=auto\n* = route_reads=explicit\n",
        "r.ini",
    )
    .unwrap();
    assert!(on.unsupported.is_empty(), "{:?}", on.unsupported);
    let err = parse_str("[databases]\na = route_reads=always\n", "r.ini").unwrap_err();
    assert_eq!(
        err.to_string(),
        "r.ini:2: a: invalid route_reads 'always' (expected one of: off, explicit, auto)"
    );
}

#[test]
fn error_messages_name_file_line_and_key() {
    let cases = [
        ("[pgbouncer]\ndefault_pool_size = abc\n", "c.ini:2: default_pool_size: invalid integer 'abc'"),
        ("[pgbouncer]\n\nfoo = 1\n", "c.ini:3: foo: unknown parameter"),
        ("[pgbouncer]\nLISTEN_PORT = 1\n", "c.ini:2: LISTEN_PORT: unknown parameter"),
        ("[pgbouncer]\nlisten_port = 70000\n", "c.ini:2: listen_port: value 70000 out of range (0..65535)"),
        ("[pgbouncer]\nquery_timeout = soon\n", "c.ini:2: query_timeout: invalid time value 'soon' (expected seconds)"),
        ("[pgbouncer]\nlog_stats = maybe\n", "c.ini:2: log_stats: invalid boolean 'maybe' (expected 0 or 1)"),
        (
            "[pgbouncer]\nauth_type = kerberos\n",
            "c.ini:2: auth_type: invalid auth type 'kerberos' (expected one of: any, trust, plain, md5, scram-sha-256, cert, hba, ldap, pam)",
        ),
        ("[sluice]\nworkers = many\n", "c.ini:2: workers: invalid integer 'many'"),
        (
            "[pgbouncer]\nmax_packet_size = 2147483648\n",
            "c.ini:2: max_packet_size: value 2147483648 out of range (0..2147483647): a packet size must stay below 2^31 bytes",
        ),
        (
            "[sluice]\nserver_require_auth = md5,!password\n",
            "c.ini:2: server_require_auth: negative require_auth method \"!password\" cannot be mixed with non-negative methods",
        ),
        ("[sluice]\nlisten_port = 1\n", "c.ini:2: listen_port: unknown parameter"),
        ("listen_port = 1\n", "c.ini:1: listen_port: parameter outside of any section"),
        ("[pgbouncer]\n[bogus]\n", "c.ini:2: unknown section '[bogus]'"),
        ("[databases]\nmydb = host=x foo=1\n", "c.ini:2: mydb: unknown parameter 'foo'"),
        ("[databases]\npgbouncer = host=x\n", "c.ini:2: pgbouncer: database name 'pgbouncer' is reserved"),
        (
            "[pgbouncer]\nauth_dbname = pgbouncer\n",
            "c.ini:2: auth_dbname: cannot use the reserved \"pgbouncer\" database as an auth_dbname",
        ),
        ("[users]\nbob = pool_size=x\n", "c.ini:2: bob: invalid integer for 'pool_size': 'x'"),
        ("[peers]\n0 = host=x\n", "c.ini:2: 0: invalid peer id '0' (expected 1..65535)"),
        ("[pgbouncer]\nlisten_port\n", "c.ini:2: expected '=' after 'listen_port'"),
    ];
    for (text, want) in cases {
        assert_eq!(
            parse_str(text, "c.ini").unwrap_err().to_string(),
            want,
            "{text:?}"
        );
    }
}

#[test]
fn load_from_disk_with_includes() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("pgbouncer.ini");
    std::fs::write(
        dir.path().join("dbs.ini"),
        "[databases]\nincluded = host=i\n%include more.ini\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("more.ini"),
        "[pgbouncer]\nmax_client_conn = 7\n",
    )
    .unwrap();
    std::fs::write(
        &main,
        "[pgbouncer]\nlisten_port = 6000\n%include dbs.ini\nmain = host=m\ndefault_pool_size = bad\n",
    )
    .unwrap();
    // The section switched inside the include stays switched: "main" lands in [pgbouncer].
    let err = load(&main).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}:4: main: unknown parameter", main.display())
    );

    std::fs::write(
        &main,
        "[pgbouncer]\nlisten_port = 6000\n%include dbs.ini\ndefault_pool_size = 9\n",
    )
    .unwrap();
    let cfg = load(&main).unwrap();
    assert_eq!(cfg.path, main);
    assert_eq!(cfg.settings.listen_port, 6000);
    assert_eq!(cfg.settings.max_client_conn, 7);
    assert_eq!(cfg.settings.default_pool_size, 9);
    let db = cfg.database("included").unwrap();
    assert!(db.file.ends_with("dbs.ini"));
    assert_eq!(db.line, 2);

    std::fs::write(
        dir.path().join("more.ini"),
        "[pgbouncer]\n\nmax_client_conn = x\n",
    )
    .unwrap();
    let err = load(&main).unwrap_err();
    match err {
        ConfigError::Key {
            file, line, key, ..
        } => {
            assert!(file.ends_with("more.ini"), "{file}");
            assert_eq!((line, key.as_str()), (3, "max_client_conn"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let missing = load(&dir.path().join("absent.ini")).unwrap_err();
    assert!(matches!(missing, ConfigError::Io { .. }));
}

#[test]
fn arbitrary_input_never_panics() {
    let samples = [
        "",
        "[",
        "]",
        "=",
        "\"",
        "%",
        "%include",
        "[databases]\n*=",
        "[databases]\nx='",
        "[peers]\n99999999999999999999 = host=x",
        "[users]\n\"\"=",
        "[pgbouncer]\nunix_socket_mode=0999",
        "\u{0}\u{1}=\u{2}",
        "[databases]\na = host=x port=-1",
        "[pgbouncer]\nserver_lifetime=1e309",
    ];
    for s in samples {
        let _ = parse_str(s, "fuzz.ini");
    }
    // Every prefix of a real config.
    for end in 0..SEED_002.len() {
        if SEED_002.is_char_boundary(end) {
            let _ = parse_str(&SEED_002[..end], "fuzz.ini");
        }
    }
}

#[test]
fn prepared_statement_cache_size_is_an_alias() {
    let cfg = parse_str("[pgbouncer]\nprepared_statement_cache_size = 50\n", "a.ini").unwrap();
    assert_eq!(cfg.settings.max_prepared_statements, 50);
    assert_eq!(
        cfg.notes,
        vec![
            "a.ini:2: prepared_statement_cache_size is read as max_prepared_statements".to_string()
        ]
    );
}

#[test]
fn auth_types_sluice_lacks_are_refused_at_load() {
    for t in ["pam", "ldap"] {
        let e = parse_str(
            &format!("[pgbouncer]\nlisten_port = 1\nauth_type = {t}\n"),
            "p.ini",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            format!(
                "p.ini:3: auth_type: {t} is not supported by Sluice; use hba, cert, scram-sha-256, md5, plain, trust or any"
            )
        );
    }
}
