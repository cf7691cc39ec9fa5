//! Read routing in the session loop (`route_reads`, transaction pool mode): at a transaction's
//! start, classify the request that opens it (a simple Query, or the statement an
//! extended-protocol batch binds, parsed in the batch or earlier) and, when it may run on a standby and a standby is
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
use crate::prepared::ClientStatements;
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
    /// auto mode: the request of the read under way on a standby (a simple Query, or an
    /// extended-protocol batch through its Sync), kept to run it on the primary if the standby
    /// refuses it with 25006 before anything reached the client.
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
    /// `statements`: the client's prepared statements when the pool rewrites their names (None
    /// when max_prepared_statements = 0: a named statement then lives on one server only, and
    /// whatever names one stays on the primary).
    pub fn begin(
        &mut self,
        pool: &Arc<Pool>,
        request: &[u8],
        params: &ParamMap,
        pinned: bool,
        statements: Option<&ClientStatements>,
    ) -> Option<Arc<Pool>> {
        self.ran_on = None;
        self.replay = None;
        // Every transaction's host counts for freshness (writes above all): know the hosts
        // before the first one, whatever it is.
        if !self.know_hosts(pool) || pinned || std::mem::take(&mut self.force_primary) {
            return None;
        }
        let opening = opening(request, statements)?;
        if opening.len != request.len() {
            // More requests buffered behind it (a pipelining client): the relay would send them
            // to the same server, where a write fails with 25006.
            return None;
        }
        let read_only = params
            .get("default_transaction_read_only")
            .is_some_and(|v| v.eq_ignore_ascii_case("on"));
        let because = route::wants_standby(self.mode, &opening.class, read_only).ok()?;
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
        // A proven read (not one the client declared): it may be replayed on the primary.
        if opening.replayable && matches!(because, route::ReadOnlyBecause::ProvenRead(_)) {
            self.replay = Some(request.to_vec());
        }
        Some(reader)
    }

    /// The read under way may be replayed on the primary (the relay guards its replies).
    pub fn replayable(&self) -> bool {
        self.replay.is_some()
    }

    /// The standby refused the read with 25006 before anything reached the client: put the
    /// request back in front of what the client sent since, for the primary, and forget the
    /// statement names it parsed (new to the client when it was taken, `extended`: it parses
    /// them again).
    pub fn refused(&mut self, rbuf: &mut bytes::BytesMut, statements: &mut ClientStatements) {
        let Some(request) = self.replay.take() else {
            return;
        };
        for name in parsed_names(&request) {
            statements.remove(name);
        }
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
            let index = self.hosts.iter().position(|h| h.issued(t))?;
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

/// What opens the transaction a request starts, as routing needs it.
#[derive(Debug)]
struct Opening {
    class: route::Classification,
    /// Bytes of the request it spans: a simple Query, or an extended-protocol batch through its
    /// Sync.
    len: usize,
    /// Running it again on the primary repeats nothing the relay keeps for the client: every
    /// statement name it parses is new to the client (forgotten again before the replay:
    /// [`ClientRoute::refused`]), it closes none, and it binds once.
    replayable: bool,
}

/// What opens the transaction: a simple Query's text, or the statement an extended-protocol
/// batch binds: one parsed in the batch, or a named statement the client parsed earlier (its
/// classification is kept with the statement, `Statement::read_class`: a Bind does not
/// classify again). A batch is only taken whole up to its Sync, binding one statement before its
/// first Execute, and executing once (that statement is then the whole transaction) unless the
/// statement declares the transaction read only; or preparing proven reads and running nothing
/// ([`prepared_only`]). Anything else (an unnamed statement parsed in an earlier batch, a name
/// the client never parsed, any name while `statements` is None, a message not fully read)
/// gives None: the primary.
fn opening(buf: &[u8], statements: Option<&ClientStatements>) -> Option<Opening> {
    let (tag, body, len) = message(buf)?;
    match tag {
        frontend_tag::QUERY => Some(Opening {
            class: route::classify(cstr(body)?.0),
            len,
            replayable: true,
        }),
        frontend_tag::PARSE | frontend_tag::BIND => extended(buf, statements),
        _ => None,
    }
}

/// The batch at the start of `buf` (see [`opening`]).
fn extended(buf: &[u8], statements: Option<&ClientStatements>) -> Option<Opening> {
    let mut at = 0;
    let mut executes = 0;
    // Binds before the first Execute, and in all.
    let (mut binds_first, mut binds) = (0, 0);
    // Where the first Bind lies, and the statement it names.
    let mut first_bind: Option<(usize, &[u8])> = None;
    let mut replayable = true;
    loop {
        let (tag, body, len) = message(&buf[at..])?;
        match tag {
            frontend_tag::PARSE => {
                let name = cstr(body)?.0;
                if !name.is_empty() {
                    // Names not rewritten: the statement would live on that server alone.
                    let statements = statements?;
                    replayable &= std::str::from_utf8(name).is_ok_and(|n| !statements.contains(n));
                }
            }
            frontend_tag::BIND => {
                binds += 1;
                if executes == 0 {
                    binds_first += 1;
                    let (_portal, rest) = cstr(body)?;
                    first_bind.get_or_insert((at, cstr(rest)?.0));
                }
            }
            frontend_tag::CLOSE => replayable = false,
            frontend_tag::EXECUTE => executes += 1,
            frontend_tag::SYNC => {
                at += len;
                break;
            }
            _ => {}
        }
        at += len;
    }
    let Some((bind_at, name)) = first_bind else {
        return prepared_only(&buf[..at], executes);
    };
    if binds_first != 1 {
        return None;
    }
    let class = match parsed_in(&buf[..bind_at], name) {
        Some(text) => route::classify(text),
        None if !name.is_empty() => statements?
            .get(std::str::from_utf8(name).ok()?)?
            .read_class(),
        None => return None,
    };
    let declared = matches!(class.verdict, route::Verdict::DeclaredReadOnly(_));
    (executes == 1 || declared).then_some(Opening {
        class,
        len: at,
        replayable: replayable && binds == 1,
    })
}

/// A batch that only prepares statements (Parse, Describe, no Bind or Execute: a driver's
/// prepare) of proven reads goes where those reads would: on the primary it would count as a
/// transaction there, and the client's reads would wait for a poll after it (read-your-writes)
/// although it wrote nothing. It runs nothing, so there is nothing to replay.
fn prepared_only(batch: &[u8], executes: usize) -> Option<Opening> {
    let mut at = 0;
    let mut class = None;
    while let Some((tag, body, len)) = message(&batch[at..]) {
        if tag == frontend_tag::PARSE {
            let c = route::classify(cstr(cstr(body)?.1)?.0);
            if !matches!(c.verdict, route::Verdict::ProvenRead { .. }) {
                return None;
            }
            class.get_or_insert(c);
        }
        at += len;
    }
    (executes == 0).then_some(Opening {
        class: class?,
        len: batch.len(),
        replayable: false,
    })
}

/// The text of the last Parse of statement `name` in `batch`.
fn parsed_in<'a>(batch: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut at = 0;
    let mut text = None;
    while let Some((tag, body, len)) = message(&batch[at..]) {
        if tag == frontend_tag::PARSE {
            let (n, rest) = cstr(body)?;
            if n == name {
                text = Some(cstr(rest)?.0);
            }
        }
        at += len;
    }
    text
}

/// The statement names a batch parses.
fn parsed_names(batch: &[u8]) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        let (tag, body, len) = message(&batch[at..])?;
        at += len;
        if tag == frontend_tag::PARSE {
            if let Some(Ok(n)) = cstr(body).map(|(n, _)| std::str::from_utf8(n)) {
                if !n.is_empty() {
                    return Some(n);
                }
            }
        }
    })
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

    /// The verdict of what opens `buf`, its span and whether it may be replayed.
    fn open(buf: &[u8], st: &ClientStatements) -> Option<(route::Verdict, usize, bool)> {
        opening(buf, Some(st)).map(|o| (o.class.verdict, o.len, o.replayable))
    }

    fn proven(v: route::Verdict) -> bool {
        matches!(v, route::Verdict::ProvenRead { .. })
    }

    #[test]
    fn opening_texts() {
        let none = ClientStatements::default();
        let q = msg(b'Q', b"SELECT 1\0");
        let (v, len, replay) = open(&q, &none).unwrap();
        assert!(proven(v) && len == q.len() && replay);
        assert!(open(&q[..6], &none).is_none());
        let parse = msg(b'P', b"s1\0SELECT 1\0\0\0");
        let bind = msg(b'B', b"\0s1\0\0\0\0\0\0\0");
        let exec = msg(b'E', b"\0\0\0\0\0");
        let sync = msg(b'S', b"");
        let one = [parse.clone(), bind.clone(), exec.clone(), sync.clone()].concat();
        let (v, len, replay) = open(&one, &none).unwrap();
        assert!(proven(v) && len == one.len());
        assert!(
            replay,
            "s1 is new to the client: forgotten again before a replay"
        );
        let unnamed_parse = msg(b'P', b"\0SELECT 1\0\0\0");
        let unnamed_bind = msg(b'B', b"\0\0\0\0\0\0\0\0");
        let batch = [unnamed_parse, unnamed_bind, exec.clone(), sync.clone()].concat();
        let (v, _, replay) = open(&batch, &none).unwrap();
        assert!(proven(v) && replay);
        let two = [
            parse.clone(),
            bind.clone(),
            exec.clone(),
            exec.clone(),
            sync.clone(),
        ]
        .concat();
        assert!(open(&two, &none).is_none());
        let unsynced = [parse.clone(), bind.clone(), exec.clone()].concat();
        assert!(open(&unsynced, &none).is_none());
        // Prepared only (a driver's prepare): where the read would go, never replayed; the
        // prepare of anything else (or with an Execute of a portal bound earlier): the primary.
        let prepare = [parse.clone(), msg(b'D', b"Ss1\0"), sync.clone()].concat();
        let (v, len, replay) = open(&prepare, &none).unwrap();
        assert!(proven(v) && len == prepare.len() && !replay);
        let write = msg(b'P', b"w\0INSERT INTO t VALUES (1)\0\0\0");
        let both = [parse.clone(), write, sync.clone()].concat();
        assert!(open(&both, &none).is_none());
        let run = [parse.clone(), exec.clone(), sync.clone()].concat();
        assert!(open(&run, &none).is_none());
        // A Bind of a name the client never parsed: the primary.
        let bound = [bind.clone(), exec.clone(), sync.clone()].concat();
        assert!(open(&bound, &none).is_none());
        // An unnamed statement parsed in an earlier batch: the primary.
        let unnamed = msg(b'B', b"\0\0\0\0\0\0\0\0");
        let unnamed = [unnamed, exec.clone(), sync.clone()].concat();
        assert!(open(&unnamed, &none).is_none());
    }

    #[test]
    fn a_bind_of_a_statement_parsed_earlier_takes_its_kept_class() {
        let reg = crate::prepared::StatementRegistry::default();
        let mut st = ClientStatements::default();
        st.insert("s1", reg.intern("SELECT v FROM t WHERE id = $1", &[23]));
        st.insert("w", reg.intern("INSERT INTO t(v) VALUES ($1)", &[23]));
        st.insert("ro", reg.intern("BEGIN READ ONLY", &[]));
        let exec = msg(b'E', b"\0\0\0\0\0");
        let sync = msg(b'S', b"");
        let bind = |name: &str| {
            let mut b = vec![0];
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(b"\0\0\0\0\0\0\0");
            msg(b'B', &b)
        };
        let batch = [bind("s1"), msg(b'D', b"P\0"), exec.clone(), sync.clone()].concat();
        let (v, len, replay) = open(&batch, &st).unwrap();
        assert!(proven(v) && len == batch.len() && replay);
        let write = [bind("w"), exec.clone(), sync.clone()].concat();
        assert!(matches!(
            open(&write, &st).unwrap().0,
            route::Verdict::Primary(_)
        ));
        // Two statements bound before the Execute: the second runs, not the first.
        let two = [bind("s1"), bind("w"), exec.clone(), sync.clone()].concat();
        assert!(open(&two, &st).is_none());
        // A read-only transaction may run several statements.
        let ro = [
            bind("ro"),
            exec.clone(),
            bind("s1"),
            exec.clone(),
            sync.clone(),
        ]
        .concat();
        assert!(matches!(
            open(&ro, &st).unwrap().0,
            route::Verdict::DeclaredReadOnly(_)
        ));
        // The batch's own Parse of a name wins over an earlier statement of that name; a name
        // the client has already (the relay refuses the Parse), a Close, or a second Bind: not
        // replayable.
        let reparse = msg(b'P', b"w\0SELECT 2\0\0\0");
        let batch = [reparse, bind("w"), exec.clone(), sync.clone()].concat();
        let (v, _, replay) = open(&batch, &st).unwrap();
        assert!(proven(v) && !replay);
        let close = [bind("s1"), exec.clone(), msg(b'C', b"Ss1\0"), sync.clone()].concat();
        let (v, _, replay) = open(&close, &st).unwrap();
        assert!(proven(v) && !replay);
        let after = [bind("s1"), exec.clone(), bind("w"), sync.clone()].concat();
        let (v, _, replay) = open(&after, &st).unwrap();
        assert!(proven(v) && !replay);
        let fresh = msg(b'P', b"new\0SELECT 3\0\0\0");
        let batch = [fresh, bind("new"), exec.clone(), sync.clone()].concat();
        assert!(open(&batch, &st).unwrap().2);
        assert_eq!(parsed_names(&batch).collect::<Vec<_>>(), vec!["new"]);
        // Names not rewritten (max_prepared_statements = 0): a named statement stays where it
        // was parsed, so whatever names one goes to the primary; unnamed ones still route.
        assert!(opening(&[bind("s1"), exec.clone(), sync.clone()].concat(), None).is_none());
        let prepare = [msg(b'P', b"n\0SELECT 1\0\0\0"), sync.clone()].concat();
        assert!(opening(&prepare, Some(&st)).is_some());
        assert!(opening(&prepare, None).is_none());
        let unnamed = [
            msg(b'P', b"\0SELECT 1\0\0\0"),
            msg(b'B', b"\0\0\0\0\0\0\0\0"),
            exec.clone(),
            sync.clone(),
        ]
        .concat();
        assert!(opening(&unnamed, None).is_some());
        // Pipelined past the Sync: the batch alone is the opening.
        let piped = [bind("s1"), exec.clone(), sync.clone(), bind("w")].concat();
        assert_eq!(open(&piped, &st).unwrap().1, piped.len() - bind("w").len());
    }
}
