//! `client_tls_ecdhcurve`: PgBouncer's (OpenSSL's) curve names mapped onto the key exchange
//! groups rustls' ring provider offers (X25519, P-256, P-384). docs/tls.md documents the mapping.

use rustls::crypto::SupportedKxGroup;
use rustls::NamedGroup;

use super::TlsError;

/// Names PgBouncer's OpenSSL accepts for the groups rustls has, lower-cased.
const NAMES: &[(&str, NamedGroup)] = &[
    ("x25519", NamedGroup::X25519),
    ("prime256v1", NamedGroup::secp256r1),
    ("secp256r1", NamedGroup::secp256r1),
    ("p-256", NamedGroup::secp256r1),
    ("secp384r1", NamedGroup::secp384r1),
    ("p-384", NamedGroup::secp384r1),
];

/// Curves OpenSSL knows that rustls does not offer: named in the error, so that the operator
/// learns it is a missing group rather than a typing error.
const KNOWN_ELSEWHERE: &[&str] = &[
    "x448",
    "secp521r1",
    "p-521",
    "secp224r1",
    "secp256k1",
    "brainpoolp256r1",
    "brainpoolp384r1",
    "brainpoolp512r1",
];

/// The groups `value` allows, out of `offered`; and the warnings to log. Which of them a
/// handshake uses follows the client's preference (rustls), as with OpenSSL's default. `auto` (the default) and empty keep rustls' own list. `none` (OpenSSL:
/// no ECDH) cannot be had: every key exchange rustls has is ECDHE, so it is ignored with a
/// warning, as the other OpenSSL-only knobs are. Names are separated by `:` or `,` (OpenSSL's
/// and libtls' forms); one rustls lacks, or an unknown one, is a config error naming the key.
pub fn key_exchange_groups(
    key: &'static str,
    value: &str,
    offered: &[&'static dyn SupportedKxGroup],
) -> Result<(Vec<&'static dyn SupportedKxGroup>, Vec<String>), TlsError> {
    let v = value.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("auto") {
        return Ok((offered.to_vec(), Vec::new()));
    }
    if v.eq_ignore_ascii_case("none") {
        return Ok((
            offered.to_vec(),
            vec![format!(
                "{key} = none is ignored: rustls has no key exchange without ECDHE"
            )],
        ));
    }
    let mut groups: Vec<&'static dyn SupportedKxGroup> = Vec::new();
    for item in v.split([':', ',']).map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let Some(&(_, name)) = NAMES.iter().find(|(n, _)| *n == lower) else {
            let why = if KNOWN_ELSEWHERE.contains(&lower.as_str()) {
                "not offered by rustls"
            } else {
                "unknown curve"
            };
            return Err(TlsError::setting(
                key,
                format!(
                    "{why} \"{item}\" (rustls offers X25519, prime256v1 / secp256r1 / P-256, \
                     secp384r1 / P-384)"
                ),
            ));
        };
        let Some(g) = offered.iter().find(|g| g.name() == name) else {
            return Err(TlsError::setting(
                key,
                format!("\"{item}\" is not offered by this build's crypto provider"),
            ));
        };
        if !groups.iter().any(|x| x.name() == name) {
            groups.push(*g);
        }
    }
    if groups.is_empty() {
        return Err(TlsError::setting(key, "names no curve".to_string()));
    }
    Ok((groups, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(value: &str) -> Result<Vec<NamedGroup>, String> {
        let offered = rustls::crypto::ring::default_provider().kx_groups;
        key_exchange_groups("client_tls_ecdhcurve", value, &offered)
            .map(|(g, _)| g.iter().map(|g| g.name()).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn openssl_names_map_to_rustls_groups_in_order() {
        let all = names("auto").unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(names("").unwrap(), all);
        assert_eq!(names("prime256v1").unwrap(), vec![NamedGroup::secp256r1]);
        assert_eq!(
            names("secp384r1:X25519").unwrap(),
            vec![NamedGroup::secp384r1, NamedGroup::X25519]
        );
        assert_eq!(
            names("P-256, p-384, secp256r1").unwrap(),
            vec![NamedGroup::secp256r1, NamedGroup::secp384r1]
        );
        // `none` keeps the list (and warns).
        assert_eq!(names("none").unwrap(), all);
    }

    #[test]
    fn curves_rustls_lacks_and_unknown_names_are_config_errors() {
        let e = names("secp521r1").unwrap_err();
        assert!(e.contains("client_tls_ecdhcurve"), "{e}");
        assert!(e.contains("not offered by rustls \"secp521r1\""), "{e}");
        let e = names("prime256v1:bogus").unwrap_err();
        assert!(e.contains("unknown curve \"bogus\""), "{e}");
        assert!(names(" : ").unwrap_err().contains("names no curve"));
    }
}
