//! What a RELOAD changes: settings to apply, non-reloadable keys to ignore, databases to reconnect, add or drop.

use crate::database::DatabaseEntry;
use crate::load::Config;
use crate::settings::{PGBOUNCER_SETTINGS, SLUICE_SETTINGS};
use crate::settings_macro::SettingDef;

/// The difference between the running config and a freshly loaded one.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReloadDiff {
    /// Reloadable keys ([pgbouncer] then [sluice], table order) whose value changed: apply them.
    pub changed_settings: Vec<String>,
    /// Non-reloadable keys whose value changed: PgBouncer silently keeps the old value.
    pub ignored_nonreloadable: Vec<String>,
    /// Databases (including "*") present in both whose connection parameters differ
    /// (`DatabaseEntry::connection_differs`): their servers must be replaced.
    pub databases_changed: Vec<String>,
    /// Databases (including "*") missing from the new config.
    pub databases_removed: Vec<String>,
    /// Databases (including "*") new in the new config.
    pub databases_added: Vec<String>,
}

impl ReloadDiff {
    pub fn is_empty(&self) -> bool {
        *self == ReloadDiff::default()
    }
}

/// Compare `old` (running) with `new` (just loaded).
pub fn diff(old: &Config, new: &Config) -> ReloadDiff {
    let mut out = ReloadDiff::default();
    settings_diff(
        &mut out,
        PGBOUNCER_SETTINGS,
        |k| old.settings.get(k),
        |k| new.settings.get(k),
    );
    settings_diff(
        &mut out,
        SLUICE_SETTINGS,
        |k| old.sluice.get(k),
        |k| new.sluice.get(k),
    );
    let old_dbs = all_databases(old);
    let new_dbs = all_databases(new);
    for o in &old_dbs {
        match new_dbs.iter().find(|n| n.name == o.name) {
            Some(n) if o.connection_differs(n) => out.databases_changed.push(o.name.clone()),
            Some(_) => {}
            None => out.databases_removed.push(o.name.clone()),
        }
    }
    for n in &new_dbs {
        if !old_dbs.iter().any(|o| o.name == n.name) {
            out.databases_added.push(n.name.clone());
        }
    }
    out
}

fn settings_diff(
    out: &mut ReloadDiff,
    table: &[SettingDef],
    old: impl Fn(&str) -> Option<String>,
    new: impl Fn(&str) -> Option<String>,
) {
    for def in table {
        if old(def.name) != new(def.name) {
            let list = if def.reloadable {
                &mut out.changed_settings
            } else {
                &mut out.ignored_nonreloadable
            };
            list.push(def.name.to_string());
        }
    }
}

fn all_databases(cfg: &Config) -> Vec<&DatabaseEntry> {
    cfg.databases.iter().chain(cfg.fallback.iter()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse_str;

    #[test]
    fn reload_diff() {
        let old = parse_str(
            "[databases]\na = host=x\nb = host=y\nc = host=z\n* = host=w\n\
             [pgbouncer]\nlisten_port = 6432\ndefault_pool_size = 20\n",
            "old.ini",
        )
        .unwrap();
        let new = parse_str(
            "[databases]\na = host=x pool_size=99\nb = host=other\nd = host=q\n\
             [pgbouncer]\nlisten_port = 7000\ndefault_pool_size = 30\nquery_timeout = 5\n\
             [sluice]\nworkers = 4\n",
            "new.ini",
        )
        .unwrap();
        let d = diff(&old, &new);
        assert_eq!(
            d.changed_settings,
            vec!["default_pool_size", "query_timeout"]
        );
        assert_eq!(d.ignored_nonreloadable, vec!["listen_port", "workers"]);
        assert_eq!(d.databases_changed, vec!["b"]);
        assert_eq!(d.databases_removed, vec!["c", "*"]);
        assert_eq!(d.databases_added, vec!["d"]);
        assert!(!d.is_empty());
        assert!(diff(&old, &old).is_empty());
    }
}
