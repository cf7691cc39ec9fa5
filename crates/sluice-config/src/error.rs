//! Error types of the config crate: load errors that name file, line and key, and `SET` errors.

/// A configuration file could not be loaded.
///
/// Display reads `"<file>:<line>: <key>: <reason>"` (key omitted when not applicable), e.g.
/// `"/etc/pgbouncer/pgbouncer.ini:12: default_pool_size: invalid integer 'abc'"`.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ConfigError {
    /// A key (setting name, database name, user name, peer id) has a bad value or is unknown.
    #[error("{file}:{line}: {key}: {reason}")]
    Key {
        file: String,
        line: usize,
        key: String,
        reason: String,
    },
    /// A line that cannot be understood at all (or a bad section, include, auth file line).
    #[error("{file}:{line}: {reason}")]
    Syntax {
        file: String,
        line: usize,
        reason: String,
    },
    /// The file could not be read.
    #[error("{file}: {reason}")]
    Io { file: String, reason: String },
}

impl ConfigError {
    pub(crate) fn key(file: &str, line: usize, key: &str, reason: impl Into<String>) -> Self {
        ConfigError::Key {
            file: file.to_string(),
            line,
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn syntax(file: &str, line: usize, reason: impl Into<String>) -> Self {
        ConfigError::Syntax {
            file: file.to_string(),
            line,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(file: &str, reason: impl Into<String>) -> Self {
        ConfigError::Io {
            file: file.to_string(),
            reason: reason.into(),
        }
    }
}

/// Why `Settings::set` (admin `SET`, or a line of the ini file) was refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SetError {
    /// No setting of that name (PgBouncer: "unknown parameter").
    #[error("unknown parameter")]
    UnknownKey,
    /// The value does not parse for the setting's type; the text says why.
    #[error("{0}")]
    BadValue(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_formats() {
        let e = ConfigError::key(
            "/etc/p.ini",
            12,
            "default_pool_size",
            "invalid integer 'abc'",
        );
        assert_eq!(
            e.to_string(),
            "/etc/p.ini:12: default_pool_size: invalid integer 'abc'"
        );
        let e = ConfigError::syntax("a.ini", 3, "expected '='");
        assert_eq!(e.to_string(), "a.ini:3: expected '='");
        let e = ConfigError::io("a.ini", "No such file");
        assert_eq!(e.to_string(), "a.ini: No such file");
        assert_eq!(SetError::UnknownKey.to_string(), "unknown parameter");
        assert_eq!(SetError::BadValue("x".into()).to_string(), "x");
    }
}
