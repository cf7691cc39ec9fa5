//! Network plumbing: one stream type for TCP and Unix sockets, socket options, addresses, and the
//! open-files limit they all count against.

pub mod fd_limit;
pub mod framed;
pub mod socket;
pub mod stream;

pub use stream::{PeerAddr, Stream};
