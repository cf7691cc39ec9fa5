//! RowDescription and DataRow in text format, for the admin console and auth_query results.

use bytes::{BufMut, BytesMut};

use crate::encode::{count_i16, len_i32, put_cstr, Frame};
use crate::error::ProtocolError;
use crate::reader::Reader;

/// Type OIDs used by the admin console.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const NUMERIC: u32 = 1700;
}

/// One column of a RowDescription: name, type OID and type length (-1 = variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldDesc<'a> {
    pub name: &'a str,
    pub type_oid: u32,
    pub type_len: i16,
}

/// Fixed bytes per field after the name: table oid, attnum, type oid, len, typmod, format.
const FIELD_FIXED: usize = 4 + 2 + 4 + 2 + 4 + 2;

/// RowDescription with every column in text format and no source table.
pub fn encode_row_description(fields: &[FieldDesc<'_>], out: &mut BytesMut) {
    let f = Frame::tagged(b'T', out);
    out.put_i16(count_i16(fields.len()));
    for fd in fields {
        put_cstr(out, fd.name);
        out.put_u32(0); // table oid
        out.put_i16(0); // column attribute number
        out.put_u32(fd.type_oid);
        out.put_i16(fd.type_len);
        out.put_i32(-1); // type modifier
        out.put_i16(0); // text format
    }
    f.finish(out);
}

/// DataRow; `None` is SQL NULL.
pub fn encode_data_row(values: &[Option<&[u8]>], out: &mut BytesMut) {
    let f = Frame::tagged(b'D', out);
    out.put_i16(count_i16(values.len()));
    for v in values {
        match v {
            Some(b) => {
                out.put_i32(len_i32(b.len()));
                out.put_slice(b);
            }
            None => out.put_i32(-1),
        }
    }
    f.finish(out);
}

/// Decodes a RowDescription into names, type OIDs and lengths (other attributes are skipped).
pub fn decode_row_description(body: &[u8]) -> Result<Vec<FieldDesc<'_>>, ProtocolError> {
    let mut r = Reader::new(body, "row description");
    let n = usize::try_from(r.i16()?).map_err(|_| r.err())?;
    if n.saturating_mul(FIELD_FIXED + 1) > r.remaining() {
        return Err(r.err());
    }
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.cstr()?;
        let _table_oid = r.u32()?;
        let _attnum = r.i16()?;
        let type_oid = r.u32()?;
        let type_len = r.i16()?;
        let _typmod = r.i32()?;
        let _format = r.i16()?;
        fields.push(FieldDesc {
            name,
            type_oid,
            type_len,
        });
    }
    r.finish()?;
    Ok(fields)
}

/// Decodes a DataRow into its column values; `None` is SQL NULL.
pub fn decode_data_row(body: &[u8]) -> Result<Vec<Option<&[u8]>>, ProtocolError> {
    let mut r = Reader::new(body, "data row");
    let n = usize::try_from(r.i16()?).map_err(|_| r.err())?;
    if n.saturating_mul(4) > r.remaining() {
        return Err(r.err());
    }
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.i32()?;
        if len == -1 {
            values.push(None);
        } else {
            let len = usize::try_from(len).map_err(|_| r.err())?;
            values.push(Some(r.bytes(len)?));
        }
    }
    r.finish()?;
    Ok(values)
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
    fn row_description_round_trip() {
        let fields = [
            FieldDesc {
                name: "database",
                type_oid: oid::TEXT,
                type_len: -1,
            },
            FieldDesc {
                name: "cl_active",
                type_oid: oid::INT4,
                type_len: 4,
            },
            FieldDesc {
                name: "total_xact_count",
                type_oid: oid::INT8,
                type_len: 8,
            },
        ];
        let mut out = BytesMut::new();
        encode_row_description(&fields, &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, b'T');
        assert_eq!(decode_row_description(body).unwrap(), fields);
        assert!(decode_row_description(&body[..body.len() - 1]).is_err());
        assert!(decode_row_description(b"\x7f\xff").is_err());
        assert!(decode_row_description(b"\xff\xff").is_err());
        assert_eq!(decode_row_description(b"\0\0").unwrap(), vec![]);
    }

    #[test]
    fn data_row_round_trip() {
        let values: [Option<&[u8]>; 4] = [Some(b"pgbouncer"), None, Some(b""), Some(b"42")];
        let mut out = BytesMut::new();
        encode_data_row(&values, &mut out);
        let (tag, body) = split(&out);
        assert_eq!(tag, b'D');
        assert_eq!(decode_data_row(body).unwrap(), values.to_vec());
        assert!(decode_data_row(&body[..body.len() - 1]).is_err());
        assert!(decode_data_row(b"\0\x01\xff\xff\xff\xfe").is_err());
        assert!(decode_data_row(b"\0\x01\0\0\0\x05ab").is_err());
        assert!(decode_data_row(b"\x7f\xff").is_err());
        assert!(decode_data_row(b"\0\0x").is_err());
    }
}
