//! X.509 version 1 certificates. OpenSSL accepts them (and so PostgreSQL, libpq and PgBouncer do);
//! webpki, which rustls verifies with, refuses them (`UnsupportedCertVersion`). They are what
//! `openssl x509 -req` and `openssl ca` issue when no extensions are asked for, as in PostgreSQL's
//! own "Creating Certificates" steps and PgBouncer's test CA, so a pooler that refuses them cannot
//! take over such a deployment.
//!
//! A v3 certificate never comes here: it goes through rustls and webpki unchanged. For a v1 one:
//! - our own certificate (`*_tls_cert_file`): the key must fit it (the SubjectPublicKeyInfo of the
//!   key equals the certificate's), then it is served as any other (`certified_key`);
//! - a peer's handshake signature is checked with the public key read off the certificate
//!   (`verify_tls12` / `verify_tls13`);
//! - a peer's chain (verify-ca / verify-full, client certificates): the certificate is in its
//!   validity period and signed by a trust anchor, directly or through intermediates the peer sent
//!   that are v3 CA certificates in their validity period, each signature checked with the
//!   provider's algorithms (`verify_chain`); verify-full also wants the host name in the subject's
//!   common name (a v1 certificate has no subjectAltName), as OpenSSL's host check does then.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::client::ResolvesClientCert;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, ServerName, SignatureVerificationAlgorithm,
    SubjectPublicKeyInfoDer, UnixTime,
};
use x509_parser::prelude::{FromDer, X509Certificate};

/// The most certificates a chain may pass through above the peer's own.
const MAX_DEPTH: usize = 6;

/// (tag, contents, rest) of the DER element that starts `b`.
fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (usize::from(first), b)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |l, &x| (l << 8) | usize::from(x));
        (len, &b[n..])
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// A DER SEQUENCE around `contents` (a trust anchor keeps its SubjectPublicKeyInfo without it).
fn sequence(contents: &[u8]) -> Vec<u8> {
    let mut out = vec![0x30];
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(contents);
    out
}

/// Whether a DER certificate is version 1: its TBSCertificate has no version field (`[0]`).
pub fn is_v1(cert: &[u8]) -> bool {
    match element(cert).and_then(|(_, c, _)| element(c)) {
        Some((0x30, tbs, _)) => tbs.first() != Some(&0xa0),
        _ => false,
    }
}

fn bad(e: CertificateError) -> Error {
    Error::InvalidCertificate(e)
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, Error> {
    X509Certificate::from_der(der)
        .map(|(_, c)| c)
        .map_err(|_| bad(CertificateError::BadEncoding))
}

/// `msg` signed with `spki`'s key under one of `algs` (TLS 1.2 offers several per scheme).
fn signed_by(
    spki: &[u8],
    algs: &[&dyn SignatureVerificationAlgorithm],
    msg: &[u8],
    signature: &[u8],
) -> bool {
    let spki = SubjectPublicKeyInfoDer::from(spki);
    let Ok(key) = webpki::RawPublicKeyEntity::try_from(&spki) else {
        return false;
    };
    algs.iter()
        .any(|alg| key.verify_signature(*alg, msg, signature).is_ok())
}

/// The algorithms `scheme` stands for.
fn scheme_algs(
    scheme: SignatureScheme,
    supported: &WebPkiSupportedAlgorithms,
) -> Result<&'static [&'static dyn SignatureVerificationAlgorithm], Error> {
    supported
        .mapping
        .iter()
        .find(|(s, _)| *s == scheme)
        .map(|(_, algs)| *algs)
        .ok_or(Error::PeerMisbehaved(
            rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
        ))
}

/// rustls' TLS 1.2 handshake signature check, for a v1 certificate too.
pub fn verify_tls12(
    msg: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    supported: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    if !is_v1(cert) {
        return rustls::crypto::verify_tls12_signature(msg, cert, dss, supported);
    }
    let algs = scheme_algs(dss.scheme, supported)?;
    let parsed = parse(cert.as_ref())?;
    if signed_by(parsed.public_key().raw, algs, msg, dss.signature()) {
        Ok(HandshakeSignatureValid::assertion())
    } else {
        Err(bad(CertificateError::BadSignature))
    }
}

/// rustls' TLS 1.3 handshake signature check, for a v1 certificate too.
pub fn verify_tls13(
    msg: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    supported: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    if !is_v1(cert) {
        return rustls::crypto::verify_tls13_signature(msg, cert, dss, supported);
    }
    let parsed = parse(cert.as_ref())?;
    let spki = SubjectPublicKeyInfoDer::from(parsed.public_key().raw);
    rustls::crypto::verify_tls13_signature_with_raw_key(msg, &spki, dss, supported)
}

/// The handshake signature checks of a verifier (client or server side) whose `provider` field
/// holds the crypto provider: `verify_tls12` / `verify_tls13` and the provider's schemes.
macro_rules! signature_checks {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            let algs = &self.provider.signature_verification_algorithms;
            $crate::tls::v1_certs::verify_tls12(message, cert, dss, algs)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            let algs = &self.provider.signature_verification_algorithms;
            $crate::tls::v1_certs::verify_tls13(message, cert, dss, algs)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    };
}
pub(crate) use signature_checks;

/// Whether `cert` is within its validity period at `now`.
fn current(cert: &X509Certificate<'_>, now: UnixTime) -> Result<(), Error> {
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let v = cert.validity();
    if now < v.not_before.timestamp() {
        Err(bad(CertificateError::NotValidYet))
    } else if now > v.not_after.timestamp() {
        Err(bad(CertificateError::Expired))
    } else {
        Ok(())
    }
}

/// Whether `cert`'s own signature was made with the key of `issuer_spki` (a full
/// SubjectPublicKeyInfo), under the algorithm the certificate names.
fn issued_by(
    cert: &X509Certificate<'_>,
    issuer_spki: &[u8],
    all: &[&dyn SignatureVerificationAlgorithm],
) -> bool {
    let oid = cert.signature_algorithm.algorithm.as_bytes();
    let named: Vec<&dyn SignatureVerificationAlgorithm> = all
        .iter()
        .copied()
        .filter(|alg| {
            let id = alg.signature_alg_id();
            matches!(element(id.as_ref()), Some((0x06, o, _)) if o == oid)
        })
        .collect();
    signed_by(
        issuer_spki,
        &named,
        cert.tbs_certificate.as_ref(),
        &cert.signature_value.data,
    )
}

/// The contents of a DER Name (a trust anchor keeps its subject without the SEQUENCE around it).
fn name_contents(raw: &[u8]) -> &[u8] {
    match element(raw) {
        Some((0x30, contents, _)) => contents,
        _ => raw,
    }
}

/// Verify a v1 certificate's chain to one of `roots` (see the module comment).
pub fn verify_chain(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &RootCertStore,
    now: UnixTime,
    supported: &WebPkiSupportedAlgorithms,
) -> Result<(), Error> {
    let leaf = parse(end_entity.as_ref())?;
    current(&leaf, now)?;
    let parsed: Vec<X509Certificate<'_>> = intermediates
        .iter()
        .filter_map(|c| parse(c.as_ref()).ok())
        .collect();
    let mut cert = &leaf;
    for _ in 0..MAX_DEPTH {
        let issuer = name_contents(cert.issuer().as_raw());
        for anchor in roots.roots.iter() {
            if anchor.subject.as_ref() == issuer
                && issued_by(
                    cert,
                    &sequence(anchor.subject_public_key_info.as_ref()),
                    supported.all,
                )
            {
                if anchor.name_constraints.is_some() {
                    // Not checked here: refused rather than half-verified.
                    return Err(bad(CertificateError::ApplicationVerificationFailure));
                }
                return Ok(());
            }
        }
        let next = parsed.iter().find(|ca| {
            name_contents(ca.subject().as_raw()) == issuer
                && is_ca(ca)
                && current(ca, now).is_ok()
                && issued_by(cert, ca.public_key().raw, supported.all)
        });
        match next {
            Some(ca) => cert = ca,
            None => return Err(bad(CertificateError::UnknownIssuer)),
        }
    }
    Err(bad(CertificateError::UnknownIssuer))
}

/// A v3 certificate whose basicConstraints say it is a CA.
fn is_ca(cert: &X509Certificate<'_>) -> bool {
    matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca)
}

/// verify-full for a v1 certificate: the host name equals the subject's common name (a leading
/// `*.` label stands for one label), without regard to case; an IP address equals it as text.
pub fn verify_name(end_entity: &CertificateDer<'_>, name: &ServerName<'_>) -> Result<(), Error> {
    let cert = parse(end_entity.as_ref())?;
    let host = match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => return Err(bad(CertificateError::NotValidForName)),
    };
    let fits = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .any(|cn| host_matches(cn, &host));
    if fits {
        Ok(())
    } else {
        Err(bad(CertificateError::NotValidForName))
    }
}

fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    match (pattern.strip_prefix("*."), host.split_once('.')) {
        (Some(rest), Some((label, host_rest))) => {
            !label.is_empty() && rest.contains('.') && rest.eq_ignore_ascii_case(host_rest)
        }
        _ => false,
    }
}

/// Our certificate chain and key, for any certificate version: the key must fit the first
/// certificate (rustls' own check parses it with webpki, which refuses v1).
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, String> {
    let Some(first) = chain.first() else {
        return Err("no certificate".into());
    };
    let cert_spki = parse(first.as_ref())
        .map_err(|e| e.to_string())?
        .public_key()
        .raw
        .to_vec();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| e.to_string())?;
    if let Some(key_spki) = signing.public_key() {
        if key_spki.as_ref() != cert_spki.as_slice() {
            return Err("the private key does not match the certificate's public key".into());
        }
    }
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Always the one certificate and key (`certified_key`), on either side of a connection.
#[derive(Debug)]
pub struct OneCert(pub Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl ResolvesClientCert for OneCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
#[path = "v1_certs_tests.rs"]
mod tests;
