//! delay-relay: a TCP relay that delays the bytes going through it the way
//! `tc qdisc add dev veth0 root netem delay 1ms 0.1ms distribution normal` delays packets, for
//! machines whose kernel has no sch_netem. bench/netem/netem.py runs it inside the PostgreSQL
//! network namespace, in front of whatever the clients reach across the veth pair.
//!
//!   delay-relay --map LISTEN=TARGET [--map ...] [--delay-us 1000] [--jitter-us 100] [--both]
//!               [--seed N]
//!
//! LISTEN and TARGET are ip:port. Each read from a client is released to the target after a
//! normal(delay, jitter) draw (cut at zero), never before the bytes read before it (TCP delivers
//! in order); replies go back at once unless --both, which delays them too (netem on both ends of
//! the veth pair). One thread (epoll_pwait2's nanosecond timeout, 1 ns timer slack). Not part of
//! Sluice.

mod delay;
mod relay;
mod sys;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::exit;

struct Args {
    maps: Vec<(SocketAddr, SocketAddr)>,
    delay_us: u64,
    jitter_us: u64,
    both: bool,
    seed: u64,
}

const USAGE: &str =
    "usage: delay-relay --map LISTEN_IP:PORT=TARGET_IP:PORT [--map ...] [--delay-us N] [--jitter-us N] [--both] [--seed N]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        maps: Vec::new(),
        delay_us: 1000,
        jitter_us: 100,
        both: false,
        seed: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{a}: '{v}' is not a whole number"))
        };
        match a.as_str() {
            "--map" => {
                let v = value()?;
                let (l, t) = v
                    .split_once('=')
                    .ok_or_else(|| format!("--map '{v}': expected LISTEN=TARGET"))?;
                let addr = |s: &str| {
                    s.parse::<SocketAddr>()
                        .map_err(|e| format!("--map '{v}': '{s}': {e}"))
                };
                args.maps.push((addr(l)?, addr(t)?));
            }
            "--delay-us" => args.delay_us = number(value()?)?,
            "--jitter-us" => args.jitter_us = number(value()?)?,
            "--seed" => args.seed = number(value()?)?,
            "--both" => args.both = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                exit(0);
            }
            _ => return Err(format!("unknown argument '{a}'")),
        }
    }
    if args.maps.is_empty() {
        return Err("at least one --map is needed".into());
    }
    Ok(args)
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("delay-relay: {e}\n{USAGE}");
        exit(2);
    });
    if let Err(e) = sys::set_timer_slack_ns(1) {
        eprintln!("delay-relay: timer slack stays at its default: {e}");
    }
    let mut listeners = Vec::new();
    for &(listen, target) in &args.maps {
        let l = TcpListener::bind(listen)
            .and_then(|l| sys::set_backlog(l.as_raw_fd(), 4096).map(|()| l))
            .unwrap_or_else(|e| {
                eprintln!("delay-relay: listening on {listen}: {e}");
                exit(1);
            });
        listeners.push((l, target));
    }
    let seed = if args.seed != 0 {
        args.seed
    } else {
        sys::mono_ns() ^ u64::from(std::process::id()) << 32
    };
    let delay = delay::Delay::new(args.delay_us * 1000, args.jitter_us * 1000, seed);
    let dirs = if args.both {
        "both directions"
    } else {
        "client -> target bytes only"
    };
    for (listen, target) in &args.maps {
        println!(
            "delay-relay: {listen} -> {target}, delay normal({} us, {} us) on {dirs}",
            args.delay_us, args.jitter_us
        );
    }
    let relay = relay::Relay::new(listeners, delay, [true, args.both]);
    if let Err(e) = relay.and_then(|mut r| r.run()) {
        eprintln!("delay-relay: {e}");
        exit(1);
    }
}
