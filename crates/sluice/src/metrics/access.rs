//! How the HTTP endpoint is reached: TLS (`metrics_tls_*`) and basic-auth users
//! (`metrics_auth_file`), read together from the config at start and on every RELOAD. A file
//! that cannot be used refuses the config with the file, line and key that named it (at start the
//! pooler does not run; on RELOAD the running access stays).

use std::sync::Arc;

use sluice_config::{parse_userlist, Config, ConfigError};

use super::basic_auth::BasicAuth;
use crate::tls::TlsError;

/// TLS and auth of the endpoint.
#[derive(Debug, Default)]
pub struct Access {
    /// Some: HTTPS only.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Some: every path but the health probes needs one of these users.
    pub auth: Option<BasicAuth>,
}

impl Access {
    /// Read the files the `[sluice]` section names.
    pub fn load(cfg: &Config) -> Result<Access, ConfigError> {
        let s = &cfg.sluice;
        let tls = if s.metrics_tls_cert_file.is_empty() {
            None
        } else {
            let c =
                crate::tls::http::server_config(&s.metrics_tls_cert_file, &s.metrics_tls_key_file)
                    .map_err(|e| tls_error(cfg, e))?;
            Some(c)
        };
        let auth = if s.metrics_auth_file.is_empty() {
            None
        } else {
            Some(load_auth(cfg, &s.metrics_auth_file)?)
        };
        Ok(Access { tls, auth })
    }
}

fn tls_error(cfg: &Config, e: TlsError) -> ConfigError {
    match e {
        TlsError::File { key, file, reason } => {
            cfg.sluice_key_error(key, format!("{file}: {reason}"))
        }
        TlsError::Setting { key, reason } => cfg.sluice_key_error(key, reason),
    }
}

fn load_auth(cfg: &Config, file: &str) -> Result<BasicAuth, ConfigError> {
    const KEY: &str = "metrics_auth_file";
    let text = std::fs::read_to_string(file)
        .map_err(|e| cfg.sluice_key_error(KEY, format!("{file}: cannot read file: {e}")))?;
    // A malformed line is named by the auth file's own line, as for auth_file.
    let entries = parse_userlist(&text, file)?;
    BasicAuth::from_entries(&entries)
        .map_err(|why| cfg.sluice_key_error(KEY, format!("{file}: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, sluice_lines: &str) -> Config {
        let ini = dir.join("p.ini");
        std::fs::write(&ini, format!("[sluice]\n{sluice_lines}")).unwrap();
        sluice_config::load(&ini).unwrap()
    }

    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        (p.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn err(dir: &std::path::Path, sluice_lines: &str) -> String {
        Access::load(&config(dir, sluice_lines))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn nothing_set_is_open_plain_http() {
        let dir = tempdir();
        let a = Access::load(&config(dir.path(), "")).unwrap();
        assert!(a.tls.is_none() && a.auth.is_none());
    }

    #[test]
    fn files_are_read_and_errors_name_file_line_key_and_the_file() {
        let dir = tempdir();
        let d = dir.path().display();
        let (cert, key) = self_signed();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), &key).unwrap();
        std::fs::write(dir.path().join("users"), "\"prom\" \"pw\"\n").unwrap();
        let good = format!(
            "metrics_tls_cert_file = {d}/c.pem\nmetrics_tls_key_file = {d}/k.pem\n\
             metrics_auth_file = {d}/users\n"
        );
        let a = Access::load(&config(dir.path(), &good)).unwrap();
        assert!(a.tls.is_some() && a.auth.is_some());

        let e = err(
            dir.path(),
            &format!("metrics_tls_cert_file = {d}/nope.pem\nmetrics_tls_key_file = {d}/k.pem\n"),
        );
        assert!(
            e.starts_with(&format!(
                "{d}/p.ini:2: metrics_tls_cert_file: {d}/nope.pem: cannot read file"
            )),
            "{e}"
        );
        let e = err(
            dir.path(),
            &format!("metrics_tls_cert_file = {d}/c.pem\nmetrics_tls_key_file = {d}/c.pem\n"),
        );
        assert!(
            e.starts_with(&format!(
                "{d}/p.ini:3: metrics_tls_key_file: {d}/c.pem: no usable private key"
            )),
            "{e}"
        );
        let e = err(dir.path(), &format!("metrics_auth_file = {d}/none\n"));
        assert!(
            e.starts_with(&format!(
                "{d}/p.ini:2: metrics_auth_file: {d}/none: cannot read file"
            )),
            "{e}"
        );
        std::fs::write(dir.path().join("empty"), "; nobody\n").unwrap();
        let e = err(dir.path(), &format!("metrics_auth_file = {d}/empty\n"));
        assert_eq!(
            e,
            format!("{d}/p.ini:2: metrics_auth_file: {d}/empty: no user in the file")
        );
        std::fs::write(dir.path().join("broken"), "prom pw\n").unwrap();
        let e = err(dir.path(), &format!("metrics_auth_file = {d}/broken\n"));
        assert!(
            e.starts_with(&format!("{d}/broken:1: broken auth file")),
            "{e}"
        );
    }

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }
}
