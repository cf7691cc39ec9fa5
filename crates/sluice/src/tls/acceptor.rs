//! Client connections: the rustls server config built from `client_tls_*`, and the handshake
//! after an SSLRequest or a direct TLS ClientHello (PostgreSQL 17, ALPN "postgresql").

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DistinguishedName, RootCertStore, ServerConfig};
use sluice_config::{Settings, TlsMode};
use tokio::net::TcpStream;

use super::v1_certs;
use super::{describe, pem, TlsError, TlsFacts};
use crate::auth::cpu::AuthCpu;
use crate::net::tls_io::FlushedTls;
use crate::net::Stream;

/// The ALPN protocol PostgreSQL 17 defines (required for direct TLS).
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// Client-side TLS: the mode and, unless disabled, the acceptor config.
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub mode: TlsMode,
    config: Option<Arc<ServerConfig>>,
    /// tls-server-end-point hash of our certificate (SCRAM-SHA-256-PLUS).
    end_point: Option<Vec<u8>>,
}

/// Why a client's TLS handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("direct TLS connection without ALPN \"postgresql\"")]
    NoAlpn,
}

impl ClientTls {
    pub fn disabled() -> Self {
        ClientTls {
            mode: TlsMode::Disable,
            config: None,
            end_point: None,
        }
    }

    pub fn load(s: &Settings) -> Result<Self, TlsError> {
        let mode = s.client_tls_sslmode;
        if mode == TlsMode::Disable {
            return Ok(Self::disabled());
        }
        let need = |key: &'static str, v: &str| {
            if v.is_empty() {
                Err(TlsError::setting(
                    key,
                    format!("must be set when client_tls_sslmode is {mode}"),
                ))
            } else {
                Ok(())
            }
        };
        need("client_tls_cert_file", &s.client_tls_cert_file)?;
        need("client_tls_key_file", &s.client_tls_key_file)?;
        let verify = matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyFull);
        if verify {
            need("client_tls_ca_file", &s.client_tls_ca_file)?;
        }
        let chain = pem::certs("client_tls_cert_file", &s.client_tls_cert_file)?;
        let key = pem::private_key("client_tls_key_file", &s.client_tls_key_file)?;
        let (provider, versions) = super::provider(s, true)?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| TlsError::setting("client_tls_protocols", e.to_string()))?;
        let builder = if s.client_tls_ca_file.is_empty() {
            builder.with_no_client_auth()
        } else {
            // verify-ca / verify-full require a certificate; lower modes check one when offered,
            // so HBA `cert` rules and auth_type=cert can still use it.
            let roots = Arc::new(pem::roots("client_tls_ca_file", &s.client_tls_ca_file)?);
            let v = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
            let v = if verify { v } else { v.allow_unauthenticated() };
            let inner = v.build().map_err(|e| {
                TlsError::file("client_tls_ca_file", &s.client_tls_ca_file, e.to_string())
            })?;
            builder.with_client_cert_verifier(Arc::new(ClientCerts {
                inner,
                roots,
                provider: provider.clone(),
            }))
        };
        let end_point = describe::end_point(&chain[0]);
        let ours = v1_certs::certified_key(chain, key, &provider).map_err(|e| {
            TlsError::file(
                "client_tls_key_file",
                &s.client_tls_key_file,
                format!("key does not fit client_tls_cert_file: {e}"),
            )
        })?;
        let mut config = builder.with_cert_resolver(Arc::new(v1_certs::OneCert(ours)));
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        Ok(ClientTls {
            mode,
            config: Some(Arc::new(config)),
            end_point,
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

    /// TLS is offered to clients (answer SSLRequest with 'S', accept direct TLS).
    pub fn offered(&self) -> bool {
        self.config.is_some()
    }

    /// Plaintext TCP clients are refused (require, verify-ca, verify-full).
    pub fn required(&self) -> bool {
        matches!(
            self.mode,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull
        )
    }

    /// Run the handshake on a plain TCP client. `direct` = no SSLRequest came first, so the
    /// client must have negotiated ALPN "postgresql" (as PostgreSQL 17 requires).
    ///
    /// The handshake runs on the authentication threads (`cpu`), not on the calling worker; the
    /// TLS stream comes back registered with the caller's runtime.
    pub async fn accept(
        &self,
        tcp: TcpStream,
        direct: bool,
        cpu: &AuthCpu,
    ) -> Result<(Stream, TlsFacts), HandshakeError> {
        let Some(config) = &self.config else {
            return Err(HandshakeError::Io(std::io::Error::other("TLS is disabled")));
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
        let tls = cpu
            .run_socket(tcp, move |tcp| acceptor.accept(tcp))
            .await??;
        let (_, conn) = tls.get_ref();
        if direct && conn.alpn_protocol() != Some(ALPN_POSTGRESQL) {
            return Err(HandshakeError::NoAlpn);
        }
        let facts = TlsFacts {
            peer_cert_cn: conn
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(describe::common_name),
            channel_binding: self.end_point.clone(),
            description: describe::describe(conn),
        };
        let mut stream = Stream::ClientTls(Box::new(FlushedTls::new(tls)));
        stream.move_to_current_worker()?;
        Ok((stream, facts))
    }
}

/// Client certificates: webpki's checks, and a version 1 certificate's chain and signatures
/// (`v1_certs`), which webpki refuses.
#[derive(Debug)]
struct ClientCerts {
    inner: Arc<dyn ClientCertVerifier>,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for ClientCerts {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if !v1_certs::is_v1(end_entity) {
            return self
                .inner
                .verify_client_cert(end_entity, intermediates, now);
        }
        let algs = &self.provider.signature_verification_algorithms;
        v1_certs::verify_chain(end_entity, intermediates, &self.roots, now, algs)?;
        Ok(ClientCertVerified::assertion())
    }

    v1_certs::signature_checks!();
}
