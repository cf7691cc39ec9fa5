//! TLS setup from settings: required files, errors naming key and file, certificate facts.

use rcgen::{CertificateParams, DnType, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use sluice_config::Settings;

use super::*;

fn settings(pairs: &[(&str, &str)]) -> Settings {
    let mut s = Settings::default();
    for (k, v) in pairs {
        s.set(k, v).unwrap();
    }
    s
}

fn self_signed(cn: &str, alg: &'static rcgen::SignatureAlgorithm) -> (String, String) {
    let key = KeyPair::generate_for(alg).unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[test]
fn disabled_needs_no_files() {
    let t = TlsSetup::load(&settings(&[("server_tls_sslmode", "disable")])).unwrap();
    assert!(!t.client.offered());
    assert!(!t.client.required());
}

#[test]
fn modes_need_their_files() {
    let e = TlsSetup::load(&settings(&[("client_tls_sslmode", "require")])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "client_tls_cert_file: must be set when client_tls_sslmode is require"
    );
    let e = TlsSetup::load(&settings(&[
        ("client_tls_sslmode", "verify-ca"),
        ("client_tls_cert_file", "/x.crt"),
        ("client_tls_key_file", "/x.key"),
    ]))
    .unwrap_err();
    assert!(e.to_string().starts_with("client_tls_ca_file: "), "{e}");
    let e = TlsSetup::load(&settings(&[("server_tls_cert_file", "/x.crt")])).unwrap_err();
    assert!(e.to_string().starts_with("server_tls_key_file: "), "{e}");
}

#[test]
fn file_errors_name_key_and_file() {
    let dir = std::env::temp_dir().join(format!("sluice-tls-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = self_signed("localhost", &rcgen::PKCS_ECDSA_P256_SHA256);
    let crt = dir.join("a.crt");
    let bad = dir.join("bad.key");
    let good_key = dir.join("a.key");
    std::fs::write(&crt, &cert).unwrap();
    std::fs::write(&good_key, &key).unwrap();
    std::fs::write(&bad, "nothing here").unwrap();
    let load = |cert: &std::path::Path, key: &std::path::Path| {
        TlsSetup::load(&settings(&[
            ("client_tls_sslmode", "prefer"),
            ("client_tls_cert_file", cert.to_str().unwrap()),
            ("client_tls_key_file", key.to_str().unwrap()),
        ]))
    };
    let e = load(&crt, &bad).unwrap_err();
    assert!(
        matches!(&e, TlsError::File { key: "client_tls_key_file", file, .. } if file.ends_with("bad.key")),
        "{e}"
    );
    let e = load(&dir.join("missing.crt"), &good_key).unwrap_err();
    assert!(e.to_string().contains("cannot read file"), "{e}");
    let cfg = e.into_config_error("/etc/p.ini").to_string();
    assert!(
        cfg.contains("missing.crt: client_tls_cert_file: cannot read file"),
        "{cfg}"
    );
    let t = load(&crt, &good_key).unwrap();
    assert!(t.client.offered());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_protocol_and_cipher_values_name_the_key() {
    let e = TlsSetup::load(&settings(&[("server_tls_protocols", "tlsv1.1")])).unwrap_err();
    assert!(e.to_string().starts_with("server_tls_protocols: "), "{e}");
    let e = TlsSetup::load(&settings(&[("server_tls13_ciphers", "TLS_NOPE")])).unwrap_err();
    assert!(e.to_string().starts_with("server_tls13_ciphers: "), "{e}");
}

#[test]
fn certificate_facts() {
    let (cert, _) = self_signed("alice", &rcgen::PKCS_ECDSA_P384_SHA384);
    let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    assert_eq!(describe::common_name(&der).as_deref(), Some("alice"));
    // ecdsa-with-SHA384 signature: the channel binding hash is SHA-384.
    assert_eq!(describe::end_point(&der).unwrap().len(), 48);
    let (cert, _) = self_signed("bob", &rcgen::PKCS_ECDSA_P256_SHA256);
    let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    assert_eq!(describe::end_point(&der).unwrap().len(), 32);
    assert_eq!(
        describe::common_name(&CertificateDer::from(vec![1, 2, 3])),
        None
    );
}
