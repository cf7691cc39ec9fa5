//! Facts read off an established TLS session: PgBouncer's `tls` column text, the peer
//! certificate's common name, and the tls-server-end-point hash of a certificate.

use rustls::{CommonState, ProtocolVersion};
use rustls_pki_types::CertificateDer;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::versions::openssl_name;

/// "TLSv1.2/ECDHE-RSA-AES256-GCM-SHA384/ECDH=prime256v1" or "TLSv1.3/TLS_AES_256_GCM_SHA384",
/// as PgBouncer 1.25.2 prints it (OpenSSL names): the key exchange group only for TLS 1.2, on
/// both legs (compared side by side, 2026-11-29).
pub fn describe(state: &CommonState) -> String {
    let tls12 = state.protocol_version() == Some(ProtocolVersion::TLSv1_2);
    let version = match state.protocol_version() {
        Some(ProtocolVersion::TLSv1_3) => "TLSv1.3".to_string(),
        Some(ProtocolVersion::TLSv1_2) => "TLSv1.2".to_string(),
        Some(v) => format!("{v:?}"),
        None => "TLS".to_string(),
    };
    let suite = state
        .negotiated_cipher_suite()
        .map(|s| openssl_name(s.suite()))
        .unwrap_or_default();
    let mut out = format!("{version}/{suite}");
    if let Some(g) = state.negotiated_key_exchange_group().filter(|_| tls12) {
        let name = match format!("{:?}", g.name()).as_str() {
            "secp256r1" => "prime256v1".to_string(),
            other => other.to_string(),
        };
        out.push_str("/ECDH=");
        out.push_str(&name);
    }
    out
}

/// The subject common name of a DER certificate, if it has one that is valid UTF-8.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, x509) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let cn = x509.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// tls-server-end-point channel binding data (RFC 5929) for a DER certificate.
pub fn end_point(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, x509) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let oid = x509.signature_algorithm.algorithm.to_id_string();
    Some(sluice_protocol::tls_server_end_point(cert.as_ref(), &oid))
}
