//! Keyword-valued setting types (pool_mode, auth_type, sslmode, load_balance_hosts,
//! target_session_attrs, route_reads, server_check_query, metrics_exporter_names).

use crate::value::SettingValue;

/// Declares an enum whose values are fixed keywords (matched case-insensitively, like PgBouncer's lookups).
macro_rules! keyword_enum {
    ($(#[$m:meta])* $name:ident, $what:literal, default $def:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant),+
        }

        impl Default for $name {
            fn default() -> Self {
                Self::$def
            }
        }

        impl $name {
            /// Every keyword accepted, in declaration order.
            pub const KEYWORDS: &'static [&'static str] = &[$($word),+];

            /// The keyword as written in the config file and shown by SHOW CONFIG.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(Self::$variant => $word,)+
                }
            }
        }

        impl SettingValue for $name {
            fn parse(s: &str) -> Result<Self, String> {
                let t = s.trim();
                $(if t.eq_ignore_ascii_case($word) {
                    return Ok(Self::$variant);
                })+
                Err(format!("invalid {} '{}' (expected one of: {})", $what, t, Self::KEYWORDS.join(", ")))
            }
            fn render(&self) -> String {
                self.as_str().to_string()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

keyword_enum!(
    /// When a server connection goes back to the pool.
    PoolMode, "pool mode", default Session {
        Session => "session",
        Transaction => "transaction",
        Statement => "statement",
    }
);

keyword_enum!(
    /// How clients authenticate (global `auth_type`).
    AuthType, "auth type", default Md5 {
        Any => "any",
        Trust => "trust",
        Plain => "plain",
        Md5 => "md5",
        ScramSha256 => "scram-sha-256",
        Cert => "cert",
        Hba => "hba",
        Ldap => "ldap",
        Pam => "pam",
    }
);

impl AuthType {
    /// Whether Sluice implements this method (ldap and pam are accepted by the parser but not
    /// implemented yet; the pooler decides how to react).
    pub fn is_supported(&self) -> bool {
        matches!(
            self,
            AuthType::Any
                | AuthType::Trust
                | AuthType::Plain
                | AuthType::Md5
                | AuthType::ScramSha256
                | AuthType::Hba
                | AuthType::Cert
        )
    }
}

keyword_enum!(
    /// TLS mode for client or server connections.
    TlsMode, "sslmode", default Disable {
        Disable => "disable",
        Allow => "allow",
        Prefer => "prefer",
        Require => "require",
        VerifyCa => "verify-ca",
        VerifyFull => "verify-full",
    }
);

keyword_enum!(
    /// Which prometheus-community pgbouncer_exporter release's metric names `/metrics` follows
    /// (`[sluice] metrics_exporter_names`): the current ones (v0.11 and later, as of v0.12.1), or
    /// those of v0.10.x and earlier for dashboards not yet moved.
    ExporterNames, "metrics_exporter_names", default Current {
        Current => "current",
        V0_10 => "v0.10",
    }
);

keyword_enum!(
    /// `route_reads` of a [databases] entry: which transactions may run on a standby
    /// (see docs/architecture.md, "Read routing").
    RouteReads, "route_reads", default Off {
        Off => "off",
        Explicit => "explicit",
        Auto => "auto",
    }
);

keyword_enum!(
    /// How a database with several hosts picks the host for a new server connection.
    LoadBalanceHosts, "load_balance_hosts", default RoundRobin {
        RoundRobin => "round-robin",
        Disable => "disable",
    }
);

keyword_enum!(
    /// libpq's `target_session_attrs` in a [databases] entry: which role a server must have.
    TargetSessionAttrs, "target_session_attrs", default Any {
        Any => "any",
        ReadWrite => "read-write",
        ReadOnly => "read-only",
        Primary => "primary",
        Standby => "standby",
        PreferStandby => "prefer-standby",
    }
);

/// `server_check_query`: what to send to a server idle longer than `server_check_delay` before reuse.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ServerCheckQuery {
    /// `<empty>` (the default): send an empty Query message.
    #[default]
    EmptyQuery,
    /// Value set to the empty string: no liveness checks at all.
    Disabled,
    /// Send this query text.
    Query(String),
}

impl SettingValue for ServerCheckQuery {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        Ok(if t.is_empty() {
            ServerCheckQuery::Disabled
        } else if t == "<empty>" {
            ServerCheckQuery::EmptyQuery
        } else {
            ServerCheckQuery::Query(t.to_string())
        })
    }
    fn render(&self) -> String {
        match self {
            ServerCheckQuery::EmptyQuery => "<empty>".to_string(),
            ServerCheckQuery::Disabled => String::new(),
            ServerCheckQuery::Query(q) => q.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_round_trip() {
        for (s, m) in [
            ("session", PoolMode::Session),
            ("transaction", PoolMode::Transaction),
            ("STATEMENT", PoolMode::Statement),
        ] {
            assert_eq!(PoolMode::parse(s), Ok(m));
        }
        assert_eq!(PoolMode::Transaction.render(), "transaction");
        assert_eq!(
            PoolMode::parse("tx"),
            Err("invalid pool mode 'tx' (expected one of: session, transaction, statement)".into())
        );
        for w in AuthType::KEYWORDS {
            assert_eq!(AuthType::parse(w).unwrap().render(), *w);
        }
        assert_eq!(AuthType::parse("scram-sha-256"), Ok(AuthType::ScramSha256));
        assert!(AuthType::ScramSha256.is_supported());
        assert!(AuthType::Hba.is_supported());
        assert!(AuthType::Cert.is_supported());
        assert!(!AuthType::Ldap.is_supported());
        for w in TlsMode::KEYWORDS {
            assert_eq!(TlsMode::parse(w).unwrap().to_string(), *w);
        }
        assert_eq!(
            LoadBalanceHosts::parse("disable"),
            Ok(LoadBalanceHosts::Disable)
        );
        assert_eq!(LoadBalanceHosts::default(), LoadBalanceHosts::RoundRobin);
        assert!(LoadBalanceHosts::parse("random").is_err());
        assert_eq!(RouteReads::default(), RouteReads::Off);
        assert_eq!(RouteReads::parse("AUTO"), Ok(RouteReads::Auto));
        assert_eq!(RouteReads::Explicit.render(), "explicit");
        assert_eq!(
            RouteReads::parse("on"),
            Err("invalid route_reads 'on' (expected one of: off, explicit, auto)".into())
        );
    }

    #[test]
    fn check_query() {
        assert_eq!(
            ServerCheckQuery::parse("<empty>"),
            Ok(ServerCheckQuery::EmptyQuery)
        );
        assert_eq!(ServerCheckQuery::parse(""), Ok(ServerCheckQuery::Disabled));
        assert_eq!(
            ServerCheckQuery::parse("select 1"),
            Ok(ServerCheckQuery::Query("select 1".into()))
        );
        for s in ["<empty>", "", "SELECT 1"] {
            assert_eq!(ServerCheckQuery::parse(s).unwrap().render(), s);
        }
    }
}
