//! End-to-end test harness for Sluice: a private PostgreSQL cluster, the real `sluice` binary and a raw
//! protocol client. See tests/README.md for the contract.

mod anchor;
mod cluster;
mod console;
mod metrics;
mod missing;
mod ports;
mod raw;
mod replica;
mod runners;
mod sluice_proc;
mod util;

pub use anchor::{Anchor, AnchorRefused};
pub use cluster::PgCluster;
pub use console::{Console, ConsoleResult};
pub use metrics::{http_get, metrics, sample, workers_now};
pub use missing::{missing_tool, require, ALLOW_MISSING_TOOLS};
pub use ports::free_port;
pub use raw::{error_fields, RawConn};
pub use replica::{host_list, start_over_replicas, PgNode, ReplicaSet};
pub use runners::{client_bin, pgbench, pgbench_script, psql_cmd};
pub use sluice_proc::{sluice_bin, Sluice, SluiceBuilder};
pub use util::raise_own_nofile;
