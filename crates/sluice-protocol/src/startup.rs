//! Untagged startup-phase packets: StartupMessage, SSLRequest, GSSENCRequest and CancelRequest.

use bytes::{BufMut, BytesMut};

use crate::encode::{put_cstr, Frame};
use crate::error::ProtocolError;
use crate::reader::Reader;

/// Largest startup packet accepted (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP_LEN: usize = 10_000;
/// Code of an SSLRequest packet.
pub const SSL_REQUEST_CODE: u32 = 80877103;
/// Code of a GSSENCRequest packet.
pub const GSSENC_REQUEST_CODE: u32 = 80877104;
/// Code of a CancelRequest packet.
pub const CANCEL_REQUEST_CODE: u32 = 80877102;
/// Protocol version 3.0 as sent in a StartupMessage.
pub const PROTOCOL_3_0: u32 = 196608;

const CANCEL_LEN: usize = 16;
const REQUEST_LEN: usize = 8;

/// The (process id, secret) pair a backend hands out in BackendKeyData.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CancelKey {
    pub pid: u32,
    pub secret: u32,
}

impl CancelKey {
    /// Wire order: pid then secret, both big-endian.
    pub fn to_bytes(&self) -> [u8; 8] {
        let [p0, p1, p2, p3] = self.pid.to_be_bytes();
        let [s0, s1, s2, s3] = self.secret.to_be_bytes();
        [p0, p1, p2, p3, s0, s1, s2, s3]
    }

    pub fn from_bytes(b: [u8; 8]) -> Self {
        let [p0, p1, p2, p3, s0, s1, s2, s3] = b;
        CancelKey {
            pid: u32::from_be_bytes([p0, p1, p2, p3]),
            secret: u32::from_be_bytes([s0, s1, s2, s3]),
        }
    }
}

/// A decoded startup-phase packet, borrowing its parameters from the bytes it was decoded from
/// (a login copies only what it keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket<'a> {
    SslRequest,
    GssEncRequest,
    Cancel(CancelKey),
    /// protocol 3.x; `params` in wire order (user, database, options, application_name, ...).
    /// Minor versions > 0 are accepted (minor reported so the pooler can send NegotiateProtocolVersion).
    Startup {
        minor: u16,
        params: Vec<(&'a str, &'a str)>,
    },
}

/// Decodes one startup-phase packet from the start of `buf`.
///
/// `Ok(None)` means more bytes are needed. The length is checked (8..=MAX_STARTUP_LEN) as soon
/// as its 4 bytes are present, so an oversized announcement is refused before buffering it.
/// Returns the packet and the number of bytes it occupied.
pub fn decode_startup(buf: &[u8]) -> Result<Option<(StartupPacket<'_>, usize)>, ProtocolError> {
    let Some(len) = startup_len(buf)? else {
        return Ok(None);
    };
    let Some(packet) = buf.get(4..len) else {
        return Ok(None);
    };
    let mut r = Reader::new(packet, "startup packet");
    let code = r.u32()?;
    let decoded = match code {
        SSL_REQUEST_CODE => {
            r.finish()?;
            StartupPacket::SslRequest
        }
        GSSENC_REQUEST_CODE => {
            r.finish()?;
            StartupPacket::GssEncRequest
        }
        CANCEL_REQUEST_CODE => {
            if len != CANCEL_LEN {
                return Err(ProtocolError::malformed("cancel request"));
            }
            StartupPacket::Cancel(CancelKey::from_bytes(r.array()?))
        }
        _ => {
            let major = (code >> 16) as u16;
            let minor = (code & 0xffff) as u16;
            if major != 3 {
                return Err(ProtocolError::UnsupportedVersion { major, minor });
            }
            StartupPacket::Startup {
                minor,
                params: decode_params(&mut r)?,
            }
        }
    };
    Ok(Some((decoded, len)))
}

/// The length of the startup-phase packet at the start of `buf` once all of it is there (`Ok(None)`
/// before), checked as `decode_startup` checks it: a caller can split the packet off its buffer and
/// decode it from there, its parameters borrowing the split-off bytes. A packet is refused as soon
/// as what has arrived can no longer start a valid one: its length word at 4 bytes, its code (and
/// the length that code implies) at 8, so a client that sends a bad header and waits is answered
/// at once rather than when its login times out.
pub fn startup_len(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    let Some(&[a, b, c, d]) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len < REQUEST_LEN {
        return Err(ProtocolError::BadHeader);
    }
    if len > MAX_STARTUP_LEN {
        return Err(ProtocolError::TooLarge {
            len,
            max: MAX_STARTUP_LEN,
        });
    }
    if let Some(&[a, b, c, d]) = buf.get(4..8) {
        match u32::from_be_bytes([a, b, c, d]) {
            SSL_REQUEST_CODE | GSSENC_REQUEST_CODE if len != REQUEST_LEN => {
                return Err(ProtocolError::malformed("encryption request"));
            }
            CANCEL_REQUEST_CODE if len != CANCEL_LEN => {
                return Err(ProtocolError::malformed("cancel request"));
            }
            SSL_REQUEST_CODE | GSSENC_REQUEST_CODE | CANCEL_REQUEST_CODE => {}
            code if code >> 16 != 3 => {
                return Err(ProtocolError::UnsupportedVersion {
                    major: (code >> 16) as u16,
                    minor: (code & 0xffff) as u16,
                });
            }
            _ => {}
        }
    }
    Ok((buf.len() >= len).then_some(len))
}

/// Key/value C strings ending with an empty key, which must be the packet's last byte. The whole
/// list is checked as UTF-8 once (NUL is valid UTF-8) and then cut at its NULs: one validation per
/// login instead of one per string.
fn decode_params<'a>(r: &mut Reader<'a>) -> Result<Vec<(&'a str, &'a str)>, ProtocolError> {
    let err = r.err();
    let text = std::str::from_utf8(r.rest()).map_err(|_| err.clone())?;
    // The terminating empty key is the last NUL; every string before it ends with its own.
    let body = text
        .strip_suffix('\0')
        .filter(|b| b.is_empty() || b.ends_with('\0'))
        .ok_or_else(|| err.clone())?;
    // Room for what drivers send (user, database, application_name, client_encoding, ...).
    let mut params = Vec::with_capacity(8);
    let mut strings = CStrings(body);
    while let Some(key) = strings.next() {
        // An empty key before the last byte ends the list early: bytes follow the terminator.
        let value = strings.next().filter(|_| !key.is_empty());
        params.push((key, value.ok_or_else(|| err.clone())?));
    }
    Ok(params)
}

/// The NUL-terminated strings of a `&str` that ends with a NUL (or is empty), found by a plain
/// byte scan: `split_terminator('\0')`'s searcher cost more per string than the UTF-8 check saved.
struct CStrings<'a>(&'a str);

impl<'a> Iterator for CStrings<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let nul = self.0.bytes().position(|b| b == 0)?;
        // NUL is ASCII, so both cuts fall on character boundaries.
        let (s, rest) = (self.0.get(..nul)?, self.0.get(nul + 1..)?);
        self.0 = rest;
        Some(s)
    }
}

/// Appends a protocol 3.0 StartupMessage with `params` in the given order.
pub fn encode_startup(params: &[(&str, &str)], out: &mut BytesMut) {
    let f = Frame::untagged(out);
    out.put_u32(PROTOCOL_3_0);
    for (k, v) in params {
        put_cstr(out, k);
        put_cstr(out, v);
    }
    out.put_u8(0);
    f.finish(out);
}

/// Appends a CancelRequest for `key`.
pub fn encode_cancel_request(key: CancelKey, out: &mut BytesMut) {
    out.put_u32(CANCEL_LEN as u32);
    out.put_u32(CANCEL_REQUEST_CODE);
    out.put_slice(&key.to_bytes());
}

/// Appends an SSLRequest.
pub fn encode_ssl_request(out: &mut BytesMut) {
    out.put_u32(REQUEST_LEN as u32);
    out.put_u32(SSL_REQUEST_CODE);
}

/// Appends a GSSENCRequest.
pub fn encode_gssenc_request(out: &mut BytesMut) {
    out.put_u32(REQUEST_LEN as u32);
    out.put_u32(GSSENC_REQUEST_CODE);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(b: &[u8]) -> StartupPacket<'_> {
        let (p, n) = decode_startup(b).unwrap().unwrap();
        assert_eq!(n, b.len());
        p
    }

    #[test]
    fn startup_round_trip() {
        let mut out = BytesMut::new();
        encode_startup(
            &[("user", "alice"), ("database", "db"), ("options", "")],
            &mut out,
        );
        let p = decode_all(&out);
        assert_eq!(
            p,
            StartupPacket::Startup {
                minor: 0,
                params: vec![("user", "alice"), ("database", "db"), ("options", "")],
            }
        );
    }

    #[test]
    fn request_round_trips() {
        let mut out = BytesMut::new();
        encode_ssl_request(&mut out);
        assert_eq!(decode_all(&out), StartupPacket::SslRequest);
        out.clear();
        encode_gssenc_request(&mut out);
        assert_eq!(decode_all(&out), StartupPacket::GssEncRequest);
        out.clear();
        let key = CancelKey {
            pid: 4242,
            secret: 0xdead_beef,
        };
        encode_cancel_request(key, &mut out);
        assert_eq!(decode_all(&out), StartupPacket::Cancel(key));
        assert_eq!(CancelKey::from_bytes(key.to_bytes()), key);
    }

    #[test]
    fn consumes_only_one_packet() {
        let mut out = BytesMut::new();
        encode_ssl_request(&mut out);
        encode_startup(&[("user", "u")], &mut out);
        let (p, n) = decode_startup(&out).unwrap().unwrap();
        assert_eq!((p, n), (StartupPacket::SslRequest, 8));
        assert!(matches!(
            decode_startup(&out[n..]),
            Ok(Some((StartupPacket::Startup { .. }, _)))
        ));
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let mut out = BytesMut::new();
        encode_startup(&[("user", "alice"), ("database", "db")], &mut out);
        for i in 0..out.len() {
            assert_eq!(decode_startup(&out[..i]), Ok(None), "prefix {i}");
        }
    }

    #[test]
    fn length_known_once_the_packet_is_whole() {
        let mut out = BytesMut::new();
        encode_startup(&[("user", "alice")], &mut out);
        let n = out.len();
        encode_ssl_request(&mut out);
        assert_eq!(startup_len(&out), Ok(Some(n)));
        for i in 0..n {
            assert_eq!(startup_len(&out[..i]), Ok(None), "prefix {i}");
        }
        assert_eq!(startup_len(b"\0\0\0\x07"), Err(ProtocolError::BadHeader));
        assert!(matches!(
            startup_len(b"\xff\xff\xff\xff"),
            Err(ProtocolError::TooLarge { .. })
        ));
    }

    #[test]
    fn minor_versions_accepted() {
        let mut out = BytesMut::new();
        encode_startup(&[("user", "u")], &mut out);
        out[7] = 2;
        assert!(matches!(
            decode_all(&out),
            StartupPacket::Startup { minor: 2, .. }
        ));
    }

    #[test]
    fn bad_lengths() {
        assert_eq!(decode_startup(b"\0\0\0\x07"), Err(ProtocolError::BadHeader));
        assert_eq!(
            decode_startup(b"\0\x01\0\0"),
            Err(ProtocolError::TooLarge {
                len: 65536,
                max: MAX_STARTUP_LEN
            })
        );
        assert_eq!(
            decode_startup(b"\xff\xff\xff\xff"),
            Err(ProtocolError::TooLarge {
                len: u32::MAX as usize,
                max: MAX_STARTUP_LEN
            })
        );
    }

    #[test]
    fn unknown_versions() {
        assert_eq!(
            decode_startup(b"\0\0\0\x08\0\x02\0\0"),
            Err(ProtocolError::UnsupportedVersion { major: 2, minor: 0 })
        );
        assert_eq!(
            decode_startup(b"\0\0\0\x08\x04\xd2\x16\x31"),
            Err(ProtocolError::UnsupportedVersion {
                major: 1234,
                minor: 5681
            })
        );
    }

    #[test]
    fn malformed_packets() {
        let bad: &[&[u8]] = &[
            // ssl request with trailing byte
            b"\0\0\0\x09\x04\xd2\x16\x2f\0",
            // cancel request too short / too long
            b"\0\0\0\x0c\x04\xd2\x16\x2e\0\0\0\x01",
            b"\0\0\0\x11\x04\xd2\x16\x2e\0\0\0\x01\0\0\0\x02\0",
            // startup without terminator
            b"\0\0\0\x08\0\x03\0\0",
            b"\0\0\0\x0d\0\x03\0\0user\0",
            // key without value
            b"\0\0\0\x0e\0\x03\0\0user\0\0",
            // a value's NUL but no terminating empty key
            b"\0\0\0\x10\0\x03\0\0user\0al\0",
            // bytes after the terminator
            b"\0\0\0\x0a\0\x03\0\0\0x",
            b"\0\0\0\x12\0\x03\0\0\0user\0al\0\0",
            // invalid utf-8
            b"\0\0\0\x0d\0\x03\0\0\xff\0v\0\0",
        ];
        for b in bad {
            assert!(
                matches!(decode_startup(b), Err(ProtocolError::Malformed { .. })),
                "{b:?} -> {:?}",
                decode_startup(b)
            );
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678_u32;
        for _ in 0..2000 {
            let mut b = Vec::new();
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let len = (seed >> 16) as usize % 40;
            b.extend_from_slice(&(len as u32).to_be_bytes());
            b.extend_from_slice(&PROTOCOL_3_0.to_be_bytes());
            for _ in 0..len {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                b.push(((seed >> 16) % 4) as u8 * 40);
            }
            let _ = decode_startup(&b);
        }
    }

    #[test]
    fn a_bad_header_is_refused_before_the_rest_arrives() {
        let head = |len: u32, code: u32| {
            let mut b = len.to_be_bytes().to_vec();
            b.extend_from_slice(&code.to_be_bytes());
            b
        };
        // 40 bytes announced, 8 there: protocol 4.0 cannot become valid.
        assert!(matches!(
            startup_len(&head(40, 4 << 16)),
            Err(ProtocolError::UnsupportedVersion { major: 4, minor: 0 })
        ));
        assert!(startup_len(&head(40, CANCEL_REQUEST_CODE)).is_err());
        assert!(startup_len(&head(12, SSL_REQUEST_CODE)).is_err());
        // Valid so far: wait for the rest.
        assert_eq!(startup_len(&head(40, 3 << 16)).unwrap(), None);
        assert_eq!(startup_len(&head(16, CANCEL_REQUEST_CODE)).unwrap(), None);
        assert_eq!(startup_len(&head(8, SSL_REQUEST_CODE)).unwrap(), Some(8));
    }
}
