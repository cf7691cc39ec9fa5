//! SCRAM secrets derived from plaintext passwords (PBKDF2, `scram_iterations` rounds), cached so
//! a reconnect storm does not redo the key derivation for every login.
//!
//! Keyed by (user, SHA-256 of the password, salt, iterations): a changed password, salt or
//! iteration count is a different entry, so the cache never answers for stale inputs; passwords
//! themselves are not kept. Bounded: when full, an arbitrary entry is evicted. Cleared on RELOAD.
//! A miss derives on the bounded authentication pool (`auth::cpu`), not on the relay thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use sluice_protocol::ScramSecret;

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

pub struct ScramCache {
    entries: Mutex<HashMap<Key, ScramSecret>>,
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
        ScramCache {
            entries: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            cpu,
        }
    }

    /// The SCRAM secret of `password` with this salt and iteration count.
    pub async fn derive(
        &self,
        user: &str,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> ScramSecret {
        let key = Key {
            user: user.to_string(),
            password_hash: Sha256::digest(password.as_bytes()).into(),
            salt: salt.to_vec(),
            iterations,
        };
        if let Some(s) = self.entries.lock().get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return s.clone();
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        // PBKDF2 runs outside the lock; two concurrent first logins may both derive (same result).
        let (p, s) = (password.to_string(), salt.to_vec());
        let secret = match self
            .cpu
            .run(move || ScramSecret::from_password(&p, &s, iterations))
            .await
        {
            Some(secret) => secret,
            // Only while the runtime shuts down.
            None => ScramSecret::from_password(password, salt, iterations),
        };
        let mut entries = self.entries.lock();
        if entries.len() >= SCRAM_CACHE_CAPACITY {
            if let Some(victim) = entries.keys().next().cloned() {
                entries.remove(&victim);
            }
        }
        entries.insert(key, secret.clone());
        secret
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
        self.derive(user, password, &salt, iterations).await
    }

    pub fn clear(&self) {
        self.entries.lock().clear();
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
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
        let a = c.derive("u", "pw", b"salt", 16).await;
        assert_eq!(c.counts(), (0, 1));
        let b = c.derive("u", "pw", b"salt", 16).await;
        assert_eq!(c.counts(), (1, 1));
        assert_eq!(a, b);
        assert!(a.verify_password("pw"));
        // Any changed input is a different entry.
        c.derive("u", "pw2", b"salt", 16).await;
        c.derive("u", "pw", b"salt2", 16).await;
        c.derive("u", "pw", b"salt", 17).await;
        c.derive("v", "pw", b"salt", 16).await;
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
    async fn bounded() {
        let c = ScramCache::default();
        for i in 0..SCRAM_CACHE_CAPACITY + 5 {
            c.derive(&format!("u{i}"), "p", b"s", 1).await;
        }
        assert_eq!(c.len(), SCRAM_CACHE_CAPACITY);
    }
}
