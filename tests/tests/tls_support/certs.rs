//! Test certificates made with rcgen: two unrelated CAs, server certificates for Sluice and for
//! PostgreSQL, client certificates with CN = a user name.

use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate and its key, as PEM.
#[derive(Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

pub struct Ca {
    pub pem: Pem,
    cert: Certificate,
    key: KeyPair,
}

pub struct Certs {
    /// Signs everything that should be trusted (P-384, so leaf signatures are ecdsa-with-SHA384
    /// and the tls-server-end-point hash is SHA-384: RFC 5929's hash selection is exercised).
    pub ca: Ca,
    /// An unrelated CA (P-256).
    pub other_ca: Ca,
    /// Sluice's certificate for clients: localhost + 127.0.0.1.
    pub sluice: Pem,
    /// A second one, for the reload test.
    pub sluice_b: Pem,
    /// PostgreSQL's certificate: DNS name localhost only (127.0.0.1 is a wrong host name for it).
    pub pg: Pem,
    /// Client certificates: CN = trust_user (ca), CN = md5_user (ca), CN = trust_user (other_ca).
    pub client_trust_user: Pem,
    pub client_md5_user: Pem,
    pub client_untrusted: Pem,
    /// Sluice's client certificate towards PostgreSQL: CN = cert_user (ca).
    pub client_cert_user: Pem,
}

fn ca(name: &str, alg: &'static rcgen::SignatureAlgorithm) -> Ca {
    let key = KeyPair::generate_for(alg).unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = p.self_signed(&key).unwrap();
    Ca {
        pem: Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        },
        cert,
        key,
    }
}

fn leaf(issuer: &Ca, cn: &str, dns: &[&str], ip: bool, server: bool) -> Pem {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    if ip {
        p.subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let cert = p.signed_by(&key, &issuer.cert, &issuer.key).unwrap();
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

impl Certs {
    pub fn get() -> &'static Certs {
        static CERTS: OnceLock<Certs> = OnceLock::new();
        CERTS.get_or_init(|| {
            let ca1 = ca("Sluice Test CA", &rcgen::PKCS_ECDSA_P384_SHA384);
            let ca2 = ca("Unrelated CA", &rcgen::PKCS_ECDSA_P256_SHA256);
            Certs {
                sluice: leaf(&ca1, "localhost", &["localhost"], true, true),
                sluice_b: leaf(&ca1, "localhost", &["localhost"], true, true),
                pg: leaf(&ca1, "localhost", &["localhost"], false, true),
                client_trust_user: leaf(&ca1, "trust_user", &[], false, false),
                client_md5_user: leaf(&ca1, "md5_user", &[], false, false),
                client_untrusted: leaf(&ca2, "trust_user", &[], false, false),
                client_cert_user: leaf(&ca1, "cert_user", &[], false, false),
                ca: ca1,
                other_ca: ca2,
            }
        })
    }
}
