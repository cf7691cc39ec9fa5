//! PostgreSQL md5 authentication: stored `md5<hex>` secrets and salted challenge responses.

use ::md5::{Digest, Md5};

use super::constant_time::constant_time_eq;

const PREFIX: &str = "md5";
/// Length of a stored md5 secret: "md5" + 32 lowercase hex digits.
pub const MD5_SECRET_LEN: usize = 35;

/// "md5" + 32 lowercase hex digits of the digest of `parts`, on the stack: a login's check of
/// the client's response allocates nothing.
fn md5_hex(parts: &[&[u8]]) -> [u8; MD5_SECRET_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    let digest = h.finalize();
    let mut out = [0u8; MD5_SECRET_LEN];
    let (prefix, hex) = out.split_at_mut(PREFIX.len());
    prefix.copy_from_slice(PREFIX.as_bytes());
    for (pair, b) in hex.chunks_exact_mut(2).zip(digest) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0x0f)];
    }
    out
}

/// The hex form as a `String` (ASCII by construction).
fn hex_string(hex: [u8; MD5_SECRET_LEN]) -> String {
    hex.iter().map(|&b| char::from(b)).collect()
}

/// True for "md5" followed by exactly 32 lowercase hex digits (PostgreSQL's test).
pub fn is_md5_secret(s: &str) -> bool {
    s.len() == MD5_SECRET_LEN
        && s.strip_prefix(PREFIX)
            .is_some_and(|h| h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

/// "md5" + hex(md5(password + user)) : the form stored in pg_authid and userlist.txt.
pub fn md5_secret(user: &str, password: &str) -> String {
    hex_string(md5_hex(&[password.as_bytes(), user.as_bytes()]))
}

/// "md5" + hex(md5(hex32 + salt)) for a stored "md5<hex32>" secret, on the stack.
fn response_hex(md5_secret: &str, salt: [u8; 4]) -> [u8; MD5_SECRET_LEN] {
    let hex = md5_secret.strip_prefix(PREFIX).unwrap_or(md5_secret);
    md5_hex(&[hex.as_bytes(), &salt])
}

/// Client response to an MD5 challenge from a stored "md5<hex32>" secret: "md5" + hex(md5(hex32 + salt)).
pub fn md5_response_from_secret(md5_secret: &str, salt: [u8; 4]) -> String {
    hex_string(response_hex(md5_secret, salt))
}

/// Client response to an MD5 challenge from a plaintext password.
pub fn md5_response_from_password(user: &str, password: &str, salt: [u8; 4]) -> String {
    md5_response_from_secret(&md5_secret(user, password), salt)
}

/// Verify a client's MD5 response against a stored md5 secret; constant time (subtle).
/// A stored value that is not a well-formed md5 secret never verifies.
pub fn md5_verify(md5_secret: &str, salt: [u8; 4], response: &str) -> bool {
    let expected = response_hex(md5_secret, salt);
    let matches = constant_time_eq(&expected, response.as_bytes());
    matches && is_md5_secret(md5_secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_vectors() {
        // md5("password" + "user"), checked with coreutils md5sum.
        assert_eq!(
            md5_secret("user", "password"),
            "md54d45974e13472b5a0be3533de4666414"
        );
        assert_eq!(
            md5_secret("postgres", "postgres"),
            "md53175bce1d3201d16594cebf9d7eb3f9d"
        );
        // Stored by PostgreSQL 15 for CREATE ROLE alice PASSWORD 'secret' (password_encryption=md5).
        assert_eq!(
            md5_secret("alice", "secret"),
            "md54a0a68b43b6cd5cf266fa02f196e2371"
        );
    }

    #[test]
    fn response_and_verify() {
        let secret = md5_secret("user", "password");
        let salt = [0x01, 0x02, 0x03, 0x04];
        let resp = md5_response_from_secret(&secret, salt);
        assert_eq!(resp.len(), MD5_SECRET_LEN);
        assert!(resp.starts_with("md5"));
        // md5("4d45974e13472b5a0be3533de4666414" + "\x01\x02\x03\x04"), checked with md5sum.
        assert_eq!(resp, "md5a3576f1ae039b8996bc4fc2720f9c71a");
        assert_eq!(md5_response_from_password("user", "password", salt), resp);
        assert!(md5_verify(&secret, salt, &resp));
        assert!(!md5_verify(&secret, [0, 0, 0, 0], &resp));
        assert!(!md5_verify(&secret, salt, "md5"));
        assert!(!md5_verify(&secret, salt, ""));
        assert!(!md5_verify(&md5_secret("user", "other"), salt, &resp));
    }

    #[test]
    fn malformed_secret_never_verifies() {
        let salt = [9, 9, 9, 9];
        let bogus = "plaintext";
        let resp = md5_response_from_secret(bogus, salt);
        assert!(!md5_verify(bogus, salt, &resp));
        assert!(!is_md5_secret("md54D45974E13472B5A0BE3533DE4666414"));
        assert!(!is_md5_secret("md54d45974e13472b5a0be3533de466641"));
        assert!(is_md5_secret("md54d45974e13472b5a0be3533de4666414"));
    }

    #[test]
    fn hex_form() {
        // md5("") and md5("abc") from RFC 1321's test suite, lowercase.
        assert_eq!(
            hex_string(md5_hex(&[])),
            "md5d41d8cd98f00b204e9800998ecf8427e"
        );
        assert_eq!(
            hex_string(md5_hex(&[b"a", b"bc"])),
            "md5900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            &md5_hex(&[b"abc"])[..],
            b"md5900150983cd24fb0d6963f7d28e17f72"
        );
    }
}
