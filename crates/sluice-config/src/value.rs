//! Value types a setting can have, how each parses from the ini file and renders for SHOW CONFIG.

use std::time::Duration;

/// A type usable as a setting value.
///
/// `parse` receives the value with surrounding whitespace already trimmed by the ini lexer (it trims
/// again, so `SET` input behaves the same). `render` is what SHOW CONFIG prints, PgBouncer style:
/// seconds with `%g`, booleans as 0/1, integers plain, strings as-is, unset as "".
/// `Default` is only a fallback: every default in the settings table is parsed (and tested) at startup.
pub trait SettingValue: Sized + Default {
    fn parse(s: &str) -> Result<Self, String>;
    fn render(&self) -> String;
}

fn parse_int_in(s: &str, min: i64, max: i64) -> Result<i64, String> {
    let t = s.trim();
    let v: i64 = t.parse().map_err(|_| format!("invalid integer '{t}'"))?;
    if v < min || v > max {
        return Err(format!("value {v} out of range ({min}..{max})"));
    }
    Ok(v)
}

impl SettingValue for u16 {
    fn parse(s: &str) -> Result<Self, String> {
        parse_int_in(s, 0, u16::MAX as i64).map(|v| v as u16)
    }
    fn render(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for u32 {
    fn parse(s: &str) -> Result<Self, String> {
        parse_int_in(s, 0, u32::MAX as i64).map(|v| v as u32)
    }
    fn render(&self) -> String {
        self.to_string()
    }
}

/// PgBouncer stores booleans as integers 0/1; the usual words are accepted as well.
impl SettingValue for bool {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "1" | "yes" | "on" | "true" => Ok(true),
            "0" | "no" | "off" | "false" => Ok(false),
            _ => Err(format!("invalid boolean '{t}' (expected 0 or 1)")),
        }
    }
    fn render(&self) -> String {
        if *self { "1" } else { "0" }.to_string()
    }
}

/// A string that is always set (may be empty, e.g. `server_reset_query =` disables the reset).
impl SettingValue for String {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(s.trim().to_string())
    }
    fn render(&self) -> String {
        self.clone()
    }
}

/// A string PgBouncer treats as "not set" when empty (logfile, pidfile, user, auth_file, ...).
impl SettingValue for Option<String> {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        Ok(if t.is_empty() {
            None
        } else {
            Some(t.to_string())
        })
    }
    fn render(&self) -> String {
        self.clone().unwrap_or_default()
    }
}

/// auth_dbname: a database name, "not set" when empty. The admin console's name is refused where
/// the key is set (file, RELOAD, SET), as PgBouncer refuses it: the console has no PostgreSQL
/// behind it to run auth_query on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthDbname(pub Option<String>);

impl AuthDbname {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl SettingValue for AuthDbname {
    fn parse(s: &str) -> Result<Self, String> {
        match <Option<String>>::parse(s)? {
            Some(name) if name == "pgbouncer" => Err(format!(
                "cannot use the reserved \"{name}\" database as an auth_dbname"
            )),
            name => Ok(AuthDbname(name)),
        }
    }
    fn render(&self) -> String {
        self.0.render()
    }
}

/// A comma separated list: items trimmed, empty items dropped. Renders joined with ",".
impl SettingValue for Vec<String> {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(s.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_string)
            .collect())
    }
    fn render(&self) -> String {
        self.join(",")
    }
}

/// A time value in (fractional) seconds, as PgBouncer's `strtod`-parsed time settings.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Seconds(pub f64);

impl Seconds {
    /// The duration, or `None` when zero (PgBouncer's "disabled" for most timeouts).
    pub fn as_duration(&self) -> Option<Duration> {
        if self.is_zero() {
            return None;
        }
        Duration::try_from_secs_f64(self.0).ok()
    }

    pub fn is_zero(&self) -> bool {
        self.0 == 0.0
    }
}

impl SettingValue for Seconds {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let v: f64 = t
            .parse()
            .map_err(|_| format!("invalid time value '{t}' (expected seconds)"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("invalid time value '{t}' (expected seconds >= 0)"));
        }
        Ok(Seconds(v))
    }
    fn render(&self) -> String {
        format_g(self.0)
    }
}

/// max_replica_lag: how far a standby may replay behind before it leaves rotation, as a time
/// (`10s`, `500ms`, `2min`) or a WAL distance (`16MB`, `512kB`, plain bytes); `0` = no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplicaLag {
    #[default]
    Unlimited,
    Time(Duration),
    Bytes(u64),
}

impl SettingValue for ReplicaLag {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let bad = || {
            format!("invalid replica lag '{t}' (expected a time such as 10s or 500ms, or a size such as 16MB)")
        };
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = (&t[..split], t[split..].trim());
        let v: f64 = num.parse().map_err(|_| bad())?;
        if !v.is_finite() || v < 0.0 {
            return Err(bad());
        }
        if v == 0.0 {
            return Ok(ReplicaLag::Unlimited);
        }
        let time = |secs: f64| Duration::try_from_secs_f64(secs).map(ReplicaLag::Time);
        let bytes = |mult: f64| {
            let b = v * mult;
            if b >= 1.0 && b < u64::MAX as f64 {
                Ok(ReplicaLag::Bytes(b as u64))
            } else {
                Err(bad())
            }
        };
        match unit.to_ascii_lowercase().as_str() {
            "ms" => time(v / 1000.0).map_err(|_| bad()),
            "s" | "sec" | "secs" => time(v).map_err(|_| bad()),
            "min" => time(v * 60.0).map_err(|_| bad()),
            "" | "b" | "bytes" => bytes(1.0),
            "kb" => bytes(1024.0),
            "mb" => bytes(1024.0 * 1024.0),
            "gb" => bytes(1024.0 * 1024.0 * 1024.0),
            _ => Err(bad()),
        }
    }
    fn render(&self) -> String {
        match self {
            ReplicaLag::Unlimited => "0".into(),
            ReplicaLag::Time(d) if d.subsec_millis() != 0 => format!("{}ms", d.as_millis()),
            ReplicaLag::Time(d) => format!("{}s", d.as_secs()),
            ReplicaLag::Bytes(b) => format!("{b}"),
        }
    }
}

/// `max_packet_size`: bytes, below 2^31. The protocol's message lengths are signed 32-bit, so
/// nothing larger can be meant, and a limit at or above 2^31 is the one PgBouncer 1.26.1's
/// advisory names (packet length arithmetic overflowing): refused at load with file, line and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketSize(pub u32);

impl SettingValue for PacketSize {
    fn parse(s: &str) -> Result<Self, String> {
        parse_int_in(s, 0, i32::MAX as i64)
            .map(|v| PacketSize(v as u32))
            .map_err(|e| format!("{e}: a packet size must stay below 2^31 bytes"))
    }
    fn render(&self) -> String {
        self.0.to_string()
    }
}

/// A Unix file mode; parsed like C `strtol(.., 0)` (leading 0 = octal, 0x = hex), rendered in octal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileMode(pub u32);

impl SettingValue for FileMode {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let parsed = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u32::from_str_radix(hex, 16)
        } else if t.len() > 1 && t.starts_with('0') {
            u32::from_str_radix(&t[1..], 8)
        } else {
            t.parse::<u32>()
        };
        match parsed {
            Ok(v) if v <= 0o7777 => Ok(FileMode(v)),
            _ => Err(format!(
                "invalid file mode '{t}' (expected octal like 0777)"
            )),
        }
    }
    fn render(&self) -> String {
        format!("0{:o}", self.0)
    }
}

/// C `printf("%g")`: 6 significant digits, trailing zeros removed, exponent form outside 1e-4..1e6.
pub fn format_g(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if !v.is_finite() {
        return v.to_string();
    }
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    if !(-4..6).contains(&exp) {
        let m = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim_fraction(&format!("{v:.decimals$}")).to_string()
    }
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format_matches_c() {
        let cases = [
            (0.0, "0"),
            (5.0, "5"),
            (3600.0, "3600"),
            (0.5, "0.5"),
            (120.0, "120"),
            (1.25, "1.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (999999.0, "999999"),
            (1000000.0, "1e+06"),
            (1234567.0, "1.23457e+06"),
            (0.333333333, "0.333333"),
            (2.5e10, "2.5e+10"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g(v), want, "value {v}");
        }
    }

    #[test]
    fn integers() {
        assert_eq!(<u32 as SettingValue>::parse(" 42 "), Ok(42));
        assert_eq!(
            <u32 as SettingValue>::parse("abc"),
            Err("invalid integer 'abc'".to_string())
        );
        assert!(<u32 as SettingValue>::parse("-1")
            .unwrap_err()
            .contains("out of range"));
        assert!(<u16 as SettingValue>::parse("65536")
            .unwrap_err()
            .contains("out of range"));
        assert_eq!(<u16 as SettingValue>::parse("65535"), Ok(65535));
        assert!(<u32 as SettingValue>::parse("1.5").is_err());
        assert!(<u32 as SettingValue>::parse("").is_err());
        assert!(<u32 as SettingValue>::parse("99999999999999999999999").is_err());
    }

    #[test]
    fn booleans() {
        for t in ["1", "yes", "on", "true", "TRUE", " On "] {
            assert_eq!(<bool as SettingValue>::parse(t), Ok(true), "{t}");
        }
        for f in ["0", "no", "off", "false"] {
            assert_eq!(<bool as SettingValue>::parse(f), Ok(false), "{f}");
        }
        assert!(<bool as SettingValue>::parse("2").is_err());
        assert_eq!(true.render(), "1");
        assert_eq!(false.render(), "0");
    }

    #[test]
    fn seconds() {
        let s = Seconds::parse("1.5").unwrap();
        assert_eq!(s.as_duration(), Some(Duration::from_millis(1500)));
        assert_eq!(s.render(), "1.5");
        assert!(Seconds::parse("0").unwrap().is_zero());
        assert_eq!(Seconds::parse("0").unwrap().as_duration(), None);
        assert!(Seconds::parse("-1").is_err());
        assert!(Seconds::parse("nan").is_err());
        assert!(Seconds::parse("inf").is_err());
        assert!(Seconds::parse("10s").is_err());
        assert_eq!(Seconds(f64::MAX).as_duration(), None);
        assert_eq!(Seconds(-3.0).as_duration(), None);
    }

    #[test]
    fn replica_lag() {
        let p = |s| ReplicaLag::parse(s);
        assert_eq!(p("0"), Ok(ReplicaLag::Unlimited));
        assert_eq!(p("10s"), Ok(ReplicaLag::Time(Duration::from_secs(10))));
        assert_eq!(p("500ms"), Ok(ReplicaLag::Time(Duration::from_millis(500))));
        assert_eq!(p("2min"), Ok(ReplicaLag::Time(Duration::from_secs(120))));
        assert_eq!(p("16MB"), Ok(ReplicaLag::Bytes(16 << 20)));
        assert_eq!(p("1000"), Ok(ReplicaLag::Bytes(1000)));
        for bad in ["", "x", "10 parsecs", "-1s", "nan"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        for v in ["0", "10s", "1500ms", "4096"] {
            assert_eq!(p(v).unwrap().render(), v);
        }
    }

    #[test]
    fn strings_and_lists() {
        assert_eq!(<Option<String> as SettingValue>::parse("  "), Ok(None));
        assert_eq!(
            <Option<String> as SettingValue>::parse(" /tmp/x "),
            Ok(Some("/tmp/x".into()))
        );
        assert_eq!(None::<String>.render(), "");
        let l = <Vec<String> as SettingValue>::parse(" a, b ,,c ,").unwrap();
        assert_eq!(l, vec!["a", "b", "c"]);
        assert_eq!(l.render(), "a,b,c");
        assert!(<Vec<String> as SettingValue>::parse("").unwrap().is_empty());
    }

    #[test]
    fn file_mode() {
        assert_eq!(FileMode::parse("0777"), Ok(FileMode(0o777)));
        assert_eq!(FileMode::parse("0x1ff"), Ok(FileMode(0o777)));
        assert_eq!(FileMode::parse("511"), Ok(FileMode(0o777)));
        assert_eq!(FileMode::parse("0"), Ok(FileMode(0)));
        assert!(FileMode::parse("0789").is_err());
        assert!(FileMode::parse("077777").is_err());
        assert!(FileMode::parse("x").is_err());
        assert_eq!(FileMode(0o700).render(), "0700");
    }
}
