//! HTTP basic auth for the endpoint (`[sluice] metrics_auth_file`): the users allowed in, kept as
//! SHA-256 digests of name and password and compared in constant time. Hashing first makes every
//! comparison the same length, so neither the content nor the length of a stored name or password
//! shows in the time an answer takes, and every user is compared whether or not one matched.

use base64::Engine;
use sha2::{Digest, Sha256};
use sluice_protocol::StoredSecret;
use subtle::{Choice, ConstantTimeEq};

/// One allowed user.
struct User {
    name: [u8; 32],
    password: [u8; 32],
}

/// The users allowed to read the endpoint.
pub struct BasicAuth {
    users: Vec<User>,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BasicAuth({} users, <redacted>)", self.users.len())
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl BasicAuth {
    /// From the entries of an auth file (`"user" "password"` lines). Passwords must be plaintext:
    /// basic auth receives the password itself, and an md5 or SCRAM secret would have to be
    /// recomputed on every request (SCRAM: thousands of hash rounds, a cost any client could make
    /// the pooler pay). Err says what is wrong without showing any password.
    pub fn from_entries(entries: &[(String, String)]) -> Result<Self, String> {
        if entries.is_empty() {
            return Err("no user in the file".into());
        }
        let mut users = Vec::with_capacity(entries.len());
        for (name, password) in entries {
            if name.contains(':') {
                return Err(format!(
                    "user \"{name}\": a name with ':' cannot be sent by basic auth"
                ));
            }
            if password.is_empty() {
                return Err(format!("user \"{name}\": empty password"));
            }
            if !StoredSecret::parse(password).is_plain() {
                return Err(format!(
                    "user \"{name}\": the password is an md5 or SCRAM secret; basic auth needs \
                     the plaintext password"
                ));
            }
            users.push(User {
                name: digest(name.as_bytes()),
                password: digest(password.as_bytes()),
            });
        }
        Ok(BasicAuth { users })
    }

    /// Whether an `Authorization` header value (`Basic base64(user:password)`) names an allowed
    /// user with the right password.
    pub fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let Some((name, password)) = authorization.and_then(credentials) else {
            return false;
        };
        let (name, password) = (digest(&name), digest(&password));
        let mut ok = Choice::from(0);
        for u in &self.users {
            ok |= u.name.ct_eq(&name) & u.password.ct_eq(&password);
        }
        ok.into()
    }
}

/// (user, password) of a basic `Authorization` value (RFC 7617: the scheme is case-insensitive,
/// the user ends at the first ':').
fn credentials(value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(pairs: &[(&str, &str)]) -> Result<BasicAuth, String> {
        let entries: Vec<(String, String)> = pairs
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect();
        BasicAuth::from_entries(&entries)
    }

    fn header(user_pass: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
        .into_bytes()
    }

    #[test]
    fn right_user_and_password_only() {
        let a = auth(&[("prom", "s3cret:with colon"), ("grafana", "g")]).unwrap();
        assert!(a.allows(Some(&header("prom:s3cret:with colon"))));
        assert!(a.allows(Some(&header("grafana:g"))));
        assert!(!a.allows(Some(&header("prom:s3cret"))));
        assert!(!a.allows(Some(&header("prom:g"))));
        assert!(!a.allows(Some(&header("nobody:g"))));
        assert!(!a.allows(Some(&header("prom"))));
        assert!(!a.allows(None));
        assert!(!a.allows(Some(b"Bearer abc")));
        assert!(!a.allows(Some(b"Basic !!!")));
        assert!(a.allows(Some(b"basic Z3JhZmFuYTpn")));
    }

    #[test]
    fn bad_entries_are_refused_without_showing_passwords() {
        assert_eq!(auth(&[]).unwrap_err(), "no user in the file");
        assert!(auth(&[("a:b", "pw")]).unwrap_err().contains("':'"));
        assert!(auth(&[("a", "")]).unwrap_err().contains("empty password"));
        let md5 = "md5".to_string() + &"0".repeat(32);
        let e = auth(&[("a", &md5)]).unwrap_err();
        assert!(e.contains("plaintext") && !e.contains(&md5), "{e}");
        assert!(!format!("{:?}", auth(&[("a", "pw")]).unwrap()).contains("pw"));
    }
}
