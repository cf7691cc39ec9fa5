//! The server leg: Sluice's server-login state machine (`sluice::server::login_machine`) fed a
//! scripted hostile server: any authentication request, SASL messages with any attributes,
//! ParameterStatus floods, BackendKeyData of any length, errors mid-login. The first byte picks
//! the stored secret (none, a password, an md5 secret, a SCRAM secret with pass-through keys, one
//! without), server_require_auth, and whether the connection has a TLS end point; the rest is a
//! stream of backend messages. Key derivations asked for run here (iterations bounded by the
//! rules, kept small so that a derivation is not a time-out).
//!
//! Checked besides "no panic, no hang": a derivation never exceeds server_scram_max_iterations;
//! the login completes only after an AuthenticationOk, after a SASLFinal when SCRAM was asked for
//! (whose signature the machine verified), with at most one method asked for and that one allowed
//! by server_require_auth; replies are whole 'p' messages; nothing is accepted past the login's
//! message bound. The seeds (corpus/server_login) replay with the nonce injected here.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice::server::login_machine::{LoginMachine, LoginRules, Step, MAX_LOGIN_MESSAGES};
use sluice_config::{RequireAuth, SettingValue};
use sluice_fuzz::{messages, scram_keys, scram_secret, SCRAM_PASSWORD};
use sluice_protocol::{decode_authentication, peek_header, Authentication, ScramKeys, StoredSecret};

/// Kept small: each derivation asked for is run.
const MAX_ITERATIONS: u32 = 64;
const REQUIRE: [&str; 5] = ["", "scram-sha-256", "md5,password", "!password,!none", "none"];

fuzz_target!(|data: &[u8]| {
    let Some((&flags, script)) = data.split_first() else {
        return;
    };
    let secret = match flags & 7 {
        0 => None,
        1 | 2 => Some(StoredSecret::Plain(SCRAM_PASSWORD.into())),
        3 => Some(StoredSecret::Md5("md5".to_string() + &"0".repeat(32))),
        _ => Some(StoredSecret::Scram(scram_secret())),
    };
    let keys = (flags & 7 >= 5).then(scram_keys);
    let require = REQUIRE[usize::from(flags >> 3) % REQUIRE.len()];
    let rules = LoginRules {
        max_iterations: MAX_ITERATIONS,
        require_auth: RequireAuth::parse(require).unwrap(),
    };
    let end_point = (flags & 0x80 != 0).then(|| vec![7u8; 32]);
    let mut m = LoginMachine::new("alice", secret, keys, end_point, rules.clone())
        .with_nonce(*b"fuzz-client-nonce!");
    let mut authenticated = false;
    let mut sasl_final = false;
    let mut methods = Vec::new();
    let mut count = 0;
    for (tag, body, _) in messages(script) {
        count += 1;
        if tag == b'R' {
            match decode_authentication(body) {
                Ok(Authentication::Ok) => authenticated = true,
                Ok(Authentication::CleartextPassword) => methods.push("password"),
                Ok(Authentication::Md5Password { .. }) => methods.push("md5"),
                Ok(Authentication::Sasl { .. }) => methods.push("scram-sha-256"),
                Ok(Authentication::SaslFinal(_)) => sasl_final = true,
                _ => {}
            }
        }
        let mut out = BytesMut::new();
        let step = m.on_message(tag, body, &mut out);
        let step = match step {
            Ok(Step::Derive(d)) => {
                assert!(d.salt.iterations <= MAX_ITERATIONS, "{:?}", d.salt);
                let keys = ScramKeys::from_password(&d.password, &d.salt.salt, d.salt.iterations);
                m.keys_derived(&keys, &mut out).map(|()| None)
            }
            Ok(Step::Ready(_)) => Ok(Some(())),
            Ok(_) => Ok(None),
            Err(_) => return,
        };
        assert!(count <= MAX_LOGIN_MESSAGES);
        check_replies(&out);
        match step {
            Ok(Some(())) => {
                assert!(authenticated, "ready without AuthenticationOk");
                assert!(methods.len() <= 1, "{methods:?}");
                let method = methods.first().copied().unwrap_or("none");
                assert!(method != "scram-sha-256" || sasl_final, "SCRAM not finished");
                assert!(
                    rules.require_auth.allows(parse_method(method)),
                    "{method} not allowed by {require:?}"
                );
                return;
            }
            Ok(None) => {}
            Err(_) => return,
        }
    }
});

fn parse_method(name: &str) -> sluice_config::ServerAuthMethod {
    use sluice_config::ServerAuthMethod::*;
    match name {
        "password" => Password,
        "md5" => Md5,
        "scram-sha-256" => ScramSha256,
        _ => None,
    }
}

/// Everything the machine asked to send is whole 'p' messages.
fn check_replies(mut out: &[u8]) {
    while !out.is_empty() {
        let h = peek_header(out, 1 << 20).unwrap().expect("a whole header");
        assert_eq!(h.tag, b'p');
        out = out.get(h.total_len()..).expect("a whole message");
    }
}
