//! What a classified statement is: the kinds of session state it creates, changes or clears,
//! with names borrowed from the query text (no allocation unless a name needs folding).

use std::borrow::Cow;
use std::fmt;

/// A (possibly schema-qualified) name exactly as written in the query, quotes included.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ident<'a>(pub(crate) &'a [u8]);

impl<'a> Ident<'a> {
    pub fn raw(&self) -> &'a [u8] {
        self.0
    }

    /// The name as the server resolves it: unquoted parts fold to ASCII lower case, quoted parts
    /// lose their quotes (`""` becomes `"`). `U&"..."` escapes are not decoded. Borrowed unless
    /// something had to change.
    pub fn normalized(&self) -> Cow<'a, str> {
        let raw = self.0;
        if !raw.iter().any(|b| *b == b'"' || b.is_ascii_uppercase()) {
            return String::from_utf8_lossy(raw);
        }
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        let mut quoted = false;
        while i < raw.len() {
            let b = raw[i];
            if b == b'"' {
                if quoted && raw.get(i + 1) == Some(&b'"') {
                    out.push(b'"');
                    i += 2;
                    continue;
                }
                quoted = !quoted;
            } else if quoted {
                out.push(b);
            } else {
                out.push(b.to_ascii_lowercase());
            }
            i += 1;
        }
        Cow::Owned(String::from_utf8_lossy(&out).into_owned())
    }
}

impl fmt::Debug for Ident<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ident({:?})", String::from_utf8_lossy(self.0))
    }
}

/// A name, or `ALL` / `*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameOrAll<'a> {
    Name(Ident<'a>),
    All,
}

/// What a SET / RESET / set_config() changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetName<'a> {
    /// A run-time parameter, lower-cased (GUC names are case-insensitive) and unquoted. The
    /// special forms map to their parameter: `TIME ZONE` → `timezone`, `NAMES` →
    /// `client_encoding`, `SCHEMA` → `search_path`, `XML OPTION` → `xmloption`,
    /// `RESET TRANSACTION ISOLATION LEVEL` → `transaction_isolation`.
    Param(Cow<'a, str>),
    /// `SET ROLE`, `SET role = ...`, `set_config('role', ...)`.
    Role,
    /// `SET SESSION AUTHORIZATION`.
    SessionAuthorization,
    /// `SET TRANSACTION ...`: the current transaction only.
    Transaction,
    /// `SET SESSION CHARACTERISTICS AS TRANSACTION ...`: the default_transaction_* parameters.
    SessionCharacteristics,
    /// `SET CONSTRAINTS ...`: the current transaction only.
    Constraints,
    /// `set_config()` whose name is not a literal (a parameter, an expression).
    Unknown,
}

impl<'a> SetName<'a> {
    /// From a parameter name as written (identifier or string contents).
    pub(crate) fn param(name: Cow<'a, str>) -> Self {
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(name.to_ascii_lowercase())
        } else {
            name
        };
        match &*name {
            "role" => SetName::Role,
            "session_authorization" => SetName::SessionAuthorization,
            _ => SetName::Param(name),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscardTarget {
    All,
    Plans,
    Sequences,
    /// `DISCARD TEMP` / `DISCARD TEMPORARY`.
    Temp,
}

/// The kind of one statement, or of one session-affecting call inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatementKind<'a> {
    /// Nothing the pooler needs to know about.
    Plain,
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END` (with `AND CHAIN` a new transaction starts at once).
    Commit {
        chain: bool,
    },
    /// `ROLLBACK`, `ABORT`.
    Rollback {
        chain: bool,
    },
    Savepoint {
        name: Ident<'a>,
    },
    /// `RELEASE [SAVEPOINT] name`.
    ReleaseSavepoint {
        name: Ident<'a>,
    },
    /// `ROLLBACK [WORK|TRANSACTION] TO [SAVEPOINT] name`: the transaction goes on.
    RollbackToSavepoint {
        name: Ident<'a>,
    },
    /// `PREPARE TRANSACTION 'gid'`: ends the transaction block (it survives the session).
    PrepareTransaction,
    /// `COMMIT PREPARED 'gid'`: not in a transaction block, ends nothing of this session.
    CommitPrepared,
    /// `ROLLBACK PREPARED 'gid'`: likewise.
    RollbackPrepared,
    /// `SET`, `SET SESSION`, `SET LOCAL`, and `set_config(name, value, is_local)`.
    /// `value_text` is the source text of the value (`'UTC'`, `a, "B"`, `DEFAULT`, a literal
    /// argument of set_config; empty when absent). `local` is true for SET LOCAL,
    /// set_config(..., true), SET TRANSACTION and SET CONSTRAINTS.
    Set {
        name: SetName<'a>,
        value_text: &'a [u8],
        local: bool,
    },
    Reset {
        name: SetName<'a>,
    },
    ResetAll,
    Discard(DiscardTarget),
    /// pg_advisory_lock, pg_try_advisory_lock and their _shared variants (`session`), or the
    /// `_xact_` ones (released at transaction end: `session == false`).
    AdvisoryLock {
        session: bool,
    },
    /// pg_advisory_unlock[_shared] (`all == false`), pg_advisory_unlock_all.
    AdvisoryUnlock {
        all: bool,
    },
    Listen {
        channel: Ident<'a>,
    },
    /// `UNLISTEN name` or `UNLISTEN *`.
    Unlisten {
        channel: NameOrAll<'a>,
    },
    /// CREATE [GLOBAL|LOCAL] TEMP|TEMPORARY TABLE/VIEW/SEQUENCE, SELECT ... INTO TEMP, or a
    /// CREATE naming the `pg_temp` schema. `ON COMMIT DROP` tables die with their transaction.
    CreateTemp {
        on_commit_drop: bool,
    },
    /// Cursors without `WITH HOLD` die with their transaction.
    DeclareCursor {
        name: Ident<'a>,
        with_hold: bool,
    },
    CloseCursor {
        name: NameOrAll<'a>,
    },
    /// SQL-level `PREPARE name [(types)] AS body`; `body` runs at EXECUTE, so classify it then.
    Prepare {
        name: Ident<'a>,
        body: &'a [u8],
    },
    Execute {
        name: Ident<'a>,
    },
    /// `DEALLOCATE [PREPARE] name | ALL`.
    Deallocate {
        name: NameOrAll<'a>,
    },
    /// `LOAD 'library'`: cannot be undone short of closing the server connection.
    LoadModule {
        file: &'a [u8],
    },
    /// `DROP ...` of any object: it may be a pinned client's last temporary one (the text does
    /// not say whether a table is temporary), so its pin is checked again after it.
    Drop,
    /// A `currval()` or `lastval()` call: it reads the value the session's last `nextval()` left,
    /// which on a pooled server may be another client's (`SessionTracker`'s `Verdict::SequenceRead`).
    SequenceRead,
}

impl StatementKind<'_> {
    /// Creates, changes or clears state that outlives the current transaction.
    pub fn affects_session(&self) -> bool {
        use StatementKind::*;
        match self {
            Set { local, .. } => !local,
            AdvisoryLock { session } => *session,
            CreateTemp { on_commit_drop } => !on_commit_drop,
            DeclareCursor { with_hold, .. } => *with_hold,
            Reset { .. } | ResetAll | Discard(_) | AdvisoryUnlock { .. } | Listen { .. } => true,
            Unlisten { .. } | CloseCursor { .. } | Prepare { .. } | Deallocate { .. } => true,
            LoadModule { .. } | Drop => true,
            // Reads state, changes none (the tracker still sees it: `reads_sequence_state`).
            Plain | Execute { .. } | SequenceRead => false,
            Begin
            | Commit { .. }
            | Rollback { .. }
            | Savepoint { .. }
            | ReleaseSavepoint { .. } => false,
            RollbackToSavepoint { .. } | PrepareTransaction | CommitPrepared => false,
            RollbackPrepared => false,
        }
    }

    /// Reads the session's sequence values (`currval()`, `lastval()`).
    pub fn reads_sequence_state(&self) -> bool {
        matches!(self, StatementKind::SequenceRead)
    }

    /// SAVEPOINT, RELEASE SAVEPOINT, ROLLBACK TO SAVEPOINT.
    pub fn is_savepoint_control(&self) -> bool {
        use StatementKind::*;
        matches!(
            self,
            Savepoint { .. } | ReleaseSavepoint { .. } | RollbackToSavepoint { .. }
        )
    }

    /// Starts, ends or moves within a transaction block.
    pub fn is_transaction_control(&self) -> bool {
        use StatementKind::*;
        matches!(
            self,
            Begin
                | Commit { .. }
                | Rollback { .. }
                | Savepoint { .. }
                | ReleaseSavepoint { .. }
                | RollbackToSavepoint { .. }
                | PrepareTransaction
                | CommitPrepared
                | RollbackPrepared
        )
    }
}

/// One classified statement (or one session-affecting call in it: a statement with several
/// yields one item per call, all with the same `index`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement<'a> {
    /// Position of the statement in a multi-statement query, from 0 (empty ones not counted).
    pub index: usize,
    /// The statement from its first token to the end of its last one, without the semicolon.
    pub text: &'a [u8],
    pub kind: StatementKind<'a>,
}
