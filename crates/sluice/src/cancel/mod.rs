//! Cancel keys: every client gets its own random key; a CancelRequest carrying it is forwarded,
//! with the real key, to the server the client is linked to at that moment.
//!
//! A forwarded cancel is counted on the client's slot until PostgreSQL has closed the forwarded
//! connection (`InFlight`), and a server the client releases meanwhile waits for the count to reach
//! zero before it goes back to the pool (`CancelSlot::settled`; SHOW POOLS `sv_being_canceled`).
//! PostgreSQL signals a backend twice for one CancelRequest (the process and its group), and a
//! signal that lands after the cancelled query ended cancels whatever that backend runs next: in
//! transaction pooling, another client's query. PgBouncer holds such a server the same way.

pub mod peers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use rand::RngCore;
use sluice_protocol::{encode_cancel_request, CancelKey};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::keyed_hash::OwnKeys;
use crate::server::ServerAddr;

type Target = (Arc<ServerAddr>, CancelKey);

/// Where a client's cancel goes right now (None while it is not linked to a server), and how many
/// of its cancels are still being forwarded.
#[derive(Debug, Default)]
pub struct CancelSlot {
    target: Mutex<Option<Target>>,
    /// Cancels looked up while linked whose forwarded connection PostgreSQL has not yet closed.
    /// Taken under `target`'s lock, so a release after `unlink` sees every cancel aimed at the
    /// server it releases.
    in_flight: AtomicU32,
    settled: tokio::sync::Notify,
}

impl CancelSlot {
    pub fn link(&self, addr: &Arc<ServerAddr>, key: CancelKey) {
        *self.target.lock() = Some((addr.clone(), key));
    }

    pub fn unlink(&self) {
        *self.target.lock() = None;
    }

    /// Cancels of this client still on their way to the server it was linked to.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Wait until no cancel of this client is being forwarded (at once when none is). Each one
    /// ends within cancel_wait_timeout (`forward`'s limit), or when its task is dropped.
    pub async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A cancel being forwarded: the server it targets, counted on the client's slot until dropped.
#[derive(Debug)]
pub struct InFlight {
    pub addr: Arc<ServerAddr>,
    pub server_key: CancelKey,
    slot: Arc<CancelSlot>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.slot.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.slot.settled.notify_waiters();
        }
    }
}

#[derive(Debug, Default)]
pub struct CancelRegistry {
    clients: Mutex<HashMap<CancelKey, Arc<CancelSlot>, OwnKeys>>,
}

impl CancelRegistry {
    /// A new unique key for a client, carrying `peer_id` when peering is on (`peers::stamp`).
    /// The key is unregistered when the handle drops.
    pub fn register(self: &Arc<Self>, peer_id: u16) -> CancelHandle {
        let slot = Arc::new(CancelSlot::default());
        let mut map = self.clients.lock();
        let key = loop {
            let mut b = [0u8; 8];
            rand::thread_rng().fill_bytes(&mut b);
            b[0] &= 0x7f; // positive "pid", as PostgreSQL clients expect
            if peer_id > 0 {
                crate::cancel::peers::stamp(&mut b, peer_id);
            }
            let k = CancelKey::from_bytes(b);
            if !map.contains_key(&k) {
                break k;
            }
        };
        map.insert(key, slot.clone());
        CancelHandle {
            key,
            slot,
            registry: self.clone(),
        }
    }

    /// Register a key another process gave its client (a takeover); None when it is taken here.
    pub fn adopt(self: &Arc<Self>, key: CancelKey) -> Option<CancelHandle> {
        let slot = Arc::new(CancelSlot::default());
        let mut map = self.clients.lock();
        if map.contains_key(&key) {
            return None;
        }
        map.insert(key, slot.clone());
        Some(CancelHandle {
            key,
            slot,
            registry: self.clone(),
        })
    }

    /// The server a cancel with `key` goes to, counted in flight until the result is dropped;
    /// None when no client has the key or it is not linked to a server.
    pub fn lookup(&self, key: &CancelKey) -> Option<InFlight> {
        let slot = self.clients.lock().get(key).cloned()?;
        let target = slot.target.lock();
        let (addr, server_key) = target.clone()?;
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        drop(target);
        Some(InFlight {
            addr,
            server_key,
            slot,
        })
    }

    pub fn len(&self) -> usize {
        self.clients.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A client's registration; unregisters on drop.
#[derive(Debug)]
pub struct CancelHandle {
    pub key: CancelKey,
    pub slot: Arc<CancelSlot>,
    registry: Arc<CancelRegistry>,
}

impl Drop for CancelHandle {
    fn drop(&mut self) {
        self.registry.clients.lock().remove(&self.key);
    }
}

/// Send a CancelRequest with the server's own key on a new connection, and wait until the server
/// closes it, within `limit`.
///
/// The wait matters: PostgreSQL closes the connection once it has signalled the backend (twice:
/// the process and its group), and drivers (libpq's PQcancel, tokio-postgres) treat the close as
/// "the cancel has landed". Closing the client's cancel connection before that would let a
/// driver send its next query while a signal is still on its way, and that query gets cancelled.
pub async fn forward(
    addr: ServerAddr,
    key: CancelKey,
    limit: Option<Duration>,
) -> std::io::Result<()> {
    let work = async {
        let mut pkt = BytesMut::with_capacity(16);
        encode_cancel_request(key, &mut pkt);
        match &addr {
            ServerAddr::Tcp { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                send_and_wait_for_close(s, &pkt).await
            }
            ServerAddr::Unix { path } => {
                let s = UnixStream::connect(path).await?;
                send_and_wait_for_close(s, &pkt).await
            }
        }
    };
    match limit {
        Some(l) => tokio::time::timeout(l, work).await.unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "cancel_wait_timeout",
            ))
        }),
        None => work.await,
    }
}

async fn send_and_wait_for_close<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    pkt: &[u8],
) -> std::io::Result<()> {
    s.write_all(pkt).await?;
    // The server sends nothing back; whatever it might send is read and dropped until EOF.
    let mut sink = [0u8; 64];
    while s.read(&mut sink).await? > 0 {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_lookup_unregister() {
        let reg = Arc::new(CancelRegistry::default());
        let h = reg.register(0);
        assert_eq!(h.key.to_bytes()[0] & 0x80, 0);
        assert!(reg.lookup(&h.key).is_none(), "not linked yet");
        assert_eq!(
            h.slot.in_flight(),
            0,
            "a cancel for an unlinked client is not counted"
        );
        let addr = Arc::new(ServerAddr::Tcp {
            host: "127.0.0.1".into(),
            port: 5432,
        });
        let server_key = CancelKey { pid: 42, secret: 7 };
        h.slot.link(&addr, server_key);
        let f = reg.lookup(&h.key).expect("linked");
        assert_eq!((&f.addr, f.server_key), (&addr, server_key));
        assert_eq!(h.slot.in_flight(), 1);
        h.slot.unlink();
        assert!(reg.lookup(&h.key).is_none());
        assert_eq!(h.slot.in_flight(), 1, "still being forwarded");
        drop(f);
        assert_eq!(h.slot.in_flight(), 0);
        let key = h.key;
        drop(h);
        assert!(reg.is_empty());
        assert!(reg.lookup(&key).is_none());
    }

    #[tokio::test]
    async fn settled_waits_for_every_cancel_in_flight() {
        let reg = Arc::new(CancelRegistry::default());
        let h = reg.register(0);
        let addr = Arc::new(ServerAddr::Tcp {
            host: "127.0.0.1".into(),
            port: 5432,
        });
        h.slot.link(&addr, CancelKey { pid: 1, secret: 2 });
        let (a, b) = (reg.lookup(&h.key).unwrap(), reg.lookup(&h.key).unwrap());
        h.slot.unlink();
        let slot = h.slot.clone();
        let waiter = tokio::spawn(async move { slot.settled().await });
        tokio::task::yield_now().await;
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one cancel still in flight");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("settled once the last cancel ended")
            .unwrap();
        // Nothing in flight: at once.
        h.slot.settled().await;
    }
}
