//! One client's session state in transaction/statement mode: parameters it changed (committed
//! with their transaction, replayed on the next server), and what pins it to its server.
//! Pure: the relay feeds it the SQL it forwards and the server's verdicts.

use super::classify::{classify_with, might_matter_to_tracker_with, LexOptions};
use super::kind::{DiscardTarget, SetName, StatementKind};
use super::policy::{self, Action, Feature};

/// A parameter change waiting for its transaction to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Set {
        key: String,
        replay: String,
    },
    Reset {
        key: String,
    },
    ResetAll,
    /// DISCARD ALL: parameters, role and session authorization back to the defaults.
    DiscardAll,
    /// SAVEPOINT (its normalized name): a ROLLBACK TO it drops the changes after it.
    Savepoint(String),
}

/// What the client did that the relay must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward as usual.
    Forward,
    /// Refuse the query: pinning for this feature is not allowed.
    Refuse(Feature),
}

#[derive(Debug, Default)]
pub struct SessionTracker {
    /// Committed parameter changes, one per key, in order of change.
    tracked: Vec<(String, String)>,
    /// Changes not yet committed, in the order seen, each with the index of the request it came
    /// in (within the relay: `observe_in`); pipelined requests are answered in that order.
    pending: Vec<(u64, Change)>,
    /// The request index `observe_in` was given last.
    block: u64,
    /// What keeps the client on its server, if anything.
    pinned: Option<Feature>,
    /// A statement that may have released the pin ran: check the server once idle.
    release_check: bool,
    /// The client changed session parameters while linked (the server now carries them).
    touched: bool,
    /// Counts the transactions that committed parameter changes: a server records the version
    /// it carries (`ServerConn::gucs_version`), so a server that carried an older one of this
    /// client's versions is brought up to date when the client comes back to it.
    version: u64,
    failed: bool,
    rolled_back: bool,
}

fn key_of(name: &SetName<'_>) -> Option<String> {
    match name {
        SetName::Param(p) => Some(p.to_string()),
        SetName::Role => Some("role".into()),
        SetName::SessionAuthorization => Some("session_authorization".into()),
        SetName::SessionCharacteristics => Some("default_transaction_characteristics".into()),
        _ => None,
    }
}

impl SessionTracker {
    /// Look at SQL about to be forwarded (a simple Query, or a Parse's text). `may_pin` says whether
    /// the policy allows pinning. A refusal leaves the tracker unchanged.
    pub fn observe(&mut self, sql: &[u8], opts: LexOptions, may_pin: bool) -> Verdict {
        self.observe_in(sql, opts, may_pin, 0)
    }

    /// `observe`, for SQL that goes in the relay's request number `block` (counted from 0 in each
    /// relay, in the order the requests go out: the ReadyForQuery that ends request n is the
    /// n+1-th): its changes commit or roll back with that request's transaction, not with one
    /// pipelined ahead of it (`on_ready_through`).
    pub fn observe_in(
        &mut self,
        sql: &[u8],
        opts: LexOptions,
        may_pin: bool,
        block: u64,
    ) -> Verdict {
        if !might_matter_to_tracker_with(sql, opts) {
            return Verdict::Forward;
        }
        self.block = block;
        let stmts: Vec<_> = classify_with(sql, opts).collect();
        for s in &stmts {
            if let Action::Refuse(f) = policy::action(&s.kind, |_| may_pin) {
                return Verdict::Refuse(f);
            }
        }
        for s in &stmts {
            match &s.kind {
                StatementKind::Savepoint { name } => {
                    self.push(Change::Savepoint(name.normalized().into_owned()));
                    continue;
                }
                StatementKind::RollbackToSavepoint { name } => {
                    // Back to the savepoint, which stays (unknown: PostgreSQL refuses it).
                    if let Some(at) = self.savepoint(&name.normalized()) {
                        self.pending.truncate(at + 1);
                    }
                    continue;
                }
                StatementKind::ReleaseSavepoint { name } => {
                    // The savepoint and those after it go; their changes stay.
                    if let Some(at) = self.savepoint(&name.normalized()) {
                        let changes: Vec<(u64, Change)> = self
                            .pending
                            .drain(at..)
                            .filter(|(_, c)| !matches!(c, Change::Savepoint(_)))
                            .collect();
                        self.pending.extend(changes);
                    }
                    continue;
                }
                _ => {}
            }
            match policy::action(&s.kind, |_| true) {
                Action::Track => {
                    self.touched = true;
                    match &s.kind {
                        StatementKind::ResetAll => self.push(Change::ResetAll),
                        StatementKind::Reset { name } => {
                            if let Some(key) = key_of(name) {
                                self.push(Change::Reset { key });
                            }
                        }
                        StatementKind::Set { name, .. } => match (key_of(name), s.replay_sql()) {
                            (Some(key), Some(replay)) => self.push(Change::Set { key, replay }),
                            // Cannot be replayed from its text: keep the client on this server.
                            _ => self.pin(Feature::DynamicSet),
                        },
                        _ => {}
                    }
                }
                Action::Pin(f) => self.pin(f),
                Action::Release => {
                    self.release_check = true;
                    if matches!(s.kind, StatementKind::Discard(DiscardTarget::All)) {
                        self.touched = true;
                        self.push(Change::DiscardAll);
                    }
                }
                Action::Forward | Action::Refuse(_) => {}
            }
        }
        Verdict::Forward
    }

    fn pin(&mut self, f: Feature) {
        // LOAD and unreplayable parameters cannot be seen by the check query: they stay pinned
        // until the client leaves. Other state is checked once the statement has run (a
        // pg_try_advisory_lock that failed, a LISTEN already undone...).
        if !self.pinned.is_some_and(sticky) {
            self.pinned = Some(f);
        }
        if !sticky(f) {
            self.release_check = true;
        }
    }

    fn push(&mut self, change: Change) {
        self.pending.push((self.block, change));
    }

    /// Where the latest savepoint named `name` is in `pending`.
    fn savepoint(&self, name: &str) -> Option<usize> {
        self.pending
            .iter()
            .rposition(|(_, c)| matches!(c, Change::Savepoint(n) if n == name))
    }

    /// A relay begins (its request numbers start again from 0). Nothing is pending when the last
    /// relay ended with its transaction or was lost (`on_lost`); a request that a standby refused
    /// before it ran (read routing) may have left its changes: it is sent again, and seen again.
    pub fn relay_started(&mut self) {
        self.pending.clear();
        self.block = 0;
    }

    /// The server was lost: whatever was pending did not commit (or cannot be known to have).
    pub fn on_lost(&mut self) {
        self.pending.clear();
        self.failed = false;
        self.rolled_back = false;
    }

    /// The server reported an error: the current transaction's changes will not commit, unless
    /// a ROLLBACK TO SAVEPOINT rescues it (its COMMIT then says COMMIT).
    pub fn on_error(&mut self) {
        self.failed = true;
    }

    /// CommandComplete tag (without the NUL). The last transaction-ending tag decides: ROLLBACK
    /// (also ROLLBACK TO SAVEPOINT's, and a COMMIT's of a failed transaction) drops the
    /// transaction's changes, a COMMIT after it (the transaction went on) keeps them.
    pub fn on_command_complete(&mut self, tag: &[u8]) {
        if tag == b"ROLLBACK" {
            self.rolled_back = true;
        } else if tag == b"COMMIT" || tag == b"PREPARE TRANSACTION" {
            self.rolled_back = false;
            self.failed = false;
        }
    }

    /// ReadyForQuery: when the transaction is over, commit or drop the pending changes (all of
    /// them: `on_ready_through` for a relay's pipelined requests).
    pub fn on_ready(&mut self, idle: bool) {
        self.on_ready_through(idle, u64::MAX);
    }

    /// ReadyForQuery ending the relay's first `answered` requests: when the transaction is over,
    /// commit or drop the changes those requests made. Changes of requests pipelined behind
    /// them wait for their own transaction's end.
    pub fn on_ready_through(&mut self, idle: bool, answered: u64) {
        if !idle {
            return;
        }
        let commit = !self.failed && !self.rolled_back;
        self.failed = false;
        self.rolled_back = false;
        let ended = self
            .pending
            .iter()
            .position(|(block, _)| *block >= answered)
            .unwrap_or(self.pending.len());
        if ended == 0 {
            return;
        }
        let changes: Vec<(u64, Change)> = self.pending.drain(..ended).collect();
        if !commit {
            return;
        }
        if changes
            .iter()
            .any(|(_, c)| !matches!(c, Change::Savepoint(_)))
        {
            self.version = self.version.wrapping_add(1);
        }
        for (_, c) in changes {
            match c {
                Change::Set { key, replay } => {
                    self.tracked.retain(|(k, _)| *k != key);
                    self.tracked.push((key, replay));
                }
                Change::Reset { key } => self.tracked.retain(|(k, _)| *k != key),
                Change::ResetAll => self
                    .tracked
                    .retain(|(k, _)| k == "role" || k == "session_authorization"),
                Change::DiscardAll => self.tracked.clear(),
                Change::Savepoint(_) => {}
            }
        }
    }

    /// Statements that recreate this client's parameters on another server, or None.
    /// A tracker carrying committed changes another process recorded (`tracked_sets`).
    pub fn restored(tracked: Vec<(String, String)>) -> Self {
        SessionTracker {
            tracked,
            ..Default::default()
        }
    }

    /// A new client's tracker holding startup values (lower-case name, value) that are replayed
    /// as if the client had SET them (`ParamMap::take_unreported`).
    pub fn with_startup_values(values: Vec<(String, String)>) -> Self {
        let tracked = values
            .into_iter()
            .map(|(name, value)| {
                // E'' reads the same whatever standard_conforming_strings the server has.
                let replay = format!(
                    "SELECT pg_catalog.set_config('{}', E'{}', false)",
                    name.replace('\'', "''"),
                    value.replace('\\', "\\\\").replace('\'', "''")
                );
                (name, replay)
            })
            .collect();
        SessionTracker::restored(tracked)
    }

    /// The committed changes, one per key: (key, statement that replays it).
    pub fn tracked_sets(&self) -> &[(String, String)] {
        &self.tracked
    }

    pub fn replay_sql(&self) -> Option<String> {
        if self.tracked.is_empty() {
            return None;
        }
        let mut sql = String::new();
        for (_, replay) in &self.tracked {
            sql.push_str(replay);
            sql.push(';');
        }
        Some(sql)
    }

    pub fn pinned(&self) -> Option<Feature> {
        self.pinned
    }

    /// Take the "check whether the pin is gone" request.
    pub fn take_release_check(&mut self) -> bool {
        std::mem::take(&mut self.release_check) && self.pinned.is_some_and(|f| !sticky(f))
    }

    pub fn unpin(&mut self) {
        if !self.pinned.is_some_and(sticky) {
            self.pinned = None;
        }
    }

    /// Did the client change session parameters on the server it is linked to? Resets the flag.
    pub fn take_touched(&mut self) -> bool {
        std::mem::take(&mut self.touched)
    }

    pub fn has_tracked(&self) -> bool {
        !self.tracked.is_empty()
    }

    /// Which committed state of the parameters this is (see `version`).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The replay changes who the client is (SET ROLE, SET SESSION AUTHORIZATION): a change that
    /// may stop being allowed (a membership revoked), so it must not run where a failure would
    /// leave the request behind it running under the login role.
    pub fn replays_identity(&self) -> bool {
        self.tracked
            .iter()
            .any(|(k, _)| k == "role" || k == "session_authorization")
    }
}

/// Pins the check query cannot see through: they last as long as the client.
fn sticky(f: Feature) -> bool {
    matches!(f, Feature::LoadModule | Feature::DynamicSet)
}

/// Run on a server whose pin may be gone: 0 means nothing session-bound is left.
pub const PIN_CHECK_SQL: &str = "SELECT (SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()) + (SELECT count(*) FROM pg_catalog.pg_listening_channels()) + (SELECT count(*) FROM pg_catalog.pg_cursors WHERE is_holdable) + (SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE from_sql) + (SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema())";

/// Cleans a server a pinned client leaves behind, one statement at a time (DISCARD ALL cannot run
/// inside the implicit transaction of a multi-statement query).
pub const CLEANUP_SQL: &[&str] = &[
    "SELECT pg_catalog.pg_advisory_unlock_all()",
    "UNLISTEN *",
    "DISCARD ALL",
];

/// Puts back a server another client changed parameters on.
pub const RESET_SQL: &str = "SET SESSION AUTHORIZATION DEFAULT; RESET ALL";

#[cfg(test)]
mod tests {
    use super::*;

    fn observe(t: &mut SessionTracker, sql: &str) -> Verdict {
        t.observe(sql.as_bytes(), LexOptions::default(), true)
    }

    #[test]
    fn startup_values_replay_until_the_client_sets_its_own() {
        let mut t =
            SessionTracker::with_startup_values(vec![("search_path".into(), r"it's a\b".into())]);
        assert_eq!(
            t.replay_sql().as_deref(),
            Some(r"SELECT pg_catalog.set_config('search_path', E'it''s a\\b', false);")
        );
        observe(&mut t, "SET search_path TO app");
        t.on_ready(true);
        assert_eq!(t.replay_sql().as_deref(), Some("SET search_path TO app;"));
    }

    #[test]
    fn sets_commit_with_their_transaction() {
        let mut t = SessionTracker::default();
        observe(&mut t, "SET search_path TO app, public");
        t.on_ready(true);
        assert_eq!(
            t.replay_sql().as_deref(),
            Some("SET search_path TO app, public;")
        );
        observe(&mut t, "SET work_mem = '8MB'; SELECT 1/0");
        t.on_error();
        t.on_ready(true);
        assert_eq!(
            t.replay_sql().as_deref(),
            Some("SET search_path TO app, public;"),
            "failed implicit transaction"
        );
        observe(&mut t, "BEGIN");
        observe(&mut t, "SET work_mem = '8MB'");
        t.on_ready(false);
        t.on_command_complete(b"ROLLBACK");
        t.on_ready(true);
        assert!(!t.replay_sql().unwrap().contains("work_mem"), "rolled back");
        observe(&mut t, "SET search_path = x");
        t.on_ready(true);
        assert_eq!(
            t.replay_sql().as_deref(),
            Some("SET search_path = x;"),
            "one entry per key"
        );
    }

    #[test]
    fn reset_and_discard_drop_entries() {
        let mut t = SessionTracker::default();
        observe(&mut t, "SET a.b = 1; SET ROLE r; SET c.d = 2");
        t.on_ready(true);
        observe(&mut t, "RESET a.b");
        t.on_ready(true);
        assert_eq!(t.replay_sql().as_deref(), Some("SET ROLE r;SET c.d = 2;"));
        observe(&mut t, "RESET ALL");
        t.on_ready(true);
        assert_eq!(
            t.replay_sql().as_deref(),
            Some("SET ROLE r;"),
            "RESET ALL keeps the role"
        );
        observe(&mut t, "DISCARD ALL");
        t.on_ready(true);
        assert_eq!(t.replay_sql(), None);
        assert!(t.take_touched());
    }

    #[test]
    fn local_sets_are_not_tracked() {
        let mut t = SessionTracker::default();
        observe(&mut t, "SET LOCAL work_mem = '1MB'");
        t.on_ready(true);
        assert_eq!(t.replay_sql(), None);
        assert!(!t.take_touched());
    }

    #[test]
    fn pins_and_release_checks() {
        let mut t = SessionTracker::default();
        assert_eq!(
            observe(&mut t, "SELECT pg_advisory_lock(1)"),
            Verdict::Forward
        );
        assert_eq!(t.pinned(), Some(Feature::AdvisoryLock));
        assert!(
            t.take_release_check(),
            "checked once the lock call ran (it may have failed)"
        );
        assert!(!t.take_release_check());
        observe(&mut t, "SELECT pg_advisory_unlock(1)");
        assert!(t.take_release_check());
        assert!(!t.take_release_check(), "taken once");
        t.unpin();
        assert_eq!(t.pinned(), None);
        observe(&mut t, "CREATE TEMP TABLE t (a int)");
        assert!(t.take_release_check());
        observe(&mut t, "DROP TABLE t");
        assert!(
            t.take_release_check(),
            "a DROP may remove the last temp object"
        );
        t.unpin();
        observe(&mut t, "LOAD 'auto_explain'");
        t.unpin();
        assert_eq!(t.pinned(), Some(Feature::LoadModule), "LOAD stays");
    }

    #[test]
    fn each_committed_change_is_a_new_version() {
        let mut t = SessionTracker::default();
        let v0 = t.version();
        observe(&mut t, "SELECT 1");
        t.on_ready(true);
        assert_eq!(t.version(), v0, "nothing changed");
        observe(&mut t, "SET work_mem = '5MB'");
        t.on_ready(true);
        let v1 = t.version();
        assert_ne!(v1, v0);
        observe(&mut t, "SET work_mem = '6MB'");
        t.on_error();
        t.on_ready(true);
        assert_eq!(t.version(), v1, "a failed transaction's SET never happened");
        observe(&mut t, "SET work_mem = '6MB'");
        t.on_ready(true);
        assert_ne!(t.version(), v1, "the same key again: another version");
    }

    fn keys(t: &SessionTracker) -> Vec<&str> {
        t.tracked_sets().iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn savepoints_keep_and_drop_what_postgresql_does() {
        let mut t = SessionTracker::default();
        observe(&mut t, "BEGIN; SET a = 1; SAVEPOINT s1; SET b = 2");
        observe(
            &mut t,
            "SAVEPOINT \"S2\"; SET c = 3; ROLLBACK TO \"S2\"; SET d = 4",
        );
        observe(
            &mut t,
            "RELEASE s1; SAVEPOINT s3; SET e = 5; ROLLBACK TO SAVEPOINT s3",
        );
        // The savepoint stays after a rollback to it; an unknown one changes nothing.
        observe(&mut t, "SET f = 6; ROLLBACK TO s3; ROLLBACK TO nosuch");
        t.on_command_complete(b"ROLLBACK"); // ROLLBACK TO's tag
        t.on_command_complete(b"COMMIT");
        t.on_ready(true);
        assert_eq!(keys(&t), ["a", "b", "d"]);
    }

    #[test]
    fn a_transaction_rescued_by_rollback_to_commits() {
        let mut t = SessionTracker::default();
        observe(&mut t, "BEGIN; SET a = 1; SAVEPOINT s; SET b = 2");
        t.on_error();
        t.on_ready(false);
        observe(&mut t, "ROLLBACK TO s; COMMIT");
        t.on_command_complete(b"ROLLBACK");
        t.on_command_complete(b"COMMIT");
        t.on_ready(true);
        assert_eq!(keys(&t), ["a"]);
        // Not rescued: COMMIT of a failed transaction answers ROLLBACK.
        observe(&mut t, "BEGIN; SET c = 3");
        t.on_error();
        observe(&mut t, "COMMIT");
        t.on_command_complete(b"ROLLBACK");
        t.on_ready(true);
        assert_eq!(keys(&t), ["a"]);
    }

    #[test]
    fn pipelined_requests_commit_with_their_own_transaction() {
        let opts = LexOptions::default();
        let mut t = SessionTracker::default();
        // Request 0 fails, request 1 sets: seen together, answered one after the other.
        t.observe_in(b"SELECT 1/0", opts, true, 0);
        t.observe_in(b"SET a = 1", opts, true, 1);
        t.on_error();
        t.on_ready_through(true, 1);
        assert!(keys(&t).is_empty(), "not yet: request 1 is still running");
        t.on_ready_through(true, 2);
        assert_eq!(keys(&t), ["a"], "request 1's own transaction committed");
        // Request 0 sets, request 1's SET fails: only the first is kept.
        t.observe_in(b"SET b = 2", opts, true, 0);
        t.observe_in(b"SET c = 'bad'", opts, true, 1);
        t.on_ready_through(true, 1);
        assert_eq!(keys(&t), ["a", "b"]);
        t.on_error();
        t.on_ready_through(true, 2);
        assert_eq!(keys(&t), ["a", "b"]);
        // A lost server drops whatever was pending.
        t.observe_in(b"SET d = 4", opts, true, 0);
        t.on_lost();
        t.on_ready_through(true, 1);
        assert_eq!(keys(&t), ["a", "b"]);
    }

    #[test]
    fn refusal_changes_nothing() {
        let mut t = SessionTracker::default();
        let v = t.observe(b"SET x.y = 1; LISTEN jobs", LexOptions::default(), false);
        assert_eq!(v, Verdict::Refuse(Feature::Listen));
        t.on_ready(true);
        assert_eq!(t.replay_sql(), None);
        assert_eq!(t.pinned(), None);
    }

    #[test]
    fn dynamic_set_config_pins() {
        let mut t = SessionTracker::default();
        observe(&mut t, "SELECT set_config('app.tenant', $1, false)");
        assert_eq!(t.pinned(), Some(Feature::DynamicSet));
        observe(&mut t, "LISTEN x; UNLISTEN x");
        assert!(
            !t.take_release_check(),
            "the check query cannot see a dynamic SET"
        );
        t.unpin();
        assert_eq!(t.pinned(), Some(Feature::DynamicSet));
    }
}
