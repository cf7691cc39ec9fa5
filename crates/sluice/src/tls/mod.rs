//! TLS with rustls: the configs for client connections (we are the TLS server) and server
//! connections (we are the TLS client), built from the `*_tls_*` settings into one `TlsSetup`
//! that `App` swaps on RELOAD. What a connection learned from its handshake (`TlsFacts`) is
//! defined with the connection, in `crate::conn`.

pub mod acceptor;
pub mod connector;
mod curves;
pub mod describe;
pub mod handshake;
pub mod http;
pub mod pem;
pub mod v1_certs;
pub mod versions;

use std::sync::Arc;

use sluice_config::{ConfigError, Settings};

pub use crate::conn::TlsFacts;
pub use acceptor::ClientTls;
pub use connector::{ServerTls, ServerTlsError};

/// A TLS setting that cannot be used. Display names the setting (and the file).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TlsError {
    #[error("{key}: {file}: {reason}")]
    File {
        key: &'static str,
        file: String,
        reason: String,
    },
    #[error("{key}: {reason}")]
    Setting { key: &'static str, reason: String },
}

impl TlsError {
    pub fn file(key: &'static str, file: &str, reason: impl Into<String>) -> Self {
        TlsError::File {
            key,
            file: file.to_string(),
            reason: reason.into(),
        }
    }

    pub fn setting(key: &'static str, reason: impl Into<String>) -> Self {
        TlsError::Setting {
            key,
            reason: reason.into(),
        }
    }

    /// As a config load error of `config_file` (startup refuses to run with it).
    pub fn into_config_error(self, config_file: &str) -> ConfigError {
        match self {
            TlsError::File { key, file, reason } => ConfigError::Io {
                file,
                reason: format!("{key}: {reason}"),
            },
            TlsError::Setting { key, reason } => ConfigError::Io {
                file: config_file.to_string(),
                reason: format!("{key}: {reason}"),
            },
        }
    }
}

/// Both sides' TLS, built together so that modes and certificates always match.
#[derive(Debug)]
pub struct TlsSetup {
    pub client: ClientTls,
    pub server: Arc<ServerTls>,
}

impl TlsSetup {
    /// Build from settings; warnings (ignored protocol or cipher names) are logged.
    pub fn load(s: &Settings) -> Result<Self, TlsError> {
        Ok(TlsSetup {
            client: ClientTls::load(s)?,
            server: Arc::new(ServerTls::load(s)?),
        })
    }

    /// Plaintext both ways (for tests and when everything is disabled).
    pub fn disabled() -> Self {
        TlsSetup {
            client: ClientTls::disabled(),
            server: Arc::new(ServerTls::disabled()),
        }
    }
}

/// The ring provider with the cipher suites, protocol versions and (towards clients) key
/// exchange groups the settings allow.
fn provider(
    s: &Settings,
    client_side: bool,
) -> Result<
    (
        Arc<rustls::crypto::CryptoProvider>,
        Vec<&'static rustls::SupportedProtocolVersion>,
    ),
    TlsError,
> {
    let (pk, pv, ck, cv, tk, tv) = if client_side {
        (
            "client_tls_protocols",
            &s.client_tls_protocols,
            "client_tls_ciphers",
            &s.client_tls_ciphers,
            "client_tls13_ciphers",
            &s.client_tls13_ciphers,
        )
    } else {
        (
            "server_tls_protocols",
            &s.server_tls_protocols,
            "server_tls_ciphers",
            &s.server_tls_ciphers,
            "server_tls13_ciphers",
            &s.server_tls13_ciphers,
        )
    };
    let (versions, mut warnings) = versions::protocols(pk, pv)?;
    let mut p = rustls::crypto::ring::default_provider();
    let (suites, w) = versions::cipher_suites(ck, cv, tk, tv, &p.cipher_suites)?;
    warnings.extend(w);
    if client_side {
        // PgBouncer has the curve setting for its clients only.
        let (groups, w) = curves::key_exchange_groups(
            "client_tls_ecdhcurve",
            &s.client_tls_ecdhcurve,
            &p.kx_groups,
        )?;
        warnings.extend(w);
        p.kx_groups = groups;
    }
    for w in warnings {
        tracing::warn!("TLS: {w}");
    }
    p.cipher_suites = suites;
    Ok((Arc::new(p), versions))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod threads_tests;
