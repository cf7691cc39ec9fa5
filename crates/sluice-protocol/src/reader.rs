//! Bounds-checked cursor over a message body; every read returns `Malformed` instead of panicking.

use crate::error::ProtocolError;

/// A forward-only reader over a borrowed body. `what` names the message in errors.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    pub(crate) fn err(&self) -> ProtocolError {
        ProtocolError::malformed(self.what)
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails unless every byte has been consumed (PostgreSQL's `pq_getmsgend`).
    pub(crate) fn finish(&self) -> Result<(), ProtocolError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.err())
        }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.err())?;
        let out = self.buf.get(self.pos..end).ok_or_else(|| self.err())?;
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len();
        out
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let b = self.bytes(N)?;
        b.try_into().map_err(|_| self.err())
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtocolError> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, ProtocolError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    /// A NUL-terminated byte string, returned without its NUL.
    pub(crate) fn cstr_bytes(&mut self) -> Result<&'a [u8], ProtocolError> {
        let rest = self.buf.get(self.pos..).ok_or_else(|| self.err())?;
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.err())?;
        let s = rest.get(..nul).ok_or_else(|| self.err())?;
        self.pos += nul + 1;
        Ok(s)
    }

    /// A NUL-terminated UTF-8 string, returned without its NUL.
    pub(crate) fn cstr(&mut self) -> Result<&'a str, ProtocolError> {
        let b = self.cstr_bytes()?;
        std::str::from_utf8(b).map_err(|_| self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_bounds() {
        let mut r = Reader::new(b"ab\0\x00\x01\xff\xff\xff\xfe", "t");
        assert_eq!(r.cstr().unwrap(), "ab");
        assert_eq!(r.i16().unwrap(), 1);
        assert_eq!(r.i32().unwrap(), -2);
        assert!(r.finish().is_ok());
        assert_eq!(r.u8(), Err(ProtocolError::malformed("t")));
        assert_eq!(r.bytes(usize::MAX), Err(ProtocolError::malformed("t")));
        assert_eq!(r.cstr(), Err(ProtocolError::malformed("t")));
    }

    #[test]
    fn cstr_without_nul_or_bad_utf8() {
        assert!(Reader::new(b"abc", "t").cstr().is_err());
        assert!(Reader::new(b"\xff\0", "t").cstr().is_err());
        assert_eq!(Reader::new(b"\xff\0", "t").cstr_bytes().unwrap(), b"\xff");
    }

    #[test]
    fn rest_and_position() {
        let mut r = Reader::new(b"xyz", "t");
        assert_eq!(r.u8().unwrap(), b'x');
        assert_eq!(r.position(), 1);
        assert_eq!(r.remaining(), 2);
        assert_eq!(r.rest(), b"yz");
        assert!(r.finish().is_ok());
        assert!(r.rest().is_empty());
    }
}
