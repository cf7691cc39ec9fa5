//! A pool client's phases: startup, authentication, login to a pool, then the session loop, one
//! file per phase. The connection type is `crate::conn`; which session a connection runs (pool
//! or admin console) is decided in `crate::dispatch`.

pub mod guard;
pub mod join;
pub mod kill;
pub mod limits;
pub mod login;
pub mod registry;
pub mod replication;
pub mod route;
pub mod session;
pub mod startup;
