//! SCRAM-SHA-256 and SCRAM-SHA-256-PLUS (RFC 5802 / RFC 7677, tls-server-end-point channel
//! binding per RFC 5929): shared primitives and key types.
//!
//! The exchange state machines live in `server` and `client`, the stored verifier in `verifier`,
//! the message grammar in `message`, gs2 flags and the certificate hash in `channel_binding`.

pub mod channel_binding;
mod client;
mod message;
mod server;
mod verifier;

use std::borrow::Cow;
use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub use client::{ScramClient, ScramCredential, ServerSalt};
pub use server::ScramServer;
pub use verifier::ScramSecret;

/// The SASL mechanism name.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";
/// Salt length PostgreSQL uses for new secrets.
pub const DEFAULT_SALT_LEN: usize = 16;
/// PostgreSQL's default `scram_iterations`.
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// Keys recovered from a successful client exchange, enough to log in to a server with the same secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramKeys {
    pub client_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl ScramKeys {
    /// Derives both keys from a password, salt and iteration count (SASLprep applied first).
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = salted_password(&normalize_password(password), salt, iterations);
        ScramKeys {
            client_key: hmac_sha256(&salted, &[b"Client Key"]),
            server_key: hmac_sha256(&salted, &[b"Server Key"]),
        }
    }

    /// StoredKey = H(ClientKey).
    pub fn stored_key(&self) -> [u8; 32] {
        sha256(&self.client_key)
    }
}

impl fmt::Debug for ScramKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScramKeys(<redacted>)")
    }
}

/// SASLprep the password when it succeeds; otherwise use the raw bytes, as PostgreSQL does.
pub(crate) fn normalize_password(password: &str) -> Cow<'_, [u8]> {
    match stringprep::saslprep(password) {
        Ok(Cow::Borrowed(s)) => Cow::Borrowed(s.as_bytes()),
        Ok(Cow::Owned(s)) => Cow::Owned(s.into_bytes()),
        Err(_) => Cow::Borrowed(password.as_bytes()),
    }
}

/// Hi(password, salt, i) from RFC 5802 (PBKDF2-HMAC-SHA-256). Zero iterations count as one.
pub(crate) fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations.max(1))
}

pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this error arm cannot be taken.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return [0; 32];
    };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

pub(crate) fn xor32(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x ^ y;
    }
    out
}

pub(crate) fn b64(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// Decodes base64 that must hold exactly 32 bytes (length checked before decoding).
pub(crate) fn b64_32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 44 {
        return None;
    }
    STANDARD.decode(s).ok()?.try_into().ok()
}

pub(crate) fn b64_decode(s: &str) -> Option<Vec<u8>> {
    STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests;
