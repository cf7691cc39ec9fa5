//! The default (safe) policy in transaction/statement mode: what the pooler does with each
//! statement kind, as a pure mapping the relay applies (see docs/session-state.md).

use super::classify::references_params;
use super::kind::{DiscardTarget, SetName, StatementKind};

/// SQLSTATE of the refusal when pinning a client is not allowed (feature_not_supported).
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";

/// Session state that ties a client to the server that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    AdvisoryLock,
    Listen,
    TempObject,
    HoldCursor,
    SqlPrepare,
    LoadModule,
    /// `set_config()` whose name is not a literal, or whose value is a bind parameter (`$1`),
    /// or a SET made inside a `DO` block: the statement text alone cannot be replayed on
    /// another server.
    DynamicSet,
}

impl Feature {
    pub const ALL: [Feature; 7] = [
        Feature::AdvisoryLock,
        Feature::Listen,
        Feature::TempObject,
        Feature::HoldCursor,
        Feature::SqlPrepare,
        Feature::LoadModule,
        Feature::DynamicSet,
    ];

    /// The feature as named in errors, logs and SHOW output.
    pub fn describe(self) -> &'static str {
        match self {
            Feature::AdvisoryLock => "session advisory locks",
            Feature::Listen => "LISTEN",
            Feature::TempObject => "temporary tables",
            Feature::HoldCursor => "cursors WITH HOLD",
            Feature::SqlPrepare => "SQL PREPARE",
            Feature::LoadModule => "LOAD",
            Feature::DynamicSet => "a SET or set_config() that cannot be replayed",
        }
    }
}

/// What the relay does with one classified statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// No session effect (or one that ends with the transaction): forward as is.
    Forward,
    /// A session parameter change: record it once its transaction commits, replay it on the
    /// next server the client gets.
    Track,
    /// Keep the client on this server until the state is gone.
    Pin(Feature),
    /// Pinning for this feature is disabled: fail the query with SQLSTATE 0A000.
    Refuse(Feature),
    /// Clears state (unlock, UNLISTEN, CLOSE, DEALLOCATE, DISCARD): forward, then check whether
    /// anything still pins the client (DISCARD ALL also drops the tracked parameters).
    Release,
}

/// The feature a statement pins for, if any.
pub fn pinning_feature(kind: &StatementKind<'_>) -> Option<Feature> {
    use StatementKind::*;
    match kind {
        AdvisoryLock { session: true } => Some(Feature::AdvisoryLock),
        Listen { .. } => Some(Feature::Listen),
        CreateTemp {
            on_commit_drop: false,
        } => Some(Feature::TempObject),
        DeclareCursor {
            with_hold: true, ..
        } => Some(Feature::HoldCursor),
        Prepare { .. } => Some(Feature::SqlPrepare),
        LoadModule { .. } => Some(Feature::LoadModule),
        Set {
            name,
            value_text,
            local: false,
        } if *name == SetName::Unknown || references_params(*value_text) => {
            Some(Feature::DynamicSet)
        }
        _ => None,
    }
}

/// The action for `kind`, given which features may pin a client (`may_pin`).
pub fn action(kind: &StatementKind<'_>, may_pin: impl Fn(Feature) -> bool) -> Action {
    use StatementKind::*;
    if let Some(feature) = pinning_feature(kind) {
        return if may_pin(feature) {
            Action::Pin(feature)
        } else {
            Action::Refuse(feature)
        };
    }
    match kind {
        Set { local: false, .. } | Reset { .. } | ResetAll => Action::Track,
        AdvisoryUnlock { .. } | Unlisten { .. } | CloseCursor { .. } | Deallocate { .. } | Drop => {
            Action::Release
        }
        Discard(DiscardTarget::All | DiscardTarget::Temp) => Action::Release,
        _ => Action::Forward,
    }
}
