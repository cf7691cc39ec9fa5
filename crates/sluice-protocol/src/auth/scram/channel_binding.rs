//! SCRAM channel binding (RFC 5802 §6) with `tls-server-end-point` (RFC 5929 §4): the gs2 header
//! flag, which mechanism/flag pairs a server accepts, and the certificate hash both sides bind to.
//! No TLS here: callers pass the DER certificate and its signature algorithm OID.

use sha2::{Digest, Sha256, Sha384, Sha512};

use crate::error::ProtocolError;

/// The SASL mechanism name with channel binding.
pub const SCRAM_SHA_256_PLUS: &str = "SCRAM-SHA-256-PLUS";
/// The only channel binding type PostgreSQL (and Sluice) implements.
pub const TLS_SERVER_END_POINT: &str = "tls-server-end-point";

/// The gs2-cbind-flag of a client-first-message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gs2Flag<'a> {
    /// "n": the client does not support channel binding.
    NotSupported,
    /// "y": the client supports it but thinks the server does not.
    SupportedNotUsed,
    /// "p=<type>": the client binds to `type`.
    Used(&'a str),
}

impl<'a> Gs2Flag<'a> {
    /// Parses the first field of a client-first-message ("n", "y" or "p=<cb-name>").
    pub fn parse(flag: &'a str) -> Result<Self, ProtocolError> {
        match flag {
            "n" => Ok(Gs2Flag::NotSupported),
            "y" => Ok(Gs2Flag::SupportedNotUsed),
            _ => match flag.strip_prefix("p=") {
                Some(name)
                    if !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-') =>
                {
                    Ok(Gs2Flag::Used(name))
                }
                _ => Err(ProtocolError::Scram("malformed message")),
            },
        }
    }
}

/// Server side: is this (mechanism, flag) pair acceptable, given whether the connection offers
/// binding data (TLS)? Returns the binding data the client must echo after the gs2 header.
///
/// PostgreSQL's rules: -PLUS requires "p=tls-server-end-point"; plain SCRAM with "p=" is an error;
/// "y" on a connection where the server offered -PLUS means a downgrade, and fails.
pub fn server_accepts<'d>(
    plus: bool,
    flag: Gs2Flag<'_>,
    binding: Option<&'d [u8]>,
) -> Result<&'d [u8], ProtocolError> {
    match (plus, flag, binding) {
        (true, Gs2Flag::Used(TLS_SERVER_END_POINT), Some(data)) => Ok(data),
        (true, Gs2Flag::Used(_), Some(_)) => {
            Err(ProtocolError::Scram("unsupported channel binding type"))
        }
        (true, _, Some(_)) => Err(ProtocolError::Scram(
            "channel binding is required by SCRAM-SHA-256-PLUS",
        )),
        (true, _, None) => Err(ProtocolError::Scram(
            "channel binding is not available on this connection",
        )),
        (false, Gs2Flag::Used(_), _) => Err(ProtocolError::Scram(
            "channel binding used without SCRAM-SHA-256-PLUS",
        )),
        (false, Gs2Flag::SupportedNotUsed, Some(_)) => Err(ProtocolError::Scram(
            "channel binding negotiation error (downgrade suspected)",
        )),
        (false, _, _) => Ok(&[]),
    }
}

/// What the pooler, as a SCRAM client, does about channel binding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClientBinding {
    /// Not on TLS: gs2 "n".
    #[default]
    NotSupported,
    /// On TLS but the server did not offer -PLUS: gs2 "y".
    SupportedNotUsed,
    /// Bind to the server certificate hash: gs2 "p=tls-server-end-point", mechanism -PLUS.
    TlsServerEndPoint(Vec<u8>),
}

impl ClientBinding {
    /// Picks the binding for a server offering `mechanisms`, given the end-point hash of its
    /// certificate when the connection is TLS.
    pub fn choose(mechanisms: &[&str], end_point: Option<&[u8]>) -> Self {
        match end_point {
            Some(h) if mechanisms.contains(&SCRAM_SHA_256_PLUS) => {
                ClientBinding::TlsServerEndPoint(h.to_vec())
            }
            Some(_) => ClientBinding::SupportedNotUsed,
            None => ClientBinding::NotSupported,
        }
    }

    pub fn mechanism(&self) -> &'static str {
        match self {
            ClientBinding::TlsServerEndPoint(_) => SCRAM_SHA_256_PLUS,
            _ => super::SCRAM_SHA_256,
        }
    }

    pub fn gs2_header(&self) -> &'static str {
        match self {
            ClientBinding::NotSupported => "n,,",
            ClientBinding::SupportedNotUsed => "y,,",
            ClientBinding::TlsServerEndPoint(_) => "p=tls-server-end-point,,",
        }
    }

    /// cbind-input = gs2-header [ cbind-data ], base64'd into the client-final's `c=`.
    pub fn cbind_input(&self) -> Vec<u8> {
        let mut v = self.gs2_header().as_bytes().to_vec();
        if let ClientBinding::TlsServerEndPoint(h) = self {
            v.extend_from_slice(h);
        }
        v
    }
}

/// Hash used for tls-server-end-point (RFC 5929 §4.1): the certificate signature's hash, except
/// that MD5 and SHA-1 become SHA-256. Unknown algorithms (RSASSA-PSS, EdDSA) use SHA-256 too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndPointHash {
    Sha256,
    Sha384,
    Sha512,
}

impl EndPointHash {
    /// From the certificate's signatureAlgorithm OID in dotted form.
    pub fn for_signature_oid(oid: &str) -> Self {
        match oid {
            // sha384WithRSAEncryption, ecdsa-with-SHA384
            "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => EndPointHash::Sha384,
            // sha512WithRSAEncryption, ecdsa-with-SHA512
            "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => EndPointHash::Sha512,
            _ => EndPointHash::Sha256,
        }
    }

    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            EndPointHash::Sha256 => Sha256::digest(data).to_vec(),
            EndPointHash::Sha384 => Sha384::digest(data).to_vec(),
            EndPointHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }
}

/// The tls-server-end-point binding data for a DER certificate signed with `signature_oid`.
pub fn tls_server_end_point(cert_der: &[u8], signature_oid: &str) -> Vec<u8> {
    EndPointHash::for_signature_oid(signature_oid).digest(cert_der)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gs2_flags() {
        assert_eq!(Gs2Flag::parse("n").unwrap(), Gs2Flag::NotSupported);
        assert_eq!(Gs2Flag::parse("y").unwrap(), Gs2Flag::SupportedNotUsed);
        assert_eq!(
            Gs2Flag::parse("p=tls-server-end-point").unwrap(),
            Gs2Flag::Used(TLS_SERVER_END_POINT)
        );
        for bad in ["", "p=", "p=a,b", "x", "nn", "p=é"] {
            assert!(Gs2Flag::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn server_rules() {
        let data: &[u8] = b"hash";
        let tep = Gs2Flag::Used(TLS_SERVER_END_POINT);
        assert_eq!(server_accepts(true, tep, Some(data)).unwrap(), data);
        assert!(server_accepts(true, Gs2Flag::Used("tls-unique"), Some(data)).is_err());
        assert!(server_accepts(true, Gs2Flag::NotSupported, Some(data)).is_err());
        assert!(server_accepts(true, Gs2Flag::SupportedNotUsed, Some(data)).is_err());
        assert!(server_accepts(true, tep, None).is_err());
        assert!(server_accepts(false, tep, Some(data)).is_err());
        assert!(server_accepts(false, tep, None).is_err());
        // "y" is fine without TLS, a downgrade sign with it.
        assert!(server_accepts(false, Gs2Flag::SupportedNotUsed, None).is_ok());
        assert!(server_accepts(false, Gs2Flag::SupportedNotUsed, Some(data)).is_err());
        assert!(server_accepts(false, Gs2Flag::NotSupported, Some(data))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn client_choice() {
        let h: &[u8] = b"h";
        let both = [SCRAM_SHA_256_PLUS, super::super::SCRAM_SHA_256];
        assert_eq!(
            ClientBinding::choose(&both, Some(h)),
            ClientBinding::TlsServerEndPoint(h.to_vec())
        );
        assert_eq!(
            ClientBinding::choose(&both[1..], Some(h)),
            ClientBinding::SupportedNotUsed
        );
        assert_eq!(
            ClientBinding::choose(&both, None),
            ClientBinding::NotSupported
        );
        let b = ClientBinding::TlsServerEndPoint(h.to_vec());
        assert_eq!(b.mechanism(), SCRAM_SHA_256_PLUS);
        assert_eq!(b.cbind_input(), b"p=tls-server-end-point,,h");
        assert_eq!(ClientBinding::NotSupported.cbind_input(), b"n,,");
        assert_eq!(ClientBinding::SupportedNotUsed.gs2_header(), "y,,");
    }

    #[test]
    fn end_point_hash_follows_signature() {
        assert_eq!(
            EndPointHash::for_signature_oid("1.2.840.10045.4.3.2"),
            EndPointHash::Sha256
        );
        // sha1WithRSAEncryption and md5WithRSAEncryption use SHA-256 (RFC 5929 §4.1).
        assert_eq!(
            EndPointHash::for_signature_oid("1.2.840.113549.1.1.5"),
            EndPointHash::Sha256
        );
        assert_eq!(
            EndPointHash::for_signature_oid("1.2.840.113549.1.1.4"),
            EndPointHash::Sha256
        );
        assert_eq!(
            EndPointHash::for_signature_oid("1.2.840.10045.4.3.3"),
            EndPointHash::Sha384
        );
        assert_eq!(
            EndPointHash::for_signature_oid("1.2.840.113549.1.1.13"),
            EndPointHash::Sha512
        );
        assert_eq!(
            tls_server_end_point(b"abc", "1.2.840.10045.4.3.2").len(),
            32
        );
        assert_eq!(
            tls_server_end_point(b"abc", "1.2.840.10045.4.3.3").len(),
            48
        );
        assert_eq!(
            tls_server_end_point(b"abc", "1.2.840.113549.1.1.11"),
            Sha256::digest(b"abc").to_vec()
        );
    }
}
