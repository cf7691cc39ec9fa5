//! Assembles a validated `Config` from the lexed ini file: dispatches each line to its section's parser.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::database::DatabaseEntry;
use crate::error::{ConfigError, SetError};
use crate::ini::{lex_file, lex_str, IniItem};
use crate::peer::PeerEntry;
use crate::settings::{Settings, SluiceSettings, PGBOUNCER_SETTINGS};
use crate::user::UserEntry;

/// Everything pgbouncer.ini (plus includes) configures.
/// Accepted in `[pgbouncer]` as another name of max_prepared_statements.
const PREPARED_ALIAS: &str = "prepared_statement_cache_size";

#[derive(Debug, Clone)]
pub struct Config {
    /// The main file.
    pub path: PathBuf,
    /// `[pgbouncer]`.
    pub settings: Settings,
    /// `[sluice]`.
    pub sluice: SluiceSettings,
    /// Explicit entries, file order, without '*'. A name defined twice keeps its first position
    /// and its last definition.
    pub databases: Vec<DatabaseEntry>,
    /// The '*' entry.
    pub fallback: Option<DatabaseEntry>,
    pub users: Vec<UserEntry>,
    pub peers: Vec<PeerEntry>,
    /// Keys that were accepted but are not implemented by Sluice yet (`SettingDef.supported ==
    /// false`) and were set to a non-default value, as (key, "file:line") in file order; the
    /// pooler logs each once.
    pub unsupported: Vec<(String, String)>,
    /// Lines the pooler logs once at start about how it read the file (aliases), "file:line: ...".
    pub notes: Vec<String>,
    /// Where each `[sluice]` key was last set: (file, line).
    pub sluice_set_at: HashMap<String, (String, usize)>,
}

impl Config {
    /// Exact match on the [databases] name (the '*' fallback is not returned).
    pub fn database(&self, name: &str) -> Option<&DatabaseEntry> {
        self.databases.iter().find(|d| d.name == name)
    }

    /// Exact match on the [users] name.
    pub fn user(&self, name: &str) -> Option<&UserEntry> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The [peers] entry with this id.
    pub fn peer(&self, id: u16) -> Option<&PeerEntry> {
        self.peers.iter().find(|p| p.id == id)
    }

    /// A load error about the `[sluice]` key `key`, naming the file and line that set it (the
    /// main file alone when the file does not set it): for what only the pooler can check, such
    /// as whether a certificate named by a key can be read.
    pub fn sluice_key_error(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        match self.sluice_set_at.get(key) {
            Some((file, line)) => ConfigError::key(file, *line, key, reason),
            None => ConfigError::io(
                &self.path.display().to_string(),
                format!("{key}: {}", reason.into()),
            ),
        }
    }
}

/// Load and validate the file at `path`. Section names are case-insensitive; an unknown section or
/// key is an error; keys are case-sensitive like PgBouncer's. `%include` paths are relative to the
/// working directory, then to the including file's directory; nesting is limited to 10 levels.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    assemble(lex_file(path)?, path.to_path_buf())
}

/// Like [`load`] for text already in memory, named `file` in errors (includes are still read from disk).
pub fn parse_str(text: &str, file: &str) -> Result<Config, ConfigError> {
    assemble(lex_str(text, file)?, PathBuf::from(file))
}

#[derive(Clone, Copy)]
enum Section {
    PgBouncer,
    Sluice,
    Databases,
    Users,
    Peers,
}

fn section_of(name: &str) -> Option<Section> {
    match name.to_ascii_lowercase().as_str() {
        "pgbouncer" => Some(Section::PgBouncer),
        "sluice" => Some(Section::Sluice),
        "databases" => Some(Section::Databases),
        "users" => Some(Section::Users),
        "peers" => Some(Section::Peers),
        _ => None,
    }
}

fn assemble(items: Vec<IniItem>, path: PathBuf) -> Result<Config, ConfigError> {
    let mut cfg = Config {
        path,
        settings: Settings::default(),
        sluice: SluiceSettings::default(),
        databases: Vec::new(),
        fallback: None,
        users: Vec::new(),
        peers: Vec::new(),
        unsupported: Vec::new(),
        notes: Vec::new(),
        sluice_set_at: HashMap::new(),
    };
    // Last place each [pgbouncer] key was set: (order, "file:line").
    let mut set_at: HashMap<String, (usize, String)> = HashMap::new();
    let mut section = None;
    for (order, item) in items.into_iter().enumerate() {
        match item {
            IniItem::Section { name, file, line } => {
                section = Some(section_of(&name).ok_or_else(|| {
                    ConfigError::syntax(&file, line, format!("unknown section '[{name}]'"))
                })?);
            }
            IniItem::Pair {
                key,
                value,
                file,
                line,
            } => {
                let Some(current) = section else {
                    return Err(ConfigError::key(
                        &file,
                        line,
                        &key,
                        "parameter outside of any section",
                    ));
                };
                match current {
                    Section::PgBouncer => {
                        // PgDog-style configs name the prepared-statement cache this way.
                        let key = if key.eq_ignore_ascii_case(PREPARED_ALIAS) {
                            cfg.notes.push(format!(
                                "{file}:{line}: {PREPARED_ALIAS} is read as max_prepared_statements"
                            ));
                            "max_prepared_statements".to_string()
                        } else {
                            key
                        };
                        cfg.settings
                            .set(&key, &value)
                            .map_err(|e| set_error(e, &file, line, &key))?;
                        set_at.insert(key, (order, format!("{file}:{line}")));
                    }
                    Section::Sluice => {
                        cfg.sluice
                            .set(&key, &value)
                            .map_err(|e| set_error(e, &file, line, &key))?;
                        cfg.sluice_set_at.insert(key, (file, line));
                    }
                    Section::Databases => {
                        let db = DatabaseEntry::parse(&key, &value, &file, line)?;
                        if db.name == "*" {
                            cfg.fallback = Some(db);
                        } else {
                            upsert(&mut cfg.databases, db, |a, b| a.name == b.name);
                        }
                    }
                    Section::Users => {
                        let user = UserEntry::parse(&key, &value, &file, line)?;
                        upsert(&mut cfg.users, user, |a, b| a.name == b.name);
                    }
                    Section::Peers => {
                        let peer = PeerEntry::parse(&key, &value, &file, line)?;
                        upsert(&mut cfg.peers, peer, |a, b| a.id == b.id);
                    }
                }
            }
        }
    }
    if !cfg.settings.auth_type.is_supported() {
        // Refused here rather than refusing every login later (the file, line and key named).
        let (file, line) = set_at
            .get("auth_type")
            .and_then(|(_, loc)| loc.rsplit_once(':'))
            .map(|(f, l)| (f.to_string(), l.parse().unwrap_or(0)))
            .unwrap_or_default();
        return Err(ConfigError::key(
            &file,
            line,
            "auth_type",
            format!(
                "{} is not supported by Sluice; use hba, cert, scram-sha-256, md5, plain, trust or any",
                cfg.settings.auth_type
            ),
        ));
    }
    crate::endpoint::check(&cfg.sluice, |k, r| cfg.sluice_key_error(k, r))?;
    cfg.unsupported = unsupported(&cfg.settings, set_at);
    Ok(cfg)
}

fn set_error(e: SetError, file: &str, line: usize, key: &str) -> ConfigError {
    let reason = match e {
        SetError::UnknownKey => "unknown parameter".to_string(),
        SetError::BadValue(reason) => reason,
    };
    ConfigError::key(file, line, key, reason)
}

fn upsert<T>(list: &mut Vec<T>, item: T, same: impl Fn(&T, &T) -> bool) {
    match list.iter_mut().find(|existing| same(existing, &item)) {
        Some(existing) => *existing = item,
        None => list.push(item),
    }
}

fn unsupported(
    settings: &Settings,
    set_at: HashMap<String, (usize, String)>,
) -> Vec<(String, String)> {
    let mut found: Vec<(usize, String, String)> = PGBOUNCER_SETTINGS
        .iter()
        .filter(|def| !def.supported)
        .filter(|def| settings.get(def.name).as_deref() != Some(def.default))
        .filter_map(|def| {
            let (order, loc) = set_at.get(def.name)?;
            Some((*order, def.name.to_string(), loc.clone()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, key, loc)| (key, loc)).collect()
}
