//! SCRAM secrets derived from plaintext passwords (PBKDF2, `scram_iterations` rounds), cached so
//! a reconnect storm does not redo the key derivation for every login.
//!
//! Keyed by (user, SHA-256 of the password, salt, iterations): a changed password, salt or
//! iteration count is a different entry, so the cache never answers for stale inputs; passwords
//! themselves are not kept. Cleared on RELOAD. A miss derives on the bounded authentication pool
//! (`auth::cpu`), not on the relay thread.
//!
//! Only secrets of passwords known to be right are kept: the stored plaintext password's
//! (`adhoc`), and a client's cleartext password once it matched the stored SCRAM secret
//! (`verify`). A flood of wrong passwords therefore adds nothing and displaces nothing (each one
//! still costs a derivation on the bounded pool, as it does in PostgreSQL). Bounded: when full,
//! the least recently used entry goes, so the secrets of users who keep logging in stay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use sluice_protocol::{constant_time_eq, ScramSecret};

use super::cpu::AuthCpu;

/// Most derived secrets kept.
pub const SCRAM_CACHE_CAPACITY: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    user: String,
    password_hash: [u8; 32],
    salt: Vec<u8>,
    iterations: u32,
}

impl Key {
    fn new(user: &str, password: &str, salt: &[u8], iterations: u32) -> Self {
        Key {
            user: user.to_string(),
            password_hash: Sha256::digest(password.as_bytes()).into(),
            salt: salt.to_vec(),
            iterations,
        }
    }
}

/// The entries and their last use (a counter, not a clock: only the order matters).
#[derive(Default)]
struct Entries {
    map: HashMap<Key, (ScramSecret, u64)>,
    tick: u64,
    capacity: usize,
}

impl Entries {
    fn get(&mut self, key: &Key) -> Option<ScramSecret> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(s, used)| {
            *used = tick;
            s.clone()
        })
    }

    /// Keep `secret`; when full, the least recently used entry makes room. Finding it scans the
    /// entries, which only a new right password for a full cache does (after a PBKDF2 of its own,
    /// far dearer than the scan).
    fn insert(&mut self, key: Key, secret: ScramSecret) {
        self.tick += 1;
        if !self.map.contains_key(&key) && self.map.len() >= self.capacity {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
        self.map.insert(key, (secret, self.tick));
    }
}

pub struct ScramCache {
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
    cpu: AuthCpu,
}

impl Default for ScramCache {
    fn default() -> Self {
        Self::new(AuthCpu::for_this_machine())
    }
}

impl ScramCache {
    /// Misses derive on `cpu`.
    pub fn new(cpu: AuthCpu) -> Self {
        Self::with_capacity(cpu, SCRAM_CACHE_CAPACITY)
    }

    fn with_capacity(cpu: AuthCpu, capacity: usize) -> Self {
        ScramCache {
            entries: Mutex::new(Entries {
                capacity: capacity.max(1),
                ..Entries::default()
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            cpu,
        }
    }

    /// The cached secret for `key`, or a fresh derivation (not kept: the caller decides).
    async fn lookup_or_derive(&self, key: &Key, password: &str) -> (ScramSecret, bool) {
        if let Some(s) = self.entries.lock().get(key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return (s, true);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        // PBKDF2 runs outside the lock; two concurrent first logins may both derive (same result).
        let (p, s, iterations) = (password.to_string(), key.salt.clone(), key.iterations);
        let secret = match self
            .cpu
            .run(move || ScramSecret::from_password(&p, &s, iterations))
            .await
        {
            Some(secret) => secret,
            // Only while the runtime shuts down.
            None => ScramSecret::from_password(password, &key.salt, key.iterations),
        };
        (secret, false)
    }

    /// The SCRAM secret of the stored (so trusted) `password` with this salt and iteration
    /// count; kept.
    async fn derive_trusted(
        &self,
        user: &str,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> ScramSecret {
        let key = Key::new(user, password, salt, iterations);
        let (secret, hit) = self.lookup_or_derive(&key, password).await;
        if !hit {
            self.entries.lock().insert(key, secret.clone());
        }
        secret
    }

    /// Whether a client's cleartext `password` is the one behind the stored SCRAM `secret`
    /// (constant-time comparison of the keys). Only a right password is kept.
    pub async fn verify(&self, user: &str, password: &str, secret: &ScramSecret) -> bool {
        let key = Key::new(user, password, &secret.salt, secret.iterations);
        let (derived, hit) = self.lookup_or_derive(&key, password).await;
        let ok = constant_time_eq(&derived.stored_key, &secret.stored_key)
            & constant_time_eq(&derived.server_key, &secret.server_key);
        if ok && !hit {
            self.entries.lock().insert(key, derived);
        }
        ok
    }

    /// An ad-hoc secret for a plaintext userlist/auth_query password. Its salt is the one the mock
    /// exchange of an unknown user of that name would show (derived from `mock_key`), so the
    /// server-first message does not tell known users from unknown ones.
    pub async fn adhoc(
        &self,
        user: &str,
        password: &str,
        iterations: u32,
        mock_key: &[u8],
    ) -> ScramSecret {
        let salt = ScramSecret::mock(user, mock_key, iterations).salt;
        self.derive_trusted(user, password, &salt, iterations).await
    }

    pub fn clear(&self) {
        self.entries.lock().map.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (hits, misses) since start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_derivation_is_a_hit() {
        let c = ScramCache::default();
        let a = c.derive_trusted("u", "pw", b"salt", 16).await;
        assert_eq!(c.counts(), (0, 1));
        let b = c.derive_trusted("u", "pw", b"salt", 16).await;
        assert_eq!(c.counts(), (1, 1));
        assert_eq!(a, b);
        assert!(a.verify_password("pw"));
        // Any changed input is a different entry.
        c.derive_trusted("u", "pw2", b"salt", 16).await;
        c.derive_trusted("u", "pw", b"salt2", 16).await;
        c.derive_trusted("u", "pw", b"salt", 17).await;
        c.derive_trusted("v", "pw", b"salt", 16).await;
        assert_eq!(c.counts(), (1, 5));
        assert_eq!(c.len(), 5);
        c.clear();
        assert!(c.is_empty());
    }

    #[tokio::test]
    async fn adhoc_salt_is_the_mock_salt() {
        let c = ScramCache::default();
        let key = [7u8; 32];
        let s = c.adhoc("alice", "pw", 32, &key).await;
        assert_eq!(s.salt, ScramSecret::mock("alice", &key, 32).salt);
        assert_eq!(s.iterations, 32);
        assert!(s.verify_password("pw"));
        c.adhoc("alice", "pw", 32, &key).await;
        assert_eq!(c.counts(), (1, 1));
    }

    #[tokio::test]
    async fn verify_keeps_only_right_passwords() {
        let c = ScramCache::default();
        let stored = ScramSecret::from_password("right", b"salt", 16);
        assert!(!c.verify("u", "wrong", &stored).await);
        assert!(c.is_empty());
        assert!(!c.verify("u", "wrong", &stored).await);
        // Wrong passwords are derived each time (nothing kept to hit).
        assert_eq!(c.counts(), (0, 2));
        assert!(c.verify("u", "right", &stored).await);
        assert_eq!(c.len(), 1);
        assert!(c.verify("u", "right", &stored).await);
        assert_eq!(c.counts(), (1, 3));
        // A kept secret is still compared with the stored one: another secret with the same salt
        // and iteration count (a changed password) does not take the old password.
        let changed = ScramSecret::from_password("new", b"salt", 16);
        assert!(!c.verify("u", "right", &changed).await);
        assert!(c.verify("u", "new", &changed).await);
    }

    /// A flood of wrong cleartext passwords neither grows the cache nor displaces the entries of
    /// users who log in with theirs.
    #[tokio::test]
    async fn wrong_password_flood_neither_grows_nor_evicts() {
        // Room for the four users and the plaintext one.
        let c = ScramCache::with_capacity(AuthCpu::new(1), 5);
        let stored: Vec<_> = (0..4)
            .map(|i| ScramSecret::from_password(&format!("pw{i}"), b"salt", 1))
            .collect();
        for (i, s) in stored.iter().enumerate() {
            assert!(c.verify(&format!("u{i}"), &format!("pw{i}"), s).await);
        }
        assert_eq!(c.len(), 4);
        for n in 0..200 {
            assert!(!c.verify("u0", &format!("guess{n}"), &stored[0]).await);
        }
        // auth_query's or the userlist's plaintext users: only the stored password is derived.
        for n in 0..50 {
            c.adhoc("plain", "stored", 1, &[1u8; 32]).await;
            assert!(!c.verify("plain", &format!("guess{n}"), &stored[1]).await);
        }
        let (hits_before, _) = c.counts();
        for (i, s) in stored.iter().enumerate() {
            assert!(c.verify(&format!("u{i}"), &format!("pw{i}"), s).await);
        }
        assert_eq!(c.counts().0, hits_before + 4, "good entries were displaced");
        assert_eq!(c.len(), 5);
    }

    #[tokio::test]
    async fn bounded_least_recently_used_goes() {
        let c = ScramCache::with_capacity(AuthCpu::new(1), 3);
        for u in ["a", "b", "c"] {
            c.derive_trusted(u, "p", b"s", 1).await;
        }
        // "a" is used again, so "b" is the oldest when "d" comes.
        c.derive_trusted("a", "p", b"s", 1).await;
        c.derive_trusted("d", "p", b"s", 1).await;
        assert_eq!(c.len(), 3);
        let (hits, misses) = c.counts();
        c.derive_trusted("a", "p", b"s", 1).await;
        c.derive_trusted("c", "p", b"s", 1).await;
        c.derive_trusted("d", "p", b"s", 1).await;
        assert_eq!(c.counts(), (hits + 3, misses));
        c.derive_trusted("b", "p", b"s", 1).await;
        assert_eq!(c.counts(), (hits + 3, misses + 1));
        assert_eq!(c.len(), 3);
    }

    #[tokio::test]
    async fn bounded() {
        let c = ScramCache::default();
        for i in 0..SCRAM_CACHE_CAPACITY + 5 {
            c.derive_trusted(&format!("u{i}"), "p", b"s", 1).await;
        }
        assert_eq!(c.len(), SCRAM_CACHE_CAPACITY);
    }
}
