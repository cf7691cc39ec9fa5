//! SCRAM exchange tests: RFC 7677 vector, server/client interop, pass-through keys, tampering.

use super::channel_binding::{ClientBinding, SCRAM_SHA_256_PLUS};
use super::*;
use crate::error::ProtocolError;

const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc_secret() -> ScramSecret {
    ScramSecret::from_password("pencil", &b64_decode(RFC_SALT).unwrap(), 4096)
}

fn secret(password: &str) -> ScramSecret {
    ScramSecret::from_password(password, b"0123456789abcdef", 4096)
}

/// Runs a full exchange; returns the keys the server recovered.
fn exchange(
    server: &mut ScramServer,
    client: &mut ScramClient,
) -> Result<ScramKeys, ProtocolError> {
    let server_first = server.handle_client_first(&client.client_first())?;
    let client_final = client.handle_server_first(&server_first)?;
    let (server_final, keys) = server.handle_client_final(&client_final)?;
    client.handle_server_final(&server_final)?;
    Ok(keys)
}

#[test]
fn rfc7677_server_side() {
    let mut server = ScramServer::with_nonce(rfc_secret(), RFC_SERVER_NONCE);
    let first = server
        .handle_client_first(RFC_CLIENT_FIRST.as_bytes())
        .unwrap();
    assert_eq!(String::from_utf8(first).unwrap(), RFC_SERVER_FIRST);
    let (fin, keys) = server
        .handle_client_final(RFC_CLIENT_FINAL.as_bytes())
        .unwrap();
    assert_eq!(String::from_utf8(fin).unwrap(), RFC_SERVER_FINAL);
    assert!(server.is_done());
    let expected = ScramKeys::from_password("pencil", &b64_decode(RFC_SALT).unwrap(), 4096);
    assert_eq!(keys, expected);
}

#[test]
fn rfc7677_client_side() {
    let cred = ScramCredential::Password("pencil".into());
    let mut client = ScramClient::with_nonce(cred, "user", RFC_CLIENT_NONCE);
    assert_eq!(client.client_first(), RFC_CLIENT_FIRST.as_bytes());
    let fin = client
        .handle_server_first(RFC_SERVER_FIRST.as_bytes())
        .unwrap();
    assert_eq!(String::from_utf8(fin).unwrap(), RFC_CLIENT_FINAL);
    client
        .handle_server_final(RFC_SERVER_FINAL.as_bytes())
        .unwrap();
    assert!(client.is_done());
}

#[test]
fn interop_with_password() {
    let mut server = ScramServer::new(secret("s3cret"), [7; 18]);
    let mut client = ScramClient::new(ScramCredential::Password("s3cret".into()), [9; 18]);
    assert!(client.client_first().starts_with(b"n,,n=,r="));
    let keys = exchange(&mut server, &mut client).unwrap();
    assert!(server.is_done() && client.is_done());
    assert_eq!(keys.server_key, secret("s3cret").server_key);
    assert_eq!(keys.stored_key(), secret("s3cret").stored_key);
}

#[test]
fn pass_through_with_recovered_keys() {
    // Client -> pooler with a password; the pooler recovers keys...
    let stored = secret("hunter2");
    let mut pooler = ScramServer::new(stored.clone(), [1; 18]);
    let mut app = ScramClient::new(ScramCredential::Password("hunter2".into()), [2; 18]);
    let keys = exchange(&mut pooler, &mut app).unwrap();
    // ...and logs in to a server holding the same secret without knowing the password.
    let mut postgres = ScramServer::new(stored, [3; 18]);
    let mut pooler_client = ScramClient::new(ScramCredential::Keys(keys.clone()), [4; 18]);
    let again = exchange(&mut postgres, &mut pooler_client).unwrap();
    assert_eq!(again, keys);
}

#[test]
fn pass_through_against_different_secret_fails() {
    let keys = ScramKeys::from_password("hunter2", b"0123456789abcdef", 4096);
    let mut postgres = ScramServer::new(secret("other"), [3; 18]);
    let mut c = ScramClient::new(ScramCredential::Keys(keys), [4; 18]);
    assert_eq!(
        exchange(&mut postgres, &mut c),
        Err(ProtocolError::Scram("invalid proof"))
    );
}

#[test]
fn wrong_password_is_invalid_proof() {
    let mut server = ScramServer::new(secret("right"), [7; 18]);
    let mut client = ScramClient::new(ScramCredential::Password("wrong".into()), [9; 18]);
    assert_eq!(
        exchange(&mut server, &mut client),
        Err(ProtocolError::Scram("invalid proof"))
    );
    assert!(!server.is_done());
    // The exchange is over: no retry on the same state.
    assert!(server.handle_client_final(b"c=biws").is_err());
    assert!(server.handle_client_first(b"n,,n=,r=abc").is_err());
}

#[test]
fn mock_secret_never_verifies() {
    let mock = ScramSecret::mock("nobody", b"mock key", 4096);
    for guess in ["", "nobody", "password"] {
        let mut server = ScramServer::new(mock.clone(), [5; 18]);
        let mut client = ScramClient::new(ScramCredential::Password(guess.into()), [6; 18]);
        assert_eq!(
            exchange(&mut server, &mut client),
            Err(ProtocolError::Scram("invalid proof"))
        );
    }
}

#[test]
fn y_flag_accepted_p_rejected() {
    let mut server = ScramServer::new(secret("pw"), [7; 18]);
    let first = server.handle_client_first(b"y,,n=,r=clientnonce").unwrap();
    let first = String::from_utf8(first).unwrap();
    // A client computing its proof with the "y,," header (c=eSws) verifies.
    let mut client =
        ScramClient::with_nonce(ScramCredential::Password("pw".into()), "", "clientnonce");
    let fin = client.handle_server_first(first.as_bytes()).unwrap();
    let fin = String::from_utf8(fin).unwrap();
    // Our client always sends biws; the server must see the mismatch against "y,,".
    assert_eq!(
        server.handle_client_final(fin.as_bytes()).err(),
        Some(ProtocolError::Scram("channel binding mismatch"))
    );

    // Without TLS there is nothing to bind to: "p=" fails, whatever the mechanism.
    let mut server = ScramServer::new(secret("pw"), [7; 18]);
    assert_eq!(
        server.handle_client_first(b"p=tls-server-end-point,,n=,r=abc"),
        Err(ProtocolError::Scram(
            "channel binding used without SCRAM-SHA-256-PLUS"
        ))
    );
    let mut server = ScramServer::new(secret("pw"), [7; 18]);
    assert!(server.select_mechanism(SCRAM_SHA_256_PLUS).is_err());
}

fn plus_exchange(
    server_binding: &[u8],
    client: ClientBinding,
    mechanism: &str,
) -> Result<ScramKeys, ProtocolError> {
    let mut server =
        ScramServer::new(secret("pw"), [7; 18]).with_channel_binding(server_binding.to_vec());
    assert_eq!(server.mechanisms(), &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
    let mut client =
        ScramClient::new(ScramCredential::Password("pw".into()), [8; 18]).with_binding(client);
    server.select_mechanism(mechanism)?;
    let sf = server.handle_client_first(&client.client_first())?;
    let cf = client.handle_server_first(&sf)?;
    let (fin, keys) = server.handle_client_final(&cf)?;
    client.handle_server_final(&fin)?;
    assert!(client.is_done());
    Ok(keys)
}

#[test]
fn channel_binding_exchange() {
    let hash = b"0123456789abcdef0123456789abcdef";
    let bound = ClientBinding::TlsServerEndPoint(hash.to_vec());
    assert_eq!(bound.mechanism(), SCRAM_SHA_256_PLUS);
    let keys = plus_exchange(hash, bound.clone(), SCRAM_SHA_256_PLUS).unwrap();
    // The keys do not depend on the binding: pass-through works the same with -PLUS.
    let stored = secret("pw");
    assert_eq!(
        keys,
        ScramKeys::from_password("pw", &stored.salt, stored.iterations)
    );
    // A client bound to another certificate (a man in the middle) fails.
    assert_eq!(
        plus_exchange(
            b"another certificate hash........",
            bound.clone(),
            SCRAM_SHA_256_PLUS
        )
        .err(),
        Some(ProtocolError::Scram("channel binding mismatch"))
    );
    // -PLUS without "p=", and "p=" with plain SCRAM, are refused.
    assert!(plus_exchange(hash, ClientBinding::NotSupported, SCRAM_SHA_256_PLUS).is_err());
    assert!(plus_exchange(hash, bound, SCRAM_SHA_256).is_err());
    // "y" over TLS where -PLUS was offered is a downgrade.
    assert_eq!(
        plus_exchange(hash, ClientBinding::SupportedNotUsed, SCRAM_SHA_256).err(),
        Some(ProtocolError::Scram(
            "channel binding negotiation error (downgrade suspected)"
        ))
    );
    // A client that does not support binding may still use plain SCRAM over TLS.
    assert!(plus_exchange(hash, ClientBinding::NotSupported, SCRAM_SHA_256).is_ok());
}

#[test]
fn y_flag_full_exchange() {
    // Build the client-final by hand with c=eSws ("y,,") to show the server accepts it.
    let stored = secret("pw");
    let keys = ScramKeys::from_password("pw", &stored.salt, stored.iterations);
    let mut server = ScramServer::with_nonce(stored, "SERVER");
    let bare = "n=,r=abc";
    let sf = server
        .handle_client_first(format!("y,,{bare}").as_bytes())
        .unwrap();
    let sf = String::from_utf8(sf).unwrap();
    let without_proof = "c=eSws,r=abcSERVER";
    let auth: [&[u8]; 5] = [
        bare.as_bytes(),
        b",",
        sf.as_bytes(),
        b",",
        without_proof.as_bytes(),
    ];
    let proof = xor32(&keys.client_key, &hmac_sha256(&keys.stored_key(), &auth));
    let msg = format!("{without_proof},p={}", b64(&proof));
    let (_, recovered) = server.handle_client_final(msg.as_bytes()).unwrap();
    assert_eq!(recovered, keys);
}

#[test]
fn tampered_client_final() {
    let run = |tamper: &dyn Fn(String) -> String| {
        let mut server = ScramServer::new(secret("pw"), [7; 18]);
        let mut client = ScramClient::new(ScramCredential::Password("pw".into()), [9; 18]);
        let sf = server.handle_client_first(&client.client_first()).unwrap();
        let cf = String::from_utf8(client.handle_server_first(&sf).unwrap()).unwrap();
        server.handle_client_final(tamper(cf).as_bytes()).err()
    };
    assert_eq!(run(&|s| s), None);
    assert_eq!(
        run(&|s| s.replacen("c=biws", "c=eSws", 1)),
        Some(ProtocolError::Scram("channel binding mismatch"))
    );
    assert_eq!(
        run(&|s| s.replacen(",p=", "x,p=", 1)),
        Some(ProtocolError::Scram("nonce mismatch"))
    );
    assert_eq!(
        run(&|s| s.replacen(",p=", ",x=ext,p=", 1)),
        Some(ProtocolError::Scram("invalid proof"))
    );
    assert_eq!(
        run(&|s| {
            let (head, _) = s.rsplit_once(",p=").unwrap();
            format!("{head},p={}", b64(&[0; 32]))
        }),
        Some(ProtocolError::Scram("invalid proof"))
    );
}

#[test]
fn client_rejects_bad_server_messages() {
    let new = || ScramClient::with_nonce(ScramCredential::Password("pw".into()), "", "abc");
    let sf = "r=abcdef,s=c2FsdA==,i=4096";
    assert_eq!(
        new().handle_server_first(b"r=xyzdef,s=c2FsdA==,i=4096"),
        Err(ProtocolError::Scram("nonce mismatch"))
    );
    assert_eq!(
        new().handle_server_first(b"r=abc,s=c2FsdA==,i=4096"),
        Err(ProtocolError::Scram("nonce mismatch"))
    );
    let mut c = new();
    c.handle_server_first(sf.as_bytes()).unwrap();
    assert!(c.handle_server_first(sf.as_bytes()).is_err());

    let mut c = new();
    c.handle_server_first(sf.as_bytes()).unwrap();
    let bogus = format!("v={}", b64(&[1; 32]));
    assert_eq!(
        c.handle_server_final(bogus.as_bytes()),
        Err(ProtocolError::Scram("invalid server signature"))
    );
    assert!(!c.is_done());

    let mut c = new();
    c.handle_server_first(sf.as_bytes()).unwrap();
    assert_eq!(
        c.handle_server_final(b"e=invalid-proof"),
        Err(ProtocolError::Scram("server reported an error"))
    );
    assert!(new()
        .handle_server_final(RFC_SERVER_FINAL.as_bytes())
        .is_err());
}

#[test]
fn garbage_never_panics() {
    let samples: Vec<Vec<u8>> = vec![
        vec![],
        b",".to_vec(),
        b",,,,".to_vec(),
        b"n,,".to_vec(),
        b"n,,n=,r=a".to_vec(),
        b"\xff\xfe".to_vec(),
        b"c=biws,r=,p=".to_vec(),
        b"r=,s=,i=".to_vec(),
        b"v=".to_vec(),
        b"=====".to_vec(),
        "n,,n=\u{0}é,r=é".as_bytes().to_vec(),
    ];
    // One iteration keeps this loop fast; the math is the same.
    let cheap = ScramSecret::from_password("pw", b"salt", 1);
    for s in &samples {
        for cut in 0..=s.len() {
            let part = &s[..cut];
            let mut server = ScramServer::new(cheap.clone(), [0; 18]);
            let _ = server.handle_client_first(part);
            let _ = server.handle_client_final(part);
            let mut server = ScramServer::new(cheap.clone(), [0; 18]);
            if server.handle_client_first(b"n,,n=,r=abc").is_ok() {
                let _ = server.handle_client_final(part);
            }
            let mut client = ScramClient::new(ScramCredential::Password("pw".into()), [0; 18]);
            let _ = client.handle_server_first(part);
            let _ = client.handle_server_final(part);
        }
    }
    // Every prefix of a valid message is rejected or accepted, never a panic.
    let rfc = rfc_secret();
    for cut in 0..RFC_CLIENT_FINAL.len() {
        let mut server = ScramServer::with_nonce(rfc.clone(), RFC_SERVER_NONCE);
        server
            .handle_client_first(RFC_CLIENT_FIRST.as_bytes())
            .unwrap();
        assert!(server
            .handle_client_final(&RFC_CLIENT_FINAL.as_bytes()[..cut])
            .is_err());
    }
}

#[test]
fn debug_output_is_redacted() {
    let keys = ScramKeys::from_password("pw", b"salt", 1);
    let texts = [
        format!("{keys:?}"),
        format!("{:?}", ScramCredential::Password("hunter2".into())),
        format!("{:?}", ScramCredential::Keys(keys.clone())),
        format!(
            "{:?}",
            ScramClient::new(ScramCredential::Password("hunter2".into()), [0; 18])
        ),
        format!("{:?}", ScramServer::new(secret("hunter2"), [0; 18])),
    ];
    for t in &texts {
        assert!(!t.contains("hunter2"), "{t}");
        assert!(
            !t.contains(&format!("{}", keys.client_key[0])) || t.contains("redacted"),
            "{t}"
        );
    }
    assert!(texts[0].contains("<redacted>"));
}

#[test]
fn saslprep_fallback() {
    assert_eq!(&*normalize_password("plain"), b"plain");
    assert_eq!(&*normalize_password("x\u{ad}y"), b"xy");
    assert_eq!(&*normalize_password("a\u{fffd}b"), "a\u{fffd}b".as_bytes());
}

#[test]
fn client_refuses_iterations_above_its_bound_before_any_work() {
    let new = || {
        ScramClient::with_nonce(ScramCredential::Password("pw".into()), "", "abc")
            .with_max_iterations(100_000)
    };
    let hostile = b"r=abcdef,s=c2FsdA==,i=2147483647";
    let error = ProtocolError::ScramIterations {
        asked: 2_147_483_647,
        max: 100_000,
    };
    let refused = Err(error.clone());
    assert_eq!(new().handle_server_first(hostile).map(|_| ()), refused);
    let mut c = new();
    assert_eq!(c.server_salt(hostile).map(|_| ()), refused);
    // A refused exchange stays failed: a second server-first is not answered either.
    assert!(c.server_salt(b"r=abcdef,s=c2FsdA==,i=4096").is_err());
    assert_eq!(
        error.to_string(),
        "server asked for 2147483647 SCRAM iterations, more than the limit of 100000"
    );
    // At the bound it is answered.
    assert!(new()
        .handle_server_first(b"r=abcdef,s=c2FsdA==,i=100000")
        .is_ok());
}

#[test]
fn keys_derived_elsewhere_answer_as_the_password_would() {
    let cred = ScramCredential::Password("pencil".into());
    let mut client = ScramClient::with_nonce(cred, "user", RFC_CLIENT_NONCE);
    assert!(client.needs_derived_keys());
    let salt = client.server_salt(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(salt.iterations, 4096);
    let keys = ScramKeys::from_password(client.password().unwrap(), &salt.salt, salt.iterations);
    let fin = client
        .handle_server_first_with_keys(RFC_SERVER_FIRST.as_bytes(), &keys)
        .unwrap();
    assert_eq!(String::from_utf8(fin).unwrap(), RFC_CLIENT_FINAL);
    client
        .handle_server_final(RFC_SERVER_FINAL.as_bytes())
        .unwrap();
    assert!(client.is_done());
}
