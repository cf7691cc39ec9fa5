//! Session-state classification of SQL sent in transaction/statement mode: a cheap lexer and a
//! classifier that say which statements create, change or clear state tied to a server session.
//!
//! Pure and IO-free; see docs/session-state.md for what the pooler does with each kind.

mod bound;
mod classify;
mod do_block;
mod fast;
mod kind;
pub mod lexer;
pub mod policy;
mod scan;
pub mod tracker;

pub use bound::{bound_set_configs, set_config_replay, BoundChange, BoundSets};
pub use classify::{
    classify, classify_full, classify_with, might_affect_session, might_affect_session_with,
    might_matter_to_tracker_with, references_params, transaction_ending_with, LexOptions,
    Statements, TxEnding,
};
pub use kind::{DiscardTarget, Ident, NameOrAll, SetName, Statement, StatementKind};

#[cfg(test)]
mod tests;
