//! Steering new TCP connections to the active workers: a classic BPF program on an address's
//! SO_REUSEPORT group picks the listening socket, whose index in the group is the worker that
//! bound it (the sockets are bound in worker order). Without it the kernel spreads connections over
//! every worker by address hash, and a login landing on a worker being given up would have to move.

use std::io;
use std::os::fd::BorrowedFd;

// Classic BPF opcodes (linux/bpf_common.h: class | size/op | source; BPF_LD, BPF_W, BPF_K and
// BPF_RET's K are 0) and the ancillary offset of a random number (linux/filter.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_MOD_K: u16 = 0x04 | 0x90;
const BPF_RET_K: u16 = 0x06;
const BPF_RET_A: u16 = 0x06 | 0x10;
const SKF_AD_RANDOM: u32 = (-0x1000i32 + 56) as u32;

fn insn(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The program: socket 0 when one worker is active, else a random one of the first `active`.
fn program(active: u32) -> Vec<libc::sock_filter> {
    if active <= 1 {
        vec![insn(BPF_RET_K, 0)]
    } else {
        vec![
            insn(BPF_LD_W_ABS, SKF_AD_RANDOM),
            insn(BPF_ALU_MOD_K, active),
            insn(BPF_RET_A, 0),
        ]
    }
}

/// Make the SO_REUSEPORT group of `listener` hand new connections to its first `active` sockets.
pub fn steer(listener: BorrowedFd<'_>, active: usize) -> io::Result<()> {
    let mut prog = program(active.min(u16::MAX as usize) as u32);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // `fprog` points at `prog`, which outlives the call; the kernel copies the program.
    crate::net::socket::set_raw_option(
        listener,
        libc::SOL_SOCKET,
        libc::SO_ATTACH_REUSEPORT_CBPF,
        &fprog,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::os::fd::AsFd;

    fn group(n: usize) -> Vec<TcpListener> {
        let mut out: Vec<TcpListener> = Vec::new();
        let mut addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for _ in 0..n {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.set_reuse_port(true).unwrap();
            s.bind(&addr.into()).unwrap();
            s.listen(64).unwrap();
            s.set_nonblocking(true).unwrap();
            let l: TcpListener = s.into();
            addr = l.local_addr().unwrap();
            out.push(l);
        }
        out
    }

    fn accepted(l: &TcpListener) -> usize {
        std::iter::from_fn(|| l.accept().ok()).count()
    }

    #[test]
    fn one_active_worker_gets_every_connection_then_two_share_them() {
        let ls = group(3);
        let addr = ls[0].local_addr().unwrap();
        steer(ls[0].as_fd(), 1).unwrap();
        let mut keep = Vec::new();
        for _ in 0..40 {
            keep.push(TcpStream::connect(addr).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(ls.iter().map(accepted).collect::<Vec<_>>(), vec![40, 0, 0]);
        // Re-attached on any socket of the group; 40 connections over 2 sockets, none on the third.
        steer(ls[2].as_fd(), 2).unwrap();
        for _ in 0..40 {
            keep.push(TcpStream::connect(addr).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let got: Vec<usize> = ls.iter().map(accepted).collect();
        assert_eq!(got[0] + got[1], 40, "{got:?}");
        assert!(got[0] > 0 && got[1] > 0 && got[2] == 0, "{got:?}");
    }
}
