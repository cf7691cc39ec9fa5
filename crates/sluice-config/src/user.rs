//! `[users]` entries: per-user overrides of pool mode, sizes, limits and timeouts.

use crate::connstr::{opt_u32, parse_pairs, pool_mode};
use crate::error::ConfigError;
use crate::modes::PoolMode;

/// One `[users]` line. `None` fields inherit (user > database > global). Timeouts are whole seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UserEntry {
    pub name: String,
    pub pool_mode: Option<PoolMode>,
    pub pool_size: Option<u32>,
    pub reserve_pool_size: Option<u32>,
    pub max_user_connections: Option<u32>,
    pub max_user_client_connections: Option<u32>,
    pub query_timeout: Option<u32>,
    pub query_wait_timeout: Option<u32>,
    pub idle_transaction_timeout: Option<u32>,
    pub transaction_timeout: Option<u32>,
    pub client_idle_timeout: Option<u32>,
}

impl UserEntry {
    /// Parse `name = value` from [users]; errors name the user ("alice: unknown parameter 'x'").
    pub fn parse(name: &str, value: &str, file: &str, line: usize) -> Result<Self, ConfigError> {
        let err = |reason: String| ConfigError::key(file, line, name, reason);
        let mut user = UserEntry {
            name: name.to_string(),
            ..UserEntry::default()
        };
        for (key, val) in parse_pairs(value).map_err(err)? {
            user.apply(&key, &val).map_err(err)?;
        }
        Ok(user)
    }

    fn apply(&mut self, key: &str, val: &str) -> Result<(), String> {
        let slot = match key {
            "pool_mode" => {
                self.pool_mode = Some(pool_mode(val)?);
                return Ok(());
            }
            "pool_size" => &mut self.pool_size,
            "reserve_pool_size" => &mut self.reserve_pool_size,
            "max_user_connections" => &mut self.max_user_connections,
            "max_user_client_connections" => &mut self.max_user_client_connections,
            "query_timeout" => &mut self.query_timeout,
            "query_wait_timeout" => &mut self.query_wait_timeout,
            "idle_transaction_timeout" => &mut self.idle_transaction_timeout,
            "transaction_timeout" => &mut self.transaction_timeout,
            "client_idle_timeout" => &mut self.client_idle_timeout,
            _ => return Err(format!("unknown parameter '{key}'")),
        };
        *slot = opt_u32(key, val)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys() {
        let u = UserEntry::parse(
            "alice",
            "pool_mode=statement pool_size=3 reserve_pool_size=1 max_user_connections=9 \
             max_user_client_connections=90 query_timeout=30 query_wait_timeout=20 \
             idle_transaction_timeout=10 transaction_timeout=60 client_idle_timeout=300",
            "u.ini",
            3,
        )
        .unwrap();
        assert_eq!(
            u,
            UserEntry {
                name: "alice".into(),
                pool_mode: Some(PoolMode::Statement),
                pool_size: Some(3),
                reserve_pool_size: Some(1),
                max_user_connections: Some(9),
                max_user_client_connections: Some(90),
                query_timeout: Some(30),
                query_wait_timeout: Some(20),
                idle_transaction_timeout: Some(10),
                transaction_timeout: Some(60),
                client_idle_timeout: Some(300),
            }
        );
        let empty = UserEntry::parse("bob", "", "u.ini", 1).unwrap();
        assert_eq!(empty.pool_mode, None);
    }

    #[test]
    fn errors() {
        let cases = [
            ("host=x", "u.ini:4: alice: unknown parameter 'host'"),
            (
                "pool_size=x",
                "u.ini:4: alice: invalid integer for 'pool_size': 'x'",
            ),
            (
                "pool_mode=none",
                "u.ini:4: alice: invalid pool mode 'none' (expected one of: session, transaction, statement)",
            ),
            ("pool_size", "u.ini:4: alice: expected '=' after 'pool_size'"),
        ];
        for (value, want) in cases {
            let err = UserEntry::parse("alice", value, "u.ini", 4).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
    }
}
