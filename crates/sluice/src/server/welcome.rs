//! A pool's welcome: the ParameterStatus set of its first server, which every client of the pool
//! is greeted with (its own values in place of the tracked parameters it sent).
//!
//! Most of the greeting (server_version, server_encoding, integer_datetimes, ...) is the same for
//! every client, so it is encoded once per welcome and copied; only the tracked parameters are
//! encoded per login. The welcome also holds the pool's shared copies of parameter values
//! (`share`), which make matching a server to a client a pointer comparison.

use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use sluice_protocol::encode_parameter_status;

use super::params::{same_value, ParamMap, TrackedSet, ValuesMark};

/// At most this many client values (beyond the welcome's) are shared per pool: enough for the
/// application names and settings of a pool's client programs, bounded when every client's
/// value is its own (application_name_add_host).
const MAX_SHARED_CLIENT_VALUES: usize = 64;

/// At most this many distinct sets of client values get a shared mark and greeting per pool
/// (`mark_and_greet`).
const MAX_VALUE_SETS: usize = 64;

/// What follows the parameters in a welcome: BackendKeyData (17 bytes) and ReadyForQuery (6), with
/// room to spare.
const WELCOME_TAIL: usize = 32;

#[derive(Debug)]
pub struct Welcome {
    pub params: ParamMap,
    /// ParameterStatus messages of the untracked parameters, encoded at the first login (the
    /// tracked set is fixed for the process's lifetime).
    untracked: OnceLock<Bytes>,
    /// Values clients sent that the welcome does not have, one shared copy each (`share`).
    client_values: Mutex<Vec<Arc<str>>>,
    /// The distinct sets of client values seen, each with its mark and greeting (`mark_and_greet`).
    marks: Mutex<Vec<ValueSet>>,
}

/// One set of client values a pool has seen.
#[derive(Debug)]
struct ValueSet {
    values: ParamMap,
    mark: Arc<ValuesMark>,
    /// The tracked part of these clients' greeting (ParameterStatus messages).
    greeting: Bytes,
}

impl Welcome {
    pub fn new(params: ParamMap) -> Self {
        Welcome {
            params,
            untracked: OnceLock::new(),
            client_values: Mutex::new(Vec::new()),
            marks: Mutex::new(Vec::new()),
        }
    }

    /// Make a client's values the pool's shared copies: the welcome's where equal, else one
    /// kept here, so that matching servers to clients compares pointers (`set_statement`).
    pub fn share(&self, client: &mut ParamMap) {
        let mut kept = None;
        client.share_values_with(|v| {
            if let Some(w) = self.params.values().find(|w| same_value(w, v)) {
                return Some(w.clone());
            }
            let kept = kept.get_or_insert_with(|| self.client_values.lock());
            if let Some(k) = kept.iter().find(|k| same_value(k, v)) {
                return Some(k.clone());
            }
            if kept.len() < MAX_SHARED_CLIENT_VALUES {
                kept.push(v.clone());
            }
            None
        });
    }

    /// Mark a client's (shared, filled) values and append its greeting. Clients with equal
    /// values get the same mark, so a server that matched one matches the others without
    /// comparing values (`set_statement`), and the same greeting, encoded once per set of values
    /// (~1,800 instructions per login otherwise). Past `MAX_VALUE_SETS` distinct sets a client
    /// gets a mark of its own and its greeting is encoded for it (still correct: the mark then
    /// only spares the comparison when the client meets a server it aligned before).
    pub fn mark_and_greet(&self, tracked: &TrackedSet, client: &mut ParamMap, out: &mut BytesMut) {
        let known = {
            let marks = self.marks.lock();
            marks
                .iter()
                .find(|set| set.values == *client)
                .map(|set| (set.mark.clone(), set.greeting.clone()))
        };
        let (mark, greeting) = match known {
            Some(known) => known,
            None => {
                let mark = Arc::new(ValuesMark);
                let greeting = self.tracked_greeting(tracked, client);
                let mut marks = self.marks.lock();
                if marks.len() < MAX_VALUE_SETS {
                    marks.push(ValueSet {
                        values: client.clone(),
                        mark: mark.clone(),
                        greeting: greeting.clone(),
                    });
                }
                (mark, greeting)
            }
        };
        client.set_mark(mark);
        let untracked = self.untracked(tracked);
        // One allocation for the whole welcome (the parameters, then BackendKeyData and
        // ReadyForQuery, `WELCOME_TAIL`), instead of growing step by step behind AuthenticationOk.
        out.reserve(untracked.len() + greeting.len() + WELCOME_TAIL);
        out.extend_from_slice(untracked);
        out.extend_from_slice(&greeting);
    }

    /// Append the greeting of a client whose tracked parameters, filled from this welcome
    /// (`ParamMap::fill_tracked_from`), are `client` (encoded, not looked up).
    #[cfg(test)]
    pub fn encode_greeting(&self, tracked: &TrackedSet, client: &ParamMap, out: &mut BytesMut) {
        out.extend_from_slice(self.untracked(tracked));
        out.extend_from_slice(&self.tracked_greeting(tracked, client));
    }

    /// The ParameterStatus messages every client gets alike (encoded at the first login).
    fn untracked(&self, tracked: &TrackedSet) -> &Bytes {
        self.untracked.get_or_init(|| {
            let mut b = BytesMut::new();
            for (k, v) in self.params.iter() {
                if tracked.canonical(k).is_none() {
                    encode_parameter_status(k, v, &mut b);
                }
            }
            b.freeze()
        })
    }

    /// The ParameterStatus messages of a client's tracked parameters.
    fn tracked_greeting(&self, tracked: &TrackedSet, client: &ParamMap) -> Bytes {
        let mut b = BytesMut::new();
        for (k, v) in client.tracked_greeting(tracked, &self.params) {
            encode_parameter_status(k, v, &mut b);
        }
        b.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::decode_parameter_status;

    fn decode_all(mut b: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            assert_eq!(b[0], b'S');
            let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            let (k, v) = decode_parameter_status(&b[5..1 + len]).unwrap();
            out.push((k.to_string(), v.to_string()));
            b = &b[1 + len..];
        }
        out.sort();
        out
    }

    #[test]
    fn clients_share_the_welcomes_values_then_the_pools_kept_ones() {
        let mut server = ParamMap::new();
        server.set("TimeZone", "UTC");
        let welcome = Welcome::new(server);
        let login = |app: &str| {
            let mut client = ParamMap::new();
            client.set("timezone", "UTC");
            client.set("application_name", app);
            welcome.share(&mut client);
            client
        };
        let (a, b) = (login("app"), login("app"));
        let shared = |x: &ParamMap, y: &ParamMap, name: &str| {
            Arc::ptr_eq(x.value(name).unwrap(), y.value(name).unwrap())
        };
        assert!(shared(&a, &welcome.params, "TimeZone"));
        assert!(shared(&a, &b, "application_name"));
        // Bounded: once the pool keeps MAX_SHARED_CLIENT_VALUES values, new ones stay the client's.
        for i in 0..MAX_SHARED_CLIENT_VALUES {
            login(&format!("app{i}"));
        }
        assert_eq!(welcome.client_values.lock().len(), MAX_SHARED_CLIENT_VALUES);
        let (c, d) = (login("late"), login("late"));
        assert!(!shared(&c, &d, "application_name"));
        assert_eq!(c, d, "the same values all the same");
    }

    #[test]
    fn equal_client_values_share_a_mark_that_any_change_drops() {
        use crate::server::params::set_statement;
        let tracked = TrackedSet::new(&[]);
        let mut first = ParamMap::new();
        first.set("TimeZone", "UTC");
        first.set("application_name", "");
        let welcome = Welcome::new(first.clone());
        let login = |app: &str| {
            let mut client = ParamMap::new();
            client.set("application_name", app);
            client.fill_tracked_from(&tracked, &welcome.params);
            welcome.share(&mut client);
            welcome.mark_and_greet(&tracked, &mut client, &mut BytesMut::new());
            client
        };
        let (a, b, other) = (login("app"), login("app"), login("other"));
        let same = |x: &ParamMap, y: &ParamMap| match (x.mark(), y.mark()) {
            (Some(p), Some(q)) => Arc::ptr_eq(p, q),
            _ => false,
        };
        assert!(same(&a, &b));
        assert!(!same(&a, &other));
        // A server aligned to `a` takes its mark, so `b` needs no SET and no comparison.
        let mut server = first;
        assert_eq!(
            set_statement(&tracked, &a, &mut server).as_deref(),
            Some("SET application_name='app';")
        );
        server.set("application_name", "app");
        assert_eq!(set_statement(&tracked, &a, &mut server), None);
        assert!(same(&server, &b));
        assert_eq!(set_statement(&tracked, &b, &mut server), None);
        // A value the server reports changed drops its mark: the client's value is SET again.
        server.set("TimeZone", "Europe/Berlin");
        assert!(server.mark().is_none());
        assert_eq!(
            set_statement(&tracked, &b, &mut server).as_deref(),
            Some("SET TimeZone='UTC';")
        );
        // So does a change of the client's own values (a SET it ran): compared again.
        let mut c = login("app");
        server.set("TimeZone", "UTC");
        assert_eq!(set_statement(&tracked, &c, &mut server), None);
        c.set("TimeZone", "Asia/Tokyo");
        assert!(c.mark().is_none());
        assert_eq!(
            set_statement(&tracked, &c, &mut server).as_deref(),
            Some("SET TimeZone='Asia/Tokyo';")
        );
    }

    #[test]
    fn greeting_has_the_servers_values_and_the_clients_tracked_ones() {
        let tracked = TrackedSet::new(&["intervalstyle".to_string()]);
        let mut server = ParamMap::new();
        for (k, v) in [
            ("server_version", "15.0"),
            ("TimeZone", "UTC"),
            ("client_encoding", "UTF8"),
            ("IntervalStyle", "postgres"),
            ("application_name", ""),
            ("integer_datetimes", "on"),
        ] {
            server.set(k, v);
        }
        let welcome = Welcome::new(server);
        let mut client = ParamMap::new();
        client.set("application_name", "app");
        client.set("intervalstyle", "iso_8601");
        // (A client's map holds tracked names only: startup packets and options are filtered.)
        client.fill_tracked_from(&tracked, &welcome.params);
        assert_eq!(client.get("TimeZone"), Some("UTC"));
        assert_eq!(client.get("IntervalStyle"), Some("iso_8601"));
        assert_eq!(client.get("server_version"), None, "not tracked");
        let expected: Vec<(String, String)> = [
            // The server's spelling of a tracked name: clients look names up case-sensitively.
            ("IntervalStyle", "iso_8601"),
            ("TimeZone", "UTC"),
            ("application_name", "app"),
            ("client_encoding", "UTF8"),
            ("integer_datetimes", "on"),
            ("server_version", "15.0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut encoded = BytesMut::new();
        welcome.encode_greeting(&tracked, &client, &mut encoded);
        assert_eq!(decode_all(&encoded), expected);
        for _ in 0..2 {
            // The first login encodes and keeps the greeting of these values, the second copies it.
            let mut out = BytesMut::new();
            welcome.mark_and_greet(&tracked, &mut client.clone(), &mut out);
            assert_eq!(out, encoded);
        }
        assert_eq!(welcome.marks.lock().len(), 1);
        // Other values, another greeting.
        let mut other = client.clone();
        other.set("application_name", "other");
        let mut out = BytesMut::new();
        welcome.mark_and_greet(&tracked, &mut other, &mut out);
        let got = decode_all(&out);
        assert!(got.contains(&("application_name".to_string(), "other".to_string())));
        assert!(!got.contains(&("application_name".to_string(), "app".to_string())));
    }
}
