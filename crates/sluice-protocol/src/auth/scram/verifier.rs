//! The stored SCRAM-SHA-256 verifier (`SCRAM-SHA-256$iter:salt$StoredKey:ServerKey`).

use std::fmt;

use super::{b64, b64_32, b64_decode, hmac_sha256, ScramKeys};
use crate::auth::constant_time::constant_time_eq;
use crate::error::ProtocolError;

const PREFIX: &str = "SCRAM-SHA-256$";
/// Mock salts are this long, like PostgreSQL's real ones.
const MOCK_SALT_LEN: usize = 16;

#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl ScramSecret {
    /// "SCRAM-SHA-256$<iter>:<b64 salt>$<b64 StoredKey>:<b64 ServerKey>"
    pub fn parse(s: &str) -> Result<Self, ProtocolError> {
        let rest = s.strip_prefix(PREFIX).ok_or(ProtocolError::BadSecret)?;
        let (iter_salt, keys) = rest.split_once('$').ok_or(ProtocolError::BadSecret)?;
        let (iter, salt) = iter_salt.split_once(':').ok_or(ProtocolError::BadSecret)?;
        let (stored, server) = keys.split_once(':').ok_or(ProtocolError::BadSecret)?;
        if iter.is_empty() || !iter.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ProtocolError::BadSecret);
        }
        let iterations: u32 = iter.parse().map_err(|_| ProtocolError::BadSecret)?;
        if iterations == 0 {
            return Err(ProtocolError::BadSecret);
        }
        let salt = b64_decode(salt)
            .filter(|s| !s.is_empty())
            .ok_or(ProtocolError::BadSecret)?;
        Ok(ScramSecret {
            iterations,
            salt,
            stored_key: b64_32(stored).ok_or(ProtocolError::BadSecret)?,
            server_key: b64_32(server).ok_or(ProtocolError::BadSecret)?,
        })
    }

    pub fn to_string_secret(&self) -> String {
        format!(
            "{PREFIX}{}:{}${}:{}",
            self.iterations,
            b64(&self.salt),
            b64(&self.stored_key),
            b64(&self.server_key)
        )
    }

    /// From a plaintext password (SASLprep applied when it succeeds, raw bytes otherwise, like
    /// PostgreSQL). Zero iterations are stored (and computed) as one.
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Self {
        let iterations = iterations.max(1);
        let keys = ScramKeys::from_password(password, salt, iterations);
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: keys.stored_key(),
            server_key: keys.server_key,
        }
    }

    /// Deterministic fake secret for unknown users (salt = first 16 bytes of
    /// HMAC-SHA256(mock_key, user)), so a probe cannot tell unknown users from wrong passwords.
    /// Its keys are derived from `mock_key` too, so no password verifies against it.
    pub fn mock(user: &str, mock_key: &[u8], iterations: u32) -> Self {
        let digest = hmac_sha256(mock_key, &[user.as_bytes()]);
        let salt = digest.get(..MOCK_SALT_LEN).unwrap_or(&digest).to_vec();
        ScramSecret {
            iterations: iterations.max(1),
            salt,
            stored_key: hmac_sha256(mock_key, &[b"mock stored key\0", user.as_bytes()]),
            server_key: hmac_sha256(mock_key, &[b"mock server key\0", user.as_bytes()]),
        }
    }

    /// Checks a plaintext password against this verifier (for cleartext auth); constant time.
    pub fn verify_password(&self, password: &str) -> bool {
        let candidate = ScramSecret::from_password(password, &self.salt, self.iterations);
        let stored = constant_time_eq(&candidate.stored_key, &self.stored_key);
        let server = constant_time_eq(&candidate.server_key, &self.server_key);
        stored & server
    }
}

impl fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramSecret")
            .field("iterations", &self.iterations)
            .field("keys", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Secrets PostgreSQL 15 stored for known passwords (CREATE ROLE ... PASSWORD).
    const PG: &[(&str, &str)] = &[
        ("pencil", "SCRAM-SHA-256$4096:sXoRBasYG/pUV3MLPsWShA==$YiZ8LeQyeYYlvqvPlHMbNClIlkvk4mPh8OcjQh5/ULM=:MVFDsdzE5mmPZAz/ubOk1EspJJg3TaytX86m21yy8/I="),
        ("pässwörd", "SCRAM-SHA-256$4096:j38MePtsB7kik1QiRjwfBA==$w/CEhixAkak+OqIfpTQhQWp5nDqodi6NPkCGtKJ03Qo=:0WVDdJtFND1cNnnAUiDBU0mob70jEw8/ZhVY4Dl5RsE="),
        // soft hyphen is mapped to nothing by SASLprep
        ("x\u{ad}y", "SCRAM-SHA-256$4096:+cmxgKgwxUCdRRyl3Dp7wA==$fc2PcxHu6lZ0oAGrhnRkVOsS1kCNkqc+VSUPCLWy6Xg=:+pQPPu77UxjDF4Sa99+31SYHaky2kgzQBrfjo8y3Vqo="),
        // NFKC turns the ligature into "fi"
        ("\u{fb01}sh", "SCRAM-SHA-256$4096:ETcRWlnnyN3FeOJuAHHM9g==$fFFcySJG5E9QZCYc9LkARu1tkK4wGaMHnXL95Lebhck=:1XkXBKdFoE6ffCeiz4pMiPwyr/T0Ffj5NQuvDlJqGi4="),
        // U+FFFD is prohibited: the raw bytes are used
        ("a\u{fffd}b", "SCRAM-SHA-256$4096:Q5wqOt0cBHR0l+icKNlO5w==$Rw8greZ0nmZfXoC0RFSeabuV0q7p3k6FxrK26ZvyQ7Y=:shjAzE4llzB8ZqcJiPYxR5NIywHxcfLr8x2wwcID324="),
    ];

    #[test]
    fn matches_postgresql() {
        for (password, stored) in PG {
            let parsed = ScramSecret::parse(stored).unwrap();
            assert_eq!(parsed.to_string_secret(), *stored);
            let ours = ScramSecret::from_password(password, &parsed.salt, parsed.iterations);
            assert_eq!(ours, parsed, "password {password:?}");
            assert!(parsed.verify_password(password));
            assert!(!parsed.verify_password("wrong"));
        }
    }

    #[test]
    fn parse_errors() {
        let good = PG[0].1;
        let bad = [
            "",
            "SCRAM-SHA-256$",
            "SCRAM-SHA-1$4096:c2FsdA==$a:b",
            &good.replace("4096", "0"),
            &good.replace("4096", "-1"),
            &good.replace("4096", "+4096"),
            &good.replace("4096", "99999999999"),
            &good.replace("sXoRBasYG/pUV3MLPsWShA==", ""),
            &good.replace("sXoRBasYG/pUV3MLPsWShA==", "!!!"),
            &good.replace("YiZ8L", "YiZ8"),
            &good.replace(":MVFD", "MVFD"),
            &good.replace("$4096:", "$4096"),
            &good.replace("8/I=", "8/I"),
            &good.replace("$YiZ", "YiZ"),
            &format!("{good}x"),
        ];
        for b in bad {
            assert_eq!(ScramSecret::parse(b), Err(ProtocolError::BadSecret), "{b}");
        }
    }

    #[test]
    fn mock_is_deterministic_and_keyed() {
        let a = ScramSecret::mock("ghost", b"key", 4096);
        assert_eq!(a, ScramSecret::mock("ghost", b"key", 4096));
        assert_eq!(a.salt.len(), 16);
        assert_eq!(a.salt, hmac_sha256(b"key", &[b"ghost"])[..16].to_vec());
        assert_ne!(a.salt, ScramSecret::mock("ghost2", b"key", 4096).salt);
        assert_ne!(a.salt, ScramSecret::mock("ghost", b"other", 4096).salt);
        assert!(!a.verify_password(""));
        assert!(!a.verify_password("ghost"));
        assert_eq!(ScramSecret::mock("x", b"k", 0).iterations, 1);
        assert!(ScramSecret::parse(&a.to_string_secret()).is_ok());
    }

    #[test]
    fn debug_is_redacted() {
        let s = ScramSecret::parse(PG[0].1).unwrap();
        let d = format!("{s:?}");
        assert!(d.contains("4096") && d.contains("<redacted>"), "{d}");
        assert!(!d.contains("YiZ8") && !d.contains("[98"), "{d}");
    }
}
