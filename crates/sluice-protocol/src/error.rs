//! Typed errors returned by every decoder and by the authentication math.

/// Everything that can go wrong while decoding a message or running an auth exchange.
///
/// Messages are static so that an error never echoes untrusted (or secret) input.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// A length word smaller than the length word itself.
    #[error("bad packet header")]
    BadHeader,
    /// A length larger than the caller's (or the protocol's) limit; nothing was allocated.
    #[error("message too large: {len} bytes (limit {max})")]
    TooLarge { len: usize, max: usize },
    /// A startup packet asking for a protocol we do not speak.
    #[error("unsupported protocol version {major}.{minor}")]
    UnsupportedVersion { major: u16, minor: u16 },
    /// A message whose body does not match its layout (`what` names the message or field).
    #[error("malformed {what}")]
    Malformed { what: &'static str },
    /// Any SCRAM parse or verification failure.
    #[error("invalid SCRAM message: {0}")]
    Scram(&'static str),
    /// A server asked for more PBKDF2 iterations than the client allows.
    #[error("server asked for {asked} SCRAM iterations, more than the limit of {max}")]
    ScramIterations { asked: u32, max: u32 },
    /// A stored `SCRAM-SHA-256$...` secret that does not parse.
    #[error("invalid SCRAM secret")]
    BadSecret,
}

impl ProtocolError {
    /// Shorthand for [`ProtocolError::Malformed`].
    pub(crate) const fn malformed(what: &'static str) -> Self {
        ProtocolError::Malformed { what }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_texts() {
        assert_eq!(ProtocolError::BadHeader.to_string(), "bad packet header");
        assert_eq!(
            ProtocolError::TooLarge { len: 10, max: 5 }.to_string(),
            "message too large: 10 bytes (limit 5)"
        );
        assert_eq!(
            ProtocolError::UnsupportedVersion { major: 2, minor: 0 }.to_string(),
            "unsupported protocol version 2.0"
        );
        assert_eq!(
            ProtocolError::malformed("query").to_string(),
            "malformed query"
        );
        assert_eq!(
            ProtocolError::Scram("invalid proof").to_string(),
            "invalid SCRAM message: invalid proof"
        );
        assert_eq!(ProtocolError::BadSecret.to_string(), "invalid SCRAM secret");
    }
}
