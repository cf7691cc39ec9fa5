//! Sluice configuration: one declarative settings table plus parsers for pgbouncer.ini and userlist.txt.
//!
//! Pure functions: no IO except reading the files it is asked to load, no globals, no logging
//! (anything worth a warning is returned as data, e.g. [`Config::unsupported`]).

mod connstr;
mod database;
mod diff;
mod error;
mod ini;
mod load;
#[cfg(test)]
mod load_tests;
mod markdown;
mod modes;
mod peer;
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
pub use load::{load, parse_str, Config};
pub use markdown::settings_markdown;
pub use modes::{AuthType, LoadBalanceHosts, PoolMode, ServerCheckQuery, TlsMode};
pub use peer::PeerEntry;
pub use settings::{
    Settings, SluiceSettings, AUTH_QUERY_DEFAULT, PGBOUNCER_SETTINGS, SLUICE_SETTINGS,
    TCP_DEFER_ACCEPT_DEFAULT,
};
pub use settings_macro::{find_def, SettingDef};
pub use user::UserEntry;
pub use userlist::{load_userlist, parse_userlist};
pub use value::{format_g, FileMode, Seconds, SettingValue};
