//! A seeded random check of the freshness rule against a model of the true WAL positions:
//! random writes, reads, standby replay, polls that start and answer later, unhealthy standbys,
//! standby crash-restarts (state may go back) and planned switchovers. Two invariants per read:
//! it never sees less than the client's own last write, nor less than any earlier read.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::route::*;

const HOSTS: usize = 3;
const CLIENTS: usize = 4;

/// The truth about one host.
#[derive(Clone, Copy, Debug)]
struct True {
    role: Role,
    /// Primary: its WAL insert position; standby: what it has replayed (and shows readers).
    at: u64,
    incarnation: u64,
}

/// A poll sent but not answered: its clock tick, and the host's truth when it was sent.
#[derive(Clone, Copy, Debug)]
struct Poll {
    tick: u64,
    at_start: u64,
    incarnation: u64,
    role: Role,
}

#[derive(Clone, Copy, Debug, Default)]
struct Client {
    state: Freshness,
    /// Highest position the client committed a write at.
    wrote: u64,
    /// Highest state the client has read (a transaction on the primary reads its position).
    saw: u64,
}

struct Model {
    rng: StdRng,
    clock: PollClock,
    truth: [True; HOSTS],
    views: [HostView; HOSTS],
    polls: [Option<Poll>; HOSTS],
    clients: [Client; CLIENTS],
    next_incarnation: u64,
    standby_reads: u64,
    reads: u64,
    /// How often each answer of `choose` came up (index: `fresh_index`).
    fresh: [u64; 6],
}

fn fresh_index(f: Fresh) -> usize {
    match f {
        Fresh::SameStandby => 0,
        Fresh::CaughtUp => 1,
        Fresh::FirstRead => 2,
        Fresh::WatermarkPending => 3,
        Fresh::NoStandbyCaughtUp => 4,
        Fresh::NoHealthyStandby => 5,
    }
}

impl Model {
    fn new(seed: u64) -> Self {
        let truth = [0, 1, 2].map(|i| True {
            role: if i == 0 { Role::Primary } else { Role::Standby },
            at: 0,
            incarnation: i as u64 + 1,
        });
        let views = truth.map(|t| HostView {
            role: t.role,
            healthy: true,
            lsn: Lsn(0),
            polled_at: 0,
            incarnation: t.incarnation,
        });
        Model {
            rng: StdRng::seed_from_u64(seed),
            clock: PollClock::new(),
            truth,
            views,
            polls: [None; HOSTS],
            clients: [Client::default(); CLIENTS],
            next_incarnation: HOSTS as u64 + 1,
            standby_reads: 0,
            reads: 0,
            fresh: [0; 6],
        }
    }

    fn primary(&self) -> usize {
        self.truth
            .iter()
            .position(|t| t.role == Role::Primary)
            .unwrap()
    }

    fn key(&self, i: usize) -> HostKey {
        HostKey {
            index: i,
            incarnation: self.truth[i].incarnation,
        }
    }

    /// The host changes life: a poll in flight on it fails (its connection is gone).
    fn new_life(&mut self, i: usize) {
        self.truth[i].incarnation = self.next_incarnation;
        self.next_incarnation += 1;
        self.polls[i] = None;
    }

    fn step(&mut self) -> Result<(), String> {
        let p = self.primary();
        match self.rng.gen_range(0..100) {
            // Someone else writes.
            0..=9 => self.truth[p].at += self.rng.gen_range(1..5),
            // A client writes (on the primary, always).
            10..=12 => {
                let c = self.rng.gen_range(0..CLIENTS);
                self.truth[p].at += 1;
                let at = self.truth[p].at;
                let now = self.clock.now();
                let key = self.key(p);
                let bounded = self.rng.gen_range(0..4) == 0;
                let cl = &mut self.clients[c];
                cl.wrote = at;
                cl.saw = cl.saw.max(at);
                if bounded {
                    cl.state.finished_bounded(key, now, Lsn(at));
                } else {
                    cl.state.finished(key, now);
                }
            }
            // A client reads.
            13..=27 => {
                let c = self.rng.gen_range(0..CLIENTS);
                let spread = self.rng.gen_range(0..HOSTS);
                let (target, fresh) = self.clients[c].state.choose(&self.views, spread);
                self.fresh[fresh_index(fresh)] += 1;
                // The pool runs it on that standby through a server of that incarnation, or on
                // the primary when it has none.
                let ran_on = match target {
                    Target::Standby(k) if self.truth[k.index].incarnation == k.incarnation => {
                        if self.truth[k.index].role == Role::Standby {
                            self.standby_reads += 1;
                        }
                        k.index
                    }
                    _ => p,
                };
                self.reads += 1;
                let at = self.truth[ran_on].at;
                let cl = self.clients[c];
                if at < cl.wrote {
                    return Err(format!(
                        "client {c} read at {at} on host {ran_on}, before its write at {}",
                        cl.wrote
                    ));
                }
                if at < cl.saw {
                    return Err(format!(
                        "client {c} read at {at} on host {ran_on}, older than its earlier read at {}",
                        cl.saw
                    ));
                }
                let now = self.clock.now();
                let key = self.key(ran_on);
                // Sometimes the pool asks the primary where it is after the transaction.
                let bounded = ran_on == p && self.rng.gen_range(0..4) == 0;
                let cl = &mut self.clients[c];
                cl.saw = at;
                if bounded {
                    cl.state.finished_bounded(key, now, Lsn(at));
                } else {
                    cl.state.finished(key, now);
                }
            }
            // A standby replays some more.
            28..=45 => {
                let i = self.rng.gen_range(0..HOSTS);
                if self.truth[i].role == Role::Standby {
                    let top = self.truth[p].at;
                    let step = self.rng.gen_range(0..20);
                    self.truth[i].at = (self.truth[i].at + step).min(top);
                }
            }
            // A poll is sent.
            46..=70 => {
                let i = self.rng.gen_range(0..HOSTS);
                if self.polls[i].is_none() {
                    let t = self.truth[i];
                    self.polls[i] = Some(Poll {
                        tick: self.clock.start_poll(),
                        at_start: t.at,
                        incarnation: t.incarnation,
                        role: t.role,
                    });
                }
            }
            // A poll answers: with a position somewhere between the truth when it was sent and
            // the truth now.
            71..=95 => {
                let i = self.rng.gen_range(0..HOSTS);
                if let Some(poll) = self.polls[i].take() {
                    let now = self.truth[i].at;
                    let lsn = self.rng.gen_range(poll.at_start..=now.max(poll.at_start));
                    let healthy = self.rng.gen_range(0..10) > 0;
                    self.views[i] = HostView {
                        role: poll.role,
                        healthy,
                        lsn: Lsn(lsn),
                        polled_at: poll.tick,
                        incarnation: poll.incarnation,
                    };
                }
            }
            // A standby crash-restarts: what it shows may go back.
            96..=97 => {
                let i = self.rng.gen_range(0..HOSTS);
                if self.truth[i].role == Role::Standby {
                    let back = self.rng.gen_range(0..20);
                    self.truth[i].at = self.truth[i].at.saturating_sub(back);
                    self.new_life(i);
                }
            }
            // A planned switchover to a standby that has caught up.
            _ => {
                let s = self.rng.gen_range(0..HOSTS);
                if self.truth[s].role == Role::Standby {
                    let at = self.truth[p].at;
                    self.truth[s] = True {
                        role: Role::Primary,
                        at,
                        ..self.truth[s]
                    };
                    self.truth[p].role = Role::Standby;
                    self.new_life(s);
                    self.new_life(p);
                }
            }
        }
        Ok(())
    }
}

#[test]
fn reads_never_go_back_in_time() {
    let (mut reads, mut on_standby, mut fresh) = (0, 0, [0u64; 6]);
    for seed in 0..300 {
        let mut m = Model::new(seed);
        for step in 0..2000 {
            if let Err(e) = m.step() {
                panic!("seed {seed}, step {step}: {e}");
            }
        }
        reads += m.reads;
        on_standby += m.standby_reads;
        for (sum, n) in fresh.iter_mut().zip(m.fresh) {
            *sum += n;
        }
    }
    // The check is not vacuous: reads went to standbys, and every path of the rule was taken
    // many times (same standby, caught up, first read, pending, none caught up, none healthy).
    assert!(
        on_standby * 10 > reads,
        "{on_standby} of {reads} reads on a standby"
    );
    assert!(fresh.iter().all(|&n| n > 100), "{fresh:?}");
}

/// The same model with the rule broken on purpose (each client's state forgotten before every
/// step, so any healthy standby will do) must fail: the model catches what the rule prevents.
#[test]
fn the_model_catches_a_naive_rule() {
    let mut caught = false;
    'seeds: for seed in 0..50 {
        let mut m = Model::new(seed);
        for _ in 0..2000 {
            // Naive: forget the client's pending transaction before each step.
            for c in &mut m.clients {
                c.state = Freshness::default();
            }
            if m.step().is_err() {
                caught = true;
                break 'seeds;
            }
        }
    }
    assert!(caught, "the model never caught a client reading stale data");
}
