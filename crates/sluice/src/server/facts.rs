//! What the advisor learns from each PostgreSQL server itself: its connection limits
//! (max_connections and the slots reserved for superusers) and work_mem. Asked once per server
//! address on a connection the pooler has just logged in, then again at most every
//! `REFRESH` (a settings change needs a server restart or reload, rarely), never per transaction.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_protocol::decode_data_row;
use tokio::time::Instant;

use super::{query, ServerConn};
use crate::error::ServerError;

/// How long learned facts are trusted before the next new connection asks again.
pub const REFRESH: Duration = Duration::from_secs(600);

/// One statement, valid on PostgreSQL 9.6 and later (`current_setting(name, missing_ok)`);
/// `reserved_connections` exists from 16 on.
pub const FACTS_SQL: &str = "SELECT current_setting('max_connections'), \
     current_setting('superuser_reserved_connections'), \
     coalesce(current_setting('reserved_connections', true), '0'), \
     pg_size_bytes(current_setting('work_mem'))";

/// A server's settings as of `learned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerFacts {
    pub max_connections: u32,
    pub superuser_reserved: u32,
    /// PostgreSQL 16's reserved_connections (0 before).
    pub reserved: u32,
    pub work_mem_bytes: u64,
}

impl ServerFacts {
    /// Connections an ordinary role can open: max_connections less the reserved slots.
    pub fn headroom(&self) -> u32 {
        self.max_connections
            .saturating_sub(self.superuser_reserved)
            .saturating_sub(self.reserved)
    }

    /// From the columns of FACTS_SQL's row.
    fn parse(row: &[Option<&[u8]>]) -> Option<ServerFacts> {
        let col = |i: usize| -> Option<u64> {
            std::str::from_utf8(row.get(i).copied().flatten()?)
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(ServerFacts {
            max_connections: u32::try_from(col(0)?).ok()?,
            superuser_reserved: u32::try_from(col(1)?).ok()?,
            reserved: u32::try_from(col(2)?).ok()?,
            work_mem_bytes: col(3)?,
        })
    }
}

#[derive(Debug, Default)]
struct Entry {
    facts: Option<ServerFacts>,
    /// When a connection last set out to ask (so that one asks at a time).
    asked: Option<Instant>,
}

/// Facts per server address (as `ServerAddr` displays it), shared by every pool of the process.
#[derive(Debug, Default)]
pub struct ServerFactsBook {
    map: Mutex<HashMap<String, Entry>>,
}

impl ServerFactsBook {
    /// Whether a connection to `addr` should ask now; true claims the asking until `REFRESH`.
    pub fn claim(&self, addr: &str) -> bool {
        let mut map = self.map.lock();
        let e = map.entry(addr.to_string()).or_default();
        if e.asked.is_some_and(|t| t.elapsed() < REFRESH) {
            return false;
        }
        e.asked = Some(Instant::now());
        true
    }

    pub fn record(&self, addr: &str, facts: ServerFacts) {
        self.map.lock().entry(addr.to_string()).or_default().facts = Some(facts);
    }

    pub fn get(&self, addr: &str) -> Option<ServerFacts> {
        self.map.lock().get(addr).and_then(|e| e.facts)
    }
}

/// Ask `conn` (idle, just logged in) for its facts. `Ok(None)`: the server answered with an error
/// (before 9.6, or a setting hidden from this role) and is still usable; `Err`: close it.
pub async fn learn(
    conn: &mut ServerConn,
    max_len: usize,
) -> Result<Option<ServerFacts>, ServerError> {
    query::send_query(conn, FACTS_SQL).await?;
    let mut facts = None;
    let result = query::drain_to_ready(conn, max_len, None, |body| {
        if facts.is_none() {
            facts = decode_data_row(body)
                .ok()
                .and_then(|row| ServerFacts::parse(&row));
        }
        None
    })
    .await;
    match result {
        Ok(()) => Ok(facts),
        Err(ServerError::Query(f)) => {
            tracing::debug!(
                "S-{}: server facts unavailable on {}: {}",
                conn.id,
                conn.addr,
                f.message
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_parse_from_the_row_and_give_the_headroom() {
        let row: Vec<Option<&[u8]>> = vec![Some(b"200"), Some(b"3"), Some(b"2"), Some(b"4194304")];
        let f = ServerFacts::parse(&row).unwrap();
        assert_eq!(f.headroom(), 195);
        assert_eq!(f.work_mem_bytes, 4 << 20);
        assert!(ServerFacts::parse(&[Some(b"x".as_slice())]).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn one_connection_asks_per_refresh() {
        let book = ServerFactsBook::default();
        assert!(book.claim("h:5432"));
        assert!(!book.claim("h:5432"));
        assert!(book.claim("other:5432"));
        tokio::time::advance(REFRESH).await;
        assert!(book.claim("h:5432"));
    }
}
