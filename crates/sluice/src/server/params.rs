//! Tracked session parameters ("varcache"): what each client expects and each server has, and the
//! `SET` that makes a server match a client when it is linked.

/// Parameters PgBouncer always tracks; track_extra_parameters adds more.
pub const ALWAYS_TRACKED: &[&str] = &[
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "standard_conforming_strings",
    "application_name",
];

/// Name -> value map with case-insensitive names (GUC names are case-insensitive).
///
/// The always-tracked parameters sit in fixed slots (in `ALWAYS_TRACKED` order) so that matching a
/// server to a client at every hand-out compares five values without looking any name up; other
/// names go in a small list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamMap {
    fixed: [Option<String>; ALWAYS_TRACKED.len()],
    entries: Vec<(String, String)>,
}

fn fixed_slot(name: &str) -> Option<usize> {
    ALWAYS_TRACKED.iter().position(|n| *n == name).or_else(|| {
        ALWAYS_TRACKED
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
    })
}

impl ParamMap {
    pub fn new() -> Self {
        ParamMap::default()
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        match fixed_slot(name) {
            Some(i) => self.fixed[i].as_deref(),
            None => self.get_listed(name),
        }
    }

    /// A name known not to be one of the fixed slots (`TrackedSet::extra`).
    fn get_listed(&self, name: &str) -> Option<&str> {
        self.listed_entry(name).map(|(_, v)| v)
    }

    /// The listed entry for `name` (any case), with its own spelling.
    fn listed_entry(&self, name: &str) -> Option<(&str, &str)> {
        // Exact spelling first: a length check and a memcmp, far cheaper than folding case.
        self.entries
            .iter()
            .find(|(k, _)| k == name)
            .or_else(|| {
                self.entries
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
            })
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Set a value; returns true when it changed.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        let slot = match fixed_slot(name) {
            Some(i) => &mut self.fixed[i],
            None => {
                match self
                    .entries
                    .iter_mut()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                {
                    Some(e) if e.1 == value => return false,
                    Some(e) => e.1 = value.to_string(),
                    None => self.entries.push((name.to_string(), value.to_string())),
                }
                return true;
            }
        };
        if slot.as_deref() == Some(value) {
            return false;
        }
        *slot = Some(value.to_string());
        true
    }

    /// Fill in the tracked parameters this (client) map lacks from a pool's welcome set, the
    /// server's values: what the client is told at login and what its servers are aligned to.
    pub fn fill_tracked_from(&mut self, tracked: &TrackedSet, welcome: &ParamMap) {
        for (mine, theirs) in self.fixed.iter_mut().zip(&welcome.fixed) {
            if mine.is_none() {
                mine.clone_from(theirs);
            }
        }
        for name in tracked.extra() {
            if self.get_listed(name).is_none() {
                if let Some(v) = welcome.get_listed(name) {
                    self.entries.push((name.to_string(), v.to_string()));
                }
            }
        }
    }

    /// The tracked part of a client's greeting: every tracked parameter this (client) map or the
    /// welcome has, with this map's value where it has one, under the welcome's spelling when the
    /// welcome has it (clients look names up case-sensitively).
    pub fn tracked_greeting<'a>(
        &'a self,
        tracked: &'a TrackedSet,
        welcome: &'a ParamMap,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let fixed = ALWAYS_TRACKED
            .iter()
            .zip(self.fixed.iter().zip(&welcome.fixed))
            .filter_map(|(name, (mine, theirs))| {
                let v = mine.as_deref().or(theirs.as_deref())?;
                Some((*name, v))
            });
        let extra = tracked.extra().filter_map(move |name| {
            let theirs = welcome.listed_entry(name);
            let name = theirs.map_or(name, |(k, _)| k);
            let v = self.get_listed(name).or(theirs.map(|(_, v)| v))?;
            Some((name, v))
        });
        fixed.chain(extra)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        ALWAYS_TRACKED
            .iter()
            .zip(&self.fixed)
            .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
            .chain(self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    pub fn len(&self) -> usize {
        self.fixed.iter().flatten().count() + self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The set of tracked parameter names for this process (always-tracked + track_extra_parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedSet {
    names: Vec<String>,
    /// The names beyond the fixed slots, worked out once: they are walked at every hand-out.
    extra: Vec<String>,
}

impl TrackedSet {
    pub fn new(extra: &[String]) -> Self {
        let mut names: Vec<String> = ALWAYS_TRACKED.iter().map(|s| s.to_string()).collect();
        for e in extra {
            if !names.iter().any(|n| n.eq_ignore_ascii_case(e)) {
                names.push(e.clone());
            }
        }
        let extra = names
            .iter()
            .skip(ALWAYS_TRACKED.len())
            .filter(|n| fixed_slot(n).is_none())
            .cloned()
            .collect();
        TrackedSet { names, extra }
    }

    /// The canonical spelling of a tracked name, if tracked.
    pub fn canonical(&self, name: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(name))
            .map(|s| s.as_str())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|s| s.as_str())
    }

    /// The names beyond `ALWAYS_TRACKED` (track_extra_parameters), which `new` puts last.
    pub fn extra(&self) -> impl Iterator<Item = &str> {
        self.extra.iter().map(|s| s.as_str())
    }
}

/// Build one simple-query text of `SET k='v';...` for every tracked parameter the client has and the
/// server differs on. None when the server already matches.
pub fn set_statement(tracked: &TrackedSet, client: &ParamMap, server: &ParamMap) -> Option<String> {
    // This runs at every hand-out; in the common case every value matches and nothing is built.
    let mut sql = String::new();
    for ((name, want), has) in ALWAYS_TRACKED.iter().zip(&client.fixed).zip(&server.fixed) {
        if let Some(want) = want.as_deref() {
            if has.as_deref() != Some(want) {
                push_set(&mut sql, name, want);
            }
        }
    }
    for name in &tracked.extra {
        if let Some(want) = client.get_listed(name) {
            if server.get_listed(name) != Some(want) {
                push_set(&mut sql, name, want);
            }
        }
    }
    (!sql.is_empty()).then_some(sql)
}

fn push_set(sql: &mut String, name: &str, value: &str) {
    sql.push_str("SET ");
    push_ident(sql, name);
    sql.push('=');
    push_literal(sql, value);
    sql.push(';');
}

fn push_ident(out: &mut String, name: &str) {
    if name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        out.push_str(name);
    } else {
        out.push('"');
        out.push_str(&name.replace('"', "\"\""));
        out.push('"');
    }
}

fn push_literal(out: &mut String, value: &str) {
    out.push('\'');
    out.push_str(&value.replace('\'', "''"));
    out.push('\'');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_insensitive_map() {
        let mut m = ParamMap::new();
        assert!(m.set("TimeZone", "UTC"));
        assert_eq!(m.get("timezone"), Some("UTC"));
        assert!(!m.set("TIMEZONE", "UTC"));
        assert!(m.set("timezone", "Europe/Berlin"));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn set_only_differences_with_quoting() {
        let tracked = TrackedSet::new(&["IntervalStyle".to_string()]);
        let mut client = ParamMap::new();
        client.set("application_name", "it's me");
        client.set("TimeZone", "UTC");
        client.set("IntervalStyle", "iso_8601");
        let mut server = ParamMap::new();
        server.set("TimeZone", "UTC");
        server.set("application_name", "");
        let sql = set_statement(&tracked, &client, &server).unwrap();
        assert_eq!(
            sql,
            "SET application_name='it''s me';SET IntervalStyle='iso_8601';"
        );
        server.set("application_name", "it's me");
        server.set("intervalstyle", "iso_8601");
        assert_eq!(set_statement(&tracked, &client, &server), None);
    }

    #[test]
    fn untracked_names_are_ignored() {
        let tracked = TrackedSet::new(&[]);
        let mut client = ParamMap::new();
        client.set("search_path", "x");
        assert_eq!(set_statement(&tracked, &client, &ParamMap::new()), None);
        assert_eq!(tracked.canonical("datestyle"), Some("DateStyle"));
    }
}
