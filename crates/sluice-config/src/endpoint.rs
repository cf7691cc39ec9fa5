//! The `[sluice]` HTTP endpoint settings that only work together: a TLS certificate needs its
//! key and a key its certificate. A half pair is refused at load, naming the file and line that set
//! it. (The files themselves are read by the pooler, which names the same place when one is bad:
//! `Config::sluice_key_error`.)

use crate::error::ConfigError;
use crate::settings::SluiceSettings;

/// Settings set in pairs: (this one, the one it needs, what the other one is).
const PAIRS: &[(&str, &str, &str)] = &[
    (
        "metrics_tls_cert_file",
        "metrics_tls_key_file",
        "the certificate's private key",
    ),
    (
        "metrics_tls_key_file",
        "metrics_tls_cert_file",
        "the certificate of this key",
    ),
];

/// Refuse a half-configured pair; `key_error` names where a key was set (`Config::sluice_key_error`).
pub(crate) fn check(
    sluice: &SluiceSettings,
    key_error: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for (key, needs, what) in PAIRS {
        let set = |k: &str| sluice.get(k).is_some_and(|v| !v.is_empty());
        if set(key) && !set(needs) {
            return Err(key_error(key, format!("{needs} ({what}) must be set too")));
        }
    }
    Ok(())
}
