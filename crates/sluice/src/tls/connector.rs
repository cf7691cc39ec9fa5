//! Server connections: the rustls client config built from `server_tls_*` (certificate checks per
//! sslmode: none for allow/prefer/require, the chain for verify-ca, chain and host name for
//! verify-full) and the SSLRequest + handshake on a fresh TCP connection.

use std::sync::Arc;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, RootCertStore};
use sluice_config::{Settings, TlsMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::v1_certs;
use super::{describe, pem, TlsError};
use crate::auth::cpu::AuthCpu;
use crate::net::tls_io::FlushedTls;
use crate::net::Stream;

/// SSLRequest: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Server-side TLS: the mode and, unless disabled, the connector config.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub mode: TlsMode,
    config: Option<Arc<ClientConfig>>,
    /// Hash of the server_tls_* values and file contents: servers are replaced on RELOAD only
    /// when it changes.
    pub fingerprint: u64,
}

/// What a TLS server connection knows after the handshake.
#[derive(Debug, Clone, Default)]
pub struct ServerTlsInfo {
    pub description: String,
    /// tls-server-end-point hash of the server's certificate (SCRAM-SHA-256-PLUS).
    pub end_point: Option<Vec<u8>>,
}

/// Why TLS to a server failed; Display is what the client and the log see.
#[derive(Debug, thiserror::Error)]
pub enum ServerTlsError {
    #[error("server refused TLS (server_tls_sslmode = {0})")]
    Refused(TlsMode),
    #[error("server sent '{0}' to SSLRequest")]
    BadAnswer(char),
    #[error("server certificate verify failed: {0}")]
    Verify(rustls::Error),
    #[error("TLS handshake with server failed: {0}")]
    Handshake(std::io::Error),
    #[error("server host name \"{0}\" is not valid for TLS")]
    BadName(String),
    #[error("server connection failed: {0}")]
    Io(#[from] std::io::Error),
}

impl ServerTls {
    pub fn disabled() -> Self {
        ServerTls {
            mode: TlsMode::Disable,
            config: None,
            fingerprint: 0,
        }
    }

    pub fn load(s: &Settings) -> Result<Self, TlsError> {
        let mode = s.server_tls_sslmode;
        if mode == TlsMode::Disable {
            return Ok(Self::disabled());
        }
        let (provider, versions) = super::provider(s, false)?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| TlsError::setting("server_tls_protocols", e.to_string()))?;
        let roots = || -> Result<Arc<RootCertStore>, TlsError> {
            let store = if s.server_tls_ca_file.is_empty() {
                pem::system_roots()
            } else {
                pem::roots("server_tls_ca_file", &s.server_tls_ca_file)?
            };
            if store.is_empty() {
                return Err(TlsError::setting(
                    "server_tls_ca_file",
                    format!("server_tls_sslmode is {mode} but no CA certificates were found (set server_tls_ca_file)"),
                ));
            }
            Ok(Arc::new(store))
        };
        let verifier: Arc<dyn ServerCertVerifier> = match mode {
            TlsMode::VerifyFull => {
                let roots = roots()?;
                let inner =
                    WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                        .build()
                        .map_err(|e| TlsError::setting("server_tls_ca_file", e.to_string()))?;
                Arc::new(Full {
                    inner,
                    roots,
                    provider: provider.clone(),
                })
            }
            TlsMode::VerifyCa => Arc::new(ChainOnly {
                roots: roots()?,
                provider: provider.clone(),
            }),
            _ => Arc::new(NoVerify {
                provider: provider.clone(),
            }),
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (
            s.server_tls_cert_file.is_empty(),
            s.server_tls_key_file.is_empty(),
        ) {
            (true, true) => builder.with_no_client_auth(),
            (false, false) => {
                let chain = pem::certs("server_tls_cert_file", &s.server_tls_cert_file)?;
                let key = pem::private_key("server_tls_key_file", &s.server_tls_key_file)?;
                let ours = v1_certs::certified_key(chain, key, &provider).map_err(|e| {
                    TlsError::file(
                        "server_tls_key_file",
                        &s.server_tls_key_file,
                        format!("key does not fit server_tls_cert_file: {e}"),
                    )
                })?;
                builder.with_client_cert_resolver(Arc::new(v1_certs::OneCert(ours)))
            }
            (true, false) => {
                return Err(TlsError::setting(
                    "server_tls_cert_file",
                    "must be set together with server_tls_key_file",
                ))
            }
            (false, true) => {
                return Err(TlsError::setting(
                    "server_tls_key_file",
                    "must be set together with server_tls_cert_file",
                ))
            }
        };
        Ok(ServerTls {
            mode,
            config: Some(Arc::new(config)),
            fingerprint: fingerprint(s),
        })
    }

    /// The same, with rustls' key log set (tests use it to see which thread ran the handshake).
    #[cfg(test)]
    pub fn with_key_log(mut self, log: Arc<dyn rustls::KeyLog>) -> Self {
        if let Some(c) = &self.config {
            let mut c = (**c).clone();
            c.key_log = log;
            self.config = Some(Arc::new(c));
        }
        self
    }

    /// Ask a freshly connected TCP server for TLS (never used for Unix sockets). prefer/allow fall
    /// back to plaintext on 'N'; require and verify-* fail.
    ///
    /// The handshake runs on the authentication threads (`cpu`), not on the calling worker; the
    /// TLS stream comes back registered with the caller's runtime.
    pub async fn connect(
        &self,
        mut tcp: TcpStream,
        host: &str,
        cpu: &AuthCpu,
    ) -> Result<(Stream, Option<ServerTlsInfo>), ServerTlsError> {
        let Some(config) = &self.config else {
            return Ok((Stream::Tcp(tcp), None));
        };
        tcp.write_all(&SSL_REQUEST).await?;
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer).await?;
        match answer[0] {
            b'S' => {}
            b'N' if matches!(self.mode, TlsMode::Allow | TlsMode::Prefer) => {
                return Ok((Stream::Tcp(tcp), None))
            }
            b'N' => return Err(ServerTlsError::Refused(self.mode)),
            other => return Err(ServerTlsError::BadAnswer(other as char)),
        }
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ServerTlsError::BadName(host.to_string()))?;
        let connector = tokio_rustls::TlsConnector::from(config.clone());
        let tls = cpu
            .run_socket(tcp, move |tcp| connector.connect(name, tcp))
            .await
            .and_then(|r| r)
            .map_err(|e| {
                let verify = e
                    .get_ref()
                    .and_then(|i| i.downcast_ref::<rustls::Error>())
                    .filter(|r| matches!(r, rustls::Error::InvalidCertificate(_)))
                    .cloned();
                match verify {
                    Some(r) => ServerTlsError::Verify(r),
                    None => ServerTlsError::Handshake(e),
                }
            })?;
        let (_, conn) = tls.get_ref();
        let info = ServerTlsInfo {
            description: describe::describe(conn),
            end_point: conn
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(describe::end_point),
        };
        let mut stream = Stream::ServerTls(Box::new(FlushedTls::new(tls)));
        stream.move_to_current_worker()?;
        Ok((stream, Some(info)))
    }
}

fn fingerprint(s: &Settings) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.server_tls_sslmode.to_string().hash(&mut h);
    for v in [
        &s.server_tls_protocols,
        &s.server_tls_ciphers,
        &s.server_tls13_ciphers,
    ] {
        v.hash(&mut h);
    }
    for f in [
        &s.server_tls_ca_file,
        &s.server_tls_cert_file,
        &s.server_tls_key_file,
    ] {
        f.hash(&mut h);
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

/// allow / prefer / require: encrypt, but accept any certificate (as libpq and PgBouncer do).
#[derive(Debug)]
struct NoVerify {
    provider: Arc<CryptoProvider>,
}

/// verify-full: webpki's chain and host name checks (a version 1 certificate: `v1_certs`).
#[derive(Debug)]
struct Full {
    inner: Arc<WebPkiServerVerifier>,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

/// verify-ca: the chain must lead to a trusted CA; the host name is not checked.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    v1_certs::signature_checks!();
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if v1_certs::is_v1(end_entity) {
            let algs = &self.provider.signature_verification_algorithms;
            v1_certs::verify_chain(end_entity, intermediates, &self.roots, now, algs)?;
            return Ok(ServerCertVerified::assertion());
        }
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    v1_certs::signature_checks!();
}

impl ServerCertVerifier for Full {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !v1_certs::is_v1(end_entity) {
            return self.inner.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp,
                now,
            );
        }
        let algs = &self.provider.signature_verification_algorithms;
        v1_certs::verify_chain(end_entity, intermediates, &self.roots, now, algs)?;
        v1_certs::verify_name(end_entity, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    v1_certs::signature_checks!();
}
