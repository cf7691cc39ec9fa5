//! Free TCP port allocation on 127.0.0.1.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Free TCP port on 127.0.0.1, never the same twice in this process.
///
/// Candidates are picked at random below the usual ephemeral range (32768+), so the many outgoing
/// client connections of a test cannot grab the port between this check and the server's bind;
/// each candidate is verified by binding it. Falls back to binding port 0.
pub fn free_port() -> u16 {
    let mut guard = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let used = guard.get_or_insert_with(HashSet::new);
    let state = RandomState::new();
    for i in 0..200u64 {
        let mut h = state.build_hasher();
        h.write_u64(i);
        h.write_u32(std::process::id());
        let port = 15000 + (h.finish() % 17000) as u16;
        if !used.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            used.insert(port);
            return port;
        }
    }
    loop {
        let l = TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        if used.insert(port) {
            return port;
        }
    }
}
