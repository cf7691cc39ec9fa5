//! Where TLS handshakes run: on the authentication threads (`auth::cpu`), never on the worker
//! that called for them; the finished stream then works on the caller's runtime.
//!
//! rustls calls the config's key log from inside the handshake (once per derived secret), so the
//! thread names it records are the threads that did the handshake's work.

use std::sync::Arc;

use parking_lot::Mutex;
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sluice_config::Settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{ClientTls, ServerTls};
use crate::auth::cpu::{AuthCpu, THREAD_NAME};

/// The names of the threads that derived TLS secrets.
#[derive(Debug, Default)]
struct Threads(Mutex<Vec<Option<String>>>);

impl rustls::KeyLog for Threads {
    fn log(&self, _label: &str, _client_random: &[u8], _secret: &[u8]) {
        let name = std::thread::current().name().map(str::to_string);
        self.0.lock().push(name);
    }
}

impl Threads {
    fn all_auth(&self) {
        let seen = self.0.lock().clone();
        assert!(!seen.is_empty(), "the key log was never called");
        assert!(
            seen.iter().all(|t| t.as_deref() == Some(THREAD_NAME)),
            "handshake ran on {seen:?}"
        );
    }
}

struct Cert {
    pem: String,
    key: String,
}

fn localhost_cert() -> Cert {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    Cert {
        pem: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS client (as psql would be) that trusts `cert`.
fn peer_client(cert: &Cert) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(cert.pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A TLS server (as PostgreSQL would be) with `cert`.
fn peer_server(cert: &Cert) -> tokio_rustls::TlsAcceptor {
    let chain = vec![CertificateDer::from_pem_slice(cert.pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(cert.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn ping_pong<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S) {
    let mut b = [0u8; 4];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"ping");
    s.write_all(b"pong").await.unwrap();
}

async fn pong_of<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S) {
    s.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"pong");
}

#[tokio::test(flavor = "current_thread")]
async fn a_clients_handshake_runs_on_the_auth_threads() {
    let cert = localhost_cert();
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert_file, &cert.pem).unwrap();
    std::fs::write(&key_file, &cert.key).unwrap();
    let mut s = Settings::default();
    s.set("client_tls_sslmode", "require").unwrap();
    s.set("client_tls_cert_file", cert_file.to_str().unwrap())
        .unwrap();
    s.set("client_tls_key_file", key_file.to_str().unwrap())
        .unwrap();
    let log = Arc::new(Threads::default());
    let tls = ClientTls::load(&s).unwrap().with_key_log(log.clone());
    let cpu = AuthCpu::new(1);

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let connector = peer_client(&cert);
    let client = tokio::spawn(async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut s = connector.connect(name, tcp).await.unwrap();
        pong_of(&mut s).await;
    });
    let (tcp, _) = l.accept().await.unwrap();
    let (mut stream, facts) = tls.accept(tcp, false, &cpu).await.unwrap();
    assert!(stream.is_tls());
    assert!(facts.description.contains("TLS"), "{}", facts.description);
    ping_pong(&mut stream).await;
    client.await.unwrap();
    log.all_auth();
}

#[tokio::test(flavor = "current_thread")]
async fn a_servers_handshake_runs_on_the_auth_threads() {
    let cert = localhost_cert();
    let mut s = Settings::default();
    s.set("server_tls_sslmode", "require").unwrap();
    let log = Arc::new(Threads::default());
    let tls = ServerTls::load(&s).unwrap().with_key_log(log.clone());
    let cpu = AuthCpu::new(1);

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acceptor = peer_server(&cert);
    let server = tokio::spawn(async move {
        let (mut tcp, _) = l.accept().await.unwrap();
        let mut request = [0u8; 8];
        tcp.read_exact(&mut request).await.unwrap();
        tcp.write_all(b"S").await.unwrap();
        let mut s = acceptor.accept(tcp).await.unwrap();
        ping_pong(&mut s).await;
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut stream, info) = tls.connect(tcp, "localhost", &cpu).await.unwrap();
    assert!(stream.is_tls());
    assert!(info.unwrap().end_point.is_some());
    pong_of(&mut stream).await;
    server.await.unwrap();
    log.all_auth();
}
