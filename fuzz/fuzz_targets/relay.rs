//! The relay's protocol core, stateful: arbitrary client message sequences (a menu of well-formed
//! messages and raw ones), split arbitrarily on the wire, against a scripted PostgreSQL backend.
//! Fails when the relay calls a server clean (back to the pool) while the backend is busy, in
//! COPY, in a transaction or skipping to Sync, or has replies unread; or when it forwards a
//! message type PostgreSQL does not define (see `sluice::forward::sim`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sluice::forward::sim::run(data);
});
