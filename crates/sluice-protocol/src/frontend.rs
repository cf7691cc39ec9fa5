//! Frontend (client -> server) messages: tags, views of what the pooler inspects, and encoders.
//!
//! Bodies passed to decoders exclude the 5-byte header.

use bytes::{BufMut, BytesMut};

use crate::encode::{count_i16, len_i32, message, put_cstr, Frame};
use crate::error::ProtocolError;
use crate::reader::Reader;

/// Message type bytes sent by clients.
pub mod frontend_tag {
    pub const QUERY: u8 = b'Q';
    pub const PARSE: u8 = b'P';
    pub const BIND: u8 = b'B';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const SYNC: u8 = b'S';
    pub const FLUSH: u8 = b'H';
    pub const CLOSE: u8 = b'C';
    pub const TERMINATE: u8 = b'X';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const FUNCTION_CALL: u8 = b'F';
    /// PasswordMessage, SASLInitialResponse and SASLResponse.
    pub const PASSWORD: u8 = b'p';

    /// Whether the protocol defines `tag` for a logged-in client (simple and extended query,
    /// function call, the COPY IN messages PostgreSQL ignores outside COPY, Terminate). Anything
    /// else (a password message, an undefined byte) must never reach a server: PostgreSQL answers
    /// it with FATAL and closes, which would land on whichever client gets that server next.
    pub fn is_defined_after_login(tag: u8) -> bool {
        matches!(
            tag,
            QUERY
                | PARSE
                | BIND
                | DESCRIBE
                | EXECUTE
                | SYNC
                | FLUSH
                | CLOSE
                | TERMINATE
                | COPY_DATA
                | COPY_DONE
                | COPY_FAIL
                | FUNCTION_CALL
        )
    }

    /// Whether `tag` is one the server accepts while it is in COPY FROM STDIN (CopyData, CopyDone,
    /// CopyFail, and Flush/Sync, which it ignores there).
    pub fn is_defined_in_copy_in(tag: u8) -> bool {
        matches!(tag, COPY_DATA | COPY_DONE | COPY_FAIL | FLUSH | SYNC)
    }

    /// PostgreSQL's cap on a frontend message's length word (which counts itself) for the types
    /// that carry SQL or data (Query, Parse, Bind, FunctionCall, CopyData): 1 GiB - 2 bytes.
    pub const LARGE_MESSAGE_LIMIT: u32 = 0x3fff_fffe;
    /// The same cap for every other type (PostgreSQL 14+: Sync, Flush, Describe, Execute, Close,
    /// CopyDone, CopyFail, Terminate).
    pub const SMALL_MESSAGE_LIMIT: u32 = 10_000;

    /// The longest length word PostgreSQL accepts for `tag`. A longer one makes the backend log
    /// "invalid message length" and hang up without a word to the client, so the pooler refuses
    /// it at the header instead of forwarding it (or buffering a body that never comes).
    pub fn max_len(tag: u8) -> u32 {
        match tag {
            QUERY | PARSE | BIND | FUNCTION_CALL | COPY_DATA => LARGE_MESSAGE_LIMIT,
            _ => SMALL_MESSAGE_LIMIT,
        }
    }

    /// The ErrorResponse text for a message whose length word exceeds `max_len(tag)`.
    pub fn oversized_message(tag: u8, len: u32) -> String {
        format!(
            "invalid message length: message type '{}' announces {len} bytes, PostgreSQL accepts at most {}",
            tag.escape_ascii(),
            max_len(tag)
        )
    }

    /// The ErrorResponse text for a message type not defined where it came (PostgreSQL's words,
    /// after PgBouncer's "unknown pkt from client" that operators grep for).
    pub fn undefined_message(tag: u8) -> String {
        let shown = if tag.is_ascii_graphic() {
            format!(" ('{}')", tag as char)
        } else {
            String::new()
        };
        format!("unknown pkt from client: invalid frontend message type {tag}{shown}")
    }
}
pub use frontend_tag as tag;

/// Query body: NUL-terminated SQL text. Returns the text without the NUL.
pub fn decode_query(body: &[u8]) -> Result<&str, ProtocolError> {
    let mut r = Reader::new(body, "query");
    let sql = r.cstr()?;
    r.finish()?;
    Ok(sql)
}

/// Parse body: statement name, query text, parameter type OIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseView<'a> {
    pub name: &'a str,
    pub query: &'a str,
    pub param_types: Vec<u32>,
}

pub fn decode_parse(body: &[u8]) -> Result<ParseView<'_>, ProtocolError> {
    let mut r = Reader::new(body, "parse");
    let name = r.cstr()?;
    let query = r.cstr()?;
    let n = usize::try_from(r.i16()?).map_err(|_| r.err())?;
    // Bound the count by the bytes actually present before allocating.
    if n.saturating_mul(4) != r.remaining() {
        return Err(r.err());
    }
    let mut param_types = Vec::with_capacity(n);
    for _ in 0..n {
        param_types.push(r.u32()?);
    }
    r.finish()?;
    Ok(ParseView {
        name,
        query,
        param_types,
    })
}

/// Bind: only the portal and statement names are decoded; `rest_offset` is where the remainder
/// (format codes, parameters, result formats) starts within the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindView<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    pub rest_offset: usize,
}

pub fn decode_bind(body: &[u8]) -> Result<BindView<'_>, ProtocolError> {
    let mut r = Reader::new(body, "bind");
    let portal = r.cstr()?;
    let statement = r.cstr()?;
    Ok(BindView {
        portal,
        statement,
        rest_offset: r.position(),
    })
}

/// A Bind's parameters: each value (None = NULL) with its format code (0 text, 1 binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindParams<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    formats: Vec<i16>,
    pub values: Vec<Option<&'a [u8]>>,
}

impl BindParams<'_> {
    /// Whether parameter `i` is sent in binary: no format codes means all text, one applies to
    /// every parameter, otherwise one per parameter.
    pub fn is_binary(&self, i: usize) -> bool {
        match self.formats.as_slice() {
            [] => false,
            [one] => *one == 1,
            many => many.get(i) == Some(&1),
        }
    }
}

/// The whole Bind body: names, parameter format codes and values (result format codes are read
/// and checked, not kept). Counts are bounded by the bytes present before anything is allocated.
pub fn decode_bind_params(body: &[u8]) -> Result<BindParams<'_>, ProtocolError> {
    let mut r = Reader::new(body, "bind");
    let portal = r.cstr()?;
    let statement = r.cstr()?;
    let count = |r: &mut Reader<'_>, each: usize| -> Result<usize, ProtocolError> {
        let n = usize::try_from(r.i16()?).map_err(|_| r.err())?;
        if n.saturating_mul(each) > r.remaining() {
            return Err(r.err());
        }
        Ok(n)
    };
    let n = count(&mut r, 2)?;
    let mut formats = Vec::with_capacity(n);
    for _ in 0..n {
        let f = r.i16()?;
        if f != 0 && f != 1 {
            return Err(r.err());
        }
        formats.push(f);
    }
    let n = count(&mut r, 4)?;
    if formats.len() > 1 && formats.len() != n {
        return Err(r.err());
    }
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.i32()?;
        values.push(match len {
            -1 => None,
            len => Some(r.bytes(usize::try_from(len).map_err(|_| r.err())?)?),
        });
    }
    let results = count(&mut r, 2)?;
    r.bytes(results * 2)?;
    r.finish()?;
    Ok(BindParams {
        portal,
        statement,
        formats,
        values,
    })
}

/// Describe / Close: kind `b'S'` (statement) or `b'P'` (portal) and the name.
pub fn decode_describe_or_close(body: &[u8]) -> Result<(u8, &str), ProtocolError> {
    let mut r = Reader::new(body, "describe/close");
    let kind = r.u8()?;
    if kind != b'S' && kind != b'P' {
        return Err(r.err());
    }
    let name = r.cstr()?;
    r.finish()?;
    Ok((kind, name))
}

/// PasswordMessage: NUL-terminated password (or md5 response).
pub fn decode_password(body: &[u8]) -> Result<&str, ProtocolError> {
    let mut r = Reader::new(body, "password message");
    let pw = r.cstr()?;
    r.finish()?;
    Ok(pw)
}

/// SASLInitialResponse: mechanism name and initial client data (length -1 => empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaslInitial<'a> {
    pub mechanism: &'a str,
    pub data: &'a [u8],
}

pub fn decode_sasl_initial(body: &[u8]) -> Result<SaslInitial<'_>, ProtocolError> {
    let mut r = Reader::new(body, "SASL initial response");
    let mechanism = r.cstr()?;
    let len = r.i32()?;
    let data = if len == -1 {
        &[][..]
    } else {
        let n = usize::try_from(len).map_err(|_| r.err())?;
        r.bytes(n)?
    };
    r.finish()?;
    Ok(SaslInitial { mechanism, data })
}

pub fn encode_query(sql: &str, out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::QUERY, out);
    put_cstr(out, sql);
    f.finish(out);
}

pub fn encode_password(password: &str, out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::PASSWORD, out);
    put_cstr(out, password);
    f.finish(out);
}

pub fn encode_sasl_initial(mechanism: &str, data: &[u8], out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::PASSWORD, out);
    put_cstr(out, mechanism);
    out.put_i32(len_i32(data.len()));
    out.put_slice(data);
    f.finish(out);
}

pub fn encode_sasl_response(data: &[u8], out: &mut BytesMut) {
    message(frontend_tag::PASSWORD, data, out);
}

pub fn encode_sync(out: &mut BytesMut) {
    message(frontend_tag::SYNC, &[], out);
}

pub fn encode_terminate(out: &mut BytesMut) {
    message(frontend_tag::TERMINATE, &[], out);
}

pub fn encode_flush(out: &mut BytesMut) {
    message(frontend_tag::FLUSH, &[], out);
}

/// Parse with the given statement name, query and parameter type OIDs (0 = unspecified).
pub fn encode_parse(name: &str, query: &str, param_types: &[u32], out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::PARSE, out);
    put_cstr(out, name);
    put_cstr(out, query);
    out.put_i16(count_i16(param_types.len()));
    for t in param_types {
        out.put_u32(*t);
    }
    f.finish(out);
}

/// Bind with all parameters and results in text format; `None` is SQL NULL.
pub fn encode_bind_text(
    portal: &str,
    statement: &str,
    params: &[Option<&[u8]>],
    out: &mut BytesMut,
) {
    let f = Frame::tagged(frontend_tag::BIND, out);
    put_cstr(out, portal);
    put_cstr(out, statement);
    out.put_i16(0);
    out.put_i16(count_i16(params.len()));
    for p in params {
        match p {
            Some(v) => {
                out.put_i32(len_i32(v.len()));
                out.put_slice(v);
            }
            None => out.put_i32(-1),
        }
    }
    out.put_i16(0);
    f.finish(out);
}

/// Describe of a statement (`b'S'`) or portal (`b'P'`).
pub fn encode_describe(kind: u8, name: &str, out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::DESCRIBE, out);
    out.put_u8(kind);
    put_cstr(out, name);
    f.finish(out);
}

/// Close of a statement (`b'S'`) or portal (`b'P'`).
pub fn encode_close(kind: u8, name: &str, out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::CLOSE, out);
    out.put_u8(kind);
    put_cstr(out, name);
    f.finish(out);
}

/// Execute a portal; `max_rows` 0 means no limit.
pub fn encode_execute(portal: &str, max_rows: u32, out: &mut BytesMut) {
    let f = Frame::tagged(frontend_tag::EXECUTE, out);
    put_cstr(out, portal);
    out.put_u32(max_rows);
    f.finish(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{peek_header, HEADER_LEN};

    /// Splits one encoded message into (tag, body), checking the header length.
    fn split(out: &[u8]) -> (u8, &[u8]) {
        let h = peek_header(out, 1 << 20).unwrap().unwrap();
        assert_eq!(h.total_len(), out.len());
        (h.tag, &out[HEADER_LEN..])
    }

    #[test]
    fn query_round_trip() {
        let mut out = BytesMut::new();
        encode_query("SELECT 1", &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::QUERY);
        assert_eq!(decode_query(body).unwrap(), "SELECT 1");
    }

    #[test]
    fn query_errors() {
        assert!(decode_query(b"").is_err());
        assert!(decode_query(b"SELECT 1").is_err());
        assert!(decode_query(b"SELECT 1\0x").is_err());
        assert!(decode_query(b"\xc3\0").is_err());
    }

    #[test]
    fn parse_round_trip() {
        let mut out = BytesMut::new();
        encode_parse("s1", "SELECT $1, $2", &[23, 0], &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::PARSE);
        let v = decode_parse(body).unwrap();
        assert_eq!(
            v,
            ParseView {
                name: "s1",
                query: "SELECT $1, $2",
                param_types: vec![23, 0]
            }
        );
    }

    #[test]
    fn parse_errors() {
        assert!(decode_parse(b"s\0q\0\0\x01\0\0").is_err()); // short oid
        assert!(decode_parse(b"s\0q\0\xff\xff").is_err()); // negative count
        assert!(decode_parse(b"s\0q\0\x7f\xff").is_err()); // huge count, no data
        assert!(decode_parse(b"s\0q\0\0\0x").is_err()); // trailing
        assert!(decode_parse(b"s\0q\0\0").is_err()); // truncated count
        assert!(decode_parse(b"s\0").is_err());
    }

    #[test]
    fn bind_round_trip() {
        let mut out = BytesMut::new();
        encode_bind_text("p", "stmt", &[Some(b"42"), None], &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::BIND);
        let v = decode_bind(body).unwrap();
        assert_eq!((v.portal, v.statement), ("p", "stmt"));
        assert_eq!(v.rest_offset, 7);
        assert_eq!(
            &body[v.rest_offset..],
            b"\0\0\0\x02\0\0\0\x0242\xff\xff\xff\xff\0\0"
        );
        assert!(decode_bind(b"p\0").is_err());
        assert!(decode_bind(b"").is_err());
    }

    #[test]
    fn describe_close_round_trip() {
        let mut out = BytesMut::new();
        encode_describe(b'S', "s1", &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::DESCRIBE);
        assert_eq!(decode_describe_or_close(body).unwrap(), (b'S', "s1"));
        out.clear();
        encode_close(b'P', "", &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::CLOSE);
        assert_eq!(decode_describe_or_close(body).unwrap(), (b'P', ""));
        assert!(decode_describe_or_close(b"Xname\0").is_err());
        assert!(decode_describe_or_close(b"S").is_err());
        assert!(decode_describe_or_close(b"").is_err());
        assert!(decode_describe_or_close(b"Sa\0b").is_err());
    }

    #[test]
    fn password_round_trip() {
        let mut out = BytesMut::new();
        encode_password("md5abc", &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::PASSWORD);
        assert_eq!(decode_password(body).unwrap(), "md5abc");
        assert!(decode_password(b"nonul").is_err());
        assert!(decode_password(b"a\0b\0").is_err());
    }

    #[test]
    fn sasl_round_trip() {
        let mut out = BytesMut::new();
        encode_sasl_initial("SCRAM-SHA-256", b"n,,n=,r=abc", &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::PASSWORD);
        let v = decode_sasl_initial(body).unwrap();
        assert_eq!(v.mechanism, "SCRAM-SHA-256");
        assert_eq!(v.data, b"n,,n=,r=abc");
        out.clear();
        encode_sasl_response(b"c=biws", &mut out);
        let (tag, body) = split(&out);
        assert_eq!((tag, body), (frontend_tag::PASSWORD, &b"c=biws"[..]));
    }

    #[test]
    fn sasl_initial_minus_one_and_errors() {
        let v = decode_sasl_initial(b"M\0\xff\xff\xff\xff").unwrap();
        assert!(v.data.is_empty());
        assert!(decode_sasl_initial(b"M\0\xff\xff\xff\xfe").is_err());
        assert!(decode_sasl_initial(b"M\0\0\0\0\x05abc").is_err());
        assert!(decode_sasl_initial(b"M\0\0\0\0\x01ab").is_err());
        assert!(decode_sasl_initial(b"M\0\0\0").is_err());
        assert!(decode_sasl_initial(b"M").is_err());
    }

    #[test]
    fn empty_messages() {
        for (f, tag) in [
            (encode_sync as fn(&mut BytesMut), frontend_tag::SYNC),
            (encode_terminate, frontend_tag::TERMINATE),
            (encode_flush, frontend_tag::FLUSH),
        ] {
            let mut out = BytesMut::new();
            f(&mut out);
            assert_eq!(&out[..], &[tag, 0, 0, 0, 4]);
        }
        let mut out = BytesMut::new();
        encode_execute("", 0, &mut out);
        assert_eq!(&out[..], b"E\0\0\0\x09\0\0\0\0\0");
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 7u32;
        for len in 0..400usize {
            let mut b = Vec::with_capacity(len % 24);
            for _ in 0..len % 24 {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                b.push(((seed >> 16) % 3) as u8 * 0x7f);
            }
            let _ = decode_query(&b);
            let _ = decode_parse(&b);
            let _ = decode_bind(&b);
            let _ = decode_describe_or_close(&b);
            let _ = decode_password(&b);
            let _ = decode_sasl_initial(&b);
        }
    }

    #[test]
    fn bind_params_are_read_with_their_formats() {
        let mut out = BytesMut::new();
        encode_bind_text("p", "s1", &[Some(&b"tenant"[..]), None], &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, frontend_tag::BIND);
        let b = decode_bind_params(body).unwrap();
        assert_eq!((b.portal, b.statement), ("p", "s1"));
        assert_eq!(b.values, vec![Some(&b"tenant"[..]), None]);
        assert!(!b.is_binary(0) && !b.is_binary(1));
        // One format code for all: binary; a count past the bytes present is refused.
        let mut body = b"\0\0\0\x01\0\x01\0\x01\0\0\0\x01\x01\0\0".to_vec();
        let b = decode_bind_params(&body).unwrap();
        assert!(b.is_binary(0));
        assert_eq!(b.values, vec![Some(&[1u8][..])]);
        body[5] = 0x7f;
        assert!(decode_bind_params(&body).is_err());
        assert!(decode_bind_params(b"\0\0\0\0\0\x01\xff\xff\xff\xfe").is_err());
    }
}

#[cfg(test)]
mod tag_set_tests {
    use super::frontend_tag::*;

    #[test]
    fn defined_after_login_is_the_protocols_set() {
        let defined: Vec<u8> = (0..=255u8).filter(|t| is_defined_after_login(*t)).collect();
        assert_eq!(defined, b"BCDEFHPQSXcdf".to_vec());
        for t in [0u8, 1, b'J', b'z', b'~', b'p'] {
            assert!(!is_defined_after_login(t), "{t}");
        }
    }

    #[test]
    fn copy_in_accepts_only_copy_flush_and_sync() {
        let defined: Vec<u8> = (0..=255u8).filter(|t| is_defined_in_copy_in(*t)).collect();
        assert_eq!(defined, b"HScdf".to_vec());
    }

    #[test]
    fn undefined_message_names_the_type() {
        assert_eq!(
            undefined_message(b'z'),
            "unknown pkt from client: invalid frontend message type 122 ('z')"
        );
        assert_eq!(
            undefined_message(0),
            "unknown pkt from client: invalid frontend message type 0"
        );
    }

    #[test]
    fn length_caps_follow_postgresql() {
        let large: Vec<u8> = b"BCDEFHPQSXcdf"
            .iter()
            .copied()
            .filter(|t| max_len(*t) == LARGE_MESSAGE_LIMIT)
            .collect();
        assert_eq!(large, b"BFPQd".to_vec());
        assert_eq!(max_len(b'S'), 10_000);
        assert_eq!(
            oversized_message(b'Q', 0x4000_0000),
            "invalid message length: message type 'Q' announces 1073741824 bytes, PostgreSQL accepts at most 1073741822"
        );
    }
}
