//! Read routing in the session loop (`route_reads`, transaction pool mode): at a transaction's
//! start, classify the request that opens it and, when it may run on a standby and a standby is
//! fresh enough for this client (`route::Freshness`), hand the session the standby's sibling pool
//! (`pool/readers.rs`) for that one transaction; at its end, record where it ran.
//!
//! A client of a database with route_reads = off has no `ClientRoute` (decided once, at login):
//! its transactions pay one branch on a `None`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_config::RouteReads;
use sluice_protocol::frontend_tag;

use crate::hosts::{self, HostHealth};
use crate::pool::{Pool, PooledServer};
use crate::route::{self, Freshness, HostKey, Lsn, Target};
use crate::server::params::ParamMap;

/// A routing client's state: where its transactions ran, and its hosts.
pub struct ClientRoute {
    mode: RouteReads,
    /// The health of each host of the pool's list, in list order (empty until every host has a
    /// checker: the pool's first connect enlists them).
    hosts: Vec<Arc<HostHealth>>,
    fresh: Freshness,
    /// The pool the client logged in to, kept here while a transaction runs on a sibling.
    home: Option<Arc<Pool>>,
    /// The host (and its incarnation) of the server of the transaction under way.
    ran_on: Option<HostKey>,
    /// Spreads this client's reads over equally fresh standbys.
    spread: usize,
    /// auto mode: the single simple Query of the read under way on a standby, kept to run it
    /// on the primary if the standby refuses it with 25006 before anything reached the client.
    replay: Option<Vec<u8>>,
    /// The standby refused: the request runs on the primary next.
    force_primary: bool,
}

impl ClientRoute {
    /// Routing state for a client of `pool`, None when its settings route nothing.
    pub fn for_pool(pool: &Pool, client_id: u64) -> Option<Box<ClientRoute>> {
        let mode = pool.settings().route_reads;
        (mode != RouteReads::Off).then(|| {
            Box::new(ClientRoute {
                mode,
                hosts: Vec::new(),
                fresh: Freshness::default(),
                home: None,
                ran_on: None,
                spread: client_id as usize,
                replay: None,
                force_primary: false,
            })
        })
    }

    /// A transaction starts with `request` buffered (at least its first message's header): the
    /// pool to take its server from, when not the session's own (a standby's sibling).
    pub fn begin(
        &mut self,
        pool: &Arc<Pool>,
        request: &[u8],
        params: &ParamMap,
        pinned: bool,
    ) -> Option<Arc<Pool>> {
        self.ran_on = None;
        self.replay = None;
        // Every transaction's host counts for freshness (writes above all): know the hosts
        // before the first one, whatever it is.
        if !self.know_hosts(pool) || pinned || std::mem::take(&mut self.force_primary) {
            return None;
        }
        let text = opening_text(request)?;
        let class = route::classify(text);
        let read_only = params
            .get("default_transaction_read_only")
            .is_some_and(|v| v.eq_ignore_ascii_case("on"));
        let because = route::wants_standby(self.mode, &class, read_only).ok()?;
        let mut views = [route::HostView {
            role: route::Role::Excluded,
            healthy: false,
            lsn: Lsn(0),
            polled_at: 0,
            incarnation: 0,
        }; 16];
        let n = self.hosts.len().min(views.len());
        for (v, h) in views.iter_mut().zip(&self.hosts) {
            *v = route_view(&h.view());
        }
        let Target::Standby(key) = self.fresh.choose(&views[..n], self.spread).0 else {
            return None;
        };
        let host = self.hosts.get(key.index)?;
        let reader = pool.reader(&host.addr)?;
        host.routed_reads.fetch_add(1, Ordering::Relaxed);
        // A proven read (not one the client declared) that is the whole request buffered: it
        // may be replayed on the primary.
        let whole = message(request)
            .is_some_and(|(tag, _, len)| tag == frontend_tag::QUERY && len == request.len());
        if whole && matches!(because, route::ReadOnlyBecause::ProvenRead(_)) {
            self.replay = Some(request.to_vec());
        }
        Some(reader)
    }

    /// The read under way may be replayed on the primary (the relay guards its replies).
    pub fn replayable(&self) -> bool {
        self.replay.is_some()
    }

    /// The standby refused the read with 25006 before anything reached the client: put the
    /// request back in front of what the client sent since, for the primary.
    pub fn refused(&mut self, rbuf: &mut bytes::BytesMut) {
        let Some(request) = self.replay.take() else {
            return;
        };
        let host = self.ran_on.and_then(|k| self.hosts.get(k.index));
        if let Some(h) = host {
            h.reads_replayed.fetch_add(1, Ordering::Relaxed);
        }
        let mut again = bytes::BytesMut::with_capacity(request.len() + rbuf.len());
        again.extend_from_slice(&request);
        again.extend_from_slice(rbuf);
        *rbuf = again;
        self.ran_on = None;
        self.force_primary = true;
    }

    /// Resolve the pool's hosts once every one has a checker.
    fn know_hosts(&mut self, pool: &Pool) -> bool {
        if self.hosts.is_empty() {
            let Some(book) = pool.host_book() else {
                return false;
            };
            let addrs = &pool.settings().target.addrs;
            if let Some(h) = book
                .health_of(addrs)
                .into_iter()
                .collect::<Option<Vec<_>>>()
            {
                self.hosts = h;
            }
        }
        !self.hosts.is_empty()
    }

    /// The session's pool is swapped for a sibling for this transaction: keep the home pool.
    pub fn keep_home(&mut self, home: Arc<Pool>) {
        self.home = Some(home);
    }

    /// The pool the client logged in to, while a transaction runs on a standby's sibling.
    pub fn home(&self) -> Option<&Arc<Pool>> {
        self.home.as_ref()
    }

    /// The transaction's server is linked: note its host.
    pub fn linked(&mut self, server: &PooledServer) {
        self.ran_on = server.host.as_ref().and_then(|t| {
            let index = self.hosts.iter().position(|h| Arc::ptr_eq(h, &t.health))?;
            Some(HostKey {
                index,
                incarnation: t.epoch,
            })
        });
    }

    /// The transaction ended (or the request was refused before one ran): record where it ran
    /// with the poll clock, and give back the home pool when a sibling served it.
    pub fn end(&mut self) -> Option<Arc<Pool>> {
        if let Some(key) = self.ran_on.take() {
            if let Some(h) = self.hosts.first() {
                self.fresh.finished(key, h.clock_now());
            }
        }
        self.home.take()
    }
}

/// A checker's view as read routing sees it: a primary out of rotation (a stale one after a
/// failover) or a host of unknown role is neither read from nor trusted for positions.
fn route_view(h: &hosts::HostView) -> route::HostView {
    let role = match (h.role, h.healthy) {
        (hosts::Role::Primary, true) => route::Role::Primary,
        (hosts::Role::Standby, _) => route::Role::Standby,
        _ => route::Role::Excluded,
    };
    route::HostView {
        role,
        healthy: h.checked && h.healthy,
        lsn: Lsn(h.wal_lsn.unwrap_or(0)),
        polled_at: if h.wal_lsn.is_some() { h.polled_at } else { 0 },
        incarnation: h.incarnation,
    }
}

/// The text that opens the transaction: a simple Query's, or the statement of a Parse that
/// starts an extended-protocol batch. A Parse is only taken when the batch up to its Sync is
/// buffered with one Execute (so that the text opens and is the whole transaction, unless it
/// declares itself read only); anything else (a Bind of a statement parsed earlier, a message
/// not fully read) gives None: the primary.
fn opening_text(buf: &[u8]) -> Option<&[u8]> {
    let (tag, body, _) = message(buf)?;
    match tag {
        frontend_tag::QUERY => Some(cstr(body)?.0),
        frontend_tag::PARSE => {
            let (_, rest) = cstr(body)?;
            let (text, _) = cstr(rest)?;
            let mut at = 0;
            let mut executes = 0;
            loop {
                let (tag, _, len) = message(&buf[at..])?;
                at += len;
                match tag {
                    frontend_tag::EXECUTE => executes += 1,
                    frontend_tag::SYNC => break,
                    _ => {}
                }
            }
            let declared = matches!(
                route::classify(text).verdict,
                route::Verdict::DeclaredReadOnly(_)
            );
            (executes == 1 || declared).then_some(text)
        }
        _ => None,
    }
}

/// One whole message at the start of `buf`: tag, body, total length.
fn message(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    let tag = *buf.first()?;
    let len = u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize;
    let body = buf.get(5..1 + len)?;
    Some((tag, body, 1 + len))
}

/// A NUL-terminated string and what follows it.
fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = b.iter().position(|&c| c == 0)?;
    Some((&b[..nul], &b[nul + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn checker_views_as_routing_sees_them() {
        let v = |role, healthy, lsn: Option<u64>| hosts::HostView {
            role,
            checked: true,
            healthy,
            wal_lsn: lsn,
            polled_at: 7,
            incarnation: 3,
            ..hosts::HostView::default()
        };
        let p = route_view(&v(hosts::Role::Primary, true, Some(100)));
        assert_eq!(
            (p.role, p.healthy, p.lsn, p.polled_at),
            (route::Role::Primary, true, Lsn(100), 7)
        );
        // A stale primary (out of rotation) bounds nothing and is never read from.
        assert_eq!(
            route_view(&v(hosts::Role::Primary, false, Some(900))).role,
            route::Role::Excluded
        );
        assert_eq!(
            route_view(&v(hosts::Role::Unknown, true, None)).role,
            route::Role::Excluded
        );
        let sb = route_view(&v(hosts::Role::Standby, false, Some(50)));
        assert_eq!(
            (sb.role, sb.healthy, sb.incarnation),
            (route::Role::Standby, false, 3)
        );
        // No position read: never taken as a bound.
        assert_eq!(
            route_view(&v(hosts::Role::Standby, true, None)).polled_at,
            0
        );
        let unchecked = hosts::HostView {
            role: hosts::Role::Standby,
            healthy: true,
            ..hosts::HostView::default()
        };
        assert!(!route_view(&unchecked).healthy);
    }

    #[test]
    fn opening_texts() {
        let q = msg(b'Q', b"SELECT 1\0");
        assert_eq!(opening_text(&q), Some(&b"SELECT 1"[..]));
        assert_eq!(opening_text(&q[..6]), None);
        let parse = msg(b'P', b"s1\0SELECT 1\0\0\0");
        let bind = msg(b'B', b"\0s1\0\0\0\0\0\0\0");
        let exec = msg(b'E', b"\0\0\0\0\0");
        let sync = msg(b'S', b"");
        let one = [parse.clone(), bind.clone(), exec.clone(), sync.clone()].concat();
        assert_eq!(opening_text(&one), Some(&b"SELECT 1"[..]));
        let two = [
            parse.clone(),
            bind.clone(),
            exec.clone(),
            exec.clone(),
            sync.clone(),
        ]
        .concat();
        assert_eq!(opening_text(&two), None);
        let unsynced = [parse, bind.clone(), exec].concat();
        assert_eq!(opening_text(&unsynced), None);
        assert_eq!(opening_text(&[bind, sync].concat()), None);
    }
}
