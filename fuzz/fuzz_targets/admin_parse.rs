//! The admin console parser (queries on the virtual `pgbouncer` database): PgBouncer's grammar
//! with its length limits. Whatever it accepts stays within those limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::admin_parse::{parse, Command};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    match parse(query) {
        Ok(Command::Show(s)) => assert!(s.len() <= 63, "{s:?}"),
        Ok(Command::Set { key, value }) => assert!(key.len() <= 63 && value.len() <= 255),
        Ok(Command::Word { cmd, arg }) => {
            assert!(cmd.len() <= 15);
            assert!(arg.is_none_or(|a| a.len() <= 63));
        }
        Ok(Command::Empty) | Err(_) => {}
    }
});
