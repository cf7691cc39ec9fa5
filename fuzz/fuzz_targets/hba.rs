//! pg_hba.conf and pg_ident.conf from memory (`parse_hba`, `parse_ident`), then the matcher over
//! whatever parsed. `@file` includes are answered from the input itself (the text after a line
//! `--include--`), so nothing is read from disk; the first byte picks the request's facts.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sluice_config::{parse_hba, parse_ident, ClientAddr, HbaRequest};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (hba, include) = text.split_once("\n--include--\n").unwrap_or((text, ""));
    let (include, ident) = include.split_once("\n--ident--\n").unwrap_or((include, ""));
    let mut depth = 0;
    let mut loader = |_: &Path| -> Result<String, String> {
        // A file that includes itself must end in an error, not a stack overflow.
        depth += 1;
        if depth > 64 {
            return Err("too deep".into());
        }
        Ok(include.to_string())
    };
    let Ok(rules) = parse_hba(hba, Path::new("/fuzz/pg_hba.conf"), &mut loader) else {
        return;
    };
    let idents = parse_ident(ident, Path::new("/fuzz/pg_ident.conf")).ok();
    let addr = match flags % 3 {
        0 => ClientAddr::Unix,
        1 => ClientAddr::Ip(IpAddr::V4(Ipv4Addr::new(10, flags, 0, 1))),
        _ => ClientAddr::Ip(IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, flags.into()))),
    };
    let req = HbaRequest {
        addr,
        is_tls: flags & 4 != 0,
        cert_cn: (flags & 8 != 0).then_some("alice"),
        peer_user: (flags & 16 != 0).then_some("root"),
        database: if flags & 32 != 0 { "app" } else { "alice" },
        user: "alice",
        physical_replication: flags & 64 != 0,
    };
    let (rule, _verdict) = rules.evaluate(idents.as_ref(), &req);
    if let Some(rule) = rule {
        assert!(rules.rules.contains(rule), "the matching rule is one of the parsed rules");
    }
});
