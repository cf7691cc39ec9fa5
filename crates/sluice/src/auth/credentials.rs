//! User secrets from auth_file (userlist.txt), reloaded when the file changes. SCRAM secrets
//! derived from plaintext passwords are cached in `scram_cache.rs`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sluice_config::{load_userlist, ConfigError};
use sluice_protocol::StoredSecret;

use crate::keyed_hash::NameKeys;

/// User name -> secret (read at every login; only the auth file adds names).
type Users = HashMap<String, StoredSecret, NameKeys>;

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    path: String,
    modified: Option<SystemTime>,
    len: u64,
}

pub struct Credentials {
    users: ArcSwap<Users>,
    stamp: Mutex<Option<FileStamp>>,
}

impl Credentials {
    pub fn empty() -> Self {
        Credentials {
            users: ArcSwap::from_pointee(Users::default()),
            stamp: Mutex::new(None),
        }
    }

    /// Load (or reload) the auth file. The file is re-read only when its path, size or mtime changed.
    /// Returns true when new contents were installed.
    pub fn load(&self, path: Option<&str>) -> Result<bool, ConfigError> {
        let Some(path) = path.filter(|p| !p.is_empty()) else {
            *self.stamp.lock() = None;
            self.users.store(Arc::new(Users::default()));
            return Ok(true);
        };
        let meta = std::fs::metadata(path).map_err(|e| ConfigError::Io {
            file: path.to_string(),
            reason: e.to_string(),
        })?;
        let stamp = FileStamp {
            path: path.to_string(),
            modified: meta.modified().ok(),
            len: meta.len(),
        };
        if self.stamp.lock().as_ref() == Some(&stamp) {
            return Ok(false);
        }
        let entries = load_userlist(Path::new(path))?;
        let map: Users = entries
            .into_iter()
            .map(|(u, s)| (u, StoredSecret::parse(&s)))
            .collect();
        self.users.store(Arc::new(map));
        *self.stamp.lock() = Some(stamp);
        Ok(true)
    }

    pub fn lookup(&self, user: &str) -> Option<StoredSecret> {
        self.users.load().get(user).cloned()
    }

    /// Whether the auth file lists `user` (no copy of its secret).
    pub fn contains(&self, user: &str) -> bool {
        self.users.load().contains_key(user)
    }

    pub fn len(&self) -> usize {
        self.users.load().len()
    }

    /// User names in the auth file (SHOW USERS lists them like PgBouncer does).
    pub fn names(&self) -> Vec<String> {
        self.users.load().keys().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
