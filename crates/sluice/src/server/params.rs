//! Tracked session parameters ("varcache"): what each client expects and each server has, and the
//! `SET` that makes a server match a client when it is linked.
//!
//! Values are shared (`Arc<str>`): a client's values come from its pool's welcome or its interned
//! set (`Welcome::share`), and a server that is found to hold a client's value takes the client's
//! copy (`set_statement`), so that matching a server to a client at every hand-out usually
//! compares pointers instead of reading strings that may be anywhere in memory (with 1000 clients
//! those reads were ~16 of the ~160 L1 misses of a -S transaction, callgrind's cache model).

use std::sync::Arc;

/// Names with a fixed slot in every `ParamMap`: the parameters PgBouncer always tracks, then
/// the default track_extra_parameters (PgBouncer 1.26's: IntervalStyle, search_path and
/// default_transaction_read_only; a slot counts as tracked only when it is configured so:
/// `TrackedSet::slots`).
const SLOTS: [&str; 8] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "standard_conforming_strings",
    "application_name",
    "IntervalStyle",
    "search_path",
    "default_transaction_read_only",
];

/// application_name's slot: the admin views publish it at every release (`application_name`).
const APPLICATION_NAME_SLOT: usize = 4;

/// Parameters PgBouncer always tracks; track_extra_parameters adds more.
pub const ALWAYS_TRACKED: &[&str] = SLOTS.split_at(5).0;

/// Name -> value map with case-insensitive names (GUC names are case-insensitive).
///
/// The names of `SLOTS` sit in fixed slots so that matching a server to a client at every
/// hand-out compares eight values without looking any name up (a name lookup walks the server's
/// list, which cost L1 misses at every hand-out with many clients); other names go in a small
/// list.
///
/// `mark` makes the common hand-out one pointer comparison: a client's map carries the mark its
/// pool's welcome gave its values (`Welcome::mark_and_greet`; clients with equal values get the same mark),
/// and a server's map the mark of the client values it was last found to match. Every change
/// of values drops the map's mark, so equal marks mean "nothing to SET" (`set_statement`).
#[derive(Debug, Clone, Default)]
pub struct ParamMap {
    mark: Option<Arc<ValuesMark>>,
    fixed: [Option<Arc<str>>; SLOTS.len()],
    entries: Vec<(String, Arc<str>)>,
}

/// The identity of one set of client values (its address: a mark stays allocated while any map
/// holds it, so it cannot be reused for other values).
#[derive(Debug)]
pub struct ValuesMark;

impl PartialEq for ParamMap {
    /// Equal values (the marks are bookkeeping).
    fn eq(&self, other: &Self) -> bool {
        self.fixed == other.fixed && self.entries == other.entries
    }
}

impl Eq for ParamMap {}

/// Equal values, by pointer first (the common case once values are shared).
pub fn same_value(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// Whether a server's value `has` equals the client's `want`; when equal, `has` becomes the
/// client's copy so that the next comparison is by pointer.
fn matches_and_adopt(has: Option<&mut Arc<str>>, want: &Arc<str>) -> bool {
    match has {
        Some(h) if Arc::ptr_eq(h, want) => true,
        Some(h) if **h == **want => {
            *h = want.clone();
            true
        }
        _ => false,
    }
}

fn fixed_slot(name: &str) -> Option<usize> {
    SLOTS
        .iter()
        .position(|n| *n == name)
        .or_else(|| SLOTS.iter().position(|n| n.eq_ignore_ascii_case(name)))
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

    /// Where the listed entry for `name` (any case) is.
    fn listed_index(&self, name: &str) -> Option<usize> {
        // Exact spelling first: a length check and a memcmp, far cheaper than folding case.
        self.entries
            .iter()
            .position(|(k, _)| k == name)
            .or_else(|| {
                self.entries
                    .iter()
                    .position(|(k, _)| k.eq_ignore_ascii_case(name))
            })
    }

    /// The listed entry for `name` (any case), with its own spelling.
    fn listed_entry(&self, name: &str) -> Option<(&str, &str)> {
        let (k, v) = &self.entries[self.listed_index(name)?];
        Some((k.as_str(), &**v))
    }

    fn listed_arc(&self, name: &str) -> Option<&Arc<str>> {
        Some(&self.entries[self.listed_index(name)?].1)
    }

    fn listed_value_mut(&mut self, name: &str) -> Option<&mut Arc<str>> {
        let i = self.listed_index(name)?;
        Some(&mut self.entries[i].1)
    }

    /// The shared value of application_name, without a name lookup (SHOW CLIENTS / SERVERS).
    pub fn application_name(&self) -> Option<&Arc<str>> {
        self.fixed[APPLICATION_NAME_SLOT].as_ref()
    }

    /// The shared value of `name` (any case).
    #[cfg(test)]
    pub(crate) fn value(&self, name: &str) -> Option<&Arc<str>> {
        match fixed_slot(name) {
            Some(i) => self.fixed[i].as_ref(),
            None => self.listed_arc(name),
        }
    }

    /// Set a value; returns true when it changed.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        if self.get(name) == Some(value) {
            return false;
        }
        self.put(name, Arc::from(value));
        true
    }

    /// Set a value this map may share with others (see the module comment); returns true when
    /// it changed. An equal value already held is replaced by the shared one.
    pub fn set_shared(&mut self, name: &str, value: &Arc<str>) -> bool {
        let changed = self.get(name) != Some(&**value);
        self.put(name, value.clone());
        changed
    }

    /// The mark of this map's values (see `ParamMap`).
    pub fn mark(&self) -> Option<&Arc<ValuesMark>> {
        self.mark.as_ref()
    }

    /// Give this (client) map's values their mark (`Welcome::mark_and_greet`).
    pub fn set_mark(&mut self, mark: Arc<ValuesMark>) {
        self.mark = Some(mark);
    }

    fn put(&mut self, name: &str, value: Arc<str>) {
        self.mark = None;
        if let Some(i) = fixed_slot(name) {
            self.fixed[i] = Some(value);
        } else if let Some(v) = self.listed_value_mut(name) {
            *v = value;
        } else {
            self.entries.push((name.to_string(), value));
        }
    }

    /// Each value this map holds for which `find` has an equal shared copy becomes that copy.
    pub fn share_values_with(&mut self, mut find: impl FnMut(&Arc<str>) -> Option<Arc<str>>) {
        let mine = self
            .fixed
            .iter_mut()
            .flatten()
            .chain(self.entries.iter_mut().map(|(_, v)| v));
        for v in mine {
            if let Some(shared) = find(v) {
                *v = shared;
            }
        }
    }

    /// The values this map holds (`Welcome::share` looks for equal ones among them).
    pub fn values(&self) -> impl Iterator<Item = &Arc<str>> {
        self.fixed
            .iter()
            .flatten()
            .chain(self.entries.iter().map(|(_, v)| v))
    }

    /// Fill in the tracked parameters this (client) map lacks from a pool's welcome set, the
    /// server's values: what the client is told at login and what its servers are aligned to.
    pub fn fill_tracked_from(&mut self, tracked: &TrackedSet, welcome: &ParamMap) {
        self.mark = None;
        for ((mine, theirs), on) in self.fixed.iter_mut().zip(&welcome.fixed).zip(tracked.slots) {
            if on && mine.is_none() {
                mine.clone_from(theirs);
            }
        }
        for name in tracked.extra() {
            if self.get_listed(name).is_none() {
                if let Some(v) = welcome.listed_arc(name) {
                    self.entries.push((name.to_string(), v.clone()));
                }
            }
        }
    }

    /// Take out of this (client) map the tracked values that the pool's servers do not report
    /// (search_path before PostgreSQL 18: not in the welcome), as (lower-case name, value).
    /// A server's value of such a parameter cannot be followed from its reports, so matching it
    /// at hand-out cannot work: the caller replays these as committed SETs instead (the session
    /// tracker), which resets them before another client gets the server.
    pub fn take_unreported(
        &mut self,
        tracked: &TrackedSet,
        welcome: &ParamMap,
    ) -> Vec<(String, String)> {
        let mut taken = Vec::new();
        for (i, name) in SLOTS.iter().enumerate() {
            if tracked.slots[i] && welcome.fixed[i].is_none() {
                if let Some(v) = self.fixed[i].take() {
                    taken.push((name.to_ascii_lowercase(), v.to_string()));
                }
            }
        }
        for name in tracked.extra() {
            if welcome.listed_index(name).is_none() {
                if let Some(i) = self.listed_index(name) {
                    let (_, v) = self.entries.remove(i);
                    taken.push((name.to_ascii_lowercase(), v.to_string()));
                }
            }
        }
        if !taken.is_empty() {
            self.mark = None;
        }
        taken
    }

    /// The tracked part of a client's greeting: every tracked parameter this (client) map or the
    /// welcome has, with this map's value where it has one, under the welcome's spelling when the
    /// welcome has it (clients look names up case-sensitively).
    pub fn tracked_greeting<'a>(
        &'a self,
        tracked: &'a TrackedSet,
        welcome: &'a ParamMap,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let fixed = SLOTS
            .iter()
            .zip(self.fixed.iter().zip(&welcome.fixed))
            .zip(tracked.slots)
            .filter(|(_, on)| *on)
            .filter_map(|((name, (mine, theirs)), _)| {
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
        SLOTS
            .iter()
            .zip(&self.fixed)
            .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
            .chain(self.entries.iter().map(|(k, v)| (k.as_str(), &**v)))
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
    /// Which fixed slots (`SLOTS`) are tracked: the first five always.
    slots: [bool; SLOTS.len()],
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
        let slots = SLOTS.map(|slot| names.iter().any(|n| n.eq_ignore_ascii_case(slot)));
        let extra = names
            .iter()
            .skip(ALWAYS_TRACKED.len())
            .filter(|n| fixed_slot(n).is_none())
            .cloned()
            .collect();
        TrackedSet {
            names,
            slots,
            extra,
        }
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

    /// The names beyond the fixed slots (track_extra_parameters but the default ones), which `new`
    /// puts last.
    pub fn extra(&self) -> impl Iterator<Item = &str> {
        self.extra.iter().map(|s| s.as_str())
    }
}

/// Build one simple-query text of `SET k='v';...` for every tracked parameter the client has and the
/// server differs on. None when the server already matches. A server value found equal to the
/// client's becomes the client's (shared) copy, so that the next match is a pointer comparison.
pub fn set_statement(
    tracked: &TrackedSet,
    client: &ParamMap,
    server: &mut ParamMap,
) -> Option<String> {
    // This runs at every hand-out. Usually the server was last found to match a client with the
    // same values (the same mark): one pointer comparison instead of reading the client's eight
    // slots (at 1,000 clients ~0.9 fewer cache misses and ~160 fewer instructions per
    // transaction, callgrind).
    if let (Some(c), Some(s)) = (&client.mark, &server.mark) {
        if Arc::ptr_eq(c, s) {
            return None;
        }
    }
    let mut sql = String::new();
    for (((name, want), has), on) in SLOTS
        .iter()
        .zip(&client.fixed)
        .zip(&mut server.fixed)
        .zip(tracked.slots)
    {
        if let (true, Some(want)) = (on, want) {
            if !matches_and_adopt(has.as_mut(), want) {
                push_set(&mut sql, name, want);
            }
        }
    }
    for name in &tracked.extra {
        if let Some(want) = client.listed_arc(name) {
            if !matches_and_adopt(server.listed_value_mut(name), want) {
                push_set(&mut sql, name, want);
            }
        }
    }
    if sql.is_empty() {
        // Adopting values above changed no value: the server keeps matching these until one of
        // its values changes (which drops its mark).
        server.mark = client.mark.clone();
        return None;
    }
    Some(sql)
}

/// After the pooler's SETs of a client's tracked parameters succeeded on a server: each value the
/// server now holds that differs from the client's is that value's canonical spelling (`ISO` is
/// `ISO, MDY` once set); it becomes the client's, so that the next server is compared with what
/// PostgreSQL reports and not set again (PgBouncer's varcache_set_canonical). Returns the changes
/// (name, the client's old value, the new one). A parameter the server never reported is left
/// alone.
pub fn adopt_canonical(
    tracked: &TrackedSet,
    client: &mut ParamMap,
    server: &ParamMap,
) -> Vec<(String, Arc<str>, Arc<str>)> {
    let mut changed = Vec::new();
    for name in tracked.names() {
        let (Some(want), Some(got)) = (client.get(name), server.get(name)) else {
            continue;
        };
        if want != got {
            let (old, new): (Arc<str>, Arc<str>) = (Arc::from(want), Arc::from(got));
            client.put(name, new.clone());
            changed.push((name.to_string(), old, new));
        }
    }
    changed
}

/// `SET k='v';...` for every tracked parameter the client has: what a server needs after a RESET
/// ALL, whose values are then the server's own defaults, not known here. None when the client
/// has none.
pub fn set_all_statement(tracked: &TrackedSet, client: &ParamMap) -> Option<String> {
    let mut sql = String::new();
    for ((name, want), on) in SLOTS.iter().zip(&client.fixed).zip(tracked.slots) {
        if let (true, Some(want)) = (on, want) {
            push_set(&mut sql, name, want);
        }
    }
    for name in &tracked.extra {
        if let Some(want) = client.listed_arc(name) {
            push_set(&mut sql, name, want);
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
    fn unreported_values_are_taken_out() {
        let tracked = TrackedSet::new(&[
            "IntervalStyle".to_string(),
            "search_path".to_string(),
            "lock_timeout".to_string(),
        ]);
        let mut welcome = ParamMap::new();
        welcome.set("IntervalStyle", "postgres");
        welcome.set("TimeZone", "UTC");
        let mut client = ParamMap::new();
        client.set("IntervalStyle", "iso_8601");
        client.set("search_path", "a, b");
        client.set("lock_timeout", "5s");
        client.set("TimeZone", "UTC");
        let taken = client.take_unreported(&tracked, &welcome);
        assert_eq!(
            taken,
            [
                ("search_path".to_string(), "a, b".to_string()),
                ("lock_timeout".to_string(), "5s".to_string())
            ]
        );
        assert_eq!(client.get("search_path"), None);
        assert_eq!(client.get("lock_timeout"), None);
        assert_eq!(client.get("IntervalStyle"), Some("iso_8601"));
        // A reported one stays, to be matched at hand-out.
        welcome.set("search_path", "public");
        client.set("search_path", "a");
        assert!(client.take_unreported(&tracked, &welcome).is_empty());
    }

    #[test]
    fn the_servers_spelling_of_a_value_set_for_a_client_becomes_the_clients() {
        let tracked = TrackedSet::new(&[]);
        let mut client = ParamMap::new();
        client.set("DateStyle", "ISO");
        client.set("TimeZone", "UTC");
        client.set("IntervalStyle", "postgres");
        let mut server = ParamMap::new();
        server.set("DateStyle", "ISO, MDY");
        server.set("TimeZone", "UTC");
        let changed = adopt_canonical(&tracked, &mut client, &server);
        assert_eq!(changed.len(), 1);
        assert_eq!(
            (changed[0].0.as_str(), &*changed[0].1, &*changed[0].2),
            ("DateStyle", "ISO", "ISO, MDY")
        );
        assert_eq!(client.get("DateStyle"), Some("ISO, MDY"));
        // Not reported by the server: left as the client has it.
        assert_eq!(client.get("IntervalStyle"), Some("postgres"));
        assert_eq!(set_statement(&tracked, &client, &mut server), None);
    }

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
        let sql = set_statement(&tracked, &client, &mut server).unwrap();
        assert_eq!(
            sql,
            "SET application_name='it''s me';SET IntervalStyle='iso_8601';"
        );
        server.set("application_name", "it's me");
        server.set("intervalstyle", "iso_8601");
        assert_eq!(set_statement(&tracked, &client, &mut server), None);
        // The matched values are now the client's copies: the next match compares pointers.
        for name in ["application_name", "IntervalStyle"] {
            assert!(Arc::ptr_eq(
                client.value(name).unwrap(),
                server.value(name).unwrap()
            ));
        }
    }

    #[test]
    fn after_a_reset_every_tracked_value_is_set() {
        let tracked = TrackedSet::new(&["search_path".to_string()]);
        let mut client = ParamMap::new();
        client.set("TimeZone", "UTC");
        client.set("search_path", "a, b");
        client.set("work_mem", "1GB"); // not tracked
        client.set("IntervalStyle", "iso_8601"); // not tracked here
        assert_eq!(
            set_all_statement(&tracked, &client).unwrap(),
            "SET TimeZone='UTC';SET search_path='a, b';"
        );
        assert_eq!(set_all_statement(&tracked, &ParamMap::new()), None);
    }

    #[test]
    fn application_name_has_its_slot() {
        let mut m = ParamMap::new();
        m.set("application_name", "app");
        assert_eq!(SLOTS[APPLICATION_NAME_SLOT], "application_name");
        assert_eq!(m.application_name().map(|a| &**a), Some("app"));
    }

    #[test]
    fn shared_values_replace_equal_ones_only() {
        let mut m = ParamMap::new();
        m.set("TimeZone", "UTC");
        m.set("search_path", "x");
        let utc: Arc<str> = Arc::from("UTC");
        let other: Arc<str> = Arc::from("y");
        let shared = [utc.clone(), other];
        m.share_values_with(|v| shared.iter().find(|s| same_value(s, v)).cloned());
        assert!(Arc::ptr_eq(m.value("timezone").unwrap(), &utc));
        assert_eq!(m.get("search_path"), Some("x"));
        assert!(!m.set_shared("TimeZone", &utc), "same value: no change");
        assert!(m.set_shared("search_path", &utc));
        assert_eq!(m.get("SEARCH_PATH"), Some("UTC"));
    }

    #[test]
    fn untracked_names_are_ignored() {
        let tracked = TrackedSet::new(&[]);
        let mut client = ParamMap::new();
        client.set("search_path", "x");
        assert_eq!(set_statement(&tracked, &client, &mut ParamMap::new()), None);
        // IntervalStyle has a fixed slot but is matched only when tracked.
        let mut client = ParamMap::new();
        client.set("IntervalStyle", "iso_8601");
        let mut server = ParamMap::new();
        server.set("intervalstyle", "postgres");
        assert_eq!(set_statement(&tracked, &client, &mut server), None);
        let tracked = TrackedSet::new(&["INTERVALSTYLE".to_string()]);
        assert_eq!(
            set_statement(&tracked, &client, &mut server).as_deref(),
            Some("SET IntervalStyle='iso_8601';")
        );
        let mut filled = ParamMap::new();
        filled.fill_tracked_from(&TrackedSet::new(&[]), &server);
        assert_eq!(filled.get("IntervalStyle"), None, "not tracked: not filled");
        filled.fill_tracked_from(&tracked, &server);
        assert_eq!(filled.get("IntervalStyle"), Some("postgres"));
        assert_eq!(tracked.canonical("datestyle"), Some("DateStyle"));
    }
}
