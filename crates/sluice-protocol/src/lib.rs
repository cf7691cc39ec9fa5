//! PostgreSQL wire protocol codec and authentication math for Sluice: bytes in, typed views out, no IO.
//!
//! Every decoder bounds lengths before allocating and returns [`ProtocolError`] instead of
//! panicking. Every item is reachable both through its module and from the crate root.

pub mod auth;
pub mod backend;
mod encode;
pub mod error;
pub mod frontend;
pub mod header;
mod reader;
pub mod startup;

pub use auth::constant_time::constant_time_eq;
pub use auth::md5::{md5_response_from_password, md5_response_from_secret, md5_secret, md5_verify};
pub use auth::scram::channel_binding::{
    tls_server_end_point, ClientBinding, EndPointHash, Gs2Flag, SCRAM_SHA_256_PLUS,
    TLS_SERVER_END_POINT,
};
pub use auth::scram::{
    ScramClient, ScramCredential, ScramKeys, ScramSecret, ScramServer, ServerSalt, SCRAM_SHA_256,
};
pub use auth::secret::StoredSecret;
pub use backend::{
    backend_tag, decode_authentication, decode_backend_key_data, decode_command_complete,
    decode_data_row, decode_error_fields, decode_negotiate_protocol_version,
    decode_parameter_status, decode_ready_for_query, decode_row_description, encode_auth_cleartext,
    encode_auth_md5, encode_auth_ok, encode_auth_sasl, encode_auth_sasl_continue,
    encode_auth_sasl_final, encode_backend_key_data, encode_command_complete, encode_data_row,
    encode_empty_query_response, encode_error, encode_error_fields,
    encode_negotiate_protocol_version, encode_notice, encode_notice_with_detail,
    encode_parameter_status, encode_ready_for_query, encode_row_description, oid, Authentication,
    ErrorFields, FieldDesc, Severity, TransactionStatus,
};
pub use error::ProtocolError;
pub use frontend::{
    decode_bind, decode_bind_params, decode_describe_or_close, decode_parse, decode_password,
    decode_query, decode_sasl_initial, encode_bind_text, encode_close, encode_describe,
    encode_execute, encode_flush, encode_parse, encode_password, encode_query, encode_sasl_initial,
    encode_sasl_response, encode_sync, encode_terminate, frontend_tag, BindParams, BindView,
    ParseView, SaslInitial,
};
pub use header::{peek_header, Header, HEADER_LEN};
pub use startup::{
    decode_startup, encode_cancel_request, encode_gssenc_request, encode_ssl_request,
    encode_startup, startup_len, CancelKey, StartupPacket, CANCEL_REQUEST_CODE,
    GSSENC_REQUEST_CODE, MAX_STARTUP_LEN, PROTOCOL_3_0, SSL_REQUEST_CODE,
};
