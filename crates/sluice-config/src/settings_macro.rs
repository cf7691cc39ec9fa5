//! The macro that turns the declarative settings table into a struct, its defaults, the metadata table and get/set.

/// Metadata of one setting, as listed in SHOW CONFIG and the generated docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingDef {
    /// Key as written in the ini file (case-sensitive).
    pub name: &'static str,
    /// Default, rendered exactly as SHOW CONFIG prints it.
    pub default: &'static str,
    /// Whether RELOAD / SET apply a new value after startup (PgBouncer's "changeable").
    pub reloadable: bool,
    /// Whether Sluice implements the setting; unsupported keys are accepted and reported.
    pub supported: bool,
    /// What applying a new value takes besides storing it (RELOAD and SET alike: `App::apply`).
    pub effect: Effect,
    /// One-line description.
    pub doc: &'static str,
}

/// What a running pooler does when a reloadable key changes, besides storing the new value (read
/// where it is used: timeouts, limits, logging flags) and recomputing every pool's targets (done
/// after every change: cheap, and a pool setting can never be missed). RELOAD re-reads the files
/// behind `Hba`, `AuthFile`, `Tls` and `MetricsAccess` and clears the caches whatever changed (a file may
/// change while its key does not); SET runs only the effects of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing more: the value is read where it is used.
    None,
    /// The HBA rules are rebuilt (auth_type, auth_hba_file, auth_ident_file).
    Hba,
    /// The auth file is read again (a broken file refuses the change) and the SCRAM secrets derived
    /// from its passwords are forgotten.
    AuthFile,
    /// Both sides' TLS configurations are rebuilt (a broken file refuses the change).
    Tls,
    /// The HTTP endpoint's TLS and basic auth are rebuilt (a broken file refuses the change).
    MetricsAccess,
    /// Syslog output is switched (syslog, syslog_facility, syslog_ident).
    Syslog,
}

impl Effect {
    /// How the generated docs name it (empty for `None`).
    pub fn describe(self) -> &'static str {
        match self {
            Effect::None => "",
            Effect::Hba => "HBA rules rebuilt",
            Effect::AuthFile => "auth file read again",
            Effect::Tls => "TLS configuration rebuilt",
            Effect::MetricsAccess => "HTTP endpoint access rebuilt",
            Effect::Syslog => "syslog output switched",
        }
    }
}

/// Find a setting's metadata by exact (case-sensitive) name.
pub fn find_def(table: &'static [SettingDef], name: &str) -> Option<&'static SettingDef> {
    table.iter().find(|d| d.name == name)
}

/// `declare_settings! { #[doc] pub struct Name in TABLE { key: Type = "default", reloadable|fixed,
/// supported|unsupported, "doc"; ... } }` (`reloadable(Effect)` names an `Effect` beyond `None`) generates the struct (one field per key), `Default` (every
/// default parsed by the type's own parser, so table and struct cannot disagree), the `TABLE` of
/// `SettingDef`s in declaration order, and `set`/`get` by key name.
macro_rules! declare_settings {
    (@reload reloadable) => { true };
    (@reload fixed) => { false };
    (@supported supported) => { true };
    (@supported unsupported) => { false };
    (@effect) => { $crate::settings_macro::Effect::None };
    (@effect $effect:ident) => { $crate::settings_macro::Effect::$effect };
    (
        $(#[$meta:meta])*
        pub struct $Struct:ident in $TABLE:ident {
            $( $key:ident : $ty:ty = $default:expr, $reload:ident $(($effect:ident))?, $supported:ident, $doc:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $Struct {
            $(
                #[doc = $doc]
                pub $key: $ty,
            )*
        }

        impl Default for $Struct {
            fn default() -> Self {
                Self {
                    $( $key: <$ty as $crate::value::SettingValue>::parse($default).unwrap_or_default(), )*
                }
            }
        }

        /// Metadata for every key of this section, in SHOW CONFIG order.
        pub static $TABLE: &[$crate::settings_macro::SettingDef] = &[
            $(
                $crate::settings_macro::SettingDef {
                    name: stringify!($key),
                    default: $default,
                    reloadable: declare_settings!(@reload $reload),
                    supported: declare_settings!(@supported $supported),
                    effect: declare_settings!(@effect $($effect)?),
                    doc: $doc,
                },
            )*
        ];

        impl $Struct {
            /// Parse `value` for `key` and store it. Reloadability is the caller's business:
            /// this always applies the value.
            pub fn set(&mut self, key: &str, value: &str) -> Result<(), $crate::error::SetError> {
                match key {
                    $(
                        stringify!($key) => {
                            self.$key = <$ty as $crate::value::SettingValue>::parse(value)
                                .map_err($crate::error::SetError::BadValue)?;
                            Ok(())
                        }
                    )*
                    _ => Err($crate::error::SetError::UnknownKey),
                }
            }

            /// The current value rendered as SHOW CONFIG prints it; `None` for an unknown key.
            pub fn get(&self, key: &str) -> Option<String> {
                match key {
                    $( stringify!($key) => Some($crate::value::SettingValue::render(&self.$key)), )*
                    _ => None,
                }
            }
        }
    };
}

pub(crate) use declare_settings;
