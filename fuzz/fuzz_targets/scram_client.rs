//! SCRAM client side (the pooler logging in to a server): server-first-message, then
//! server-final-message, separated by a NUL in the input. Pass-through keys are used so that a
//! huge server-chosen iteration count is not a time-out (see sluice_fuzz::scram_keys).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{scram_keys, two_steps, CLIENT_NONCE};
use sluice_protocol::{ScramClient, ScramCredential};

fuzz_target!(|data: &[u8]| {
    let (first, fin) = two_steps(data);
    let mut client = ScramClient::with_nonce(ScramCredential::Keys(scram_keys()), "", CLIENT_NONCE);
    let Ok(client_final) = client.handle_server_first(first) else {
        assert!(!client.is_done());
        return;
    };
    assert!(client_final.starts_with(b"c=biws,r="));
    let Some(fin) = fin else {
        return;
    };
    let verified = client.handle_server_final(fin).is_ok();
    assert_eq!(verified, client.is_done());
    assert!(client.handle_server_final(fin).is_err());
});
