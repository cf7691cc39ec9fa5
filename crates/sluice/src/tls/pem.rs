//! Reading PEM certificates, private keys and CA bundles named by `*_tls_*_file` settings; every
//! error names the setting and the file.

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

fn read(key: &'static str, file: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(file).map_err(|e| TlsError::file(key, file, format!("cannot read file: {e}")))
}

/// All certificates of a PEM file (a chain, end-entity first). At least one is required.
pub fn certs(key: &'static str, file: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = read(key, file)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::file(key, file, format!("bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::file(key, file, "no certificate found"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn private_key(key: &'static str, file: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let data = read(key, file)?;
    PrivateKeyDer::from_pem_slice(&data)
        .map_err(|e| TlsError::file(key, file, format!("no usable private key: {e}")))
}

/// A CA bundle as trust anchors.
pub fn roots(key: &'static str, file: &str) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs(key, file)? {
        store
            .add(cert)
            .map_err(|e| TlsError::file(key, file, format!("bad CA certificate: {e}")))?;
    }
    Ok(store)
}

/// The operating system's trust store, for server verification without server_tls_ca_file.
pub fn system_roots() -> RootCertStore {
    let mut store = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!("TLS: reading the system trust store: {e}");
    }
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    tracing::debug!("TLS: {added} system trust anchors");
    store
}
