//! The auth_ident_file (pg_ident.conf format): `MAPNAME SYSTEM-USERNAME PG-USERNAME` lines used by
//! hba `map=` options of peer and cert lines.
//!
//! As PostgreSQL documents: a system name starting with `/` is a regular expression (unanchored;
//! write `^...$`), and `\1` in the database user name is replaced by its first capture group. A
//! database user name may be `all` (any user), a `/regex`, or a literal (quoted or not). `+group` is
//! refused with a clear error.

use std::path::Path;

use regex::Regex;

use crate::error::ConfigError;
use crate::hba_lex::{lex, take_word};

#[derive(Debug, Clone)]
enum SystemName {
    Literal(String),
    Regex(Regex),
}

#[derive(Debug, Clone)]
enum PgName {
    All,
    Literal(String),
    Regex(Regex),
}

#[derive(Debug, Clone)]
struct IdentEntry {
    map: String,
    system: SystemName,
    pg: PgName,
}

/// All mappings of an ident file, in file order.
#[derive(Debug, Clone, Default)]
pub struct IdentMaps {
    entries: Vec<IdentEntry>,
}

/// Parse ident text named `path` (for errors).
pub fn parse_ident(text: &str, path: &Path) -> Result<IdentMaps, ConfigError> {
    let file = path.display().to_string();
    let lines = lex(text).map_err(|(line, r)| ConfigError::syntax(&file, line, r))?;
    let mut entries = Vec::with_capacity(lines.len());
    for line in lines {
        let err = |r: String| ConfigError::syntax(&file, line.number, r);
        let mut pos = 0;
        let mut word = || take_word(&line.tokens, &mut pos);
        let (Some((map, _)), Some((system, _)), Some((pg, pg_quoted))) = (word(), word(), word())
        else {
            return Err(err(
                "expected MAPNAME SYSTEM-USERNAME PG-USERNAME".to_string()
            ));
        };
        if pos < line.tokens.len() {
            return Err(err("extra fields after PG-USERNAME".to_string()));
        }
        let system = match system.strip_prefix('/') {
            Some(re) => SystemName::Regex(
                Regex::new(re).map_err(|e| err(format!("invalid regular expression: {e}")))?,
            ),
            _ => SystemName::Literal(system),
        };
        let pg = if pg_quoted {
            PgName::Literal(pg)
        } else if pg == "all" {
            PgName::All
        } else if pg.starts_with('+') {
            return Err(err(format!("group membership (\"{pg}\") is not supported")));
        } else if let Some(re) = pg.strip_prefix('/') {
            PgName::Regex(
                Regex::new(re).map_err(|e| err(format!("invalid regular expression: {e}")))?,
            )
        } else {
            PgName::Literal(pg)
        };
        entries.push(IdentEntry { map, system, pg });
    }
    Ok(IdentMaps { entries })
}

/// Read and parse the ident file at `path`.
pub fn load_ident(path: &Path) -> Result<IdentMaps, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(&file, e.to_string()))?;
    parse_ident(&text, path)
}

impl IdentMaps {
    /// The map has at least one line.
    pub fn has_map(&self, map: &str) -> bool {
        self.entries.iter().any(|e| e.map == map)
    }

    /// Whether map `map` lets OS/certificate identity `system_user` log in as `pg_user`.
    pub fn permits(&self, map: &str, system_user: &str, pg_user: &str) -> bool {
        self.entries
            .iter()
            .filter(|e| e.map == map)
            .any(|e| entry_permits(e, system_user, pg_user))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn entry_permits(e: &IdentEntry, system_user: &str, pg_user: &str) -> bool {
    let capture = match &e.system {
        SystemName::Literal(s) => {
            if s != system_user {
                return false;
            }
            None
        }
        SystemName::Regex(re) => match re.captures(system_user) {
            Some(c) => c.get(1).map(|m| m.as_str().to_string()),
            None => return false,
        },
    };
    match &e.pg {
        PgName::All => true,
        PgName::Regex(re) => re.is_match(pg_user),
        PgName::Literal(name) => match (&e.system, capture) {
            (SystemName::Regex(_), Some(c)) if name.contains("\\1") => {
                name.replacen("\\1", &c, 1) == pg_user
            }
            _ => name == pg_user,
        },
    }
}
