//! The queue of answers a server owes, in request order, used when the relay rewrites prepared
//! statements: it says which server replies to forward, which to drop (requests the pooler injected)
//! and where to synthesize replies for requests the pooler absorbed.

/// What to do with the reply to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The client sent it; forward the reply.
    Forward,
    /// The pooler injected it; drop the reply.
    Skip,
    /// The pooler answered it itself; emit the reply at this position.
    Fake,
}

/// One request awaiting its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Simple Query or FunctionCall: everything through ReadyForQuery.
    UntilReady,
    Sync,
    Parse {
        action: Action,
        /// The client's statement name, to forget it when the Parse fails.
        client_name: Option<String>,
        /// The statement was recorded in the server's cache and must be dropped from it on failure.
        cached: Option<u64>,
    },
    Bind,
    Describe,
    Execute,
    Close {
        action: Action,
    },
}

impl Expect {
    #[inline]
    pub fn action(&self) -> Action {
        match self {
            Expect::Parse { action, .. } | Expect::Close { action } => *action,
            _ => Action::Forward,
        }
    }

    /// Part of the extended protocol, skipped by the server after an error until Sync.
    pub fn is_extended(&self) -> bool {
        !matches!(self, Expect::UntilReady | Expect::Sync)
    }
}
