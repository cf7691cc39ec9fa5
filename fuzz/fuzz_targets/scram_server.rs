//! SCRAM server side (the pooler verifying a client): client-first-message, then
//! client-final-message, separated by a NUL in the input. The server nonce is fixed so the
//! committed seeds hold complete, verifying exchanges.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{scram_secret, two_steps, SERVER_NONCE};
use sluice_protocol::ScramServer;

fuzz_target!(|data: &[u8]| {
    let (first, fin) = two_steps(data);
    let mut server = ScramServer::with_nonce(scram_secret(), SERVER_NONCE);
    let Ok(server_first) = server.handle_client_first(first) else {
        assert!(!server.is_done());
        return;
    };
    assert!(server_first.starts_with(b"r="));
    let Some(fin) = fin else {
        return;
    };
    match server.handle_client_final(fin) {
        Ok((server_final, _keys)) => {
            assert!(server.is_done());
            assert!(server_final.starts_with(b"v="));
        }
        Err(_) => assert!(!server.is_done()),
    }
    // The exchange is over either way: nothing more is accepted.
    assert!(server.handle_client_final(fin).is_err());
    assert!(server.handle_client_first(first).is_err());
});
