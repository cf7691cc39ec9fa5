//! The queue of answers a server owes, in request order, used when the relay rewrites prepared
//! statements: it says which server replies to forward, which to drop (requests the pooler injected)
//! and where to synthesize replies for requests the pooler absorbed.

use std::collections::VecDeque;

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
    /// A request the pooler refused (`refuse.rs`): the server's error for its stand-in is
    /// replaced by this one.
    Refused {
        sqlstate: &'static str,
        message: String,
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

/// The replies a server owes, oldest first: a `VecDeque` whose front is kept inline. A simple
/// Query owes one reply set (`UntilReady`), which then never touches the heap: an idle client
/// holds no queue memory, and at many clients a transaction does not reach for a cold block of
/// its own (the session's state is touched anyway). Batches of extended-protocol messages spill
/// into the deque. Invariant: `rest` is empty while `head` is `None`.
#[derive(Debug, Default)]
pub struct ExpectQueue {
    head: Option<Expect>,
    rest: VecDeque<Expect>,
}

impl ExpectQueue {
    #[inline]
    pub fn front(&self) -> Option<&Expect> {
        self.head.as_ref()
    }

    #[inline]
    pub fn push_back(&mut self, e: Expect) {
        if self.head.is_none() {
            self.head = Some(e);
        } else {
            self.rest.push_back(e);
        }
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<Expect> {
        let front = self.head.take();
        self.head = self.rest.pop_front();
        front
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    pub fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// The `i`-th owed reply (0 = front).
    pub fn get(&self, i: usize) -> Option<&Expect> {
        match i {
            0 => self.head.as_ref(),
            _ => self.rest.get(i - 1),
        }
    }

    pub fn remove(&mut self, i: usize) -> Option<Expect> {
        match i {
            0 => self.pop_front(),
            _ => self.rest.remove(i - 1),
        }
    }

    pub fn clear(&mut self) {
        self.head = None;
        self.rest.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut ExpectQueue) -> Vec<Expect> {
        std::iter::from_fn(|| q.pop_front()).collect()
    }

    #[test]
    fn keeps_request_order_across_the_inline_front_and_the_deque() {
        let mut q = ExpectQueue::default();
        assert!(q.is_empty() && q.front().is_none() && q.pop_front().is_none());
        q.push_back(Expect::Bind);
        assert_eq!(q.len(), 1);
        q.push_back(Expect::Execute);
        q.push_back(Expect::Sync);
        assert_eq!((q.len(), q.front()), (3, Some(&Expect::Bind)));
        assert_eq!(q.pop_front(), Some(Expect::Bind));
        assert_eq!(q.front(), Some(&Expect::Execute)); // moved up from the deque
        q.push_back(Expect::UntilReady);
        assert_eq!(
            drain(&mut q),
            [Expect::Execute, Expect::Sync, Expect::UntilReady]
        );
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_simple_query_stays_off_the_heap() {
        let mut q = ExpectQueue::default();
        for _ in 0..3 {
            q.push_back(Expect::UntilReady);
            assert_eq!(q.pop_front(), Some(Expect::UntilReady));
        }
        assert_eq!(q.rest.capacity(), 0);
    }

    #[test]
    fn get_and_remove_address_the_whole_queue() {
        let mut q = ExpectQueue::default();
        for e in [Expect::Sync, Expect::Bind, Expect::Sync, Expect::Execute] {
            q.push_back(e);
        }
        assert_eq!(q.get(0), Some(&Expect::Sync));
        assert_eq!(q.get(2), Some(&Expect::Sync));
        assert_eq!(q.get(4), None);
        assert_eq!(q.remove(2), Some(Expect::Sync));
        assert_eq!(q.remove(0), Some(Expect::Sync));
        assert_eq!(q.front(), Some(&Expect::Bind));
        assert_eq!(drain(&mut q), [Expect::Bind, Expect::Execute]);
        q.push_back(Expect::Describe);
        q.clear();
        assert!(q.is_empty() && q.get(0).is_none());
        assert_eq!(q.len(), 0);
    }
}
