//! One worker's share of a pool: its idle servers and its waiting clients under a lock of its own,
//! with their sizes published in atomics that other workers read before they steal an idle server
//! or lend one to a waiter. A transaction whose worker has a server idle, or a waiter when it
//! releases one, touches only its own shard: no cache line written by two workers. The pool-wide
//! numbers (servers open, connecting, clients) are elsewhere (`Pool`), and global limits are the
//! `ConnCounter`s, which change only when a server opens or closes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use super::Waiter;
use crate::server::ServerConn;

/// The lists behind a shard's lock.
#[derive(Default)]
pub(super) struct Lists {
    /// Boxed so that hand-outs and returns move a pointer, not the whole connection.
    pub idle: VecDeque<Box<ServerConn>>,
    /// Oldest first (`since` ascending).
    pub waiters: VecDeque<Waiter>,
    /// Releases that went to a local waiter since the shard last compared with the others.
    pub local_releases: u32,
}

/// A shard's lists and the waiter figures other workers read, on the lines its worker writes.
#[repr(align(128))]
#[derive(Default)]
struct Busy {
    lists: Mutex<Lists>,
    /// `lists.waiters.len()`.
    waiting: AtomicUsize,
    /// When the oldest waiter joined, in ns after the pool's `born` plus 1; 0 = nobody waits.
    head: AtomicU64,
}

/// The idle count on a line of its own: it changes only when servers go idle or are taken from
/// idle, so a worker whose waiters queue per transaction can read every shard's without a miss
/// per shard while the pool is saturated.
#[repr(align(128))]
#[derive(Default)]
struct IdleCount(AtomicUsize);

#[derive(Default)]
pub(super) struct Shard {
    busy: Busy,
    idle: IdleCount,
}

impl Shard {
    pub fn lock(&self) -> MutexGuard<'_, Lists> {
        self.busy.lists.lock()
    }

    /// Publish the lists' sizes (under the lock, after changing them). The idle count is written
    /// only when it changed.
    pub fn publish(&self, l: &Lists, born: Instant) {
        let idle = l.idle.len();
        if self.idle.0.load(Relaxed) != idle {
            self.idle.0.store(idle, Relaxed);
        }
        self.busy.waiting.store(l.waiters.len(), Relaxed);
        let head = l.waiters.front().map_or(0, |w| stamp(w.since, born));
        self.busy.head.store(head, Relaxed);
    }

    pub fn idle_hint(&self) -> usize {
        self.idle.0.load(Relaxed)
    }

    pub fn waiting_hint(&self) -> usize {
        self.busy.waiting.load(Relaxed)
    }

    /// How long the shard's oldest waiter has waited at `now`, as last published.
    pub fn head_wait(&self, born: Instant, now: Instant) -> Option<Duration> {
        let head = self.busy.head.load(Relaxed);
        (head != 0).then(|| {
            let since = born + Duration::from_nanos(head - 1);
            now.saturating_duration_since(since)
        })
    }
}

fn stamp(at: Instant, born: Instant) -> u64 {
    at.saturating_duration_since(born).as_nanos() as u64 + 1
}

/// The shard of the calling worker among `n`.
pub(super) fn here(n: usize) -> usize {
    usize::from(crate::workers::current()) % n
}

/// Of the shards other than `me` that `eligible` admits, the one whose oldest waiter has waited
/// longest, with that wait.
pub(super) fn longest_waiting_other(
    shards: &[Shard],
    me: usize,
    born: Instant,
    now: Instant,
    eligible: impl Fn(usize) -> bool,
) -> Option<(usize, Duration)> {
    let mut best: Option<(usize, Duration)> = None;
    for (i, s) in shards.iter().enumerate() {
        if i == me || !eligible(i) {
            continue;
        }
        if let Some(w) = s.head_wait(born, now) {
            if best.is_none_or(|(_, b)| w > b) {
                best = Some((i, w));
            }
        }
    }
    best
}
