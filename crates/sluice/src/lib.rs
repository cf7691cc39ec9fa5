//! Sluice: a multi-core PostgreSQL connection pooler that is a drop-in successor to PgBouncer.
//! This file is the crate's face: its modules, and `run`, which drives one pooler instance
//! (`runtime/`); everything it needs is passed in (no globals). docs/architecture.md maps the
//! modules and their layers (checked by tests/tests/module_graph.rs).

pub mod admin;
pub mod advice;
pub mod app;
pub mod auth;
pub mod cancel;
pub mod client;
pub mod conn;
pub mod dispatch;
pub mod error;
pub mod forward;
pub mod hosts;
pub mod ids;
pub mod keyed_hash;
pub mod lifecycle;
pub mod metrics;
pub mod net;
pub mod pool;
pub mod prepared;
pub mod process;
pub mod route;
pub mod runtime;
pub mod server;
pub mod session_state;
pub mod stats;
pub mod takeover;
pub mod targets;
pub mod tls;
pub mod workers;

pub use runtime::{run, spawn_listeners};
