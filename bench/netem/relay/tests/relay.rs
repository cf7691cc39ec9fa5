//! The relay binary against a local echo server: bytes arrive whole and in order under jitter,
//! end of stream crosses both ways, the delay is at least what was asked, and bad arguments are
//! refused with a message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// An echo server on 127.0.0.1 (one thread per connection; echoes until EOF, then closes).
fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            thread::spawn(move || {
                let mut buf = [0u8; 16384];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => s.write_all(&buf[..n]).unwrap(),
                    }
                }
            });
        }
    });
    port
}

struct Relay {
    child: Child,
    port: u16,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn relay(target: u16, extra: &[&str]) -> Relay {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_delay-relay"))
        .arg("--map")
        .arg(format!("127.0.0.1:{port}=127.0.0.1:{target}"))
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The relay prints one line per listener once it listens.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains(&format!("127.0.0.1:{port} -> 127.0.0.1:{target}")),
        "{line}"
    );
    Relay { child, port }
}

#[test]
fn bytes_arrive_in_order_and_eof_crosses_both_ways() {
    let r = relay(
        echo_server(),
        &["--delay-us", "300", "--jitter-us", "300", "--both"],
    );
    let data: Vec<u8> = (0..16_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap(); // a lost EOF fails, not hangs
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let writer = thread::spawn(move || {
        // Many small writes: many chunks, each with its own draw.
        for c in sent.chunks(1000) {
            w.write_all(c).unwrap();
        }
        w.shutdown(Shutdown::Write).unwrap();
    });
    // Read late: the socket buffers fill up, so the relay meets short writes and EAGAIN.
    thread::sleep(Duration::from_millis(500));
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap(); // returns only once the echo server's EOF came back
    writer.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes reordered or changed");
}

#[test]
fn round_trip_takes_at_least_the_delay() {
    let echo = echo_server();
    for (args, floor_ms) in [
        (&["--delay-us", "20000", "--jitter-us", "0"][..], 20),
        (
            &["--delay-us", "20000", "--jitter-us", "0", "--both"][..],
            40,
        ),
    ] {
        let r = relay(echo, args);
        let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        s.set_nodelay(true).unwrap();
        for _ in 0..3 {
            let t = Instant::now();
            s.write_all(b"ping").unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping");
            let took = t.elapsed();
            assert!(
                took >= Duration::from_millis(floor_ms),
                "{args:?}: round trip {took:?} < {floor_ms} ms"
            );
        }
    }
}

#[test]
fn a_refused_target_closes_the_client_and_the_relay_goes_on() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // nobody listens now
    let r = relay(dead, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    let mut buf = Vec::new();
    assert_eq!(s.read_to_end(&mut buf).map(|_| buf.len()).unwrap_or(0), 0);
    // Still accepting.
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    assert_eq!(s.read_to_end(&mut buf).map(|_| buf.len()).unwrap_or(0), 0);
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for (args, says) in [
        (&[][..], "at least one --map"),
        (&["--map", "127.0.0.1:1"][..], "expected LISTEN=TARGET"),
        (&["--map", "nowhere=127.0.0.1:1"][..], "'nowhere'"),
        (
            &["--map", "127.0.0.1:0=127.0.0.1:1", "--delay-us", "1ms"][..],
            "'1ms' is not a whole number",
        ),
        (&["--frobnicate"][..], "unknown argument '--frobnicate'"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_delay-relay"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
