//! Shared pieces of the fuzz targets: splitting input into wire messages the way Sluice frames
//! them, the fixed SCRAM exchange parameters the seeds were made with, and the session_state
//! module compiled from the pooler's own source.

use sluice_protocol::{peek_header, ScramKeys, ScramSecret};

/// Largest message the stream targets accept; Sluice refuses larger ones at the header.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Splits `data` into tagged messages (tag, body, whole message) the way the pooler frames its
/// input: header first, bounded before anything is sliced. Stops at the first bad or partial one.
pub fn messages(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8], &[u8])> {
    std::iter::from_fn(move || {
        let h = peek_header(data, MAX_MESSAGE).ok()??;
        assert!(h.len >= 4 && h.len as usize <= MAX_MESSAGE, "{h:?}");
        let whole = data.get(..h.total_len())?;
        data = &data[h.total_len()..];
        Some((h.tag, &whole[5..], whole))
    })
}

/// The two halves of a two-step exchange in one input, separated by the first NUL byte
/// (SCRAM messages are text and never contain one).
pub fn two_steps(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    }
}

/// Salt, iterations and password of the verifier the SCRAM seeds were produced with.
pub const SCRAM_SALT: &[u8] = b"fuzz-salt-16byte";
pub const SCRAM_ITERATIONS: u32 = 16;
pub const SCRAM_PASSWORD: &str = "pencil";
/// Nonces fixed so that a recorded exchange replays: the server's suffix and the client's nonce.
pub const SERVER_NONCE: &str = "fuzzServerNonce";
pub const CLIENT_NONCE: &str = "fuzzClientNonce";

pub fn scram_secret() -> ScramSecret {
    ScramSecret::from_password(SCRAM_PASSWORD, SCRAM_SALT, SCRAM_ITERATIONS)
}

/// Pass-through keys: the client side then needs no PBKDF2 run with a server-chosen iteration
/// count (which would make every input with `i=4000000000` a time-out, not a finding).
pub fn scram_keys() -> ScramKeys {
    ScramKeys::from_password(SCRAM_PASSWORD, SCRAM_SALT, SCRAM_ITERATIONS)
}

/// The pooler's session_state lexer and classifier, compiled from its source file. The module is
/// pure (no imports outside itself), and this keeps tokio and the rest of the `sluice` crate out
/// of the sanitizer build.
#[allow(dead_code, unused_imports)]
#[path = "../../crates/sluice/src/session_state/mod.rs"]
pub mod session_state;

/// The admin console's command parser (`SHOW x`, `SET k = v`, `PAUSE db`...), from its source
/// file like [`session_state`]; it only needs thiserror.
#[allow(dead_code)]
#[path = "../../crates/sluice/src/admin/parse.rs"]
pub mod admin_parse;
