//! The open-files limit. Every client costs a descriptor and every server connection another, so at
//! startup the soft RLIMIT_NOFILE is raised to the hard limit (PgBouncer's max_client_conn guidance
//! asks operators for exactly that headroom; a default soft limit of 1024 is far too low).

use std::io;

/// Where the soft limit was and where it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    pub before: u64,
    pub now: u64,
    pub hard: u64,
}

/// Kernel ceiling used when the hard limit is "unlimited" (fs.nr_open's default).
const UNLIMITED_CAP: u64 = 1 << 20;

/// Raise the soft open-files limit to the hard limit (capped at fs.nr_open when unlimited).
pub fn raise_to_hard() -> io::Result<FdLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    let hard = lim.rlim_max;
    let target = if hard == libc::RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(UNLIMITED_CAP)
    } else {
        hard
    };
    if before != libc::RLIM_INFINITY && before < target {
        lim.rlim_cur = target;
        // SAFETY: setrlimit only reads the struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let now = if before < target { target } else { before };
    Ok(FdLimit { before, now, hard })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_soft_to_hard_and_is_idempotent() {
        let first = raise_to_hard().unwrap();
        assert!(first.now >= first.before);
        assert!(first.hard == libc::RLIM_INFINITY || first.now == first.hard);
        let again = raise_to_hard().unwrap();
        assert_eq!(again.before, again.now);
        assert_eq!(again.now, first.now);
    }
}
