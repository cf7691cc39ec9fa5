//! Per-worker spare read buffers. A client that goes idle with nothing buffered gives its read
//! buffer back here and takes one when its next request arrives (`Stream::read_when_ready`): idle
//! clients hold no buffer memory, and a busy worker cycles a few warm buffers instead of
//! allocating one per transaction.
//!
//! Per thread because each worker is one thread running its clients' tasks: no lock, no sharing.

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers kept per worker thread (of `chunk` to 4 × `chunk` bytes: at 4 KiB, 1 MiB at most).
const KEEP: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `chunk` bytes.
pub fn take(chunk: usize) -> BytesMut {
    // `try_with`: connections may be dropped while the thread's locals are torn down at exit.
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .filter(|b| b.capacity() >= chunk)
        .unwrap_or_else(|| BytesMut::with_capacity(chunk))
}

/// Keep `buf` (its contents discarded) for the next `take` on this thread; a buffer that grew
/// past 4 × `chunk`, or one more than `KEEP`, is freed instead.
pub fn give(mut buf: BytesMut, chunk: usize) {
    buf.clear();
    // Consuming messages advanced the buffer's start, which shrinks what `capacity` reports; an
    // empty buffer that owns its memory gets all of it back here without allocating or copying.
    buf.reserve(chunk);
    if buf.capacity() > 4 * chunk {
        return;
    }
    let _ = SPARE.try_with(|s| {
        let mut spare = s.borrow_mut();
        if spare.len() < KEEP {
            spare.push(buf);
        }
    });
}

/// A client about to wait in line for a server with a short request in `buf`: the request moves to
/// an allocation of its own size and the buffer goes back to the spares. In a connection storm
/// thousands of clients wait at once, each with a few bytes in a `chunk`-sized buffer (most of a
/// storm's peak memory before this). A request of more than a quarter of `chunk` keeps its buffer.
pub fn park_request(buf: &mut BytesMut, chunk: usize) {
    if buf.capacity() >= chunk && buf.len() <= chunk / 4 {
        let request = BytesMut::from(&buf[..]);
        give(std::mem::replace(buf, request), chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_on_the_same_thread_within_bounds() {
        let mut b = take(4096);
        assert!(b.capacity() >= 4096);
        let ptr = b.as_ptr();
        b.extend_from_slice(b"consumed");
        let _ = b.split_to(8); // as the relay consumes messages: the start moves on
        assert!(b.capacity() < 4096);
        give(b, 4096);
        let again = take(4096);
        assert_eq!(again.as_ptr(), ptr, "the spare buffer is handed out again");
        assert!(again.is_empty(), "contents are discarded");
        // Too large: freed, not kept.
        give(BytesMut::with_capacity(64 * 1024), 4096);
        assert_eq!(SPARE.with(|s| s.borrow().len()), 0);
        // At most KEEP are kept.
        for _ in 0..KEEP + 10 {
            give(BytesMut::with_capacity(4096), 4096);
        }
        assert_eq!(SPARE.with(|s| s.borrow().len()), KEEP);
    }

    #[test]
    fn a_parked_request_keeps_its_bytes_and_gives_the_buffer_back() {
        SPARE.with(|s| s.borrow_mut().clear());
        let mut b = take(4096);
        let ptr = b.as_ptr();
        b.extend_from_slice(b"Q\0\0\0\x0dSELECT 1\0");
        park_request(&mut b, 4096);
        assert_eq!(&b[..], b"Q\0\0\0\x0dSELECT 1\0");
        assert!(b.capacity() < 4096);
        assert_eq!(take(4096).as_ptr(), ptr, "the buffer is a spare again");
        // A long request keeps its buffer.
        let mut long = take(4096);
        long.extend_from_slice(&[b'x'; 2000]);
        let ptr = long.as_ptr();
        park_request(&mut long, 4096);
        assert_eq!(long.as_ptr(), ptr);
    }
}
