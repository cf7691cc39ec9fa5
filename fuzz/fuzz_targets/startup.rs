//! Startup-phase packets (`decode_startup`): StartupMessage, SSLRequest, GSSENCRequest and
//! CancelRequest, decoded in a loop like the pooler does (a request may precede a startup).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_protocol::{decode_startup, encode_startup, StartupPacket, MAX_STARTUP_LEN};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    // Bounded like the pooler's loop, which also has client_login_timeout behind it.
    for _ in 0..16 {
        let Ok(Some((packet, used))) = decode_startup(rest) else {
            return;
        };
        assert!((8..=MAX_STARTUP_LEN).contains(&used) && used <= rest.len());
        if let StartupPacket::Startup { minor: 0, params } = &packet {
            // A 3.0 startup packet re-encodes to exactly the bytes it came from.
            let mut out = BytesMut::new();
            encode_startup(params, &mut out);
            assert_eq!(&out[..], &rest[..used]);
        }
        rest = &rest[used..];
    }
});
