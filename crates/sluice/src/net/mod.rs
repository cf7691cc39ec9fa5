//! Network plumbing: one stream type for TCP, Unix sockets and TLS, socket options, addresses.

pub mod framed;
pub mod socket;
pub mod stream;
pub mod tls_io;

pub use stream::{PeerAddr, Stream};
