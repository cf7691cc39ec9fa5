//! The HTTP endpoint's TLS (`[sluice] metrics_tls_cert_file`, `metrics_tls_key_file`): a rustls
//! server config from the same PEM readers as the client side, with rustls' safe defaults (TLS
//! 1.2 and 1.3, the ring provider's suites), no client certificates and ALPN "http/1.1".

use std::sync::Arc;

use rustls::ServerConfig;

use super::{pem, v1_certs, TlsError};

/// The ALPN protocol the endpoint speaks.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The server config for `cert_file` and `key_file`; errors name the setting and the file.
pub fn server_config(cert_file: &str, key_file: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = pem::certs("metrics_tls_cert_file", cert_file)?;
    let key = pem::private_key("metrics_tls_key_file", key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // (A version 1 certificate too, as on the client side: `v1_certs`.)
    let ours = v1_certs::certified_key(chain, key, &provider).map_err(|e| {
        TlsError::file(
            "metrics_tls_key_file",
            key_file,
            format!("key does not fit metrics_tls_cert_file: {e}"),
        )
    })?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::setting("metrics_tls_cert_file", e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(v1_certs::OneCert(ours)));
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}
