//! Sluice's own certificates through the real binary: X.509 version 1 certificates (what
//! `openssl x509 -req` issues without extensions) served and accepted from clients, and key and
//! certificate changed from the console one SET at a time.

mod tls_support;

use sluice_e2e::{psql_cmd, Console, Sluice};
use tls_support::client::{Negotiation, PgTls};
use tls_support::{builder, der, ini, verify_full_conn, write_private, Certs, DB_BY_IP};

#[tokio::test]
async fn admin_set_of_tls_keys_rebuilds_tls_or_keeps_it() {
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = prefer\nserver_tls_sslmode = disable\n\
         admin_users = trust_user\n",
        DB_BY_IP,
    ))
    .start();
    let c = Certs::get();
    let served = || async {
        PgTls::connect(s.port, &c.ca.pem.cert, Negotiation::SslRequest)
            .await
            .unwrap()
            .peer_cert
    };
    let mut console = Console::connect(s.port, "trust_user", "x").await.unwrap();
    // A file that cannot be read: stored, TLS stays as it was, the notice says why (PgBouncer's
    // words, the reason in its DETAIL).
    let r = console
        .query("SET client_tls_cert_file = '/nonexistent/cert.pem'")
        .await
        .unwrap();
    assert_eq!(r.tag, "SET client_tls_cert_file=/nonexistent/cert.pem");
    assert_eq!(
        r.notices,
        ["TLS settings could not be applied, still using old configuration"]
    );
    assert!(
        r.notice_details[0].contains("/nonexistent/cert.pem"),
        "{r:?}"
    );
    assert_eq!(
        served().await,
        der(&c.sluice.cert),
        "the old certificate is still served"
    );
    // Nothing of it half-applies: require is not in force while TLS cannot be rebuilt.
    let r = console
        .query("SET client_tls_sslmode = require")
        .await
        .unwrap();
    assert_eq!(r.notices.len(), 1, "{r:?}");
    s.connect("trust_user", "x", "app").await.unwrap();
    // A new key and certificate, one SET at a time: the key alone does not fit the old
    // certificate (kept), with its certificate both apply together with require.
    let dir = s.dir.path();
    std::fs::write(dir.join("b.crt"), &c.sluice_b.cert).unwrap();
    std::fs::write(dir.join("b.key"), &c.sluice_b.key).unwrap();
    let r = console
        .query(&format!(
            "SET client_tls_key_file = '{}'",
            dir.join("b.key").display()
        ))
        .await
        .unwrap();
    assert_eq!(r.notices.len(), 1, "{r:?}");
    assert_eq!(served().await, der(&c.sluice.cert));
    let r = console
        .query(&format!(
            "SET client_tls_cert_file = '{}'",
            dir.join("b.crt").display()
        ))
        .await
        .unwrap();
    assert!(r.notices.is_empty(), "{r:?}");
    assert_eq!(
        served().await,
        der(&c.sluice_b.cert),
        "the new pair is served"
    );
    let e = s.connect("trust_user", "x", "app").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "SSL required");
    // A value that does not parse is refused outright.
    let e = console
        .query("SET client_tls_sslmode = 'sometimes'")
        .await
        .unwrap_err();
    assert!(e[&b'M'].contains("client_tls_sslmode"), "{e:?}");
}

/// X.509 version 1 certificates, as `openssl x509 -req` issues them (the OpenSSL-made fixtures of
/// `crates/sluice/src/tls/testdata/v1`): Sluice serves one to psql under verify-full (CN =
/// localhost), and takes a client's one through an intermediate under verify-ca; webpki alone
/// refuses both (the old build did not start with such a certificate).
#[test]
fn version_1_certificates_work_on_the_client_leg() {
    let v1 = |name: &str| {
        std::fs::read_to_string(format!(
            "{}/../crates/sluice/src/tls/testdata/v1/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let s = Sluice::builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = verify-ca\nclient_tls_ca_file = {dir}/ca.crt\n",
        DB_BY_IP,
    ))
    .file("sluice.crt", &v1("leaf.crt"))
    .file("sluice.key", &v1("leaf.key"))
    .file("ca.crt", &v1("root.crt"))
    .file(
        "client.crt",
        &format!("{}{}", v1("deep.crt"), v1("inter.crt")),
    )
    .userlist("\"trust_user\" \"\"\n")
    .start();
    let dir = s.dir.path().to_path_buf();
    write_private(&dir.join("client.key"), &v1("deep.key"));
    let conn = |extra: &str| {
        verify_full_conn(
            &s,
            "trust_user",
            "app",
            &format!(
                "sslcert={}/client.crt sslkey={}/client.key {extra}",
                dir.display(),
                dir.display()
            ),
        )
    };
    let (st, out, err) = psql_cmd(&conn(""), "SELECT 'v1 ok'");
    assert!(st.success(), "{out}{err}\n{}", s.log());
    assert_eq!(out.trim(), "v1 ok");
    // Without the client certificate verify-ca refuses the handshake.
    let (st, _, _) = psql_cmd(&verify_full_conn(&s, "trust_user", "app", ""), "SELECT 1");
    assert!(!st.success());
}
