//! userlist.txt (`parse_userlist`) and the stored secrets it holds (`StoredSecret`, `ScramSecret`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_config::parse_userlist;
use sluice_protocol::{ScramSecret, StoredSecret};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(users) = parse_userlist(&text, "userlist.txt") else {
        return;
    };
    for (_user, secret) in &users {
        let _ = StoredSecret::parse(secret);
        if let Ok(s) = ScramSecret::parse(secret) {
            // A parsed verifier prints back to one that parses the same.
            assert_eq!(ScramSecret::parse(&s.to_string_secret()), Ok(s));
        }
    }
});
