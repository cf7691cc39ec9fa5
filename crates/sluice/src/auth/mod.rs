//! Who may log in, and how: the client authentication exchange (`exchange.rs`: trust, plain, md5,
//! SCRAM, cert, hba), the per-connection method of auth_type = hba (`hba_check.rs` over the rules
//! loaded in `hba_state.rs`), certificate logins (`cert.rs`), and where secrets come from:
//! auth_file (`credentials.rs`, with derived SCRAM secrets cached in `scram_cache.rs`) or
//! auth_query (`query.rs`). Depends on the client connection's leaf type (`crate::conn`), not on
//! `client/`: the pool client's login and the admin console both call in here.

pub mod cert;
pub mod cpu;
pub mod credentials;
pub mod exchange;
pub mod hba_check;
pub mod hba_state;
pub mod query;
pub mod scram_cache;
