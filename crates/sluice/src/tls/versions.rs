//! PgBouncer's `*_tls_protocols` and `*_tls_ciphers` / `*_tls13_ciphers` values mapped onto what
//! rustls offers (TLS 1.2 and 1.3, AEAD suites only). docs/tls.md documents the mapping.

use rustls::{CipherSuite, SupportedCipherSuite, SupportedProtocolVersion};

use super::TlsError;

/// rustls suites with their IANA and OpenSSL names.
const SUITES: &[(CipherSuite, &str, &str)] = &[
    (
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        "TLS_AES_256_GCM_SHA384",
        "TLS_AES_256_GCM_SHA384",
    ),
    (
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_128_GCM_SHA256",
    ),
    (
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_CHACHA20_POLY1305_SHA256",
    ),
    (
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
    ),
    (
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
    ),
    (
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ),
    (
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
    ),
    (
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
    ),
    (
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-RSA-CHACHA20-POLY1305",
    ),
];

/// OpenSSL-style name of a negotiated suite (what PgBouncer prints in SHOW CLIENTS `tls`).
pub fn openssl_name(suite: CipherSuite) -> String {
    SUITES
        .iter()
        .find(|(s, _, _)| *s == suite)
        .map(|(_, _, o)| (*o).to_string())
        .unwrap_or_else(|| format!("{suite:?}"))
}

fn tokens(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c == ',' || c == ':' || c.is_whitespace())
        .filter(|t| !t.is_empty())
}

/// `*_tls_protocols`: tlsv1.0..tlsv1.3, all, legacy, secure, default, each optionally negated with
/// '!'. rustls has no TLS 1.0/1.1: naming them explicitly gives a warning, and a value that leaves
/// nothing but them is an error. Returns the versions and warnings to log.
pub fn protocols(
    key: &'static str,
    value: &str,
) -> Result<(Vec<&'static SupportedProtocolVersion>, Vec<String>), TlsError> {
    // [1.0, 1.1, 1.2, 1.3]
    let mut set = [false; 4];
    let mut warnings = Vec::new();
    let mut any = false;
    for t in tokens(value) {
        any = true;
        let (neg, word) = match t.strip_prefix('!') {
            Some(w) => (true, w),
            None => (false, t),
        };
        let which: &[usize] = match word.to_ascii_lowercase().as_str() {
            "all" | "legacy" => &[0, 1, 2, 3],
            "secure" | "default" => &[2, 3],
            "tlsv1" | "tlsv1.0" => &[0],
            "tlsv1.1" => &[1],
            "tlsv1.2" => &[2],
            "tlsv1.3" => &[3],
            _ => {
                return Err(TlsError::setting(
                    key,
                    format!("unknown TLS protocol '{t}' (use tlsv1.2, tlsv1.3, secure or all)"),
                ))
            }
        };
        if !neg && which.len() == 1 && which[0] < 2 {
            warnings.push(format!(
                "{key}: {word} is not available (rustls supports TLS 1.2 and 1.3 only); ignored"
            ));
        }
        for &i in which {
            set[i] = !neg;
        }
    }
    if !any {
        set = [false, false, true, true];
    }
    let mut out: Vec<&'static SupportedProtocolVersion> = Vec::new();
    if set[3] {
        out.push(&rustls::version::TLS13);
    }
    if set[2] {
        out.push(&rustls::version::TLS12);
    }
    if out.is_empty() {
        return Err(TlsError::setting(
            key,
            format!("'{value}' allows no protocol rustls supports (TLS 1.2 and 1.3 only)"),
        ));
    }
    Ok((out, warnings))
}

fn is_tls13(s: CipherSuite) -> bool {
    matches!(
        s,
        CipherSuite::TLS13_AES_256_GCM_SHA384
            | CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    )
}

fn lookup(name: &str) -> Option<CipherSuite> {
    SUITES
        .iter()
        .find(|(_, iana, openssl)| name.eq_ignore_ascii_case(iana) || name == *openssl)
        .map(|(s, _, _)| *s)
}

/// Keywords meaning "the library's sensible defaults" in PgBouncer's cipher settings.
const DEFAULT_WORDS: &[&str] = &[
    "default", "secure", "fast", "normal", "all", "compat", "legacy", "insecure",
];

/// `*_tls_ciphers` (TLS <= 1.2, OpenSSL cipher string) and `*_tls13_ciphers` (TLS 1.3 suite
/// names) -> the rustls suites to offer, in rustls' preference order, plus warnings.
///
/// TLS 1.2: PgBouncer's keywords (default, secure, fast, normal, all...) mean every rustls suite.
/// A list selects the suites it names (IANA or OpenSSL names); OpenSSL selectors (HIGH, !aNULL,
/// @STRENGTH...) and suites rustls does not have are ignored with a warning; if nothing usable is
/// named, all rustls suites are used. TLS 1.3: empty = all; otherwise a ':'-list of TLS 1.3 names,
/// unknown ones are an error, ones rustls lacks (CCM) ignored with a warning.
pub fn cipher_suites(
    key12: &'static str,
    value12: &str,
    key13: &'static str,
    value13: &str,
    available: &[SupportedCipherSuite],
) -> Result<(Vec<SupportedCipherSuite>, Vec<String>), TlsError> {
    let mut warnings = Vec::new();
    let mut want: Vec<CipherSuite> = Vec::new();

    let v12 = value12.trim();
    if v12.is_empty() || DEFAULT_WORDS.iter().any(|w| v12.eq_ignore_ascii_case(w)) {
        want.extend(SUITES.iter().map(|s| s.0).filter(|s| !is_tls13(*s)));
    } else {
        let mut ignored = Vec::new();
        for t in tokens(v12) {
            match lookup(t) {
                Some(s) if !is_tls13(s) => want.push(s),
                Some(_) => ignored.push(t),
                None => {
                    let plausible = t
                        .trim_start_matches(['!', '-', '+', '@'])
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.=+".contains(&b));
                    if !plausible {
                        return Err(TlsError::setting(
                            key12,
                            format!("cannot parse cipher '{t}'"),
                        ));
                    }
                    ignored.push(t);
                }
            }
        }
        if !ignored.is_empty() {
            warnings.push(format!(
                "{key12}: ignored (not a TLS 1.2 suite rustls offers): {}",
                ignored.join(":")
            ));
        }
        if want.is_empty() {
            warnings.push(format!(
                "{key12}: names no rustls TLS 1.2 suite; using all of them"
            ));
            want.extend(SUITES.iter().map(|s| s.0).filter(|s| !is_tls13(*s)));
        }
    }

    let v13 = value13.trim();
    if v13.is_empty() {
        want.extend(SUITES.iter().map(|s| s.0).filter(|s| is_tls13(*s)));
    } else {
        let mut n = 0;
        for t in tokens(v13) {
            match lookup(t) {
                Some(s) if is_tls13(s) => {
                    want.push(s);
                    n += 1;
                }
                _ if t.eq_ignore_ascii_case("TLS_AES_128_CCM_SHA256")
                    || t.eq_ignore_ascii_case("TLS_AES_128_CCM_8_SHA256") =>
                {
                    warnings.push(format!("{key13}: {t} is not available in rustls; ignored"))
                }
                _ => {
                    return Err(TlsError::setting(
                        key13,
                        format!(
                            "failed to set the TLSv1.3 cipher suites: unknown suite '{t}' (rustls offers TLS_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256, TLS_CHACHA20_POLY1305_SHA256)"
                        ),
                    ))
                }
            }
        }
        if n == 0 {
            return Err(TlsError::setting(
                key13,
                "names no TLS 1.3 suite rustls offers",
            ));
        }
    }

    let suites = available
        .iter()
        .filter(|s| want.contains(&s.suite()))
        .copied()
        .collect();
    Ok((suites, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&SupportedProtocolVersion]) -> Vec<String> {
        v.iter().map(|p| format!("{:?}", p.version)).collect()
    }

    #[test]
    fn protocol_values() {
        let (v, w) = protocols("k", "secure").unwrap();
        assert_eq!(names(&v), ["TLSv1_3", "TLSv1_2"]);
        assert!(w.is_empty());
        let (v, w) = protocols("k", "all").unwrap();
        assert_eq!(v.len(), 2);
        assert!(w.is_empty());
        let (v, _) = protocols("k", "tlsv1.3").unwrap();
        assert_eq!(names(&v), ["TLSv1_3"]);
        let (v, _) = protocols("k", "all,!tlsv1.3").unwrap();
        assert_eq!(names(&v), ["TLSv1_2"]);
        let (v, w) = protocols("k", "tlsv1.1:tlsv1.2").unwrap();
        assert_eq!(names(&v), ["TLSv1_2"]);
        assert_eq!(w.len(), 1);
        assert!(protocols("k", "tlsv1.0").is_err());
        assert!(protocols("k", "sslv3").is_err());
        assert_eq!(protocols("k", "").unwrap().0.len(), 2);
    }

    fn picked(v12: &str, v13: &str) -> Result<Vec<String>, TlsError> {
        let all = rustls::crypto::ring::default_provider().cipher_suites;
        cipher_suites("c12", v12, "c13", v13, &all)
            .map(|(s, _)| s.iter().map(|s| openssl_name(s.suite())).collect())
    }

    #[test]
    fn cipher_values() {
        assert_eq!(picked("default", "").unwrap().len(), 9);
        assert_eq!(picked("HIGH:!aNULL:!MD5", "").unwrap().len(), 9);
        let v = picked(
            "ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA",
            "TLS_AES_256_GCM_SHA384",
        )
        .unwrap();
        assert_eq!(v, ["TLS_AES_256_GCM_SHA384", "ECDHE-RSA-AES128-GCM-SHA256"]);
        let v = picked("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "").unwrap();
        assert_eq!(v.len(), 4);
        assert!(picked("default", "TLS_BOGUS").is_err());
        assert!(picked("default", "TLS_AES_128_CCM_SHA256").is_err());
        assert!(picked("bad cipher;", "").is_err());
    }
}
