//! Support for the driver compatibility matrix of compat.rs: the drivers, modes and scenarios, the
//! result cells and the repository paths; building, running and reporting live in the submodules.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod build;
pub mod report;
pub mod run;

pub const USER: &str = "compat_user";
pub const PASSWORD: &str = "compat_pass";
pub const MODES: [&str; 2] = ["session", "transaction"];
/// One driver program run may not take longer than this (scenarios have their own short timeouts).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
/// Building one toolchain's programs (first run downloads packages).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
/// Driver programs run at the same time (each against its own Sluice).
pub const PARALLEL_RUNS: usize = 3;

const COMMON: &[&str] = &[
    "connect",
    "simple_query",
    "prepared",
    "transaction",
    "error_in_tx",
    "copy",
    "large_result",
    "cancel",
    "set_isolation",
    "advisory_lock",
    "listen_notify",
];

/// The toolchain a driver program is built with; one build per toolchain.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Toolchain {
    Python,
    Java,
    Go,
    Node,
    Rust,
}

pub struct Driver {
    pub name: &'static str,
    pub toolchain: Toolchain,
    /// Scenarios beyond COMMON that this driver reports.
    extra: &'static [&'static str],
}

pub const DRIVERS: &[Driver] = &[
    Driver {
        name: "psycopg",
        toolchain: Toolchain::Python,
        extra: &["pipeline"],
    },
    Driver {
        name: "asyncpg",
        toolchain: Toolchain::Python,
        extra: &[],
    },
    Driver {
        name: "pgjdbc",
        toolchain: Toolchain::Java,
        extra: &["batch"],
    },
    Driver {
        name: "pgx",
        toolchain: Toolchain::Go,
        extra: &["batch"],
    },
    Driver {
        name: "node-postgres",
        toolchain: Toolchain::Node,
        extra: &[],
    },
    Driver {
        name: "tokio-postgres",
        toolchain: Toolchain::Rust,
        extra: &["pipeline"],
    },
];

impl Driver {
    /// Every scenario of this driver (or those named in COMPAT_ONLY, which the programs honour too).
    pub fn scenarios(&self) -> Vec<&'static str> {
        let only = std::env::var("COMPAT_ONLY").unwrap_or_default();
        let only: Vec<&str> = only.split(',').filter(|s| !s.is_empty()).collect();
        COMMON
            .iter()
            .chain(self.extra.iter())
            .copied()
            .filter(|s| only.is_empty() || only.contains(s))
            .collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

#[derive(Clone, Debug)]
pub struct Cell {
    pub status: Status,
    pub detail: String,
}

pub struct Paths {
    root: PathBuf,
    cache: PathBuf,
}

impl Paths {
    pub fn new() -> Paths {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_path_buf();
        let cache = root.join("target/compat-cache");
        fs::create_dir_all(&cache).expect("create target/compat-cache");
        Paths { root, cache }
    }
    pub fn compat(&self, sub: &str) -> PathBuf {
        self.root.join("compat").join(sub)
    }
}
