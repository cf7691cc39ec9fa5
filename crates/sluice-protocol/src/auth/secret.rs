//! Secrets as stored in userlist.txt or returned by auth_query, and constant-time comparison.

use std::fmt;

use super::md5::is_md5_secret;
use super::scram::ScramSecret;

/// What userlist.txt / auth_query may hold.
#[derive(Clone, PartialEq, Eq)]
pub enum StoredSecret {
    /// A plaintext password.
    Plain(String),
    /// A full "md5..." secret.
    Md5(String),
    /// A parsed `SCRAM-SHA-256$...` verifier.
    Scram(ScramSecret),
}

impl StoredSecret {
    /// Classifies a stored string the way PostgreSQL does: "md5" + 32 lowercase hex digits is
    /// md5, a `SCRAM-SHA-256$...` string that parses is SCRAM, anything else is plaintext.
    pub fn parse(s: &str) -> StoredSecret {
        if is_md5_secret(s) {
            return StoredSecret::Md5(s.to_owned());
        }
        match ScramSecret::parse(s) {
            Ok(secret) => StoredSecret::Scram(secret),
            Err(_) => StoredSecret::Plain(s.to_owned()),
        }
    }

    /// True for a plaintext password.
    pub fn is_plain(&self) -> bool {
        matches!(self, StoredSecret::Plain(_))
    }
}

impl fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            StoredSecret::Plain(_) => "Plain",
            StoredSecret::Md5(_) => "Md5",
            StoredSecret::Scram(_) => "Scram",
        };
        write!(f, "{kind}(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG_SCRAM: &str = "SCRAM-SHA-256$4096:sXoRBasYG/pUV3MLPsWShA==$YiZ8LeQyeYYlvqvPlHMbNClIlkvk4mPh8OcjQh5/ULM=:MVFDsdzE5mmPZAz/ubOk1EspJJg3TaytX86m21yy8/I=";

    #[test]
    fn classifies() {
        assert_eq!(
            StoredSecret::parse("md54d45974e13472b5a0be3533de4666414"),
            StoredSecret::Md5("md54d45974e13472b5a0be3533de4666414".into())
        );
        assert!(matches!(
            StoredSecret::parse(PG_SCRAM),
            StoredSecret::Scram(s) if s.iterations == 4096
        ));
        for plain in [
            "",
            "hunter2",
            "md5notreallyhex",
            "MD54d45974e13472b5a0be3533de4666414",
            "SCRAM-SHA-256$broken",
        ] {
            assert_eq!(
                StoredSecret::parse(plain),
                StoredSecret::Plain(plain.into())
            );
            assert!(StoredSecret::parse(plain).is_plain());
        }
    }

    #[test]
    fn debug_is_redacted() {
        for s in ["hunter2", "md54d45974e13472b5a0be3533de4666414", PG_SCRAM] {
            let d = format!("{:?}", StoredSecret::parse(s));
            assert!(d.contains("<redacted>"), "{d}");
            assert!(!d.contains("hunter2") && !d.contains("4d4597") && !d.contains("sXoR"));
        }
    }
}
