//! Message header peek (`peek_header`): the first thing Sluice runs on every client and server
//! byte after login. The first input byte picks the limit, the rest is a byte stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_protocol::{peek_header, ProtocolError, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, mut rest)) = data.split_first() else {
        return;
    };
    let max = match pick % 4 {
        0 => 4,
        1 => 8192,
        2 => 1 << 20,
        _ => usize::MAX,
    };
    while let Ok(Some(h)) = peek_header(rest, max) {
        assert!(h.len >= 4 && h.len as usize <= max);
        assert_eq!(h.tag, rest[0]);
        assert_eq!(h.total_len(), h.len as usize + 1);
        assert_eq!(h.body_len() + HEADER_LEN, h.total_len());
        match rest.get(h.total_len()..) {
            Some(next) => rest = next,
            None => break,
        }
    }
    match peek_header(rest, max) {
        Ok(None) => assert!(rest.len() < HEADER_LEN),
        Ok(Some(_)) => {}
        Err(ProtocolError::BadHeader) => {}
        Err(ProtocolError::TooLarge { len, max: m }) => assert!(len > m && m == max),
        Err(e) => panic!("unexpected header error {e:?}"),
    }
});
