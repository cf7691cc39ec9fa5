//! Version 1 certificates made with OpenSSL (`testdata/v1/make.sh`): chains, names, our own key,
//! and full handshakes in memory over TLS 1.2 and 1.3 with a v1 certificate on either side.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{ClientConfig, ClientConnection, DistinguishedName, ServerConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;

use super::*;

fn cert(name: &str) -> CertificateDer<'static> {
    let path = format!("{}/src/tls/testdata/v1/{name}", env!("CARGO_MANIFEST_DIR"));
    CertificateDer::from_pem_file(path).unwrap()
}

fn key(name: &str) -> PrivateKeyDer<'static> {
    let path = format!("{}/src/tls/testdata/v1/{name}", env!("CARGO_MANIFEST_DIR"));
    PrivateKeyDer::from_pem_file(path).unwrap()
}

fn roots(names: &[&str]) -> RootCertStore {
    let mut r = RootCertStore::empty();
    for n in names {
        r.add(cert(n)).unwrap();
    }
    r
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn now() -> UnixTime {
    UnixTime::now()
}

fn chain(leaf: &str, inter: &[&str], root: &[&str], at: UnixTime) -> Result<(), Error> {
    let inter: Vec<_> = inter.iter().map(|n| cert(n)).collect();
    let algs = provider().signature_verification_algorithms;
    verify_chain(&cert(leaf), &inter, &roots(root), at, &algs)
}

#[test]
fn only_version_1_is_v1() {
    assert!(is_v1(cert("leaf.crt").as_ref()));
    assert!(is_v1(cert("deep.crt").as_ref()));
    assert!(!is_v1(cert("root.crt").as_ref()));
    assert!(!is_v1(cert("inter.crt").as_ref()));
    assert!(!is_v1(b"\x30\x03\x02\x01\x00"));
    assert!(!is_v1(b""));
}

#[test]
fn a_chain_ends_at_a_root_that_signed_it() {
    chain("leaf.crt", &[], &["root.crt"], now()).unwrap();
    chain("deep.crt", &["inter.crt"], &["root.crt"], now()).unwrap();
    // The intermediate itself as the trust anchor.
    chain("deep.crt", &[], &["inter.crt"], now()).unwrap();
}

#[test]
fn a_name_alone_does_not_make_an_issuer() {
    // `other` has the root's name and another key.
    let e = chain("leaf.crt", &[], &["other.crt"], now()).unwrap_err();
    assert_eq!(e, bad(CertificateError::UnknownIssuer));
    assert!(chain("deep.crt", &["inter.crt"], &["other.crt"], now()).is_err());
    // Without the intermediate there is no way up.
    assert!(chain("deep.crt", &[], &["root.crt"], now()).is_err());
    // A v1 leaf sent as an "intermediate" is no CA.
    assert!(chain("deep.crt", &["leaf.crt"], &["root.crt"], now()).is_err());
}

#[test]
fn outside_its_validity_period_a_chain_fails() {
    let long_ago = UnixTime::since_unix_epoch(Duration::from_secs(1_000_000_000));
    let e = chain("leaf.crt", &[], &["root.crt"], long_ago).unwrap_err();
    assert_eq!(e, bad(CertificateError::NotValidYet));
    let far = UnixTime::since_unix_epoch(Duration::from_secs(10_000_000_000));
    let e = chain("leaf.crt", &[], &["root.crt"], far).unwrap_err();
    assert_eq!(e, bad(CertificateError::Expired));
}

#[test]
fn verify_full_reads_the_common_name() {
    let name = |s: &str| ServerName::try_from(s.to_string()).unwrap();
    verify_name(&cert("leaf.crt"), &name("localhost")).unwrap();
    verify_name(&cert("leaf.crt"), &name("LOCALHOST")).unwrap();
    assert!(verify_name(&cert("leaf.crt"), &name("db.example.com")).is_err());
    verify_name(&cert("deep.crt"), &name("db.example.com")).unwrap();
    assert!(verify_name(&cert("deep.crt"), &name("example.com")).is_err());
    assert!(verify_name(&cert("deep.crt"), &name("a.b.example.com")).is_err());
    assert!(verify_name(&cert("leaf.crt"), &name("127.0.0.1")).is_err());
}

#[test]
fn our_key_must_fit_our_certificate() {
    let p = provider();
    certified_key(vec![cert("leaf.crt")], key("leaf.key"), &p).unwrap();
    let e = certified_key(vec![cert("leaf.crt")], key("deep.key"), &p).unwrap_err();
    assert!(e.contains("does not match"), "{e}");
}

/// The verifiers of `connector.rs` / `acceptor.rs` reduced to what this module adds.
#[derive(Debug)]
struct V1Only {
    roots: RootCertStore,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for V1Only {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let algs = &self.provider.signature_verification_algorithms;
        verify_chain(end_entity, intermediates, &self.roots, now, algs)?;
        verify_name(end_entity, server_name)?;
        Ok(ServerCertVerified::assertion())
    }
    signature_checks!();
}

impl ClientCertVerifier for V1Only {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let algs = &self.provider.signature_verification_algorithms;
        verify_chain(end_entity, intermediates, &self.roots, now, algs)?;
        Ok(ClientCertVerified::assertion())
    }
    signature_checks!();
}

/// A handshake in memory: server with `leaf`, client with `deep` (through the intermediate),
/// each verifying the other against the root. Err: the first side's error.
fn handshake(version: &'static rustls::SupportedProtocolVersion, host: &str) -> Result<(), Error> {
    let p = provider();
    let verifier = Arc::new(V1Only {
        roots: roots(&["root.crt"]),
        provider: p.clone(),
    });
    let server_key = certified_key(vec![cert("leaf.crt")], key("leaf.key"), &p).unwrap();
    let client_key = certified_key(
        vec![cert("deep.crt"), cert("inter.crt")],
        key("deep.key"),
        &p,
    )
    .unwrap();
    let server = ServerConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_client_cert_verifier(verifier.clone())
        .with_cert_resolver(Arc::new(OneCert(server_key)));
    let client = ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&[version])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_cert_resolver(Arc::new(OneCert(client_key)));
    let name = ServerName::try_from(host.to_string()).unwrap();
    let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
    let mut s = ServerConnection::new(Arc::new(server)).unwrap();
    for _ in 0..10 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).unwrap();
        s.read_tls(&mut &buf[..]).unwrap();
        s.process_new_packets()?;
        let mut buf = Vec::new();
        s.write_tls(&mut buf).unwrap();
        c.read_tls(&mut &buf[..]).unwrap();
        c.process_new_packets()?;
        if !c.is_handshaking() && !s.is_handshaking() {
            assert!(s.peer_certificates().is_some_and(|p| is_v1(p[0].as_ref())));
            return Ok(());
        }
    }
    panic!("handshake did not finish");
}

#[test]
fn handshakes_with_v1_certificates_on_both_sides() {
    handshake(&rustls::version::TLS13, "localhost").unwrap();
    handshake(&rustls::version::TLS12, "localhost").unwrap();
    let e = handshake(&rustls::version::TLS13, "db.example.com").unwrap_err();
    assert_eq!(e, bad(CertificateError::NotValidForName));
}
