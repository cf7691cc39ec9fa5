//! Round-trip and malformed-input tests for the backend codec.

use super::*;
use crate::header::{peek_header, HEADER_LEN};

fn split(out: &[u8]) -> (u8, &[u8]) {
    let h = peek_header(out, 1 << 20).unwrap().unwrap();
    assert_eq!(h.total_len(), out.len());
    (h.tag, &out[HEADER_LEN..])
}

fn auth_round_trip(encode: impl FnOnce(&mut BytesMut), expected: Authentication<'_>) {
    let mut out = BytesMut::new();
    encode(&mut out);
    let (tag, body) = split(&out);
    assert_eq!(tag, backend_tag::AUTHENTICATION);
    assert_eq!(decode_authentication(body).unwrap(), expected);
}

#[test]
fn authentication_round_trips() {
    auth_round_trip(encode_auth_ok, Authentication::Ok);
    auth_round_trip(encode_auth_cleartext, Authentication::CleartextPassword);
    auth_round_trip(
        |o| encode_auth_md5([1, 2, 3, 4], o),
        Authentication::Md5Password { salt: [1, 2, 3, 4] },
    );
    auth_round_trip(
        |o| encode_auth_sasl(&["SCRAM-SHA-256", "SCRAM-SHA-256-PLUS"], o),
        Authentication::Sasl {
            mechanisms: vec!["SCRAM-SHA-256", "SCRAM-SHA-256-PLUS"],
        },
    );
    auth_round_trip(
        |o| encode_auth_sasl_continue(b"r=abc,s=xyz,i=4096", o),
        Authentication::SaslContinue(b"r=abc,s=xyz,i=4096"),
    );
    auth_round_trip(
        |o| encode_auth_sasl_final(b"v=sig", o),
        Authentication::SaslFinal(b"v=sig"),
    );
    assert_eq!(
        decode_authentication(b"\0\0\0\x07anything").unwrap(),
        Authentication::Other(7)
    );
}

#[test]
fn authentication_errors() {
    for bad in [
        &b""[..],
        b"\0\0\0",
        b"\0\0\0\0x",                      // ok with trailing byte
        b"\0\0\0\x05\x01\x02\x03",         // md5 short salt
        b"\0\0\0\x05\x01\x02\x03\x04\x05", // md5 long
        b"\0\0\0\x0aSCRAM\0",              // sasl list without terminator
        b"\0\0\0\x0aSCRAM",
        b"\0\0\0\x0a\0x",
    ] {
        assert!(decode_authentication(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn parameter_status_round_trip() {
    let mut out = BytesMut::new();
    encode_parameter_status("client_encoding", "UTF8", &mut out);
    let (tag, body) = split(&out);
    assert_eq!(tag, backend_tag::PARAMETER_STATUS);
    assert_eq!(
        decode_parameter_status(body).unwrap(),
        ("client_encoding", "UTF8")
    );
    assert!(decode_parameter_status(b"a\0").is_err());
    assert!(decode_parameter_status(b"a\0b").is_err());
    assert!(decode_parameter_status(b"a\0b\0c").is_err());
    // A NUL cannot be sent inside a C string: each part is cut there, and the length matches.
    let mut out = BytesMut::new();
    encode_parameter_status("app\0x", "v\0w", &mut out);
    assert_eq!(&out[..], b"S\0\0\0\x0aapp\0v\0");
    let (_, body) = split(&out);
    assert_eq!(decode_parameter_status(body).unwrap(), ("app", "v"));
}

#[test]
fn backend_key_data_round_trip() {
    let key = CancelKey {
        pid: 99,
        secret: 0x0102_0304,
    };
    let mut out = BytesMut::new();
    encode_backend_key_data(key, &mut out);
    let (tag, body) = split(&out);
    assert_eq!(tag, backend_tag::BACKEND_KEY_DATA);
    assert_eq!(decode_backend_key_data(body).unwrap(), key);
    assert!(decode_backend_key_data(&body[..7]).is_err());
    assert!(decode_backend_key_data(b"123456789").is_err());
}

#[test]
fn ready_for_query_round_trip() {
    for s in [
        TransactionStatus::Idle,
        TransactionStatus::InTransaction,
        TransactionStatus::Failed,
    ] {
        let mut out = BytesMut::new();
        encode_ready_for_query(s, &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, backend_tag::READY_FOR_QUERY);
        assert_eq!(decode_ready_for_query(body).unwrap(), s);
        assert_eq!(TransactionStatus::from_byte(s.as_byte()), Some(s));
    }
    assert!(decode_ready_for_query(b"").is_err());
    assert!(decode_ready_for_query(b"X").is_err());
    assert!(decode_ready_for_query(b"II").is_err());
    assert_eq!(TransactionStatus::from_byte(b'x'), None);
}

#[test]
fn command_complete_round_trip() {
    let mut out = BytesMut::new();
    encode_command_complete("INSERT 0 1", &mut out);
    let (tag, body) = split(&out);
    assert_eq!(tag, backend_tag::COMMAND_COMPLETE);
    assert_eq!(decode_command_complete(body).unwrap(), "INSERT 0 1");
    assert!(decode_command_complete(b"SELECT").is_err());
}

#[test]
fn empty_query_response() {
    let mut out = BytesMut::new();
    encode_empty_query_response(&mut out);
    assert_eq!(&out[..], b"I\0\0\0\x04");
}

#[test]
fn negotiate_protocol_version_round_trip() {
    let mut out = BytesMut::new();
    encode_negotiate_protocol_version(0, &["_pq_.foo", "_pq_.bar"], &mut out);
    let (tag, body) = split(&out);
    assert_eq!(tag, backend_tag::NEGOTIATE_PROTOCOL_VERSION);
    assert_eq!(&body[..4], &196608u32.to_be_bytes());
    assert_eq!(
        decode_negotiate_protocol_version(body).unwrap(),
        (0, vec!["_pq_.foo", "_pq_.bar"])
    );
    assert!(decode_negotiate_protocol_version(b"\0\x03\0\0\x7f\xff\xff\xff").is_err());
    assert!(decode_negotiate_protocol_version(b"\0\x03\0\0\0\0\0\x01a").is_err());
}

#[test]
fn garbage_never_panics() {
    let mut seed = 99u32;
    for len in 0..400usize {
        let mut b = Vec::new();
        for _ in 0..len % 20 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            b.push(((seed >> 16) % 4) as u8 * 3);
        }
        let _ = decode_authentication(&b);
        let _ = decode_parameter_status(&b);
        let _ = decode_backend_key_data(&b);
        let _ = decode_ready_for_query(&b);
        let _ = decode_error_fields(&b);
        let _ = decode_command_complete(&b);
        let _ = decode_row_description(&b);
        let _ = decode_data_row(&b);
        let _ = decode_negotiate_protocol_version(&b);
    }
}
