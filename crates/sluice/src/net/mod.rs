//! Network plumbing: one stream type for TCP, Unix sockets and TLS, socket options, addresses, and
//! the open-files limit they all count against.

pub mod dns;
pub mod fd_limit;
pub mod framed;
pub mod listen;
pub mod socket;
pub mod spare_buffers;
pub mod stream;
pub mod tls_io;

pub use stream::{PeerAddr, Stream};
