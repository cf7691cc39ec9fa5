//! What an idle PostgreSQL backend costs, for the "pool too large" finding: measured the way seed
//! 002 does it (the backend's `Private_Dirty` in `/proc/<pid>/smaps_rollup`) when the server runs
//! on this host and its processes are readable, else seed 002's figure for an idle backend,
//! labelled as an estimate.

use std::path::Path;

/// Seed 002's private memory of an idle backend (Private_Dirty, 12.5 MB).
pub const ESTIMATE_BYTES: u64 = 12_800 * 1024;

/// Backends measured at most, per pool and question.
const SAMPLE: usize = 8;

/// Private memory per idle backend, and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendCost {
    pub bytes: u64,
    /// Backends measured (0: the figure is seed 002's estimate).
    pub measured: usize,
    /// The server's work_mem, when learned: what each busy backend may add per sort or hash.
    pub work_mem: Option<u64>,
}

impl BackendCost {
    pub fn estimate(work_mem: Option<u64>) -> Self {
        BackendCost {
            bytes: ESTIMATE_BYTES,
            measured: 0,
            work_mem,
        }
    }

    /// "12.5 MB per idle backend (measured: Private_Dirty of 3 backends)".
    pub fn describe(&self) -> String {
        let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
        let source = if self.measured > 0 {
            format!(
                "measured: Private_Dirty of {} of its backends in /proc",
                self.measured
            )
        } else {
            "estimate: seed 002's idle backend, not measured".to_string()
        };
        let mut s = format!(
            "{:.1} MB private memory per idle backend ({source})",
            mb(self.bytes)
        );
        if let Some(w) = self.work_mem {
            s.push_str(&format!(
                ", plus up to work_mem {:.0} MB per sort or hash while busy",
                mb(w)
            ));
        }
        s
    }
}

/// Whether `addr` (as `ServerAddr` displays it) is a server on this host.
pub fn is_local(addr: &str) -> bool {
    addr.starts_with("unix:")
        || addr.starts_with("127.")
        || addr.starts_with("localhost:")
        || addr.starts_with("[::1]:")
}

/// The mean Private_Dirty of the backends `pids` that are readable PostgreSQL processes here.
pub fn measure(proc_root: &Path, pids: &[u32]) -> Option<(u64, usize)> {
    let mut sizes = Vec::new();
    for &pid in pids.iter().filter(|&&p| p > 0).take(SAMPLE) {
        let dir = proc_root.join(pid.to_string());
        // The pid comes from the server's BackendKeyData: make sure it names a PostgreSQL process
        // in our view of /proc (another PID namespace would show some other process, or none).
        let Ok(cmd) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        if !cmd.starts_with(b"postgres") {
            continue;
        }
        if let Some(b) = std::fs::read_to_string(dir.join("smaps_rollup"))
            .ok()
            .and_then(|t| private_dirty(&t))
        {
            sizes.push(b);
        }
    }
    if sizes.is_empty() {
        return None;
    }
    Some((sizes.iter().sum::<u64>() / sizes.len() as u64, sizes.len()))
}

/// `Private_Dirty:    12544 kB` -> bytes.
fn private_dirty(smaps_rollup: &str) -> Option<u64> {
    smaps_rollup.lines().find_map(|l| {
        let kb = l
            .strip_prefix("Private_Dirty:")?
            .trim()
            .strip_suffix("kB")?;
        kb.trim().parse::<u64>().ok().map(|k| k * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dirty_of_postgres_processes_only() {
        let root = std::env::temp_dir().join(format!("sluice-proc-{}", std::process::id()));
        let write = |pid: u32, cmd: &str, kb: u64| {
            let d = root.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cmdline"), cmd).unwrap();
            std::fs::write(
                d.join("smaps_rollup"),
                format!("Rss: 29184 kB\nPrivate_Dirty:     {kb} kB\nShared_Clean: 1 kB\n"),
            )
            .unwrap();
        };
        write(10, "postgres: app app [local] idle\0", 12_000);
        write(11, "postgres: app app [local] idle\0", 14_000);
        write(12, "bash\0", 99_999);
        assert_eq!(
            measure(&root, &[10, 11, 12, 13, 0]),
            Some((13_000 * 1024, 2))
        );
        assert_eq!(measure(&root, &[12]), None);
        std::fs::remove_dir_all(&root).unwrap();
        let c = BackendCost::estimate(Some(4 << 20));
        assert!(c.describe().contains("estimate"), "{}", c.describe());
        assert!(c.describe().contains("work_mem 4 MB"), "{}", c.describe());
        assert!(is_local("unix:/tmp/.s.PGSQL.5432") && !is_local("db.example:5432"));
    }
}
