//! SHOW CLIENTS, SERVERS, SOCKETS, ACTIVE_SOCKETS and FDS, read off the client registry and the
//! pools' server books. `ptr`/`link` use the C-<id>/S-<id> names of the log lines.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use super::result::{null, num, text, time, Col, ResultSet, Value};
use crate::app::App;
use crate::client::registry::ClientState;
use crate::net::PeerAddr;
use crate::pool::rules;
use crate::pool::servers::ServerState;

const I: Col = Col::Int4;
const T: Col = Col::Text;

macro_rules! conn_columns {
    ($($extra:expr),*) => {
        &[
            ("type", T),
            ("user", T),
            ("database", T),
            ("replication", T),
            ("state", T),
            ("addr", T),
            ("port", I),
            ("local_addr", T),
            ("local_port", I),
            ("connect_time", Col::Time),
            ("request_time", Col::Time),
            ("wait", I),
            ("wait_us", I),
            ("close_needed", I),
            ("ptr", T),
            ("link", T),
            ("remote_pid", I),
            ("tls", T),
            ("application_name", T),
            ("prepared_statements", I),
            ("id", I),
            $($extra),*
        ]
    };
}

pub const CLIENTS_COLUMNS: &[(&str, Col)] = conn_columns!();
pub const SOCKETS_COLUMNS: &[(&str, Col)] = conn_columns!(
    ("recv_pos", I),
    ("pkt_pos", I),
    ("pkt_remain", I),
    ("send_pos", I),
    ("send_remain", I),
    ("pkt_avail", I),
    ("send_avail", I)
);

/// One connection as SHOW CLIENTS/SERVERS print it, plus whether it is in an active state.
struct ConnRow {
    values: Vec<Value>,
    active: bool,
}

fn client_rows(app: &App) -> Vec<ConnRow> {
    let listen_port = app.config().settings.listen_port;
    let now = SystemTime::now();
    let mut out = Vec::new();
    for c in app.registry.all() {
        let (db, user) = c.identity.get().cloned().unwrap_or_default();
        let state = c.state();
        let (addr, port, pid) = match &c.peer {
            PeerAddr::Tcp(a) => (a.ip().to_string(), a.port(), 0),
            PeerAddr::Unix { pid } => ("unix".to_string(), listen_port, pid.unwrap_or(0)),
        };
        let (local_addr, local_port) = match c.local_addr.get() {
            Some(a) => (a.ip().to_string(), a.port()),
            None => ("unix".to_string(), listen_port),
        };
        let wait = c.wait(now);
        let server = c.server_id.load(Ordering::Relaxed);
        out.push(ConnRow {
            active: state == ClientState::Active,
            values: vec![
                text("C"),
                text(user),
                text(db),
                text(*c.replication.get().unwrap_or(&"none")),
                text(state.as_str()),
                text(addr),
                num(port),
                text(local_addr),
                num(local_port),
                time(c.connect_time()),
                time(c.request_time()),
                num(wait.as_secs()),
                num(wait.subsec_micros()),
                num(0),
                text(format!("C-{}", c.id)),
                text(if server == 0 {
                    String::new()
                } else {
                    format!("S-{server}")
                }),
                num(pid),
                text(c.tls.get().cloned().unwrap_or_default()),
                text(c.application_name.get()),
                num(c.prepared()),
                num(c.id),
            ],
        });
    }
    out
}

fn server_rows(app: &App) -> Vec<ConnRow> {
    let links: HashMap<u64, crate::ids::ClientId> = app
        .registry
        .all()
        .iter()
        .filter_map(|c| {
            let s = c.server_id.load(Ordering::Relaxed);
            (s != 0).then_some((s, c.id))
        })
        .collect();
    let now = SystemTime::now();
    let mut out = Vec::new();
    for p in app.pools.all() {
        let settings = p.settings();
        for r in p.servers_book.all() {
            let state = match r.state() {
                ServerState::Active => "active",
                ServerState::Tested => "tested",
                ServerState::BeingCanceled => "being_canceled",
                ServerState::Idle => {
                    let idle = now.duration_since(r.request_time()).unwrap_or_default();
                    if settings.check_query.is_some()
                        && rules::needs_check(idle, settings.check_delay, true)
                    {
                        "used"
                    } else {
                        "idle"
                    }
                }
            };
            let (local_addr, local_port) = match r.seen.local {
                Some(a) => (text(a.ip().to_string()), num(a.port())),
                None => (text("unix"), null()),
            };
            out.push(ConnRow {
                active: r.state() != ServerState::Idle,
                values: vec![
                    text("S"),
                    text(p.key.user.clone()),
                    text(p.key.database.clone()),
                    text(*r.replication.get().unwrap_or(&"none")),
                    text(state),
                    text(r.seen.addr.clone()),
                    r.seen.peer_port.map(|v| v.to_string()),
                    local_addr,
                    local_port,
                    time(r.connect_time()),
                    time(r.request_time()),
                    num(0),
                    num(0),
                    num(u8::from(p.close_needed(
                        r.seen.id,
                        r.seen.generation,
                        &settings,
                    ))),
                    text(format!("S-{}", r.seen.id)),
                    text(
                        links
                            .get(&r.seen.id.0)
                            .map(|c| format!("C-{c}"))
                            .unwrap_or_default(),
                    ),
                    num(r.seen.remote_pid),
                    text(r.seen.tls.clone()),
                    text(r.application_name.get()),
                    num(r.prepared()),
                    num(r.seen.id),
                ],
            });
        }
    }
    out
}

pub fn clients(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(CLIENTS_COLUMNS);
    for r in client_rows(app) {
        rs.push(r.values);
    }
    rs
}

pub fn servers(app: &Arc<App>) -> ResultSet {
    let mut rs = ResultSet::new(CLIENTS_COLUMNS);
    for r in server_rows(app) {
        rs.push(r.values);
    }
    rs
}

/// Buffer positions live inside each connection's task and are not sampled, so the seven buffer
/// columns are NULL. `state` is the list's name (`socket_state`). ACTIVE_SOCKETS lists the connections in an active state (linked clients,
/// servers in use), the only ones that can have bytes in flight.
pub fn sockets(app: &Arc<App>, only_active: bool) -> ResultSet {
    let mut rs = ResultSet::new(SOCKETS_COLUMNS);
    for r in client_rows(app).into_iter().chain(server_rows(app)) {
        if only_active && !r.active {
            continue;
        }
        let mut v = r.values;
        v[4] = socket_state(v[0].as_deref(), v[4].as_deref());
        v.extend(std::iter::repeat_n(None, 7));
        rs.push(v);
    }
    rs
}

/// SHOW SOCKETS names the list a connection is on, as PgBouncer does (`cl_active` also for a
/// logged-in client that SHOW CLIENTS calls `idle`), where SHOW CLIENTS / SERVERS give its state.
fn socket_state(kind: Option<&str>, state: Option<&str>) -> Value {
    let state = state.unwrap_or_default();
    Some(match (kind, state) {
        (Some("C"), "login") => "cl_login".to_string(),
        (Some("C"), "waiting") => "cl_waiting".to_string(),
        (Some("C"), _) => "cl_active".to_string(),
        (_, "new") => "sv_login".to_string(),
        (_, s) => format!("sv_{s}"),
    })
}

pub const FDS_COLUMNS: &[(&str, Col)] = &[
    ("fd", I),
    ("task", T),
    ("user", T),
    ("database", T),
    ("addr", T),
    ("port", I),
    ("cancel", Col::Int8),
    ("link", I),
    ("client_encoding", T),
    ("std_strings", T),
    ("datestyle", T),
    ("timezone", T),
    ("password", T),
    ("scram_client_key", Col::Bytea),
    ("scram_server_key", Col::Bytea),
];

/// SHOW FDS exists for PgBouncer's online restart (-R). Sluice's takeover (`takeover/`) passes
/// descriptors over its own socket, not through the console, so the list is empty.
pub fn fds(_app: &Arc<App>) -> ResultSet {
    ResultSet::new(FDS_COLUMNS)
}
