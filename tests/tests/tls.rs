//! TLS end to end: libpq (psql) with verify-full through Sluice to a PostgreSQL with ssl=on, server
//! certificate checks (wrong CA, wrong host name), client_tls_sslmode=require, client certificates
//! and auth_type=cert, direct TLS with ALPN, plaintext pipelined after SSLRequest, certificate
//! reload, SCRAM-SHA-256-PLUS channel binding on both legs, the SHOW CLIENTS/SERVERS tls column.
//! The relay over TLS (large and rewritten messages, sockets moving between workers): `tls_relay.rs`.

mod tls_support;

use std::time::Duration;

use sluice_e2e::{error_fields, psql_cmd, RawConn, Sluice};
use tls_support::client::{Negotiation, PgTls};
use tls_support::{
    builder, der, ini, pg_with_ssl, verify_full_conn, write_private, Certs, DB_BY_IP, DB_BY_NAME,
};

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn psql_verify_full_to_sluice_and_sluice_verify_full_to_postgres() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = verify-full\n\
         server_tls_ca_file = {dir}/ca.crt\nstats_users = trust_user\n",
        DB_BY_NAME,
    ))
    .start();
    let ssl_and_pid = || {
        let (st, out, err) = psql_cmd(
            &verify_full_conn(&s, "trust_user", "app", ""),
            "SELECT ssl::text || ' ' || pid FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        );
        assert!(st.success(), "{err}\n{}", s.log());
        out.trim().to_string()
    };
    let first = ssl_and_pid();
    assert!(first.starts_with("true "), "the server leg is TLS: {first}");
    // The idle TLS server goes back to the pool and serves the next client.
    assert_eq!(ssl_and_pid(), first, "same TLS server reused");

    let console = verify_full_conn(&s, "trust_user", "pgbouncer", "");
    let (st, out, err) = psql_cmd(&console, "SHOW CLIENTS");
    assert!(st.success(), "{err}\n{}", s.log());
    assert!(
        out.contains("|TLSv1.3/TLS_AES_256_GCM_SHA384|"),
        "SHOW CLIENTS tls column: {out}"
    );
    let (st, out, err) = psql_cmd(&console, "SHOW SERVERS");
    assert!(st.success(), "{err}");
    // PgBouncer 1.25.2 names the key exchange group for TLS 1.2 only, on both legs.
    assert!(
        out.contains("|TLSv1.3/TLS_AES_256_GCM_SHA384|"),
        "SHOW SERVERS tls column: {out}"
    );
}

/// Sluice requiring TLS of clients with `tls_lines` added, and SHOW CLIENTS over psql (TLS).
fn show_clients_over_tls(tls_lines: &str) -> (Sluice, String) {
    let s = builder(&ini(
        &format!(
            "auth_type = trust\nclient_tls_sslmode = require\n{tls_lines}\n\
             server_tls_sslmode = disable\nstats_users = trust_user\n"
        ),
        DB_BY_IP,
    ))
    .start();
    let (st, out, err) = psql_cmd(
        &verify_full_conn(&s, "trust_user", "pgbouncer", ""),
        "SHOW CLIENTS",
    );
    assert!(st.success(), "{err}\n{}", s.log());
    (s, out)
}

#[test]
fn protocol_and_cipher_settings_apply() {
    let (s, out) = show_clients_over_tls(
        "client_tls_protocols = tlsv1.2\n\
         client_tls_ciphers = HIGH:!aNULL:ECDHE-ECDSA-AES128-GCM-SHA256",
    );
    assert!(
        out.contains("|TLSv1.2/ECDHE-ECDSA-AES128-GCM-SHA256/ECDH=X25519|"),
        "{out}"
    );
    assert!(
        s.log().contains("client_tls_ciphers: ignored") && s.log().contains("HIGH:!aNULL"),
        "OpenSSL selectors are reported: {}",
        s.log()
    );
}

/// client_tls_ecdhcurve (OpenSSL names) limits the key exchange groups offered to clients (which
/// of a list is used follows the client's preference); SHOW CLIENTS names the group over TLS 1.2
/// (as PgBouncer does, not over TLS 1.3). A curve rustls lacks is a config error
/// naming the key.
#[test]
fn client_tls_ecdhcurve_picks_the_group() {
    for (value, shown) in [
        ("secp384r1", &["ECDH=secp384r1"][..]),
        ("prime256v1", &["ECDH=prime256v1"]),
        // libpq prefers X25519: a list without it gets one of its own groups.
        ("secp384r1, P-256", &["ECDH=secp384r1", "ECDH=prime256v1"]),
    ] {
        let (_s, out) = show_clients_over_tls(&format!(
            "client_tls_ecdhcurve = {value}\nclient_tls_protocols = tlsv1.2"
        ));
        assert!(
            shown.iter().any(|g| out.contains(&format!("/{g}|"))),
            "{value}: {out}"
        );
    }
    let (status, out) = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nclient_tls_ecdhcurve = secp521r1\n",
        DB_BY_IP,
    ))
    .run_expect_exit(Duration::from_secs(10));
    assert!(!status.success());
    assert!(
        out.contains("client_tls_ecdhcurve: not offered by rustls \"secp521r1\""),
        "{out}"
    );
}

#[tokio::test]
async fn client_certificate_towards_the_server() {
    pg_with_ssl();
    let c = Certs::get();
    let text = |cert_lines: &str| {
        ini(
            &format!(
                "auth_type = trust\nserver_tls_sslmode = verify-full\n\
                 server_tls_ca_file = {{dir}}/ca.crt\n{cert_lines}"
            ),
            DB_BY_NAME,
        )
    };
    let s = builder(&text(
        "server_tls_cert_file = {dir}/pg_client.crt\nserver_tls_key_file = {dir}/pg_client.key\n",
    ))
    .file("pg_client.crt", &c.client_cert_user.cert)
    .file("pg_client.key", &c.client_cert_user.key)
    .userlist("\"cert_user\" \"\"\n")
    .start();
    let client = s
        .connect("cert_user", "", "app")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", s.log()));
    let row = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "cert_user");

    // Without the certificate PostgreSQL refuses the login, and the client hears why.
    let s = builder(&text("")).userlist("\"cert_user\" \"\"\n").start();
    let msg = server_leg_error_as(&s, "cert_user").await;
    assert!(msg.contains("certificate"), "{msg}");
}

async fn server_leg_error_as(s: &Sluice, user: &str) -> String {
    let e = s
        .connect(user, "", "app")
        .await
        .err()
        .unwrap_or_else(|| panic!("login succeeded\n{}", s.log()));
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

async fn server_leg_error(s: &Sluice) -> String {
    let e = s
        .connect("trust_user", "trust_pass", "app")
        .await
        .err()
        .unwrap_or_else(|| panic!("login succeeded\n{}", s.log()));
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

#[tokio::test]
async fn server_certificate_from_unknown_ca_is_refused() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nserver_tls_sslmode = verify-ca\nserver_tls_ca_file = {dir}/other_ca.crt\n",
        DB_BY_NAME,
    ))
    .start();
    let msg = server_leg_error(&s).await;
    assert!(
        msg.contains("server certificate verify failed") && msg.contains("UnknownIssuer"),
        "{msg}"
    );
    assert!(s.log().contains("server certificate verify failed"));
}

#[tokio::test]
async fn server_host_name_is_checked_by_verify_full_only() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nserver_tls_sslmode = verify-full\nserver_tls_ca_file = {dir}/ca.crt\n",
        DB_BY_IP,
    ))
    .start();
    let msg = server_leg_error(&s).await;
    assert!(
        msg.contains("server certificate verify failed") && msg.contains("not valid for name"),
        "{msg}"
    );

    // verify-ca checks the chain only: the same server by IP is fine.
    let s = builder(&ini(
        "auth_type = trust\nserver_tls_sslmode = verify-ca\nserver_tls_ca_file = {dir}/ca.crt\n",
        DB_BY_IP,
    ))
    .start();
    let c = s.connect("trust_user", "x", "app").await.unwrap();
    let row = c
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
}

#[tokio::test]
async fn require_refuses_plaintext_clients() {
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = disable\n",
        DB_BY_IP,
    ))
    .start();
    let mut raw = RawConn::connect(s.port).await;
    raw.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    let (tag, body) = raw.read_message(WAIT).await.expect("an error");
    assert_eq!(tag, b'E');
    let f = error_fields(&body);
    assert_eq!(f[&b'C'], "28000");
    assert_eq!(f[&b'M'], "SSL required");

    let (st, _, err) = psql_cmd(
        &format!(
            "host=127.0.0.1 port={} dbname=app user=trust_user sslmode=disable",
            s.port
        ),
        "SELECT 1",
    );
    assert!(!st.success());
    assert!(err.contains("SSL required"), "{err}");

    // The same client with TLS gets in.
    let (st, out, err) = psql_cmd(&verify_full_conn(&s, "trust_user", "app", ""), "SELECT 1");
    assert!(st.success(), "{err}\n{}", s.log());
    assert_eq!(out.trim(), "1");
}

#[test]
fn client_certificates_and_auth_type_cert() {
    let s = builder(&ini(
        "auth_type = cert\nclient_tls_sslmode = verify-full\nclient_tls_ca_file = {dir}/ca.crt\n\
         server_tls_sslmode = disable\n",
        DB_BY_IP,
    ))
    .start();
    let c = Certs::get();
    let dir = s.dir.path().to_path_buf();
    for (name, pem) in [
        ("trust_user", &c.client_trust_user),
        ("md5_user", &c.client_md5_user),
        ("untrusted", &c.client_untrusted),
    ] {
        write_private(&dir.join(format!("{name}.crt")), &pem.cert);
        write_private(&dir.join(format!("{name}.key")), &pem.key);
    }
    let with_cert = |user: &str, cert: &str| {
        verify_full_conn(
            &s,
            user,
            "app",
            &format!(
                "sslcert={0}/{cert}.crt sslkey={0}/{cert}.key",
                dir.display()
            ),
        )
    };

    // CN = user: in, without any password.
    let (st, out, err) = psql_cmd(
        &with_cert("trust_user", "trust_user"),
        "SELECT current_user",
    );
    assert!(st.success(), "{err}\n{}", s.log());
    assert_eq!(out.trim(), "trust_user");

    // A valid certificate for another user.
    let (st, _, err) = psql_cmd(&with_cert("trust_user", "md5_user"), "SELECT 1");
    assert!(!st.success());
    assert!(
        err.contains("certificate authentication failed for user \"trust_user\""),
        "{err}"
    );
    assert!(s
        .log()
        .contains("certificate CN \"md5_user\" does not match user \"trust_user\""));

    // A certificate from another CA, and no certificate at all: the handshake fails.
    let (st, _, err) = psql_cmd(&with_cert("trust_user", "untrusted"), "SELECT 1");
    assert!(!st.success(), "untrusted CA accepted");
    assert!(err.contains("SSL"), "{err}");
    let (st, _, err) = psql_cmd(&verify_full_conn(&s, "trust_user", "app", ""), "SELECT 1");
    assert!(!st.success(), "no certificate accepted");
    assert!(err.contains("certificate"), "{err}");
}

/// `clientcert=` on hba lines (PostgreSQL 14+): verify-ca lets in only a client with a certificate
/// that client_tls_ca_file verifies, verify-full only one whose CN is the user, and the line's own
/// method still runs after that (its password asked for). Before, the option was read and ignored:
/// a `trust clientcert=verify-ca` line let in anyone over TLS.
#[test]
fn hba_clientcert_is_enforced() {
    let hba = "\
hostssl ca_db   all 127.0.0.1/32 trust clientcert=verify-ca
hostssl full_db all 127.0.0.1/32 md5   clientcert=verify-full
host    all     all 127.0.0.1/32 reject
";
    let dbs = "ca_db = host={pg_host} port={pg_port} dbname=app\n\
               full_db = host={pg_host} port={pg_port} dbname=app";
    let s = builder(&ini(
        "auth_type = hba\nauth_hba_file = {dir}/hba.conf\nclient_tls_sslmode = prefer\n\
         client_tls_ca_file = {dir}/ca.crt\nserver_tls_sslmode = disable\n",
        dbs,
    ))
    .file("hba.conf", hba)
    .start();
    let c = Certs::get();
    let dir = s.dir.path().to_path_buf();
    for (name, pem) in [
        ("md5_user", &c.client_md5_user),
        ("trust_user", &c.client_trust_user),
    ] {
        write_private(&dir.join(format!("{name}.crt")), &pem.cert);
        write_private(&dir.join(format!("{name}.key")), &pem.key);
    }
    let run = |user: &str, db: &str, cert: Option<&str>| {
        let cert = cert.map_or(String::new(), |c| {
            format!("sslcert={0}/{c}.crt sslkey={0}/{c}.key", dir.display())
        });
        let conn = verify_full_conn(&s, user, db, &format!("password=md5_pass {cert}"));
        let (st, out, err) = psql_cmd(&conn, "SELECT current_user");
        if st.success() {
            Ok(out.trim().to_string())
        } else {
            Err(err)
        }
    };
    // verify-ca: any verified certificate, none refused.
    assert_eq!(
        run("md5_user", "ca_db", Some("trust_user")).as_deref(),
        Ok("md5_user")
    );
    let err = run("md5_user", "ca_db", None).unwrap_err();
    assert!(
        err.contains("connection requires a valid client certificate"),
        "{err}\n{}",
        s.log()
    );
    // verify-full: the CN must be the user; then md5 runs (the right password is given).
    assert_eq!(
        run("md5_user", "full_db", Some("md5_user")).as_deref(),
        Ok("md5_user")
    );
    let err = run("md5_user", "full_db", Some("trust_user")).unwrap_err();
    assert!(
        err.contains("certificate authentication failed for user \"md5_user\""),
        "{err}"
    );
    let err = run("md5_user", "full_db", None).unwrap_err();
    assert!(
        err.contains("connection requires a valid client certificate"),
        "{err}"
    );
    let log = s.log();
    assert!(
        log.contains("clientcert=verify-full: certificate authentication failed: \"trust_user\" may not log in as \"md5_user\""),
        "{log}"
    );
    assert!(
        log.contains("no valid client certificate (clientcert=verify-ca)"),
        "{log}"
    );
}

#[tokio::test]
async fn direct_tls_requires_alpn_postgresql() {
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = prefer\nserver_tls_sslmode = disable\n",
        DB_BY_IP,
    ))
    .start();
    let ca = &Certs::get().ca.pem.cert;
    let mut c = PgTls::connect(s.port, ca, Negotiation::Direct { alpn: true })
        .await
        .unwrap();
    assert_eq!(c.alpn.as_deref(), Some(&b"postgresql"[..]));
    c.startup("trust_user", "app").await.unwrap();
    assert_eq!(
        c.query("SELECT 40 + 2").await.unwrap().as_deref(),
        Some("42")
    );

    // Without ALPN the connection is dropped after the handshake.
    let mut c = PgTls::connect(s.port, ca, Negotiation::Direct { alpn: false })
        .await
        .unwrap();
    assert!(c.startup("trust_user", "app").await.is_err());
    // The client sees the close before Sluice's log line is flushed: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !s.log().contains("without ALPN") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.log().contains("without ALPN"), "{}", s.log());

    // SSLRequest then TLS, as libpq does.
    let mut c = PgTls::connect(s.port, ca, Negotiation::SslRequest)
        .await
        .unwrap();
    c.startup("trust_user", "app").await.unwrap();
    assert_eq!(c.query("SELECT 1").await.unwrap().as_deref(), Some("1"));
}

#[tokio::test]
async fn plaintext_pipelined_after_sslrequest_is_rejected() {
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = prefer\nserver_tls_sslmode = disable\n",
        DB_BY_IP,
    ))
    .start();
    let mut raw = RawConn::connect(s.port).await;
    let mut bytes = RawConn::ssl_request();
    bytes.extend(RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]));
    raw.send(&bytes).await;
    let (out, closed) = raw.read_until_close(WAIT).await;
    assert!(closed);
    assert_eq!(out.first(), Some(&b'E'), "no 'S', only an error: {out:?}");
    let f = error_fields(&out[5..]);
    assert_eq!(f[&b'C'], "08P01");
    assert_eq!(f[&b'M'], "unexpected data after SSLRequest");
}

#[tokio::test]
async fn reload_swaps_certificates_and_keeps_the_old_ones_when_broken() {
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = prefer\nserver_tls_sslmode = disable\n",
        DB_BY_IP,
    ))
    .start();
    let c = Certs::get();
    let ca = &c.ca.pem.cert;
    let mut open = PgTls::connect(s.port, ca, Negotiation::SslRequest)
        .await
        .unwrap();
    assert_eq!(open.peer_cert, der(&c.sluice.cert));
    open.startup("trust_user", "app").await.unwrap();

    s.write_file("sluice.crt", &c.sluice_b.cert);
    s.write_file("sluice.key", &c.sluice_b.key);
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let mut served = Vec::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        served = PgTls::connect(s.port, ca, Negotiation::SslRequest)
            .await
            .unwrap()
            .peer_cert;
        if served == der(&c.sluice_b.cert) {
            break;
        }
    }
    assert_eq!(
        served,
        der(&c.sluice_b.cert),
        "new connections get the new certificate"
    );
    assert_eq!(
        open.query("SELECT 7").await.unwrap().as_deref(),
        Some("7"),
        "an established connection keeps working"
    );

    s.write_file("sluice.crt", "-----BEGIN CERTIFICATE-----\nbroken\n");
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let mut logged = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if s.log().contains("client_tls_cert_file") {
            logged = true;
            break;
        }
    }
    assert!(logged, "reload error names the setting: {}", s.log());
    assert!(s.log().contains("sluice.crt"), "and the file: {}", s.log());
    let again = PgTls::connect(s.port, ca, Negotiation::SslRequest)
        .await
        .unwrap();
    assert_eq!(again.peer_cert, der(&c.sluice_b.cert), "old config kept");
    assert_eq!(open.query("SELECT 8").await.unwrap().as_deref(), Some("8"));
}

#[tokio::test]
async fn reload_of_server_tls_settings_replaces_servers() {
    pg_with_ssl();
    let text = |mode: &str| {
        ini(
            &format!("auth_type = trust\nserver_tls_sslmode = {mode}\n"),
            DB_BY_IP,
        )
    };
    let s = builder(&text("disable")).start();
    let ssl = || async {
        let c = s.connect("trust_user", "x", "app").await.unwrap();
        c.query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    };
    assert!(!ssl().await);
    s.rewrite_config(&text("require"));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let mut now_tls = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if ssl().await {
            now_tls = true;
            break;
        }
    }
    assert!(now_tls, "servers were replaced with TLS ones: {}", s.log());
}

#[test]
fn broken_certificate_at_startup_is_a_config_error() {
    let (status, out) = builder(&ini("client_tls_sslmode = require\n", DB_BY_IP))
        .file("sluice.key", "not a key")
        .run_expect_exit(Duration::from_secs(10));
    assert!(!status.success());
    assert!(
        out.contains("client_tls_key_file") && out.contains("sluice.key"),
        "{out}"
    );
}

/// psql with channel_binding=require through Sluice (SCRAM-SHA-256-PLUS on the client leg), and
/// Sluice using -PLUS towards PostgreSQL, which offers it over TLS.
fn channel_binding_case(userlist: &str) {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = scram-sha-256\nclient_tls_sslmode = require\nserver_tls_sslmode = verify-full\n\
         server_tls_ca_file = {dir}/ca.crt\n",
        DB_BY_NAME,
    ))
    .userlist(userlist)
    .arg("-v")
    .start();
    let (st, out, err) = psql_cmd(
        &verify_full_conn(
            &s,
            "scram_user",
            "app",
            "password=scram_pass channel_binding=require",
        ),
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    );
    assert!(st.success(), "{err}\n{}", s.log());
    assert_eq!(out.trim(), "t");
    assert!(
        s.log().contains("logged in with SCRAM-SHA-256-PLUS"),
        "server leg used channel binding: {}",
        s.log()
    );
    // A wrong password still fails with channel binding.
    let (st, _, err) = psql_cmd(
        &verify_full_conn(
            &s,
            "scram_user",
            "app",
            "password=wrong channel_binding=require",
        ),
        "SELECT 1",
    );
    assert!(!st.success());
    // PgBouncer's answer to a failed SCRAM exchange.
    assert!(err.contains("SASL authentication failed"), "{err}");
}

#[test]
fn channel_binding_with_plaintext_userlist_password() {
    channel_binding_case("\"scram_user\" \"scram_pass\"\n");
}

#[test]
fn channel_binding_with_scram_pass_through() {
    let pg = pg_with_ssl();
    let secret = pg.stored_secret("scram_user");
    channel_binding_case(&format!("\"scram_user\" \"{secret}\"\n"));
}

/// auth_type = hba sees the TLS facts: hostssl / hostnossl pick rules by transport, and a `cert`
/// rule admits a client whose verified certificate CN is the user.
#[test]
fn hba_rules_use_the_tls_facts() {
    let hba = "hostssl app md5_user 127.0.0.1/32 md5\n\
               hostnossl app md5_user 127.0.0.1/32 reject\n\
               hostssl app trust_user 127.0.0.1/32 cert\n\
               host all all 127.0.0.1/32 reject\n";
    let s = builder(&ini(
        "auth_type = hba\nauth_hba_file = {dir}/hba.conf\nclient_tls_sslmode = prefer\n\
         client_tls_ca_file = {dir}/ca.crt\nserver_tls_sslmode = disable\n",
        DB_BY_IP,
    ))
    .file("hba.conf", hba)
    .start();
    let c = Certs::get();
    let dir = s.dir.path().to_path_buf();
    for (name, pem) in [
        ("trust_user", &c.client_trust_user),
        ("md5_user", &c.client_md5_user),
    ] {
        write_private(&dir.join(format!("{name}.crt")), &pem.cert);
        write_private(&dir.join(format!("{name}.key")), &pem.key);
    }
    let conn = |user: &str, ssl: &str| {
        format!(
            "host=127.0.0.1 port={} dbname=app user={user} password=md5_pass {ssl} connect_timeout=5",
            s.port
        )
    };

    // Same user and address: TLS matches the hostssl md5 line, plaintext the hostnossl reject.
    let (st, out, err) = psql_cmd(&conn("md5_user", "sslmode=require"), "SELECT current_user");
    assert!(st.success(), "{err}\n{}", s.log());
    assert_eq!(out.trim(), "md5_user");
    let (st, _, err) = psql_cmd(&conn("md5_user", "sslmode=disable"), "SELECT 1");
    assert!(!st.success(), "hostnossl reject ignored");
    assert!(err.contains("md5_user"), "{err}");

    // cert rule: the CN must be the user.
    let cert = |name: &str| {
        format!(
            "sslmode=require sslcert={0}/{name}.crt sslkey={0}/{name}.key",
            dir.display()
        )
    };
    let (st, out, err) = psql_cmd(
        &conn("trust_user", &cert("trust_user")),
        "SELECT current_user",
    );
    assert!(st.success(), "{err}\n{}", s.log());
    assert_eq!(out.trim(), "trust_user");
    let (st, _, err) = psql_cmd(&conn("trust_user", &cert("md5_user")), "SELECT 1");
    assert!(!st.success(), "certificate of another user accepted");
    assert!(err.contains("trust_user"), "{err}");
    // No certificate at all over TLS.
    let (st, _, _) = psql_cmd(&conn("trust_user", "sslmode=require"), "SELECT 1");
    assert!(!st.success(), "cert rule without a certificate accepted");
}
