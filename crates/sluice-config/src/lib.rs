//! Sluice configuration: one declarative settings table plus parsers for pgbouncer.ini, userlist.txt,
//! the hba file (pg_hba.conf format) and the ident map file (pg_ident.conf format).
//!
//! Pure functions: no IO except reading the files it is asked to load, no globals, no logging
//! (anything worth a warning is returned as data, e.g. [`Config::unsupported`]).

mod connstr;
mod database;
mod diff;
mod endpoint;
#[cfg(test)]
mod endpoint_tests;
mod error;
mod hba;
mod hba_lex;
mod hba_match;
#[cfg(test)]
mod hba_tests;
mod ident;
mod ini;
mod load;
#[cfg(test)]
mod load_tests;
mod markdown;
mod modes;
mod peer;
mod require_auth;
mod settings;
mod settings_macro;
#[cfg(test)]
mod settings_tests;
mod user;
mod userlist;
mod value;

pub use database::DatabaseEntry;
pub use diff::{diff, ReloadDiff};
pub use error::{ConfigError, SetError};
pub use hba::{
    load_hba, parse_hba, ClientCert, HbaAddress, HbaConnType, HbaMethod, HbaRule, HbaRules,
    IncludeLoader, NameList,
};
pub use hba_match::{ClientAddr, HbaRequest, HbaVerdict};
pub use ident::{load_ident, parse_ident, IdentMaps};
pub use load::{load, parse_str, Config};
pub use markdown::settings_markdown;
pub use modes::{
    AuthType, ExporterNames, LoadBalanceHosts, PoolMode, RouteReads, ServerCheckQuery,
    TargetSessionAttrs, TlsMode,
};
pub use peer::PeerEntry;
pub use require_auth::{RequireAuth, ServerAuthMethod};
pub use settings::{
    Settings, SluiceSettings, AUTH_QUERY_DEFAULT, PGBOUNCER_SETTINGS, SLUICE_SETTINGS,
    TCP_DEFER_ACCEPT_DEFAULT,
};
pub use settings_macro::{find_def, Effect, SettingDef};
pub use user::UserEntry;
pub use userlist::{load_userlist, parse_userlist};
pub use value::{format_g, AuthDbname, FileMode, PacketSize, ReplicaLag, Seconds, SettingValue};
