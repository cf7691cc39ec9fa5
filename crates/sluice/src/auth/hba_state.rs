//! The loaded auth_hba_file and auth_ident_file (auth_type = hba). Read at startup (a broken file is
//! a config error) and on every RELOAD (a broken file keeps the previous rules and is logged).

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use sluice_config::{
    load_hba, load_ident, AuthType, ConfigError, HbaMethod, HbaRules, IdentMaps, Settings,
};

/// Rules and ident maps that are used together.
#[derive(Debug)]
pub struct HbaSet {
    pub rules: HbaRules,
    pub idents: Option<IdentMaps>,
}

#[derive(Default)]
pub struct HbaState {
    current: ArcSwapOption<HbaSet>,
}

impl HbaState {
    /// The rules in force; None when auth_type is not hba (or no file ever loaded: refuse all).
    pub fn current(&self) -> Option<Arc<HbaSet>> {
        self.current.load_full()
    }

    /// Read the files named by `settings` (only when auth_type = hba). Errors leave the current
    /// rules in place.
    pub fn load(&self, settings: &Settings) -> Result<(), ConfigError> {
        if settings.auth_type != AuthType::Hba {
            self.current.store(None);
            return Ok(());
        }
        let set = read(settings)?;
        self.current.store(Some(Arc::new(set)));
        Ok(())
    }

    /// RELOAD: like [`load`](Self::load), but an error is logged and the old rules stay.
    pub fn reload(&self, settings: &Settings) {
        if let Err(e) = self.load(settings) {
            let kept = if self.current.load().is_some() {
                "keeping the previous rules"
            } else {
                "no rules loaded: every login is refused"
            };
            tracing::error!("hba not reloaded ({kept}): {e}");
        }
    }
}

fn read(settings: &Settings) -> Result<HbaSet, ConfigError> {
    if settings.auth_hba_file.trim().is_empty() {
        return Err(ConfigError::Io {
            file: "auth_hba_file".to_string(),
            reason: "auth_type = hba needs auth_hba_file".to_string(),
        });
    }
    let rules = load_hba(Path::new(settings.auth_hba_file.trim()))?;
    let idents = match settings.auth_ident_file.as_deref().map(str::trim) {
        Some(f) if !f.is_empty() => Some(load_ident(Path::new(f))?),
        _ => None,
    };
    if settings.client_tls_ca_file.trim().is_empty() {
        // Without a CA no client certificate is asked for: such a line refuses every login.
        for rule in &rules.rules {
            if rule.client_cert.is_some() || rule.method == HbaMethod::Cert {
                tracing::warn!(
                    "{}: the line needs a client certificate, and client_tls_ca_file is not set \
                     (no certificate is asked for): it refuses every login it matches",
                    rule.location()
                );
            }
        }
    }
    Ok(HbaSet { rules, idents })
}
