//! Authentication math: md5 challenge/response, SCRAM-SHA-256 (server and client), stored secrets.

pub mod constant_time;
pub mod md5;
pub mod scram;
pub mod secret;

pub use self::constant_time::constant_time_eq;
pub use self::md5::{md5_response_from_password, md5_response_from_secret, md5_secret, md5_verify};
pub use self::scram::channel_binding::{
    tls_server_end_point, ClientBinding, EndPointHash, Gs2Flag, SCRAM_SHA_256_PLUS,
    TLS_SERVER_END_POINT,
};
pub use self::scram::{
    ScramClient, ScramCredential, ScramKeys, ScramSecret, ScramServer, ServerSalt, SCRAM_SHA_256,
};
pub use self::secret::StoredSecret;
