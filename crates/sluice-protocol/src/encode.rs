//! Message framing for encoders: tag, back-filled length word, C strings and length casts.

use bytes::{BufMut, BytesMut};

/// An open message in `out`; [`Frame::finish`] writes the length once the body is complete.
pub(crate) struct Frame {
    len_at: usize,
}

impl Frame {
    /// Starts a tagged message (tag byte + 4-byte length placeholder).
    pub(crate) fn tagged(tag: u8, out: &mut BytesMut) -> Self {
        out.put_u8(tag);
        Self::untagged(out)
    }

    /// Starts an untagged startup-phase packet (4-byte length placeholder only).
    pub(crate) fn untagged(out: &mut BytesMut) -> Self {
        let len_at = out.len();
        out.put_u32(0);
        Frame { len_at }
    }

    /// Back-fills the length word (which counts itself and the body, not the tag).
    pub(crate) fn finish(self, out: &mut BytesMut) {
        let len = len_u32(out.len().saturating_sub(self.len_at));
        if let Some(slot) = out.get_mut(self.len_at..self.len_at + 4) {
            slot.copy_from_slice(&len.to_be_bytes());
        }
    }
}

/// Appends a whole tagged message whose body is `body`.
pub(crate) fn message(tag: u8, body: &[u8], out: &mut BytesMut) {
    let f = Frame::tagged(tag, out);
    out.put_slice(body);
    f.finish(out);
}

/// Writes `s` as a C string. A string cannot carry a NUL on the wire, so it is cut at the
/// first NUL rather than producing a message the peer would misparse.
pub(crate) fn put_cstr(out: &mut BytesMut, s: &str) {
    out.put_slice(cstr_bytes(s));
    out.put_u8(0);
}

/// The bytes `put_cstr` writes before the terminator: `s` up to its first NUL.
pub(crate) fn cstr_bytes(s: &str) -> &[u8] {
    let b = s.as_bytes();
    match b.iter().position(|&c| c == 0) {
        Some(end) => &b[..end],
        None => b,
    }
}

/// Length conversions never panic: absurd sizes saturate (and the peer rejects the message).
pub(crate) fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(crate) fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

pub(crate) fn count_i16(n: usize) -> i16 {
    i16::try_from(n).unwrap_or(i16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_backfills_length() {
        let mut out = BytesMut::from(&b"junk"[..]);
        let f = Frame::tagged(b'Q', &mut out);
        put_cstr(&mut out, "a\0b");
        f.finish(&mut out);
        assert_eq!(&out[..], b"junkQ\x00\x00\x00\x06a\0");
    }

    #[test]
    fn untagged_frame() {
        let mut out = BytesMut::new();
        let f = Frame::untagged(&mut out);
        out.put_u32(7);
        f.finish(&mut out);
        assert_eq!(&out[..], b"\x00\x00\x00\x08\x00\x00\x00\x07");
    }

    #[test]
    fn saturating_lengths() {
        assert_eq!(count_i16(1 << 20), i16::MAX);
        assert_eq!(len_i32(3), 3);
        assert_eq!(len_u32(usize::MAX), u32::MAX);
    }
}
