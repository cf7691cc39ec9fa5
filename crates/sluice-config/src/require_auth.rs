//! `server_require_auth`: which authentication methods a server may ask the pooler for, with
//! libpq's `require_auth` syntax and meaning, for the server leg.
//!
//! A comma list of methods (`password`, `md5`, `gss`, `sspi`, `scram-sha-256`, `oauth`, `none`):
//! the server must ask for one of them (`none`: it may let the pooler in without asking). Or a
//! list of methods each prefixed with `!`: the server must not ask for any of them (`!none`: it
//! must ask for something). The two forms do not mix and no method is named twice, as in libpq.
//! Empty (the default) accepts whatever the server asks, as PgBouncer does.

use crate::value::SettingValue;

/// A way a server can let the pooler in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerAuthMethod {
    /// AuthenticationOk without asking for anything (trust).
    None,
    /// AuthenticationCleartextPassword.
    Password,
    Md5,
    ScramSha256,
    Gss,
    Sspi,
    Oauth,
}

impl ServerAuthMethod {
    const ALL: [ServerAuthMethod; 7] = [
        ServerAuthMethod::None,
        ServerAuthMethod::Password,
        ServerAuthMethod::Md5,
        ServerAuthMethod::ScramSha256,
        ServerAuthMethod::Gss,
        ServerAuthMethod::Sspi,
        ServerAuthMethod::Oauth,
    ];

    /// libpq's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerAuthMethod::None => "none",
            ServerAuthMethod::Password => "password",
            ServerAuthMethod::Md5 => "md5",
            ServerAuthMethod::ScramSha256 => "scram-sha-256",
            ServerAuthMethod::Gss => "gss",
            ServerAuthMethod::Sspi => "sspi",
            ServerAuthMethod::Oauth => "oauth",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// The parsed setting: empty = no requirement.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequireAuth {
    /// The `!` form: the listed methods are the refused ones.
    negated: bool,
    methods: Vec<ServerAuthMethod>,
}

impl RequireAuth {
    /// True when the server may let the pooler in with `method`.
    pub fn allows(&self, method: ServerAuthMethod) -> bool {
        if self.methods.is_empty() {
            return true;
        }
        self.methods.contains(&method) != self.negated
    }

    pub fn is_set(&self) -> bool {
        !self.methods.is_empty()
    }
}

impl SettingValue for RequireAuth {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let mut out = RequireAuth::default();
        if t.is_empty() {
            return Ok(out);
        }
        for (i, word) in t.split(',').map(str::trim).enumerate() {
            let (negated, name) = match word.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, word),
            };
            if i == 0 {
                out.negated = negated;
            } else if negated != out.negated {
                return Err(format!(
                    "negative require_auth method \"{word}\" cannot be mixed with non-negative methods"
                ));
            }
            let method = ServerAuthMethod::from_name(name)
                .ok_or_else(|| format!("invalid require_auth method: \"{name}\""))?;
            if out.methods.contains(&method) {
                return Err(format!(
                    "require_auth method \"{name}\" is specified more than once"
                ));
            }
            out.methods.push(method);
        }
        Ok(out)
    }

    fn render(&self) -> String {
        let bang = if self.negated { "!" } else { "" };
        self.methods
            .iter()
            .map(|m| format!("{bang}{}", m.as_str()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::ServerAuthMethod::*;
    use super::*;

    #[test]
    fn empty_accepts_every_method() {
        let r = RequireAuth::parse("").unwrap();
        assert!(!r.is_set());
        assert!(ServerAuthMethod::ALL.iter().all(|m| r.allows(*m)));
    }

    #[test]
    fn a_list_is_what_the_server_may_ask_for() {
        let r = RequireAuth::parse("scram-sha-256, md5").unwrap();
        assert!(r.allows(ScramSha256) && r.allows(Md5));
        assert!(!r.allows(Password) && !r.allows(None));
        assert_eq!(r.render(), "scram-sha-256,md5");
        let r = RequireAuth::parse("scram-sha-256,none").unwrap();
        assert!(r.allows(None));
    }

    #[test]
    fn the_bang_form_is_what_it_may_not() {
        let r = RequireAuth::parse("!password,!none").unwrap();
        assert!(!r.allows(Password) && !r.allows(None));
        assert!(r.allows(Md5) && r.allows(ScramSha256));
        assert_eq!(r.render(), "!password,!none");
    }

    #[test]
    fn libpqs_errors() {
        assert!(RequireAuth::parse("md5,!password")
            .unwrap_err()
            .contains("cannot be mixed"));
        assert!(RequireAuth::parse("md5,md5")
            .unwrap_err()
            .contains("more than once"));
        assert!(RequireAuth::parse("scram")
            .unwrap_err()
            .contains("invalid require_auth method"));
        assert!(RequireAuth::parse("md5,").is_err(), "an empty method");
    }
}
