//! Comparing credentials: only the lengths may leak through timing. A leaf, so that the md5 and
//! SCRAM math and the stored-secret classifier above them can all use it.

use subtle::ConstantTimeEq;

/// Constant-time string/bytes equality helper. Only the lengths may leak through timing.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
