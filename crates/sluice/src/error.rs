//! Typed errors per layer, each knowing what the client sees (SQLSTATE + message).

use std::io;

use sluice_protocol::{ErrorFields, ProtocolError};

/// What a client is sent before it is disconnected: an ErrorResponse with severity FATAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientNotice {
    pub sqlstate: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// A server's own error, forwarded with all its fields.
    pub forwarded: Option<Box<ErrorFields>>,
}

impl ClientNotice {
    pub fn new(sqlstate: &str, message: impl Into<String>) -> Self {
        ClientNotice {
            sqlstate: sqlstate.to_string(),
            message: message.into(),
            detail: None,
            hint: None,
            forwarded: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn forwarded(fields: ErrorFields) -> Self {
        ClientNotice {
            sqlstate: fields.code.clone(),
            message: fields.message.clone(),
            detail: fields.detail.clone(),
            hint: fields.hint.clone(),
            forwarded: Some(Box::new(fields)),
        }
    }
}

/// SQLSTATEs the pooler uses itself. Like PgBouncer, pooler-side refusals (unknown database,
/// connection limits, timeouts) are FATAL 08P01; server errors are forwarded with their own code.
pub mod sqlstate {
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_AUTHORIZATION: &str = "28000";
    pub const CONNECTION_FAILURE: &str = "08006";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    pub const QUERY_CANCELED: &str = "57014";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const CONFIG_ERROR: &str = "F0000";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
}

/// Failures talking to a PostgreSQL server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("server connection failed: {0}")]
    Io(#[from] io::Error),
    #[error("server connect timeout")]
    ConnectTimeout,
    /// The server's host name did not resolve (PgBouncer's "server DNS lookup failed").
    #[error("server DNS lookup failed: {0}")]
    Dns(String),
    #[error("server sent a bad message: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("server login failed: {}", .0.message)]
    Login(Box<ErrorFields>),
    #[error("{0}")]
    Auth(String),
    /// The stored secret cannot answer the server's method; the client is told PgBouncer's words,
    /// the log has the reason.
    #[error("server login failed: wrong password type ({0})")]
    WrongPasswordType(&'static str),
    #[error("server closed the connection unexpectedly")]
    Closed,
    #[error("unexpected message from server: {0}")]
    Unexpected(String),
    #[error("server error: {}", .0.message)]
    Query(Box<ErrorFields>),
    /// TLS to the server failed (refused, certificate not verified, handshake error).
    #[error("{0}")]
    Tls(String),
    /// No host of the database's target_session_attrs came into rotation within
    /// failover_timeout (the message says which hosts were tried and why each did not fit).
    #[error("{0}")]
    NoHost(String),
    /// The pooler refused what a server sent or asked for during login (more SCRAM iterations than
    /// server_scram_max_iterations, a method server_require_auth does not allow, an oversized or
    /// out-of-place message): that login ends and the clients waiting for it are told.
    #[error("server login refused: {reason}")]
    Refused {
        sqlstate: &'static str,
        reason: String,
    },
}

impl ServerError {
    pub fn client_notice(&self) -> ClientNotice {
        match self {
            ServerError::Login(f) | ServerError::Query(f) => ClientNotice::forwarded((**f).clone()),
            ServerError::Auth(msg) => ClientNotice::new(sqlstate::INVALID_PASSWORD, msg.clone()),
            ServerError::WrongPasswordType(_) => ClientNotice::new(
                sqlstate::PROTOCOL_VIOLATION,
                "server login failed: wrong password type",
            ),
            ServerError::NoHost(msg) => {
                ClientNotice::new(sqlstate::CONNECTION_FAILURE, msg.clone())
            }
            ServerError::Refused { sqlstate, reason } => {
                ClientNotice::new(sqlstate, format!("server login failed: {reason}"))
            }
            other => ClientNotice::new(
                sqlstate::CONNECTION_FAILURE,
                format!("pooler error: {other}"),
            ),
        }
    }

    /// PgBouncer's words for a failed connect or login ("connect failed", "connect timeout",
    /// "server conn crashed?", the server's own message): the "closing because" of its log line
    /// and the cached error clients get ("server login has been failing, cached error: ..."),
    /// which operators and client libraries match on.
    pub fn close_reason(&self) -> String {
        use std::io::ErrorKind;
        match self {
            ServerError::Login(f) => f.message.clone(),
            ServerError::ConnectTimeout => "connect timeout".into(),
            ServerError::Dns(_) => "server DNS lookup failed".into(),
            ServerError::Io(io)
                if matches!(
                    io.kind(),
                    ErrorKind::ConnectionRefused
                        | ErrorKind::HostUnreachable
                        | ErrorKind::NetworkUnreachable
                        | ErrorKind::AddrNotAvailable
                        | ErrorKind::NotFound
                ) =>
            {
                "connect failed".into()
            }
            ServerError::Io(_) | ServerError::Closed => "server conn crashed?".into(),
            other => other.to_string(),
        }
    }

    /// True when the server answered a login with an error of its own (bad password, no such role):
    /// clients waiting for that pool get the same error instead of waiting for a retry.
    pub fn is_login_rejection(&self) -> bool {
        match self {
            ServerError::Login(f) => f.code != sqlstate::CANNOT_CONNECT_NOW,
            ServerError::Auth(_)
            | ServerError::WrongPasswordType(_)
            | ServerError::Tls(_)
            | ServerError::NoHost(_)
            | ServerError::Refused { .. } => true,
            _ => false,
        }
    }
}

/// What a client gets when the server refused the SETs that give it the client's session
/// parameters (a bad client_encoding, TimeZone, ... in its startup packet).
pub fn invalid_server_parameter(e: &ServerError) -> ClientNotice {
    ClientNotice::new(
        sqlstate::PROTOCOL_VIOLATION,
        format!("invalid server parameter: {e}"),
    )
}

/// Failures getting a server for a client.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("query_wait_timeout")]
    WaitTimeout,
    /// Waited for a server longer than query_timeout (PgBouncer holds a queued client's request
    /// to query_timeout as well, and looks at it before query_wait_timeout).
    #[error("query_timeout")]
    QueryTimeout,
    #[error("server login has been failing, cached error: {0} (server_login_retry)")]
    LoginFailing(String),
    #[error("{0}")]
    Server(#[from] ServerError),
    #[error("server shutting down")]
    ShuttingDown,
    #[error("database removed")]
    DatabaseRemoved,
    /// The pool failed every waiting client with this (e.g. the server refused the login).
    #[error("{}", .0.message)]
    Rejected(Box<ClientNotice>),
}

impl PoolError {
    pub fn client_notice(&self) -> ClientNotice {
        match self {
            PoolError::WaitTimeout => {
                ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, "query_wait_timeout")
            }
            PoolError::QueryTimeout => {
                ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, "query_timeout")
            }
            PoolError::LoginFailing(_) => {
                ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, self.to_string())
            }
            PoolError::Server(e) => e.client_notice(),
            PoolError::ShuttingDown => {
                ClientNotice::new(sqlstate::ADMIN_SHUTDOWN, "server shutting down")
            }
            PoolError::DatabaseRemoved => {
                ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, "database removed")
            }
            PoolError::Rejected(n) => (**n).clone(),
        }
    }
}
