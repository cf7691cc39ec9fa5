//! THE declarative settings table: every `[pgbouncer]` key (name, type, default, reloadable, supported, doc) and the `[sluice]` keys.

use crate::modes::{AuthType, ExporterNames, PoolMode, ServerCheckQuery, TlsMode};
use crate::require_auth::RequireAuth;
use crate::settings_macro::declare_settings;
use crate::value::{AuthDbname, FileMode, PacketSize, ReplicaLag, Seconds};

/// PgBouncer's default `auth_query` (with the VALID UNTIL check added in 1.24.1).
pub const AUTH_QUERY_DEFAULT: &str = "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM pg_authid WHERE rolname=$1 AND rolcanlogin";

/// `tcp_defer_accept` is on by default only on Linux.
pub const TCP_DEFER_ACCEPT_DEFAULT: &str = if cfg!(target_os = "linux") { "1" } else { "0" };

// Keep alphabetical: this is SHOW CONFIG order (a test checks it).
declare_settings! {
    /// The `[pgbouncer]` section. Defaults are PgBouncer 1.25's. Durations are `Seconds`, comma lists
    /// `Vec<String>`, "not set" strings `Option<String>`.
    pub struct Settings in PGBOUNCER_SETTINGS {
        admin_users: Vec<String> = "", reloadable, supported, "Comma list of users allowed all admin console commands.";
        application_name_add_host: bool = "0", reloadable, supported, "Append ' - <addr>:<port>' of the client to application_name at login.";
        auth_dbname: AuthDbname = "", reloadable, supported, "Database (from [databases]) in which auth_query runs; unset = the client's database (the console's name, pgbouncer, is refused).";
        auth_file: Option<String> = "", reloadable(AuthFile), supported, "userlist file with user names and passwords or SCRAM/md5 secrets.";
        auth_hba_file: String = "", reloadable(Hba), supported, "pg_hba.conf-style file used when auth_type = hba (see docs/hba.md); a broken file keeps the previous rules on reload.";
        auth_ident_file: Option<String> = "", reloadable(Hba), supported, "pg_ident.conf-style map file used by hba map= options of peer and cert lines.";
        auth_ldap_options: Option<String> = "", reloadable, unsupported, "LDAP options for auth_type = ldap.";
        auth_query: String = AUTH_QUERY_DEFAULT, reloadable, supported, "Query returning (user, password) for users not in auth_file; $1 is the user name. Run at every login of such a user.";
        auth_type: AuthType = "md5", reloadable(Hba), supported, "Client authentication: any, trust, plain, md5, scram-sha-256, cert (client certificate CN = user), hba (rules from auth_hba_file) (ldap and pam are refused at load: not implemented).";
        auth_user: Option<String> = "", reloadable, supported, "User (with its password in auth_file) that connects to run auth_query for users not in auth_file.";
        autodb_idle_timeout: Seconds = "3600", reloadable, supported, "Seconds after which a database created from the '*' entry, with no clients and no servers, is freed (its pools closed and removed); 0 = never.";
        cancel_wait_timeout: Seconds = "10", reloadable, supported, "Seconds a cancel request may wait to be forwarded before it is dropped; 0 = no limit.";
        client_idle_timeout: Seconds = "0", reloadable, supported, "Seconds an idle client may stay connected; 0 = no limit.";
        client_login_timeout: Seconds = "60", reloadable, supported, "Seconds a client has to finish login; 0 = no limit.";
        client_tls13_ciphers: String = "", reloadable(Tls), supported, "TLS 1.3 cipher suites for client connections, ':'-separated IANA names (empty = all rustls offers).";
        client_tls_ca_file: String = "", reloadable(Tls), supported, "CA file to validate client certificates.";
        client_tls_cert_file: String = "", reloadable(Tls), supported, "Certificate presented to clients.";
        client_tls_ciphers: String = "default", reloadable(Tls), supported, "TLS 1.2 cipher suites for client connections: default/secure/fast/normal/all = all rustls offers, or a list of suite names (see docs/tls.md).";
        client_tls_dheparams: String = "auto", reloadable(Tls), unsupported, "DH parameters for client connections: none, auto, legacy.";
        client_tls_ecdhcurve: String = "auto", reloadable(Tls), supported, "ECDH curves offered to clients: auto (X25519, P-256, P-384), or the curve names allowed, separated by : or , (x25519, prime256v1, secp384r1; see docs/tls.md); none is ignored (rustls has no key exchange without ECDHE).";
        client_tls_key_file: String = "", reloadable(Tls), supported, "Private key for client_tls_cert_file.";
        client_tls_protocols: String = "secure", reloadable(Tls), supported, "TLS protocol versions allowed for clients: secure/all = TLS 1.2 and 1.3, or tlsv1.2, tlsv1.3 (rustls has no TLS 1.0/1.1).";
        client_tls_sslmode: TlsMode = "disable", reloadable(Tls), supported, "TLS mode for client connections: disable, allow, prefer, require (TLS mandatory), verify-ca, verify-full (also a client certificate signed by client_tls_ca_file).";
        conffile: Option<String> = "", reloadable, unsupported, "Config file read on the next reload (the pooler sets it to the command-line file).";
        default_pool_size: u32 = "20", reloadable, supported, "Server connections per (database, user) pool; 0 = unlimited.";
        disable_pqexec: bool = "0", fixed, supported, "Reject simple Query messages (only the extended protocol is allowed).";
        dns_max_ttl: Seconds = "15", reloadable, supported, "Seconds a successful DNS lookup is cached.";
        dns_nxdomain_ttl: Seconds = "15", reloadable, supported, "Seconds a failed DNS lookup is cached.";
        dns_zone_check_period: Seconds = "0", reloadable, unsupported, "Seconds between DNS zone serial checks; 0 = off.";
        idle_transaction_timeout: Seconds = "0", reloadable, supported, "Seconds a server may stay idle in transaction before it is closed; 0 = no limit.";
        ignore_startup_parameters: Vec<String> = "", reloadable, supported, "Comma list of startup parameters to ignore instead of rejecting ('options' ignores unknown -c settings).";
        job_name: String = "pgbouncer", fixed, unsupported, "Windows service name (alias service_name).";
        listen_addr: Option<String> = "", fixed, supported, "Comma list of TCP addresses to listen on, or '*'; unset = Unix socket only.";
        listen_backlog: u32 = "128", fixed, supported, "listen(2) backlog.";
        listen_port: u16 = "6432", fixed, supported, "TCP port, also used in the Unix socket name .s.PGSQL.<port>.";
        log_connections: bool = "1", reloadable, supported, "Log successful logins, and each new server connection ('new connection to server (from ...)').";
        log_disconnections: bool = "1", reloadable, supported, "Log disconnections with their reason ('closing because: ...'), of clients and of servers (failed connects, server_lifetime, server_idle_timeout, evictions).";
        log_pooler_errors: bool = "1", reloadable, supported, "Log errors the pooler sends to clients.";
        log_stats: bool = "1", reloadable, supported, "Log aggregate statistics every stats_period.";
        logfile: Option<String> = "", reloadable, supported, "Log file (reopened on reload); unset = log to stderr only.";
        login_notify_message: String = "", reloadable, supported, "NOTICE text sent to each client after login.";
        max_client_conn: u32 = "100", reloadable, supported, "Maximum client connections (admin console excluded).";
        max_db_client_connections: u32 = "0", reloadable, supported, "Maximum client connections per database; 0 = no limit.";
        max_db_connections: u32 = "0", reloadable, supported, "Maximum server connections per database (all users); 0 = no limit.";
        max_packet_size: PacketSize = "2147483647", reloadable, supported, "Largest packet accepted (bytes), below 2^31 (a larger value is refused at load). Server messages during login are held to 64 KiB each whatever this says.";
        max_prepared_statements: u32 = "200", reloadable, supported, "Protocol-level prepared statements tracked per server connection; 0 = off.";
        max_user_client_connections: u32 = "0", reloadable, supported, "Maximum client connections per user; 0 = no limit.";
        max_user_connections: u32 = "0", reloadable, supported, "Maximum server connections per user (all databases); 0 = no limit.";
        min_pool_size: u32 = "0", reloadable, supported, "Keep at least this many server connections per pool.";
        peer_id: u16 = "0", reloadable, supported, "Id of this process in a peer group; 0 = peering off.";
        pidfile: Option<String> = "", fixed, supported, "PID file; unset = none.";
        pkt_buf: u32 = "4096", fixed, unsupported, "Per-connection I/O buffer size (bytes).";
        pool_idle_timeout: Seconds = "0", reloadable, supported, "Seconds after which a pool without clients or servers is freed (logged as 'cleaning up idle pool'); pools with a min_pool_size are kept; 0 = off.";
        pool_mode: PoolMode = "session", reloadable, supported, "When a server goes back to the pool: session, transaction, statement.";
        query_timeout: Seconds = "0", reloadable, supported, "Seconds a query may run before its server connection is closed; a client waiting for a server that long is disconnected with query_timeout too (before query_wait_timeout is looked at); 0 = no limit.";
        query_wait_notify: u32 = "5", reloadable, supported, "Whole seconds a queued client waits before a NOTICE tells it so; 0 = off.";
        query_wait_timeout: Seconds = "120", reloadable, supported, "Seconds a client may wait for a server before it is disconnected; 0 = no limit. Checked by the janitor (every 200 ms), as PgBouncer checks it in its maintenance pass. A [databases] entry and a [users] entry may set their own (query_wait_timeout=N, following PgBouncer 1.26); the user's wins over the database's, which wins over this one.";
        reserve_pool_size: u32 = "0", reloadable, supported, "Extra server connections per pool once a client waited reserve_pool_timeout.";
        reserve_pool_timeout: Seconds = "5", reloadable, supported, "Seconds a client waits before the reserve pool is used.";
        resolv_conf: String = "", fixed, unsupported, "Custom resolv.conf for the DNS resolver.";
        sbuf_loopcnt: u32 = "5", reloadable, unsupported, "Read/forward rounds per connection before yielding; 0 = unlimited.";
        scram_iterations: u32 = "4096", reloadable, supported, "Iterations for SCRAM secrets the pooler computes from plaintext passwords (and for mock exchanges).";
        server_check_delay: Seconds = "30", reloadable, supported, "Seconds of idleness after which a server is checked with server_check_query before reuse (0: every server a client released; a server no client has used yet is vouched for by its login until it idled 1 s).";
        server_check_query: ServerCheckQuery = "<empty>", reloadable, supported, "Liveness query; <empty> = send an empty query, empty value = no checks.";
        server_connect_timeout: Seconds = "15", reloadable, supported, "Seconds allowed for server connect and login.";
        server_fast_close: bool = "0", reloadable, supported, "Session mode: close servers marked for reconnect at the end of the current transaction.";
        server_idle_timeout: Seconds = "600", reloadable, supported, "Seconds an idle server may stay open; 0 = no limit.";
        server_lifetime: Seconds = "3600", reloadable, supported, "Seconds after which an unused server is closed; 0 = use once (a server closes when the client that used it lets it go; a new server waits for its one client).";
        server_login_retry: Seconds = "15", reloadable, supported, "Seconds to wait before retrying after a failed server connect or login.";
        server_reset_query: String = "DISCARD ALL", reloadable, supported, "Query run when a server is released in session mode; empty = none.";
        server_reset_query_always: bool = "0", reloadable, supported, "Also run server_reset_query in transaction and statement modes.";
        server_round_robin: bool = "0", reloadable, supported, "Reuse idle servers in FIFO (1) instead of LIFO (0) order.";
        server_tls13_ciphers: String = "", reloadable(Tls), supported, "TLS 1.3 cipher suites for server connections (as client_tls13_ciphers).";
        server_tls_ca_file: String = "", reloadable(Tls), supported, "CA file to validate server certificates (empty = the system trust store).";
        server_tls_cert_file: String = "", reloadable(Tls), supported, "Client certificate presented to servers.";
        server_tls_ciphers: String = "default", reloadable(Tls), supported, "TLS 1.2 cipher suites for server connections (as client_tls_ciphers).";
        server_tls_key_file: String = "", reloadable(Tls), supported, "Private key for server_tls_cert_file.";
        server_tls_protocols: String = "secure", reloadable(Tls), supported, "TLS protocol versions allowed for servers (as client_tls_protocols).";
        server_tls_sslmode: TlsMode = "prefer", reloadable(Tls), supported, "TLS mode for server connections: disable, allow/prefer (TLS if the server has it), require, verify-ca (chain checked), verify-full (chain and host name); never over Unix sockets.";
        service_name: String = "pgbouncer", fixed, unsupported, "Windows service name (alias of job_name).";
        so_reuseport: bool = "0", fixed, supported, "Set SO_REUSEPORT on TCP listeners.";
        stats_period: u32 = "60", reloadable, supported, "Whole seconds between statistics averages and stats log lines.";
        stats_users: Vec<String> = "", reloadable, supported, "Comma list of users allowed read-only admin console commands.";
        suspend_timeout: Seconds = "10", reloadable, supported, "Seconds to flush buffers during SUSPEND before dropping laggards.";
        syslog: bool = "0", reloadable(Syslog), supported, "Also log to syslog.";
        syslog_facility: String = "daemon", reloadable(Syslog), supported, "Syslog facility.";
        syslog_ident: String = "pgbouncer", reloadable(Syslog), supported, "Syslog ident.";
        tcp_defer_accept: bool = TCP_DEFER_ACCEPT_DEFAULT, reloadable, supported, "Set TCP_DEFER_ACCEPT (45 s) on TCP listeners: a connection is accepted once the client has sent something (or after 45 s), so silent ones take no client slot. Linux only.";
        tcp_keepalive: bool = "1", reloadable, supported, "Set SO_KEEPALIVE on TCP connections.";
        tcp_keepcnt: u32 = "0", reloadable, supported, "TCP_KEEPCNT; 0 = OS default.";
        tcp_keepidle: u32 = "0", reloadable, supported, "TCP_KEEPIDLE seconds; 0 = OS default.";
        tcp_keepintvl: u32 = "0", reloadable, supported, "TCP_KEEPINTVL seconds; 0 = OS default.";
        tcp_socket_buffer: u32 = "0", reloadable, supported, "SO_SNDBUF/SO_RCVBUF bytes, set before each connection's handshake; a relay write to a TCP socket then carries at most this many bytes (PgBouncer's are at most its 4 KiB pkt_buf); 0 = OS default.";
        tcp_user_timeout: u32 = "0", reloadable, supported, "TCP_USER_TIMEOUT milliseconds; 0 = OS default.";
        track_extra_parameters: Vec<String> = "IntervalStyle,search_path,default_transaction_read_only", fixed, supported, "Comma list of extra GUC_REPORT parameters tracked per client (default as PgBouncer 1.26).";
        transaction_timeout: Seconds = "0", reloadable, supported, "Seconds a transaction may stay open before its server is closed; 0 = no limit.";
        unix_socket_dir: String = "/tmp", fixed, supported, "Directory of the listening Unix socket; empty = no Unix socket.";
        unix_socket_group: Option<String> = "", fixed, supported, "Group owning the Unix socket file.";
        unix_socket_mode: FileMode = "0777", fixed, supported, "Mode of the Unix socket file (octal).";
        user: Option<String> = "", fixed, supported, "Unix user to switch to after startup.";
        verbose: u32 = "0", reloadable, supported, "Log verbosity (number of -v).";
    }
}

declare_settings! {
    /// The `[sluice]` section: settings PgBouncer does not have.
    pub struct SluiceSettings in SLUICE_SETTINGS {
        failover_timeout: Seconds = "30", reloadable, supported, "Databases whose [databases] entry sets target_session_attrs: how long a client waiting for a server is held while no host of the role it needs is in rotation (a failover or switchover under way) before it gets SQLSTATE 08006 saying why; 0 = fail at once. query_wait_timeout still applies to a waiting client: keep it above this.";
        host_check_interval: Seconds = "1", reloadable, supported, "Databases whose [databases] entry sets target_session_attrs (with a host list, or a role other than any): seconds between health checks of each host (one checker per distinct host, shared by every pool that uses it; it logs in as the pool that first used the host). A failed server connect checks the host again at once.";
        max_pinned_clients: u32 = "0", reloadable, supported, "Transaction/statement mode: most clients per pool that session state may pin to their server at once (0 = no limit); past it such statements fail with 0A000.";
        max_replica_lag: ReplicaLag = "0", reloadable, supported, "How far a standby may replay behind before it is taken out of rotation (and its idle servers closed): a time (10s, 500ms: now() - pg_last_xact_replay_timestamp() while WAL is pending) or a WAL distance (16MB, or plain bytes, against the primary's pg_current_wal_lsn()); 0 = no limit.";
        metrics_auth_file: String = "", reloadable(MetricsAccess), supported, "File in auth_file format (`\"user\" \"password\"` per line, plaintext passwords) naming who may read the HTTP endpoint with basic auth; /health, /health/ready and /health/live stay open for probes; empty = no auth.";
        metrics_exporter_names: ExporterNames = "current", reloadable, supported, "Names of the pgbouncer_exporter families on /metrics: current = those of pgbouncer_exporter v0.11 and later (as of v0.12.1: pgbouncer_stats_totals_* from SHOW STATS_TOTALS, pgbouncer_client_connections, pgbouncer_databases_reserve_pool); v0.10 = those of v0.10.x and earlier (pgbouncer_stats_* from SHOW STATS, and pgbouncer_server_connections), for dashboards not yet moved.";
        metrics_listen_addr: Option<String> = "", fixed, supported, "host:port of the HTTP listener serving Prometheus /metrics and /health (e.g. 127.0.0.1:9127); empty = off.";
        metrics_tls_cert_file: String = "", reloadable(MetricsAccess), supported, "Certificate (PEM, chain allowed) of the HTTP endpoint: with metrics_tls_key_file set it speaks HTTPS only; empty = plain HTTP.";
        metrics_tls_key_file: String = "", reloadable(MetricsAccess), supported, "Private key (PEM) for metrics_tls_cert_file.";
        pin_session_state: bool = "1", reloadable, supported, "Transaction/statement mode: session state (advisory locks, LISTEN, temp tables, WITH HOLD cursors, SQL PREPARE, LOAD) keeps the client on its server until it is gone (1), or the statement fails with SQLSTATE 0A000 (0).";
        server_require_auth: RequireAuth = "", reloadable, supported, "Authentication methods a server may ask the pooler for, as libpq's require_auth: a comma list of password, md5, scram-sha-256, gss, sspi, oauth, none (the server must use one of them; none = it may let the pooler in without asking), or the same names each with a leading ! (the server must use none of them); a server asking otherwise fails that login (SQLSTATE 28000 for its clients). Empty = accept what the server asks, as PgBouncer does.";
        server_scram_max_iterations: u32 = "100000", reloadable, supported, "Most PBKDF2 iterations a server's SCRAM challenge may ask for when the pooler logs in with a plaintext password (PostgreSQL's scram_iterations, default 4096); a server asking for more fails that login (SQLSTATE 08P01 for its clients). Bounds the CPU one server login can cost (100000 iterations take tens of milliseconds of one core).";
        worker_spread_percent: u32 = "75", reloadable, supported, "How busy a worker may get (percent of one CPU over a second) before clients spread to one more worker; while the load fits on fewer workers, clients gather on them (fewer wake-ups per query, less CPU); 0 = always use every worker.";
        workers: u32 = "0", fixed, supported, "Worker threads, each running its own event loop; clients use as many of them as the load needs (worker_spread_percent), pools and limits are shared; 0 = number of CPU cores.";
    }
}
