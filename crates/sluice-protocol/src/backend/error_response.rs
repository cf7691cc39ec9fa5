//! ErrorResponse / NoticeResponse: decoding a server's fields and encoding the pooler's own errors.

use bytes::{BufMut, BytesMut};

use crate::encode::{put_cstr, Frame};
use crate::error::ProtocolError;
use crate::reader::Reader;

const SEVERITY: u8 = b'S';
const SEVERITY_RAW: u8 = b'V';
const CODE: u8 = b'C';
const MESSAGE: u8 = b'M';
const DETAIL: u8 = b'D';
const HINT: u8 = b'H';

/// ErrorResponse / NoticeResponse fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFields {
    /// Non-localized severity (`V`) when present, else the localized one (`S`).
    pub severity: String,
    /// SQLSTATE (`C`).
    pub code: String,
    /// Primary message (`M`).
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// Every field as received, in order (including the ones above).
    pub fields: Vec<(u8, String)>,
}

impl ErrorFields {
    /// The first field of the given type, if any.
    pub fn get(&self, field: u8) -> Option<&str> {
        self.fields
            .iter()
            .find(|(t, _)| *t == field)
            .map(|(_, v)| v.as_str())
    }
}

/// Decodes the body of an ErrorResponse or NoticeResponse.
///
/// Text that is not UTF-8 (a server using another client_encoding) is decoded lossily rather
/// than rejected: the message must still reach the user.
pub fn decode_error_fields(body: &[u8]) -> Result<ErrorFields, ProtocolError> {
    let mut r = Reader::new(body, "error response");
    let mut out = ErrorFields::default();
    let mut have_raw_severity = false;
    loop {
        let t = r.u8()?;
        if t == 0 {
            r.finish()?;
            return Ok(out);
        }
        let value = String::from_utf8_lossy(r.cstr_bytes()?).into_owned();
        match t {
            SEVERITY if !have_raw_severity => out.severity.clone_from(&value),
            SEVERITY_RAW => {
                have_raw_severity = true;
                out.severity.clone_from(&value);
            }
            CODE => out.code.clone_from(&value),
            MESSAGE => out.message.clone_from(&value),
            DETAIL => out.detail = Some(value.clone()),
            HINT => out.hint = Some(value.clone()),
            _ => {}
        }
        out.fields.push((t, value));
    }
}

/// Severity of a message the pooler synthesizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    Error,
    Fatal,
    Panic,
    Warning,
    Notice,
    Debug,
    Info,
    Log,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
            Severity::Panic => "PANIC",
            Severity::Warning => "WARNING",
            Severity::Notice => "NOTICE",
            Severity::Debug => "DEBUG",
            Severity::Info => "INFO",
            Severity::Log => "LOG",
        }
    }
}

fn put_field(out: &mut BytesMut, t: u8, v: &str) {
    out.put_u8(t);
    put_cstr(out, v);
}

fn put_standard(
    out: &mut BytesMut,
    severity: &str,
    sqlstate: &str,
    message: &str,
    detail: Option<&str>,
    hint: Option<&str>,
) {
    put_field(out, SEVERITY, severity);
    put_field(out, SEVERITY_RAW, severity);
    put_field(out, CODE, sqlstate);
    put_field(out, MESSAGE, message);
    if let Some(d) = detail {
        put_field(out, DETAIL, d);
    }
    if let Some(h) = hint {
        put_field(out, HINT, h);
    }
}

/// ErrorResponse with S, V (same text), C (sqlstate), M, and optional D/H fields.
pub fn encode_error(
    severity: Severity,
    sqlstate: &str,
    message: &str,
    detail: Option<&str>,
    hint: Option<&str>,
    out: &mut BytesMut,
) {
    let f = Frame::tagged(b'E', out);
    put_standard(out, severity.as_str(), sqlstate, message, detail, hint);
    out.put_u8(0);
    f.finish(out);
}

/// NoticeResponse ('N') with S, V, C and M.
pub fn encode_notice(severity: Severity, sqlstate: &str, message: &str, out: &mut BytesMut) {
    let f = Frame::tagged(b'N', out);
    put_standard(out, severity.as_str(), sqlstate, message, None, None);
    out.put_u8(0);
    f.finish(out);
}

/// NoticeResponse ('N') with S, V, C, M and D (the console's SHOW HELP, as PgBouncer sends it).
pub fn encode_notice_with_detail(
    severity: Severity,
    sqlstate: &str,
    message: &str,
    detail: &str,
    out: &mut BytesMut,
) {
    let f = Frame::tagged(b'N', out);
    put_standard(
        out,
        severity.as_str(),
        sqlstate,
        message,
        Some(detail),
        None,
    );
    out.put_u8(0);
    f.finish(out);
}

/// Re-encodes `fields` under `tag` (`b'E'` or `b'N'`). When `fields.fields` is non-empty it is
/// written verbatim, in order; otherwise the message is built from the named members.
pub fn encode_error_fields(tag: u8, fields: &ErrorFields, out: &mut BytesMut) {
    let f = Frame::tagged(tag, out);
    if fields.fields.is_empty() {
        put_standard(
            out,
            &fields.severity,
            &fields.code,
            &fields.message,
            fields.detail.as_deref(),
            fields.hint.as_deref(),
        );
    } else {
        for (t, v) in fields.fields.iter().filter(|(t, _)| *t != 0) {
            put_field(out, *t, v);
        }
    }
    out.put_u8(0);
    f.finish(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{peek_header, HEADER_LEN};

    fn split(out: &[u8]) -> (u8, &[u8]) {
        let h = peek_header(out, 1 << 20).unwrap().unwrap();
        assert_eq!(h.total_len(), out.len());
        (h.tag, &out[HEADER_LEN..])
    }

    #[test]
    fn error_round_trip() {
        let mut out = BytesMut::new();
        encode_error(
            Severity::Fatal,
            "28P01",
            "password authentication failed for user \"bob\"",
            Some("detail"),
            Some("hint"),
            &mut out,
        );
        let (tag, body) = split(&out);
        assert_eq!(tag, b'E');
        let f = decode_error_fields(body).unwrap();
        assert_eq!(f.severity, "FATAL");
        assert_eq!(f.code, "28P01");
        assert_eq!(f.message, "password authentication failed for user \"bob\"");
        assert_eq!(f.detail.as_deref(), Some("detail"));
        assert_eq!(f.hint.as_deref(), Some("hint"));
        assert_eq!(f.fields.len(), 6);
        assert_eq!(f.get(b'S'), Some("FATAL"));
        assert_eq!(f.get(b'P'), None);

        let mut again = BytesMut::new();
        encode_error_fields(b'E', &f, &mut again);
        assert_eq!(again, out);
    }

    #[test]
    fn notice_round_trip() {
        let mut out = BytesMut::new();
        encode_notice(Severity::Warning, "01000", "careful", &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, b'N');
        let f = decode_error_fields(body).unwrap();
        assert_eq!((f.severity.as_str(), f.code.as_str()), ("WARNING", "01000"));
        assert_eq!(f.message, "careful");
        assert_eq!((f.detail, f.hint), (None, None));
    }

    #[test]
    fn localized_severity_prefers_v() {
        let body =
            b"SFATAL_LOCALIZED\0VFATAL\0C57P03\0Mthe database system is starting up\0P12\0\0";
        let f = decode_error_fields(body).unwrap();
        assert_eq!(f.severity, "FATAL");
        assert_eq!(f.code, "57P03");
        assert_eq!(f.get(b'P'), Some("12"));
        let only_s = decode_error_fields(b"SERREUR\0\0").unwrap();
        assert_eq!(only_s.severity, "ERREUR");
        let mut out = BytesMut::new();
        encode_error_fields(b'N', &f, &mut out);
        let (tag, re) = split(&out);
        assert_eq!((tag, re), (b'N', &body[..]));
    }

    #[test]
    fn synthesized_from_members() {
        let f = ErrorFields {
            severity: "ERROR".into(),
            code: "08P01".into(),
            message: "m".into(),
            ..Default::default()
        };
        let mut a = BytesMut::new();
        encode_error_fields(b'E', &f, &mut a);
        let mut b = BytesMut::new();
        encode_error(Severity::Error, "08P01", "m", None, None, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn lossy_text_and_errors() {
        let f = decode_error_fields(b"M\xffx\0\0").unwrap();
        assert_eq!(f.message, "\u{fffd}x");
        assert!(decode_error_fields(b"").is_err());
        assert!(decode_error_fields(b"Mabc").is_err());
        assert!(decode_error_fields(b"Mabc\0").is_err());
        assert!(decode_error_fields(b"M\0\0x").is_err());
        assert_eq!(decode_error_fields(b"\0").unwrap(), ErrorFields::default());
    }

    #[test]
    fn severity_strings() {
        let all = [
            (Severity::Error, "ERROR"),
            (Severity::Fatal, "FATAL"),
            (Severity::Panic, "PANIC"),
            (Severity::Warning, "WARNING"),
            (Severity::Notice, "NOTICE"),
            (Severity::Debug, "DEBUG"),
            (Severity::Info, "INFO"),
            (Severity::Log, "LOG"),
        ];
        for (s, text) in all {
            assert_eq!(s.as_str(), text);
        }
    }
}
