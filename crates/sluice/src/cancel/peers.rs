//! Peering (`peer_id`, `[peers]`, PgBouncer 1.21+'s key layout): several processes serve one port
//! (so_reuseport), so a client's CancelRequest may reach a process that does not know its key.
//! With peer_id > 0 each key carries its process's id in bytes 1 (low) and 2 (high) and a
//! time-to-live in the low 2 bits of byte 7 (3 when made); a process that gets a key of another
//! peer forwards it there with the TTL lowered (dropped at 0: no forwarding loops), at most
//! `pool_size` at once per peer (SHOW PEER_POOLS), each within cancel_wait_timeout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_protocol::CancelKey;
use tokio::sync::Semaphore;

/// The TTL a key is made with.
pub const TTL_MAX: u8 = 3;

/// Write `peer_id` and a full TTL into a new key's bytes.
pub fn stamp(b: &mut [u8; 8], peer_id: u16) {
    let [lo, hi] = peer_id.to_le_bytes();
    b[1] = lo;
    b[2] = hi;
    b[7] = (b[7] & !3) | TTL_MAX;
}

/// The peer id a key was made by.
pub fn peer_of(key: &CancelKey) -> u16 {
    let b = key.to_bytes();
    u16::from_le_bytes([b[1], b[2]])
}

/// The hops a key may still be forwarded.
pub fn ttl(key: &CancelKey) -> u8 {
    key.to_bytes()[7] & 3
}

/// `key` with its TTL set to `ttl`.
pub fn with_ttl(key: &CancelKey, ttl: u8) -> CancelKey {
    let mut b = key.to_bytes();
    b[7] = (b[7] & !3) | (ttl & 3);
    CancelKey::from_bytes(b)
}

/// One peer's forwarded cancels.
pub struct PeerPool {
    limit: Arc<Semaphore>,
    /// Being forwarded (sv_active_cancel).
    pub active: AtomicUsize,
    /// Waiting for a slot under the peer's pool_size (cl_waiting_cancel_req).
    pub waiting: AtomicUsize,
}

/// The peer pools, made when a cancel is first forwarded to a peer.
#[derive(Default)]
pub struct PeerPools {
    pools: Mutex<BTreeMap<u16, Arc<PeerPool>>>,
}

impl PeerPools {
    /// The pool of `peer`, with `size` concurrent forwards (made on first use).
    pub fn get(&self, peer: u16, size: usize) -> Arc<PeerPool> {
        self.pools
            .lock()
            .entry(peer)
            .or_insert_with(|| {
                Arc::new(PeerPool {
                    limit: Arc::new(Semaphore::new(size.max(1))),
                    active: AtomicUsize::new(0),
                    waiting: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    pub fn all(&self) -> Vec<(u16, Arc<PeerPool>)> {
        self.pools
            .lock()
            .iter()
            .map(|(id, p)| (*id, p.clone()))
            .collect()
    }
}

impl PeerPool {
    /// Run `forward` once a slot is free, counted as active meanwhile.
    pub async fn run<F: std::future::Future>(&self, forward: F) -> F::Output {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let permit = self.limit.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        let out = forward.await;
        self.active.fetch_sub(1, Ordering::Relaxed);
        drop(permit);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_peer_and_a_ttl() {
        let mut b = [0x7f, 0xaa, 0xbb, 1, 2, 3, 4, 0xfc];
        stamp(&mut b, 0x1234);
        let k = CancelKey::from_bytes(b);
        assert_eq!(peer_of(&k), 0x1234);
        assert_eq!(ttl(&k), 3);
        assert_eq!(b[0], 0x7f, "the pid stays positive");
        let fwd = with_ttl(&k, ttl(&k) - 1);
        assert_eq!((peer_of(&fwd), ttl(&fwd)), (0x1234, 2));
        assert_eq!(
            with_ttl(&fwd, TTL_MAX),
            k,
            "restoring the TTL gives the key back"
        );
    }
}
