//! endpoint.rs: a half TLS pair of the HTTP endpoint is refused at load, naming file and line.

use crate::load::parse_str;

fn load(sluice_lines: &str) -> Result<crate::Config, String> {
    parse_str(
        &format!("[pgbouncer]\nlisten_port = 6432\n\n[sluice]\n{sluice_lines}"),
        "p.ini",
    )
    .map_err(|e| e.to_string())
}

#[test]
fn a_certificate_without_its_key_is_refused_naming_file_line_and_key() {
    let e =
        load("metrics_listen_addr = 127.0.0.1:9127\nmetrics_tls_cert_file = /c.pem\n").unwrap_err();
    assert_eq!(
        e,
        "p.ini:6: metrics_tls_cert_file: metrics_tls_key_file (the certificate's private key) \
         must be set too"
    );
}

#[test]
fn a_key_without_its_certificate_is_refused() {
    let e = load("metrics_tls_key_file = /k.pem\n").unwrap_err();
    assert_eq!(
        e,
        "p.ini:5: metrics_tls_key_file: metrics_tls_cert_file (the certificate of this key) \
         must be set too"
    );
}

#[test]
fn both_or_neither_load() {
    let c = load("metrics_tls_cert_file = /c.pem\nmetrics_tls_key_file = /k.pem\n").unwrap();
    assert_eq!(c.sluice.metrics_tls_cert_file, "/c.pem");
    load("metrics_auth_file = /a.txt\n").unwrap();
    load("").unwrap();
}

#[test]
fn key_errors_name_where_the_key_was_set() {
    let c = load("\nmetrics_auth_file = /a.txt\n").unwrap();
    assert_eq!(
        c.sluice_key_error("metrics_auth_file", "bad").to_string(),
        "p.ini:6: metrics_auth_file: bad"
    );
    // Not in the file (default, or SET on the console): the main file, without a line.
    assert_eq!(
        c.sluice_key_error("metrics_tls_cert_file", "bad")
            .to_string(),
        "p.ini: metrics_tls_cert_file: bad"
    );
}
