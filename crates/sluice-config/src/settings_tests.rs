//! Tests of the settings table: every key, every default, get/set, table order and reference coverage.

use crate::error::SetError;
use crate::modes::{AuthType, PoolMode, ServerCheckQuery};
use crate::settings::*;
use crate::settings_macro::find_def;
use crate::value::{FileMode, Seconds};

/// Every key of the compatibility reference §2.1-2.8, as listed there.
const REFERENCE_KEYS: &[&str] = &[
    "logfile",
    "pidfile",
    "listen_addr",
    "listen_port",
    "unix_socket_dir",
    "unix_socket_mode",
    "unix_socket_group",
    "user",
    "pool_mode",
    "max_client_conn",
    "default_pool_size",
    "min_pool_size",
    "reserve_pool_size",
    "reserve_pool_timeout",
    "max_db_connections",
    "max_db_client_connections",
    "max_user_connections",
    "max_user_client_connections",
    "server_round_robin",
    "track_extra_parameters",
    "ignore_startup_parameters",
    "peer_id",
    "disable_pqexec",
    "application_name_add_host",
    "conffile",
    "service_name",
    "job_name",
    "stats_period",
    "max_prepared_statements",
    "scram_iterations",
    "auth_type",
    "auth_hba_file",
    "auth_ident_file",
    "auth_file",
    "auth_user",
    "auth_query",
    "auth_dbname",
    "auth_ldap_options",
    "syslog",
    "syslog_ident",
    "syslog_facility",
    "log_connections",
    "log_disconnections",
    "log_pooler_errors",
    "log_stats",
    "verbose",
    "admin_users",
    "stats_users",
    "server_reset_query",
    "server_reset_query_always",
    "server_check_delay",
    "server_check_query",
    "server_fast_close",
    "server_lifetime",
    "server_idle_timeout",
    "server_connect_timeout",
    "server_login_retry",
    "client_login_timeout",
    "autodb_idle_timeout",
    "pool_idle_timeout",
    "dns_max_ttl",
    "dns_nxdomain_ttl",
    "dns_zone_check_period",
    "resolv_conf",
    "query_wait_notify",
    "login_notify_message",
    "client_tls_sslmode",
    "client_tls_key_file",
    "client_tls_cert_file",
    "client_tls_ca_file",
    "client_tls_protocols",
    "client_tls_ciphers",
    "client_tls13_ciphers",
    "client_tls_ecdhcurve",
    "client_tls_dheparams",
    "server_tls_sslmode",
    "server_tls_ca_file",
    "server_tls_key_file",
    "server_tls_cert_file",
    "server_tls_protocols",
    "server_tls_ciphers",
    "server_tls13_ciphers",
    "query_timeout",
    "query_wait_timeout",
    "cancel_wait_timeout",
    "client_idle_timeout",
    "idle_transaction_timeout",
    "transaction_timeout",
    "suspend_timeout",
    "pkt_buf",
    "max_packet_size",
    "listen_backlog",
    "sbuf_loopcnt",
    "so_reuseport",
    "tcp_defer_accept",
    "tcp_socket_buffer",
    "tcp_keepalive",
    "tcp_keepcnt",
    "tcp_keepidle",
    "tcp_keepintvl",
    "tcp_user_timeout",
];

/// Reference §1 "Non-reloadable keys".
const NON_RELOADABLE: &[&str] = &[
    "disable_pqexec",
    "job_name",
    "service_name",
    "listen_addr",
    "listen_backlog",
    "listen_port",
    "pidfile",
    "pkt_buf",
    "resolv_conf",
    "so_reuseport",
    "track_extra_parameters",
    "unix_socket_dir",
    "unix_socket_group",
    "unix_socket_mode",
    "user",
];

/// Keys the first Sluice version implements.
const SUPPORTED: &[&str] = &[
    "disable_pqexec",
    "dns_max_ttl",
    "dns_nxdomain_ttl",
    "login_notify_message",
    "max_prepared_statements",
    "logfile",
    "peer_id",
    "query_wait_notify",
    "autodb_idle_timeout",
    "syslog",
    "syslog_facility",
    "syslog_ident",
    "unix_socket_group",
    "pidfile",
    "listen_addr",
    "listen_port",
    "unix_socket_dir",
    "unix_socket_mode",
    "user",
    "pool_mode",
    "pool_idle_timeout",
    "server_fast_close",
    "max_client_conn",
    "default_pool_size",
    "min_pool_size",
    "reserve_pool_size",
    "reserve_pool_timeout",
    "max_db_connections",
    "max_user_connections",
    "server_round_robin",
    "track_extra_parameters",
    "ignore_startup_parameters",
    "application_name_add_host",
    "stats_period",
    "auth_type",
    "auth_file",
    "auth_hba_file",
    "auth_ident_file",
    "auth_user",
    "auth_query",
    "auth_dbname",
    "scram_iterations",
    "log_connections",
    "log_disconnections",
    "log_pooler_errors",
    "log_stats",
    "verbose",
    "server_reset_query",
    "server_reset_query_always",
    "server_check_delay",
    "server_check_query",
    "server_lifetime",
    "server_idle_timeout",
    "server_connect_timeout",
    "server_login_retry",
    "client_login_timeout",
    "query_timeout",
    "query_wait_timeout",
    "client_idle_timeout",
    "idle_transaction_timeout",
    "transaction_timeout",
    "cancel_wait_timeout",
    "max_packet_size",
    "listen_backlog",
    "so_reuseport",
    "tcp_defer_accept",
    "tcp_keepalive",
    "tcp_keepcnt",
    "tcp_keepidle",
    "tcp_keepintvl",
    "tcp_user_timeout",
    "tcp_socket_buffer",
    "max_db_client_connections",
    "max_user_client_connections",
    "admin_users",
    "stats_users",
    "suspend_timeout",
    "client_tls_sslmode",
    "client_tls_key_file",
    "client_tls_cert_file",
    "client_tls_ca_file",
    "client_tls_protocols",
    "client_tls_ciphers",
    "client_tls13_ciphers",
    "client_tls_ecdhcurve",
    "server_tls_sslmode",
    "server_tls_ca_file",
    "server_tls_key_file",
    "server_tls_cert_file",
    "server_tls_protocols",
    "server_tls_ciphers",
    "server_tls13_ciphers",
];

#[test]
fn table_covers_reference_exactly() {
    for key in REFERENCE_KEYS {
        assert!(find_def(PGBOUNCER_SETTINGS, key).is_some(), "{key} missing");
    }
    assert_eq!(PGBOUNCER_SETTINGS.len(), REFERENCE_KEYS.len());
}

#[test]
fn table_is_alphabetical_and_unique() {
    for table in [PGBOUNCER_SETTINGS, SLUICE_SETTINGS] {
        for pair in table.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
    }
}

#[test]
fn reloadable_and_supported_flags() {
    for def in PGBOUNCER_SETTINGS {
        assert_eq!(
            def.reloadable,
            !NON_RELOADABLE.contains(&def.name),
            "{}",
            def.name
        );
        assert_eq!(def.supported, SUPPORTED.contains(&def.name), "{}", def.name);
        assert!(!def.doc.is_empty(), "{}", def.name);
    }
    assert_eq!(
        PGBOUNCER_SETTINGS.iter().filter(|d| d.supported).count(),
        SUPPORTED.len()
    );
}

#[test]
fn every_default_parses_and_renders_back() {
    let defaults = Settings::default();
    for def in PGBOUNCER_SETTINGS {
        assert_eq!(
            defaults.get(def.name).as_deref(),
            Some(def.default),
            "{}",
            def.name
        );
        let mut s = Settings::default();
        s.set(def.name, def.default)
            .unwrap_or_else(|e| panic!("{}: default does not parse: {e}", def.name));
        assert_eq!(s, defaults, "{}", def.name);
    }
    let sluice = SluiceSettings::default();
    for def in SLUICE_SETTINGS {
        assert_eq!(
            sluice.get(def.name).as_deref(),
            Some(def.default),
            "{}",
            def.name
        );
    }
}

#[test]
fn default_values_are_pgbouncers() {
    let s = Settings::default();
    assert_eq!(s.listen_port, 6432);
    assert_eq!(s.listen_addr, None);
    assert_eq!(s.logfile, None);
    assert_eq!(s.user, None);
    assert_eq!(s.auth_file, None);
    assert_eq!(s.unix_socket_dir, "/tmp");
    assert_eq!(s.unix_socket_mode, FileMode(0o777));
    assert_eq!(s.pool_mode, PoolMode::Session);
    assert_eq!(s.auth_type, AuthType::Md5);
    assert_eq!(s.max_client_conn, 100);
    assert_eq!(s.default_pool_size, 20);
    assert_eq!(s.reserve_pool_timeout, Seconds(5.0));
    assert_eq!(s.server_lifetime, Seconds(3600.0));
    assert_eq!(s.query_wait_timeout, Seconds(120.0));
    assert_eq!(s.server_check_query, ServerCheckQuery::EmptyQuery);
    assert_eq!(s.server_reset_query, "DISCARD ALL");
    assert_eq!(
        s.track_extra_parameters,
        [
            "IntervalStyle",
            "search_path",
            "default_transaction_read_only"
        ]
    );
    assert!(s.admin_users.is_empty());
    assert_eq!(s.max_packet_size.0, 2147483647);
    assert_eq!(s.auth_query, AUTH_QUERY_DEFAULT);
    assert!(s.log_connections && s.tcp_keepalive && !s.server_round_robin);
    assert_eq!(s.tcp_defer_accept, cfg!(target_os = "linux"));
    assert_eq!(SluiceSettings::default().workers, 0);
    assert_eq!(SluiceSettings::default().metrics_listen_addr, None);
}

#[test]
fn set_and_get() {
    let mut s = Settings::default();
    s.set("default_pool_size", " 50 ").unwrap();
    assert_eq!(s.default_pool_size, 50);
    assert_eq!(s.get("default_pool_size").as_deref(), Some("50"));
    s.set("query_timeout", "2.5").unwrap();
    assert_eq!(s.get("query_timeout").as_deref(), Some("2.5"));
    s.set("admin_users", "a, b").unwrap();
    assert_eq!(s.admin_users, vec!["a", "b"]);
    s.set("server_check_query", "").unwrap();
    assert_eq!(s.server_check_query, ServerCheckQuery::Disabled);
    s.set("logfile", "/var/log/x.log").unwrap();
    assert_eq!(s.logfile.as_deref(), Some("/var/log/x.log"));
    s.set("logfile", "").unwrap();
    assert_eq!(s.logfile, None);
    assert_eq!(s.set("no_such_key", "1"), Err(SetError::UnknownKey));
    assert_eq!(s.set("Listen_Port", "1"), Err(SetError::UnknownKey));
    assert_eq!(
        s.set("default_pool_size", "abc"),
        Err(SetError::BadValue("invalid integer 'abc'".into()))
    );
    assert!(s.set("pool_mode", "bogus").is_err());
    assert_eq!(s.get("no_such_key"), None);
    let mut sl = SluiceSettings::default();
    sl.set("workers", "8").unwrap();
    assert_eq!(sl.workers, 8);
    assert_eq!(sl.set("listen_port", "1"), Err(SetError::UnknownKey));
}

#[test]
fn every_key_rejects_garbage_without_panicking() {
    for def in PGBOUNCER_SETTINGS {
        for junk in [
            "",
            "-1",
            "abc",
            "99999999999999999999",
            "\u{0}",
            "0x",
            "<empty>",
            " 1e400 ",
        ] {
            let mut s = Settings::default();
            let _ = s.set(def.name, junk);
            assert!(s.get(def.name).is_some());
        }
    }
}

#[test]
fn effects_belong_to_reloadable_keys_and_cover_the_files() {
    use crate::settings_macro::Effect;
    for def in PGBOUNCER_SETTINGS.iter().chain(SLUICE_SETTINGS) {
        if !def.reloadable {
            assert_eq!(
                def.effect,
                Effect::None,
                "{}: fixed keys take no effect",
                def.name
            );
        }
        // Every key that names a file a running pooler reads has an effect that reads it again.
        let names_a_file =
            def.name.ends_with("_file") && def.name != "logfile" && def.name != "pidfile";
        if names_a_file && def.reloadable {
            assert_ne!(
                def.effect,
                Effect::None,
                "{} names a file but no effect re-reads it",
                def.name
            );
        }
    }
    let effect = |k| crate::find_def(PGBOUNCER_SETTINGS, k).unwrap().effect;
    assert_eq!(effect("auth_hba_file"), Effect::Hba);
    assert_eq!(effect("auth_file"), Effect::AuthFile);
    assert_eq!(effect("client_tls_sslmode"), Effect::Tls);
    assert_eq!(effect("default_pool_size"), Effect::None);
}
