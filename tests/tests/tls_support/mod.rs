//! Shared pieces of the TLS tests: certificates, PostgreSQL with ssl=on, a raw TLS client.

#![allow(dead_code)]

pub mod certs;
pub mod client;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use sluice_e2e::{PgCluster, Sluice, SluiceBuilder};

pub use certs::Certs;

/// Write a file the `postgres` user owns (PostgreSQL refuses keys readable by others).
fn write_for_postgres(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    if nix::unistd::geteuid().is_root() {
        let u = nix::unistd::User::from_name("postgres").unwrap().unwrap();
        nix::unistd::chown(path, Some(u.uid), Some(u.gid)).unwrap();
    }
}

/// This test binary's cluster, with ssl=on and the `Certs::pg` certificate (signed by `Certs::ca`,
/// valid for "localhost" only). Plaintext connections keep working (hba `host` lines). Role
/// `cert_user` may log in only over TLS with a client certificate (`hostssl ... cert`) signed by
/// `Certs::ca` with CN = cert_user.
pub fn pg_with_ssl() -> &'static PgCluster {
    static DONE: OnceLock<()> = OnceLock::new();
    let pg = PgCluster::get();
    DONE.get_or_init(|| {
        let c = Certs::get();
        write_for_postgres(&pg.data_dir.join("sluice-test.crt"), &c.pg.cert, 0o644);
        write_for_postgres(&pg.data_dir.join("sluice-test.key"), &c.pg.key, 0o600);
        write_for_postgres(
            &pg.data_dir.join("sluice-test-ca.crt"),
            &c.ca.pem.cert,
            0o644,
        );
        let hba = pg.data_dir.join("pg_hba.conf");
        let old = fs::read_to_string(&hba).unwrap();
        let line =
            "hostssl all cert_user 127.0.0.1/32 cert\nhost all cert_user 127.0.0.1/32 reject\n";
        write_for_postgres(&hba, &format!("{line}{old}"), 0o600);
        pg.psql("postgres", "CREATE ROLE cert_user LOGIN");
        pg.psql("postgres", "GRANT CONNECT ON DATABASE app TO cert_user");
        pg.psql(
            "postgres",
            "ALTER SYSTEM SET ssl_ca_file = 'sluice-test-ca.crt'",
        );
        pg.psql(
            "postgres",
            "ALTER SYSTEM SET ssl_cert_file = 'sluice-test.crt'",
        );
        pg.psql(
            "postgres",
            "ALTER SYSTEM SET ssl_key_file = 'sluice-test.key'",
        );
        pg.psql("postgres", "ALTER SYSTEM SET ssl = on");
        pg.psql("postgres", "SELECT pg_reload_conf()");
        for _ in 0..100 {
            if pg.psql("postgres", "SHOW ssl") == "on" {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("PostgreSQL did not turn ssl on");
    });
    pg
}

/// Key files handed to libpq must not be group/world readable.
pub fn write_private(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// PostgreSQL by its certificate's host name (valid) and by IP (not in its certificate).
pub const DB_BY_NAME: &str = "app = host=localhost port={pg_port} dbname=app";
pub const DB_BY_IP: &str = "app = host={pg_host} port={pg_port} dbname=app";

/// Sluice's certificate, key and both CAs as files in {dir}; `extra` adds [pgbouncer] lines.
pub fn ini(extra: &str, databases: &str) -> String {
    Sluice::basic_ini(
        &format!(
            "client_tls_cert_file = {{dir}}/sluice.crt\nclient_tls_key_file = {{dir}}/sluice.key\n\
             server_connect_timeout = 3\nserver_login_retry = 1\nquery_wait_timeout = 5\n{extra}"
        ),
        databases,
    )
}

pub fn builder(ini: &str) -> SluiceBuilder {
    let c = Certs::get();
    Sluice::builder(ini)
        .file("sluice.crt", &c.sluice.cert)
        .file("sluice.key", &c.sluice.key)
        .file("ca.crt", &c.ca.pem.cert)
        .file("other_ca.crt", &c.other_ca.pem.cert)
        .userlist(
            "\"trust_user\" \"trust_pass\"\n\"md5_user\" \"md5_pass\"\n\"scram_user\" \"scram_pass\"\n",
        )
}

/// libpq connection string to Sluice verifying its certificate (host name "localhost").
pub fn verify_full_conn(s: &Sluice, user: &str, db: &str, extra: &str) -> String {
    format!(
        "host=localhost hostaddr=127.0.0.1 port={} dbname={db} user={user} sslmode=verify-full \
         sslrootcert={}/ca.crt connect_timeout=5 {extra}",
        s.port,
        s.dir.path().display()
    )
}

/// The DER bytes of a PEM certificate.
pub fn der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}
