//! Backend (server -> client) messages: tags, decoders of what the pooler inspects, and encoders
//! for what it synthesizes. Bodies passed to decoders exclude the 5-byte header.

mod error_response;
mod rows;

use bytes::{BufMut, BytesMut};

use crate::encode::{cstr_bytes, len_i32, len_u32, message, put_cstr, Frame};
use crate::error::ProtocolError;
use crate::reader::Reader;
use crate::startup::CancelKey;

pub use error_response::{
    decode_error_fields, encode_error, encode_error_fields, encode_notice,
    encode_notice_with_detail, ErrorFields, Severity,
};
pub use rows::{
    decode_data_row, decode_row_description, encode_data_row, encode_row_description, oid,
    FieldDesc,
};

/// Message type bytes sent by servers.
pub mod backend_tag {
    pub const AUTHENTICATION: u8 = b'R';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const ROW_DESCRIPTION: u8 = b'T';
    pub const DATA_ROW: u8 = b'D';
    pub const EMPTY_QUERY: u8 = b'I';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const NO_DATA: u8 = b'n';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const COPY_IN: u8 = b'G';
    pub const COPY_OUT: u8 = b'H';
    pub const COPY_BOTH: u8 = b'W';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const NOTIFICATION: u8 = b'A';
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
}
pub use backend_tag as tag;

const AUTH_OK: i32 = 0;
const AUTH_CLEARTEXT: i32 = 3;
const AUTH_MD5: i32 = 5;
const AUTH_SASL: i32 = 10;
const AUTH_SASL_CONTINUE: i32 = 11;
const AUTH_SASL_FINAL: i32 = 12;

/// Transaction state reported by ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    /// `'I'`: not in a transaction block.
    Idle,
    /// `'T'`: in a transaction block.
    InTransaction,
    /// `'E'`: in a failed transaction block.
    Failed,
}

impl TransactionStatus {
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'I' => Some(Self::Idle),
            b'T' => Some(Self::InTransaction),
            b'E' => Some(Self::Failed),
            _ => None,
        }
    }

    pub fn as_byte(self) -> u8 {
        match self {
            Self::Idle => b'I',
            Self::InTransaction => b'T',
            Self::Failed => b'E',
        }
    }
}

/// An Authentication* request ('R') from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication<'a> {
    Ok,
    CleartextPassword,
    Md5Password {
        salt: [u8; 4],
    },
    Sasl {
        mechanisms: Vec<&'a str>,
    },
    SaslContinue(&'a [u8]),
    SaslFinal(&'a [u8]),
    /// A method we do not implement (GSS, SSPI, ...), by its code.
    Other(u32),
}

pub fn decode_authentication(body: &[u8]) -> Result<Authentication<'_>, ProtocolError> {
    let mut r = Reader::new(body, "authentication request");
    let code = r.i32()?;
    let auth = match code {
        AUTH_OK => Authentication::Ok,
        AUTH_CLEARTEXT => Authentication::CleartextPassword,
        AUTH_MD5 => Authentication::Md5Password { salt: r.array()? },
        AUTH_SASL => {
            let mut mechanisms = Vec::new();
            loop {
                let m = r.cstr()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m);
            }
            Authentication::Sasl { mechanisms }
        }
        AUTH_SASL_CONTINUE => Authentication::SaslContinue(r.rest()),
        AUTH_SASL_FINAL => Authentication::SaslFinal(r.rest()),
        other => return Ok(Authentication::Other(other as u32)),
    };
    r.finish()?;
    Ok(auth)
}

/// ParameterStatus: (name, value).
pub fn decode_parameter_status(body: &[u8]) -> Result<(&str, &str), ProtocolError> {
    let mut r = Reader::new(body, "parameter status");
    let name = r.cstr()?;
    let value = r.cstr()?;
    r.finish()?;
    Ok((name, value))
}

pub fn decode_backend_key_data(body: &[u8]) -> Result<CancelKey, ProtocolError> {
    let mut r = Reader::new(body, "backend key data");
    let key = CancelKey::from_bytes(r.array()?);
    r.finish()?;
    Ok(key)
}

pub fn decode_ready_for_query(body: &[u8]) -> Result<TransactionStatus, ProtocolError> {
    let mut r = Reader::new(body, "ready for query");
    let status = TransactionStatus::from_byte(r.u8()?).ok_or_else(|| r.err())?;
    r.finish()?;
    Ok(status)
}

/// CommandComplete tag text, e.g. `"INSERT 0 1"`.
pub fn decode_command_complete(body: &[u8]) -> Result<&str, ProtocolError> {
    let mut r = Reader::new(body, "command complete");
    let tag = r.cstr()?;
    r.finish()?;
    Ok(tag)
}

fn auth_message(code: i32, data: &[u8], out: &mut BytesMut) {
    let f = Frame::tagged(backend_tag::AUTHENTICATION, out);
    out.put_i32(code);
    out.put_slice(data);
    f.finish(out);
}

pub fn encode_auth_ok(out: &mut BytesMut) {
    auth_message(AUTH_OK, &[], out);
}

pub fn encode_auth_cleartext(out: &mut BytesMut) {
    auth_message(AUTH_CLEARTEXT, &[], out);
}

pub fn encode_auth_md5(salt: [u8; 4], out: &mut BytesMut) {
    auth_message(AUTH_MD5, &salt, out);
}

pub fn encode_auth_sasl(mechanisms: &[&str], out: &mut BytesMut) {
    let f = Frame::tagged(backend_tag::AUTHENTICATION, out);
    out.put_i32(AUTH_SASL);
    for m in mechanisms.iter().filter(|m| !m.is_empty()) {
        put_cstr(out, m);
    }
    out.put_u8(0);
    f.finish(out);
}

pub fn encode_auth_sasl_continue(data: &[u8], out: &mut BytesMut) {
    auth_message(AUTH_SASL_CONTINUE, data, out);
}

pub fn encode_auth_sasl_final(data: &[u8], out: &mut BytesMut) {
    auth_message(AUTH_SASL_FINAL, data, out);
}

pub fn encode_parameter_status(name: &str, value: &str, out: &mut BytesMut) {
    // A dozen of these greet every client: one reservation and two copies each, with the length
    // known up front (a NUL cannot travel inside a C string: each part is cut at its first).
    let name = cstr_bytes(name);
    let value = cstr_bytes(value);
    let len = 4 + name.len() + 1 + value.len() + 1;
    out.reserve(1 + len);
    out.put_u8(backend_tag::PARAMETER_STATUS);
    out.put_u32(len_u32(len));
    out.extend_from_slice(name);
    out.put_u8(0);
    out.extend_from_slice(value);
    out.put_u8(0);
}

pub fn encode_backend_key_data(key: CancelKey, out: &mut BytesMut) {
    message(backend_tag::BACKEND_KEY_DATA, &key.to_bytes(), out);
}

pub fn encode_ready_for_query(status: TransactionStatus, out: &mut BytesMut) {
    message(backend_tag::READY_FOR_QUERY, &[status.as_byte()], out);
}

/// NegotiateProtocolVersion. On the wire the first word is the full version code
/// (major 3 in the high half, `newest_minor` in the low half), as PostgreSQL sends and libpq
/// expects; then the count and names of unrecognized `_pq_.` options.
pub fn encode_negotiate_protocol_version(
    newest_minor: u32,
    unrecognized: &[&str],
    out: &mut BytesMut,
) {
    let f = Frame::tagged(backend_tag::NEGOTIATE_PROTOCOL_VERSION, out);
    out.put_u32((3 << 16) | (newest_minor & 0xffff));
    out.put_i32(len_i32(unrecognized.len()));
    for o in unrecognized {
        put_cstr(out, o);
    }
    f.finish(out);
}

/// Decodes NegotiateProtocolVersion: (newest minor, unrecognized options).
pub fn decode_negotiate_protocol_version(body: &[u8]) -> Result<(u32, Vec<&str>), ProtocolError> {
    let mut r = Reader::new(body, "negotiate protocol version");
    let version = r.u32()?;
    let n = usize::try_from(r.i32()?).map_err(|_| r.err())?;
    // Each option needs at least its NUL: bound the count before allocating.
    if n > r.remaining() {
        return Err(r.err());
    }
    let mut options = Vec::with_capacity(n);
    for _ in 0..n {
        options.push(r.cstr()?);
    }
    r.finish()?;
    Ok((version & 0xffff, options))
}

pub fn encode_command_complete(tag: &str, out: &mut BytesMut) {
    let f = Frame::tagged(backend_tag::COMMAND_COMPLETE, out);
    put_cstr(out, tag);
    f.finish(out);
}

pub fn encode_empty_query_response(out: &mut BytesMut) {
    message(backend_tag::EMPTY_QUERY, &[], out);
}

#[cfg(test)]
mod tests;
