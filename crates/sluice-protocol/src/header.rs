//! The 5-byte header of every regular message: tag byte plus a big-endian length that counts itself.

use crate::error::ProtocolError;

/// Bytes in a regular message header (tag + length word).
pub const HEADER_LEN: usize = 5;

/// A decoded message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Message type byte.
    pub tag: u8,
    /// Length as on the wire: includes the 4 length bytes, excludes the tag.
    pub len: u32,
}

impl Header {
    /// Bytes the whole message occupies on the wire (tag + length + body).
    pub fn total_len(&self) -> usize {
        (self.len as usize).saturating_add(1)
    }

    /// Bytes in the body after the 5-byte header.
    pub fn body_len(&self) -> usize {
        (self.len as usize).saturating_sub(4)
    }
}

/// Looks at the start of `buf` without consuming anything.
///
/// `Ok(None)` when fewer than 5 bytes are buffered, `Err(BadHeader)` when the length word is
/// below 4, `Err(TooLarge)` when it exceeds `max_len` (checked before anyone allocates).
pub fn peek_header(buf: &[u8], max_len: usize) -> Result<Option<Header>, ProtocolError> {
    let Some(&[tag, a, b, c, d]) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([a, b, c, d]);
    if len < 4 {
        return Err(ProtocolError::BadHeader);
    }
    if len as usize > max_len {
        return Err(ProtocolError::TooLarge {
            len: len as usize,
            max: max_len,
        });
    }
    Ok(Some(Header { tag, len }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_five_bytes() {
        assert_eq!(peek_header(b"", 100), Ok(None));
        assert_eq!(peek_header(b"Q\0\0\0", 100), Ok(None));
    }

    #[test]
    fn decodes_tag_and_lengths() {
        let h = peek_header(b"Q\0\0\0\x09sel", 100).unwrap().unwrap();
        assert_eq!(h, Header { tag: b'Q', len: 9 });
        assert_eq!(h.total_len(), 10);
        assert_eq!(h.body_len(), 5);
        let empty = peek_header(b"S\0\0\0\x04", 4).unwrap().unwrap();
        assert_eq!(empty.body_len(), 0);
        assert_eq!(empty.total_len(), 5);
    }

    #[test]
    fn rejects_short_and_large() {
        assert_eq!(
            peek_header(b"Q\0\0\0\x03", 100),
            Err(ProtocolError::BadHeader)
        );
        assert_eq!(
            peek_header(b"Q\x40\0\0\0", 1 << 20),
            Err(ProtocolError::TooLarge {
                len: 1 << 30,
                max: 1 << 20
            })
        );
        let h = peek_header(b"d\xff\xff\xff\xff", usize::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(h.total_len(), 1 << 32);
    }
}
