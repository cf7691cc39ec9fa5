//! WAL positions (`pg_lsn`): parse and format PostgreSQL's `X/Y` text form, compare.

use std::fmt;
use std::str::FromStr;

/// A WAL position, as `pg_current_wal_insert_lsn()` or `pg_last_wal_replay_lsn()` return it.
/// Ordered like the server orders `pg_lsn` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid WAL position '{0}' (expected two hexadecimal numbers such as 16/B374D848)")]
pub struct LsnError(pub String);

impl FromStr for Lsn {
    type Err = LsnError;

    /// `hi/lo`, each 1 to 8 hexadecimal digits (the server's `pg_lsn` input).
    fn from_str(s: &str) -> Result<Self, LsnError> {
        let err = || LsnError(s.chars().take(40).collect());
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        let part = |p: &str| {
            if p.is_empty() || p.len() > 8 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            u32::from_str_radix(p, 16).map_err(|_| err())
        };
        Ok(Lsn((u64::from(part(hi)?) << 32) | u64::from(part(lo)?)))
    }
}

impl fmt::Display for Lsn {
    /// As the server prints it: upper case, no leading zeros (`0/0`, `16/B374D848`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_format_compare() {
        for (text, value) in [
            ("0/0", 0u64),
            ("0/1", 1),
            ("16/B374D848", 0x16_B374_D848),
            ("FFFFFFFF/FFFFFFFF", u64::MAX),
        ] {
            let lsn: Lsn = text.parse().unwrap();
            assert_eq!(lsn, Lsn(value));
            assert_eq!(lsn.to_string(), text);
        }
        assert_eq!("16/b374d848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
        assert_eq!(
            "00000001/0000000A".parse::<Lsn>().unwrap().to_string(),
            "1/A"
        );
        assert!("0/FFFFFFFF".parse::<Lsn>().unwrap() < "1/0".parse().unwrap());
        assert!("A/0".parse::<Lsn>().unwrap() > "9/FFFFFFFF".parse().unwrap());
        for bad in [
            "",
            "/",
            "0/",
            "/0",
            "0",
            "1/2/3",
            "G/0",
            "0/123456789",
            " 0/1",
            "0/-1",
            "+1/0",
        ] {
            let e = bad.parse::<Lsn>().unwrap_err();
            assert!(e.to_string().contains("invalid WAL position"), "{bad}: {e}");
        }
    }
}
