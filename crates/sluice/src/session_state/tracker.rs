//! One client's session state in transaction/statement mode: parameters it changed (committed
//! with their transaction, replayed on the next server), and what pins it to its server.
//! Pure: the relay feeds it the SQL it forwards and the server's verdicts.

use sluice_protocol::{decode_parse, BindParams};

use super::bound::{bound_set_configs, set_config_replay, BoundChange, BoundSets};
use super::classify::{
    classify_full, might_matter_to_tracker_with, transaction_ending_with, LexOptions,
};
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
    /// A SAVEPOINT that ran (its normalized name): a ROLLBACK TO it drops the changes after it.
    Savepoint(String),
    /// A statement that acts on the changes before it once its CommandComplete says it ran.
    Awaiting(Control),
}

/// Transaction control whose effect on pending changes waits for its CommandComplete. Tags come
/// in statement order, and PostgreSQL skips the rest of a request after an error, so a control
/// statement that gets no tag before its request's ReadyForQuery never ran.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Control {
    Savepoint(String),
    Release(String),
    RollbackTo(String),
    /// COMMIT, END, COMMIT AND CHAIN: commits the changes before it (tag COMMIT), or drops them
    /// (tag ROLLBACK: the transaction had failed).
    Commit,
    /// ROLLBACK, ABORT, ROLLBACK AND CHAIN.
    Rollback,
    /// PREPARE TRANSACTION keeps the session's parameters as a COMMIT does.
    Prepare,
}

impl Control {
    /// The CommandComplete tags this statement answers with.
    fn answers(&self, tag: &[u8]) -> bool {
        match self {
            Control::Savepoint(_) => tag == b"SAVEPOINT",
            Control::Release(_) => tag == b"RELEASE",
            Control::RollbackTo(_) | Control::Rollback => tag == b"ROLLBACK",
            Control::Commit => tag == b"COMMIT" || tag == b"ROLLBACK",
            Control::Prepare => tag == b"PREPARE TRANSACTION" || tag == b"ROLLBACK",
        }
    }
}

/// What the client did that the relay must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward as usual.
    Forward,
    /// Refuse the query: pinning for this feature is not allowed.
    Refuse(Feature),
    /// Forward; the text reads the session's sequence values (`currval()`, `lastval()`). On a
    /// server that another client used since this one's last transaction, those values are not
    /// the client's: the relay has them discarded first when it still can (`requests_pushed_back`).
    SequenceRead,
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
    /// The unnamed statement, when its Parse was nothing but bound set_config calls: read at each
    /// Bind to it (`bind_unnamed`), with the Parse's parameter types.
    unnamed: Option<Box<(BoundSets, Vec<u32>)>>,
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
    #[inline]
    pub fn observe_in(
        &mut self,
        sql: &[u8],
        opts: LexOptions,
        may_pin: bool,
        block: u64,
    ) -> Verdict {
        if !self.matters(sql, opts) {
            return Verdict::Forward;
        }
        self.observe_read(sql, opts, may_pin, block)
    }

    /// Whether `sql` can change what the tracker holds.
    #[inline]
    fn matters(&self, sql: &[u8], opts: LexOptions) -> bool {
        // With changes pending, a COMMIT or ROLLBACK settles them where it runs (it may not end
        // the request: COMMIT AND CHAIN, several transactions in one query string).
        might_matter_to_tracker_with(sql, opts)
            || (!self.pending.is_empty() && transaction_ending_with(sql, opts).ends)
    }

    /// `observe_in` for a simple Query (`parse` None) or a Parse of the unnamed statement (its
    /// body), which either replaces. A Parse of nothing but `set_config()` calls with bind
    /// parameters waits for its Binds (`bind_unnamed`), which carry the values, instead of
    /// pinning the client.
    #[inline]
    pub fn observe_unnamed(
        &mut self,
        sql: &[u8],
        opts: LexOptions,
        may_pin: bool,
        block: u64,
        parse: Option<&[u8]>,
    ) -> Verdict {
        if self.unnamed.is_some() {
            self.unnamed = None;
        }
        if !self.matters(sql, opts) {
            return Verdict::Forward;
        }
        self.observe_unnamed_read(sql, opts, may_pin, block, parse)
    }

    /// `observe_unnamed` past the shortcut.
    fn observe_unnamed_read(
        &mut self,
        sql: &[u8],
        opts: LexOptions,
        may_pin: bool,
        block: u64,
        parse: Option<&[u8]>,
    ) -> Verdict {
        if let Some(body) = parse {
            if let Some(calls) = bound_set_configs(sql, opts) {
                let types = decode_parse(body).map_or_else(|_| Vec::new(), |p| p.param_types);
                self.unnamed = Some(Box::new((calls, types)));
                return Verdict::Forward;
            }
        }
        self.observe_read(sql, opts, may_pin, block)
    }

    /// The unnamed statement's Parse was bound set_config calls: its Binds are to be read.
    pub fn binds_unnamed(&self) -> bool {
        self.unnamed.is_some()
    }

    /// A Bind of the unnamed statement (None: one too large to read), in request `block`.
    pub fn bind_unnamed(&mut self, bind: Option<&BindParams<'_>>, block: u64) {
        if let Some(unnamed) = self.unnamed.take() {
            self.bound(&unnamed.0, bind, &unnamed.1, block);
            self.unnamed = Some(unnamed);
        }
    }

    /// A Bind of a named statement whose text may matter (`sql`): bound set_config calls
    /// (`calls`, read once per statement) take their values from `bind` (None: too large to
    /// read); any other text is observed as at a Parse.
    pub fn observe_bind(
        &mut self,
        sql: &[u8],
        calls: Option<&BoundSets>,
        bind: Option<&BindParams<'_>>,
        types: &[u32],
        opts: LexOptions,
        block: u64,
    ) -> Verdict {
        match calls {
            Some(calls) => {
                self.bound(calls, bind, types, block);
                Verdict::Forward
            }
            None => self.observe_in(sql, opts, true, block),
        }
    }

    /// Bound set_config calls run with these values: tracked like SETs, or the client pinned
    /// when the values cannot be read.
    fn bound(
        &mut self,
        calls: &BoundSets,
        bind: Option<&BindParams<'_>>,
        types: &[u32],
        block: u64,
    ) {
        self.block = block;
        match bind.and_then(|b| calls.resolve(b, types)) {
            Some(changes) => {
                for c in changes {
                    self.touched = true;
                    self.push(match c {
                        BoundChange::Set { key, replay } => Change::Set { key, replay },
                        BoundChange::Reset { key } => Change::Reset { key },
                    });
                }
            }
            None => self.pin(Feature::DynamicSet),
        }
    }

    /// `observe_in` past the shortcut: classify and act.
    #[inline(never)]
    fn observe_read(&mut self, sql: &[u8], opts: LexOptions, may_pin: bool, block: u64) -> Verdict {
        self.block = block;
        // Every statement named (the shortcut calls a lone COMMIT plain).
        let stmts: Vec<_> = classify_full(sql, opts).collect();
        for s in &stmts {
            if let Action::Refuse(f) = policy::action(&s.kind, |_| may_pin) {
                return Verdict::Refuse(f);
            }
        }
        for s in &stmts {
            let control = match &s.kind {
                StatementKind::Savepoint { name } => {
                    Some(Control::Savepoint(name.normalized().into_owned()))
                }
                StatementKind::RollbackToSavepoint { name } => {
                    Some(Control::RollbackTo(name.normalized().into_owned()))
                }
                StatementKind::ReleaseSavepoint { name } => {
                    Some(Control::Release(name.normalized().into_owned()))
                }
                StatementKind::Commit { .. } => Some(Control::Commit),
                StatementKind::Rollback { .. } => Some(Control::Rollback),
                StatementKind::PrepareTransaction => Some(Control::Prepare),
                _ => None,
            };
            if let Some(control) = control {
                self.push(Change::Awaiting(control));
                continue;
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
        if stmts.iter().any(|s| s.kind.reads_sequence_state()) {
            return Verdict::SequenceRead;
        }
        Verdict::Forward
    }

    /// The relay sent a query of its own ahead of every request of this relay it had read so
    /// far: each of them is answered one ReadyForQuery later than the number it was observed in.
    pub fn requests_pushed_back(&mut self) {
        for (block, _) in &mut self.pending {
            *block += 1;
        }
        self.block += 1;
    }

    fn pin(&mut self, f: Feature) {
        // LOAD and unreplayable parameters cannot be seen by the check query: they stay pinned
        // until the client leaves. Other state is checked once the statement has run (a
        // pg_try_advisory_lock that failed, a LISTEN already undone...).
        // A sticky pin is looked at once too, when it begins: the session counts pinned clients
        // (max_pinned_clients, the gauge) when the relay stops for a look.
        if !sticky(f) || self.pinned.is_none() {
            self.release_check = true;
        }
        if !self.pinned.is_some_and(sticky) {
            self.pinned = Some(f);
        }
    }

    fn push(&mut self, change: Change) {
        self.pending.push((self.block, change));
    }

    /// Where the latest savepoint named `name` that ran is in `pending[..before]`.
    fn savepoint(&self, name: &str, before: usize) -> Option<usize> {
        self.pending[..before]
            .iter()
            .rposition(|(_, c)| matches!(c, Change::Savepoint(n) if n == name))
    }

    /// Changes are waiting for their transaction's end (or a control statement for its tag).
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
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

    /// CommandComplete tag (without the NUL) of a relay's first request (`on_command_complete_in`).
    pub fn on_command_complete(&mut self, tag: &[u8]) {
        self.on_command_complete_in(tag, 0);
    }

    /// CommandComplete tag (without the NUL) answering the relay's request number `request`.
    ///
    /// The first control statement still awaiting its tag, when it is in this request and the
    /// tag is its own, acts now: a SAVEPOINT counts from here, RELEASE drops savepoints, ROLLBACK
    /// TO drops the changes after its savepoint, COMMIT (tag COMMIT) keeps the changes before it
    /// and ROLLBACK (or a failed transaction's COMMIT) drops them.
    ///
    /// A tag that no observed statement awaits (a prepared statement's, seen at its Parse) falls
    /// back to the transaction's end: the last transaction-ending tag before an idle
    /// ReadyForQuery decides whether the changes still pending commit.
    #[inline]
    pub fn on_command_complete_in(&mut self, tag: &[u8], request: u64) {
        if !self.pending.is_empty() && self.control_answered(tag, request) {
            return;
        }
        if tag == b"ROLLBACK" {
            self.rolled_back = true;
        } else if tag == b"COMMIT" || tag == b"PREPARE TRANSACTION" {
            self.rolled_back = false;
            self.failed = false;
        }
    }

    /// `on_command_complete_in` for an awaited control statement: false when `tag` is not its.
    #[inline(never)]
    fn control_answered(&mut self, tag: &[u8], request: u64) -> bool {
        let Some(at) = self
            .pending
            .iter()
            .position(|(_, c)| matches!(c, Change::Awaiting(_)))
        else {
            return false;
        };
        let (block, Change::Awaiting(control)) = &self.pending[at] else {
            return false;
        };
        if *block != request || !control.answers(tag) {
            return false;
        }
        let control = control.clone();
        match control {
            Control::Savepoint(name) => self.pending[at].1 = Change::Savepoint(name),
            Control::Release(name) => {
                self.pending.remove(at);
                // The savepoint and those after it go; their changes stay.
                if let Some(from) = self.savepoint(&name, at) {
                    let (mut i, mut end) = (from, at);
                    while i < end {
                        if matches!(self.pending[i].1, Change::Savepoint(_)) {
                            self.pending.remove(i);
                            end -= 1;
                        } else {
                            i += 1;
                        }
                    }
                }
            }
            Control::RollbackTo(name) => {
                self.pending.remove(at);
                // Back to the savepoint, which stays; the transaction works again.
                if let Some(mark) = self.savepoint(&name, at) {
                    self.pending.drain(mark + 1..at);
                }
                self.failed = false;
            }
            Control::Commit | Control::Prepare | Control::Rollback => {
                let commit = tag != b"ROLLBACK";
                let changes: Vec<(u64, Change)> = self.pending.drain(..=at).collect();
                self.settle(changes, commit);
                self.failed = false;
                self.rolled_back = false;
            }
        }
        true
    }

    /// ReadyForQuery: when the transaction is over, commit or drop the pending changes (all of
    /// them: `on_ready_through` for a relay's pipelined requests).
    pub fn on_ready(&mut self, idle: bool) {
        self.on_ready_through(idle, u64::MAX);
    }

    /// ReadyForQuery ending the relay's first `answered` requests: when the transaction is over,
    /// commit or drop the changes those requests made. Changes of requests pipelined behind
    /// them wait for their own transaction's end.
    #[inline]
    pub fn on_ready_through(&mut self, idle: bool, answered: u64) {
        if self.pending.is_empty() {
            // The common case: nothing to settle (the flags still end with the transaction).
            if idle {
                self.failed = false;
                self.rolled_back = false;
            }
            return;
        }
        self.settle_through(idle, answered);
    }

    /// `on_ready_through` with changes pending.
    #[inline(never)]
    fn settle_through(&mut self, idle: bool, answered: u64) {
        // Control statements of the requests answered that got no tag never ran.
        self.pending
            .retain(|(block, c)| *block >= answered || !matches!(c, Change::Awaiting(_)));
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
        self.settle(changes, commit);
    }

    /// The end of the transaction that made `changes`: a commit makes them the client's.
    fn settle(&mut self, changes: Vec<(u64, Change)>, commit: bool) {
        if !commit {
            return;
        }
        if changes
            .iter()
            .any(|(_, c)| !matches!(c, Change::Savepoint(_) | Change::Awaiting(_)))
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
                Change::Savepoint(_) | Change::Awaiting(_) => {}
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
                let replay = set_config_replay(&name, &value);
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

    /// Take the "look at the pin" request: it began, or may have been released. The session
    /// then counts it, and asks the server whether it is gone when it can (`pin_checkable`).
    pub fn take_release_check(&mut self) -> bool {
        std::mem::take(&mut self.release_check) && self.pinned.is_some()
    }

    /// Whether the check query can see the pin go (LOAD and unreplayable parameters last as long
    /// as the client).
    pub fn pin_checkable(&self) -> bool {
        self.pinned.is_some_and(|f| !sticky(f))
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
