//! Protocol-level prepared statements in transaction and statement mode: one server-side name per
//! distinct (query text, parameter types), a per-client map from the client's names, and a per-server
//! LRU of what each server connection has prepared. The relay rewrites names and re-prepares a
//! statement on whichever server the client lands on.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use sluice_protocol::encode_parse;

use crate::route;

/// A distinct statement: its text and parameter types, the name it has on every server, and its
/// Parse message ready to send.
#[derive(Debug)]
pub struct Statement {
    pub id: u64,
    pub server_name: String,
    query: Box<str>,
    param_types: Box<[u32]>,
    /// The complete Parse message with the server name.
    pub parse_message: Bytes,
    /// Running it may create or change session state (SET, advisory locks, LISTEN...), or
    /// move within a transaction's savepoints: the session tracker looks at its text each time
    /// it is executed.
    pub affects_session: bool,
    /// How running it ends a transaction block (what a client is told if its server is lost
    /// while it runs: `forward/lost.rs`).
    pub ends_transaction: crate::session_state::TxEnding,
    /// The text is nothing but `set_config()` calls with bind parameters: the tracker reads
    /// what they set from each Bind (`session_state::bound_set_configs`).
    pub bound_sets: Option<crate::session_state::BoundSets>,
    /// Read routing's classification of the text (`route::classify`), made the first time a
    /// routing client binds it (clients of pools that route nothing never pay for it), then
    /// shared by every client and every Bind of this statement.
    read_class: OnceLock<route::Classification>,
}

#[derive(Clone, PartialEq, Eq)]
struct Key {
    query: Arc<str>,
    param_types: Arc<[u32]>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.query.hash(state);
        self.param_types.hash(state);
    }
}

/// Process-wide table of statements, shared by all clients and servers. Entries live as long as a
/// client map or a server cache holds them.
#[derive(Debug, Default)]
pub struct StatementRegistry {
    map: Mutex<HashMap<KeyHandle, Weak<Statement>>>,
    next_id: AtomicU64,
}

/// Map key wrapper so Debug is not required of the inner strings' contents.
#[derive(Clone, PartialEq, Eq, Hash)]
struct KeyHandle(Key);

impl std::fmt::Debug for KeyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} bytes)", self.0.query.len())
    }
}

impl StatementRegistry {
    /// The statement for this text and parameter types, created on first use.
    pub fn intern(&self, query: &str, param_types: &[u32]) -> Arc<Statement> {
        let key = KeyHandle(Key {
            query: Arc::from(query),
            param_types: Arc::from(param_types),
        });
        let mut map = self.map.lock();
        if let Some(s) = map.get(&key).and_then(Weak::upgrade) {
            return s;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let server_name = format!("sluice_{id}");
        let mut msg =
            BytesMut::with_capacity(query.len() + server_name.len() + 16 + 4 * param_types.len());
        encode_parse(&server_name, query, param_types, &mut msg);
        let opts = crate::session_state::LexOptions::default();
        let affects_session =
            crate::session_state::might_matter_to_tracker_with(query.as_bytes(), opts);
        let stmt = Arc::new(Statement {
            id,
            server_name,
            query: query.into(),
            param_types: param_types.into(),
            parse_message: msg.freeze(),
            affects_session,
            ends_transaction: crate::session_state::transaction_ending_with(query, opts),
            bound_sets: affects_session
                .then(|| crate::session_state::bound_set_configs(query.as_bytes(), opts))
                .flatten(),
            read_class: OnceLock::new(),
        });
        if map.len() >= 1024 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        map.insert(key, Arc::downgrade(&stmt));
        stmt
    }

    /// Live distinct statements (for SHOW / metrics).
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Statement {
    pub fn query(&self) -> &str {
        &self.query
    }

    pub fn param_types(&self) -> &[u32] {
        &self.param_types
    }

    /// The text's read-routing classification, classified once per statement.
    pub fn read_class(&self) -> route::Classification {
        *self
            .read_class
            .get_or_init(|| route::classify(self.query.as_bytes()))
    }
}

/// A client's prepared statements, by the names the client chose.
#[derive(Debug, Default)]
pub struct ClientStatements {
    map: HashMap<String, Arc<Statement>>,
}

impl ClientStatements {
    pub fn get(&self, name: &str) -> Option<&Arc<Statement>> {
        self.map.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    pub fn insert(&mut self, name: &str, stmt: Arc<Statement>) {
        self.map.insert(name.to_string(), stmt);
    }

    pub fn remove(&mut self, name: &str) -> Option<Arc<Statement>> {
        self.map.remove(name)
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Every (client name, statement).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<Statement>)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// What one server connection has prepared, least recently used first out.
#[derive(Debug, Default)]
pub struct ServerStatements {
    entries: HashMap<u64, (Arc<Statement>, u64)>,
    tick: u64,
}

impl ServerStatements {
    /// Is it prepared here? Marks it used.
    pub fn touch(&mut self, id: u64) -> bool {
        self.tick += 1;
        match self.entries.get_mut(&id) {
            Some(e) => {
                e.1 = self.tick;
                true
            }
            None => false,
        }
    }

    /// Record a statement as prepared; returns the statements evicted to stay within `max`
    /// (they must be closed on the server).
    pub fn insert(&mut self, stmt: Arc<Statement>, max: usize) -> Vec<Arc<Statement>> {
        self.tick += 1;
        self.entries.insert(stmt.id, (stmt, self.tick));
        let mut evicted = Vec::new();
        while self.entries.len() > max.max(1) {
            let Some((&oldest, _)) = self.entries.iter().min_by_key(|(_, (_, t))| *t) else {
                break;
            };
            if let Some((s, _)) = self.entries.remove(&oldest) {
                evicted.push(s);
            }
        }
        evicted
    }

    pub fn remove(&mut self, id: u64) {
        self.entries.remove(&id);
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_and_types_share_one_statement() {
        let r = StatementRegistry::default();
        let a = r.intern("select $1", &[23]);
        let b = r.intern("select $1", &[23]);
        let c = r.intern("select $1", &[25]);
        assert!(Arc::ptr_eq(&a, &b));
        assert_ne!(a.id, c.id);
        assert_eq!(a.server_name, format!("sluice_{}", a.id));
        assert_eq!(a.parse_message[0], b'P');
        drop((a, b));
        let d = r.intern("select $1", &[23]);
        assert_ne!(d.id, c.id);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn server_cache_is_lru() {
        let r = StatementRegistry::default();
        let s: Vec<_> = (0..3).map(|i| r.intern(&format!("q{i}"), &[])).collect();
        let mut cache = ServerStatements::default();
        assert!(cache.insert(s[0].clone(), 2).is_empty());
        assert!(cache.insert(s[1].clone(), 2).is_empty());
        assert!(cache.touch(s[0].id));
        let evicted = cache.insert(s[2].clone(), 2);
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].id, s[1].id, "least recently used goes first");
        assert!(cache.touch(s[0].id) && cache.touch(s[2].id) && !cache.touch(s[1].id));
    }

    #[test]
    fn client_names_map_to_statements() {
        let r = StatementRegistry::default();
        let mut c = ClientStatements::default();
        c.insert("s1", r.intern("select 1", &[]));
        assert!(c.contains("s1"));
        assert_eq!(c.get("s1").unwrap().query(), "select 1");
        assert!(c.remove("s1").is_some());
        assert!(c.is_empty());
    }

    #[test]
    fn read_class_is_the_texts_and_kept() {
        let r = StatementRegistry::default();
        let read = r.intern("SELECT v FROM t WHERE id = $1", &[23]);
        assert!(matches!(
            read.read_class().verdict,
            route::Verdict::ProvenRead { .. }
        ));
        assert!(read.read_class.get().is_some(), "kept after the first use");
        let write = r.intern("INSERT INTO t(v) VALUES ($1)", &[23]);
        assert!(
            write.read_class.get().is_none(),
            "not classified until asked"
        );
        assert!(matches!(
            write.read_class().verdict,
            route::Verdict::Primary(_)
        ));
        let lock = r.intern("SELECT v FROM t FOR UPDATE", &[]);
        assert!(matches!(
            lock.read_class().verdict,
            route::Verdict::Primary(route::PrimaryWhy::LockingClause)
        ));
    }
}
