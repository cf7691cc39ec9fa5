//! `[peers]` entries: other processes of a peer group, to which cancel requests are forwarded.

use crate::connstr::{opt_u32, parse_pairs, port};
use crate::error::ConfigError;

/// One `[peers]` line: `<id> = host=... [port=...] [pool_size=...]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerEntry {
    /// Peer id, 1..=65535.
    pub id: u16,
    /// Host name, IP, `/dir` (Unix socket) or `@name` (abstract socket).
    pub host: String,
    /// Default 6432.
    pub port: u16,
    /// Max concurrent forwarded cancels; `None` = default_pool_size.
    pub pool_size: Option<u32>,
}

impl PeerEntry {
    pub const DEFAULT_PORT: u16 = 6432;

    /// Parse `id = value` from [peers]; errors name the peer id.
    pub fn parse(id: &str, value: &str, file: &str, line: usize) -> Result<Self, ConfigError> {
        let err = |reason: String| ConfigError::key(file, line, id, reason);
        let num = match id.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(err(format!("invalid peer id '{id}' (expected 1..65535)"))),
        };
        let mut host = None;
        let mut peer_port = Self::DEFAULT_PORT;
        let mut pool_size = None;
        for (key, val) in parse_pairs(value).map_err(err)? {
            match key.as_str() {
                "host" => host = Some(val),
                "port" => peer_port = port(&val).map_err(err)?,
                "pool_size" => pool_size = opt_u32(&key, &val).map_err(err)?,
                _ => return Err(err(format!("unknown parameter '{key}'"))),
            }
        }
        let Some(host) = host else {
            return Err(err("host is required".to_string()));
        };
        Ok(PeerEntry {
            id: num,
            host,
            port: peer_port,
            pool_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let p = PeerEntry::parse("1", "host=/tmp/p1 port=6433 pool_size=4", "f", 2).unwrap();
        assert_eq!(
            p,
            PeerEntry {
                id: 1,
                host: "/tmp/p1".into(),
                port: 6433,
                pool_size: Some(4)
            }
        );
        let p = PeerEntry::parse("65535", "host=h", "f", 2).unwrap();
        assert_eq!((p.id, p.port, p.pool_size), (65535, 6432, None));
    }

    #[test]
    fn errors() {
        let cases = [
            (
                "0",
                "host=h",
                "f:2: 0: invalid peer id '0' (expected 1..65535)",
            ),
            (
                "x",
                "host=h",
                "f:2: x: invalid peer id 'x' (expected 1..65535)",
            ),
            (
                "65536",
                "host=h",
                "f:2: 65536: invalid peer id '65536' (expected 1..65535)",
            ),
            ("1", "port=1", "f:2: 1: host is required"),
            ("1", "host=h dbname=x", "f:2: 1: unknown parameter 'dbname'"),
            ("1", "host=h port=x", "f:2: 1: invalid port: 'x'"),
        ];
        for (id, value, want) in cases {
            assert_eq!(
                PeerEntry::parse(id, value, "f", 2).unwrap_err().to_string(),
                want
            );
        }
    }
}
