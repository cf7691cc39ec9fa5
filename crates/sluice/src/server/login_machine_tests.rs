//! The login machine against scripted servers: a real SCRAM exchange (`ScramServer`), and what a
//! hostile one may try.

use super::*;
use sluice_config::SettingValue;
use sluice_protocol::{
    decode_sasl_initial, encode_auth_cleartext, encode_auth_md5, encode_auth_ok, encode_auth_sasl,
    encode_auth_sasl_continue, encode_auth_sasl_final, encode_parameter_status,
    encode_ready_for_query, ScramSecret, ScramServer,
};

fn machine(secret: Option<StoredSecret>, rules: LoginRules) -> LoginMachine {
    LoginMachine::new("alice", secret, None, None, rules)
}

fn plain(p: &str) -> Option<StoredSecret> {
    Some(StoredSecret::Plain(p.into()))
}

/// Feed one encoded backend message; returns the step (with owned parameter text) and the reply.
fn feed(m: &mut LoginMachine, msg: &BytesMut) -> (Result<String, ServerError>, BytesMut) {
    let mut out = BytesMut::new();
    let step = m
        .on_message(msg[0], &msg[5..], &mut out)
        .map(|s| format!("{s:?}"));
    (step, out)
}

fn msg(f: impl FnOnce(&mut BytesMut)) -> BytesMut {
    let mut b = BytesMut::new();
    f(&mut b);
    b
}

fn reason(e: ServerError) -> (String, String) {
    match e {
        ServerError::Refused { sqlstate, reason } => (sqlstate.to_string(), reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Runs a SCRAM login against `ScramServer` for `secret`; the derive step runs here.
fn scram_login(password: &str, server_secret: ScramSecret) -> Result<(), ServerError> {
    let mut m = machine(plain(password), LoginRules::default());
    let (step, out) = feed(&mut m, &msg(|b| encode_auth_sasl(&["SCRAM-SHA-256"], b)));
    assert_eq!(step?, "Read");
    let initial = decode_sasl_initial(&out[5..]).unwrap().data;
    let (salt, iterations) = (server_secret.salt.clone(), server_secret.iterations);
    let mut server = ScramServer::new(server_secret, [3; 18]);
    let first = server.handle_client_first(initial).unwrap();
    let (step, out) = feed(&mut m, &msg(|b| encode_auth_sasl_continue(&first, b)));
    assert!(out.is_empty());
    assert!(step?.starts_with("Derive"));
    let derive = ScramKeys::from_password(password, &salt, iterations);
    let mut out = BytesMut::new();
    m.keys_derived(&derive, &mut out)?;
    let fin = server
        .handle_client_final(&out[5..])
        .map_err(|_| ServerError::Auth("bad proof".into()))?;
    feed(&mut m, &msg(|b| encode_auth_sasl_final(&fin.0, b))).0?;
    feed(&mut m, &msg(encode_auth_ok)).0?;
    let (step, _) = feed(
        &mut m,
        &msg(|b| encode_parameter_status("TimeZone", "UTC", b)),
    );
    assert_eq!(step?, r#"Param("TimeZone", "UTC")"#);
    let (step, _) = feed(
        &mut m,
        &msg(|b| encode_ready_for_query(TransactionStatus::Idle, b)),
    );
    assert_eq!(step?, "Ready(Idle)");
    Ok(())
}

#[test]
fn a_scram_login_derives_keys_through_the_caller() {
    scram_login(
        "pw",
        ScramSecret::from_password("pw", b"salt-salt-salt", 4096),
    )
    .unwrap();
    assert!(scram_login("other", ScramSecret::from_password("pw", b"salt", 4096)).is_err());
}

#[test]
fn too_many_iterations_are_refused_before_any_derivation() {
    let mut m = machine(plain("pw"), LoginRules::default());
    let (_, out) = feed(&mut m, &msg(|b| encode_auth_sasl(&["SCRAM-SHA-256"], b)));
    let initial = decode_sasl_initial(&out[5..]).unwrap().data;
    let nonce = std::str::from_utf8(initial)
        .unwrap()
        .split("r=")
        .nth(1)
        .unwrap()
        .to_string();
    let first = format!("r={nonce}xyz,s=c2FsdA==,i=2147483647");
    let (step, _) = feed(
        &mut m,
        &msg(|b| encode_auth_sasl_continue(first.as_bytes(), b)),
    );
    let (code, why) = reason(step.unwrap_err());
    assert_eq!(code, "08P01");
    assert_eq!(
        why,
        "the server asked for 2147483647 SCRAM iterations, more than server_scram_max_iterations (100000)"
    );
}

#[test]
fn authentication_ok_without_a_verified_scram_exchange_is_refused() {
    let mut m = machine(plain("pw"), LoginRules::default());
    feed(&mut m, &msg(|b| encode_auth_sasl(&["SCRAM-SHA-256"], b)))
        .0
        .unwrap();
    let (code, _) = reason(feed(&mut m, &msg(encode_auth_ok)).0.unwrap_err());
    assert_eq!(code, "08P01");
}

#[test]
fn one_authentication_request_per_login() {
    let mut m = machine(plain("pw"), LoginRules::default());
    feed(&mut m, &msg(encode_auth_cleartext)).0.unwrap();
    let (_, why) = reason(
        feed(&mut m, &msg(|b| encode_auth_md5([1; 4], b)))
            .0
            .unwrap_err(),
    );
    assert!(why.contains("second authentication request"), "{why}");
    let mut m = machine(None, LoginRules::default());
    feed(&mut m, &msg(encode_auth_ok)).0.unwrap();
    assert!(feed(&mut m, &msg(encode_auth_cleartext)).0.is_err());
    let mut m = machine(None, LoginRules::default());
    let ready = msg(|b| encode_ready_for_query(TransactionStatus::Idle, b));
    assert!(
        feed(&mut m, &ready).0.is_err(),
        "ready before authentication"
    );
}

#[test]
fn require_auth_refuses_what_it_does_not_name() {
    let rules = |s: &str| LoginRules {
        require_auth: RequireAuth::parse(s).unwrap(),
        ..LoginRules::default()
    };
    let mut m = machine(plain("pw"), rules("scram-sha-256"));
    let (code, why) = reason(feed(&mut m, &msg(encode_auth_cleartext)).0.unwrap_err());
    assert_eq!(code, "28000");
    assert!(why.contains("\"password\""), "{why}");
    // Trust is a method too ("none").
    let mut m = machine(plain("pw"), rules("md5"));
    assert!(feed(&mut m, &msg(encode_auth_ok)).0.is_err());
    let mut m = machine(plain("pw"), rules("md5,none"));
    assert!(feed(&mut m, &msg(encode_auth_ok)).0.is_ok());
    let mut m = machine(plain("pw"), rules("!password"));
    assert!(feed(&mut m, &msg(|b| encode_auth_md5([1; 4], b))).0.is_ok());
    // The default (empty) accepts a cleartext request, as PgBouncer does.
    let mut m = machine(plain("pw"), LoginRules::default());
    let (step, out) = feed(&mut m, &msg(encode_auth_cleartext));
    assert_eq!(step.unwrap(), "Read");
    assert_eq!(&out[..1], b"p");
}

#[test]
fn floods_end_the_login() {
    let mut m = machine(None, LoginRules::default());
    feed(&mut m, &msg(encode_auth_ok)).0.unwrap();
    let param = msg(|b| encode_parameter_status("x", "y", b));
    let mut failed = None;
    for i in 0..=MAX_LOGIN_MESSAGES {
        if let Err(e) = feed(&mut m, &param).0 {
            failed = Some(i);
            reason(e);
            break;
        }
    }
    assert_eq!(failed, Some(MAX_LOGIN_MESSAGES - 1));
}

#[test]
fn malformed_and_unexpected_messages_are_refusals() {
    let mut m = machine(None, LoginRules::default());
    let mut out = BytesMut::new();
    reason(m.on_message(b'K', &[1, 2, 3], &mut out).unwrap_err());
    reason(m.on_message(b'D', &[], &mut out).unwrap_err());
    reason(m.on_message(b'R', &[0, 0, 0, 12, 1], &mut out).unwrap_err());
    let mut m = machine(plain("pw"), LoginRules::default());
    reason(
        m.on_message(b'R', &[0, 0, 0, 11, b'x'], &mut out)
            .unwrap_err(),
    );
}
