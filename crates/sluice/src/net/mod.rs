//! Network plumbing: one stream type for TCP and Unix sockets, socket options, addresses.

pub mod framed;
pub mod socket;
pub mod stream;

pub use stream::{PeerAddr, Stream};
