//! Connection ids. Clients and servers are numbered from one sequence (SHOW SOCKETS ids are
//! unique across both, as PgBouncer's), each kind as a type of its own so that a client's id
//! cannot be passed where a server's is meant. They print as the bare number (SHOW columns, the
//! `C-<id>` / `S-<id>` of log lines).

use std::fmt;

/// A client connection's id: SHOW CLIENTS `id`, KILL_CLIENT's argument, `C-<id>` in log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// A server connection's id: SHOW SERVERS `id`, `S-<id>` in log lines; 0 is never given out
/// (the client registry's "not linked").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId(pub u64);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_their_number() {
        assert_eq!(format!("C-{}", ClientId(7)), "C-7");
        assert_eq!(format!("S-{}", ServerId(12)), "S-12");
    }
}
