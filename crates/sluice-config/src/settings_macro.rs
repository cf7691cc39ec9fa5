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
    /// One-line description.
    pub doc: &'static str,
}

/// Find a setting's metadata by exact (case-sensitive) name.
pub fn find_def(table: &'static [SettingDef], name: &str) -> Option<&'static SettingDef> {
    table.iter().find(|d| d.name == name)
}

/// `declare_settings! { #[doc] pub struct Name in TABLE { key: Type = "default", reloadable|fixed,
/// supported|unsupported, "doc"; ... } }` generates the struct (one field per key), `Default` (every
/// default parsed by the type's own parser, so table and struct cannot disagree), the `TABLE` of
/// `SettingDef`s in declaration order, and `set`/`get` by key name.
macro_rules! declare_settings {
    (@reload reloadable) => { true };
    (@reload fixed) => { false };
    (@supported supported) => { true };
    (@supported unsupported) => { false };
    (
        $(#[$meta:meta])*
        pub struct $Struct:ident in $TABLE:ident {
            $( $key:ident : $ty:ty = $default:expr, $reload:ident, $supported:ident, $doc:literal; )*
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
