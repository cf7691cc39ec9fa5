//! The freshness rule over scripted event sequences: writes, polls, reads, a lagging standby,
//! a standby restart, a change of primary.

use crate::route::*;

/// A primary (host 0) and two standbys (hosts 1, 2), all polled at clock 0 at position 0.
struct World {
    clock: PollClock,
    hosts: Vec<HostView>,
    client: Freshness,
}

impl World {
    fn new() -> Self {
        let host = |role| HostView {
            role,
            healthy: true,
            lsn: Lsn(0),
            polled_at: 0,
            incarnation: 1,
        };
        World {
            clock: PollClock::new(),
            hosts: vec![
                host(Role::Primary),
                host(Role::Standby),
                host(Role::Standby),
            ],
            client: Freshness::default(),
        }
    }

    /// A poll of host `i` that starts now and reports `lsn`.
    fn poll(&mut self, i: usize, lsn: u64) {
        let t = self.clock.start_poll();
        self.hosts[i].lsn = Lsn(lsn);
        self.hosts[i].polled_at = t;
    }

    /// Start a poll now; its answer comes later with `land`.
    fn start(&self) -> u64 {
        self.clock.start_poll()
    }

    fn land(&mut self, i: usize, started: u64, lsn: u64) {
        self.hosts[i].lsn = Lsn(lsn);
        self.hosts[i].polled_at = started;
    }

    fn ran_on(&mut self, i: usize) {
        let key = HostKey {
            index: i,
            incarnation: self.hosts[i].incarnation,
        };
        self.client.finished(key, self.clock.now());
    }

    fn read(&mut self) -> (Target, Fresh) {
        self.client.choose(&self.hosts, 1)
    }

    /// Standby `i` at the incarnation its view shows.
    fn sb(&self, i: usize) -> Target {
        Target::Standby(HostKey {
            index: i,
            incarnation: self.hosts[i].incarnation,
        })
    }
}

#[test]
fn first_read_goes_to_a_standby() {
    let mut w = World::new();
    assert_eq!(w.read(), (w.sb(1), Fresh::FirstRead));
}

#[test]
fn a_read_after_a_write_waits_for_a_poll_that_started_after_it() {
    let mut w = World::new();
    w.poll(0, 10);
    w.poll(1, 10);
    w.poll(2, 10);
    // The client writes on the primary (its commit is somewhere past 10).
    w.ran_on(0);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    // A poll of the primary that started *before* the write ended does not count, even though
    // its answer arrives after it.
    let early = w.start();
    w.ran_on(0);
    w.land(0, early, 15);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    // A standby poll does not bound a primary write either.
    w.poll(1, 30);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    // The primary's poll after the write: watermark 20. Standby 1 replayed 30 >= 20 (polled
    // before the primary, still a valid lower bound).
    w.poll(0, 20);
    assert_eq!(w.read(), (w.sb(1), Fresh::CaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(20)));
}

#[test]
fn a_lagging_standby_is_skipped_until_it_catches_up() {
    let mut w = World::new();
    w.ran_on(0);
    w.poll(0, 100);
    w.poll(1, 90);
    w.poll(2, 100);
    // spread = 1 would pick standby 1 first, but it is behind the watermark.
    assert_eq!(w.read(), (w.sb(2), Fresh::CaughtUp));
    w.hosts[2].healthy = false;
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    w.poll(1, 100);
    assert_eq!(w.read(), (w.sb(1), Fresh::CaughtUp));
}

#[test]
fn reads_stay_on_the_standby_used_last_while_the_watermark_is_pending() {
    let mut w = World::new();
    w.poll(0, 50);
    w.poll(1, 40);
    w.poll(2, 30);
    assert_eq!(w.read(), (w.sb(1), Fresh::FirstRead));
    w.ran_on(1);
    // No poll since: standby 1 is still fine (its replay only moved forward), standby 2 is not
    // known to be as far as what the client saw.
    assert_eq!(w.read(), (w.sb(1), Fresh::SameStandby));
    w.hosts[1].healthy = false;
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    // Standby 1's next poll bounds what the client read there: 45.
    w.poll(1, 45);
    w.poll(2, 44);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(45)));
    w.poll(2, 45);
    assert_eq!(w.read(), (w.sb(2), Fresh::CaughtUp));
}

#[test]
fn a_restarted_standby_is_not_trusted_for_monotonic_reads() {
    let mut w = World::new();
    w.poll(0, 50);
    w.poll(1, 50);
    w.hosts[2].healthy = false;
    assert_eq!(w.read(), (w.sb(1), Fresh::FirstRead));
    w.ran_on(1);
    // Standby 1 restarts: it may come back with less replayed than the client saw.
    w.hosts[1].incarnation = 2;
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    // Its next poll is of the new incarnation: it does not bound the old read. The primary's does.
    w.poll(1, 20);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    w.poll(0, 60);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(60)));
    w.poll(1, 60);
    assert_eq!(w.read(), (w.sb(1), Fresh::CaughtUp));
}

#[test]
fn a_change_of_primary() {
    let mut w = World::new();
    w.poll(0, 100);
    w.ran_on(0);
    // Switchover: standby 1 (caught up) becomes the primary, the old primary a standby; both
    // change incarnation.
    w.hosts[0].role = Role::Standby;
    w.hosts[0].incarnation = 2;
    w.hosts[1].role = Role::Primary;
    w.hosts[1].incarnation = 2;
    // The old primary's poll of the new incarnation does not resolve the write made on the old
    // one; the new primary's poll does.
    w.poll(0, 100);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    w.poll(1, 120);
    w.poll(2, 110);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(120)));
    w.poll(0, 125);
    // spread = 1 starts at host 1 (the primary now, skipped), then 2 (behind), then 0.
    assert_eq!(w.read(), (w.sb(0), Fresh::CaughtUp));
}

#[test]
fn the_watermark_never_goes_down() {
    let mut w = World::new();
    w.poll(0, 100);
    w.poll(1, 100);
    w.ran_on(0);
    w.poll(0, 200);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(200)));
    // A read on standby 1 (replayed 200) and its later poll says 150 of a *new* incarnation:
    // the primary's next poll resolves it, and the watermark keeps the larger bound.
    w.poll(1, 200);
    assert_eq!(w.read(), (w.sb(1), Fresh::CaughtUp));
    w.ran_on(1);
    w.hosts[1].incarnation = 5;
    w.poll(1, 150);
    w.poll(0, 190);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(200)));
}

#[test]
fn no_standby_at_all() {
    let mut w = World::new();
    w.hosts[1].healthy = false;
    w.hosts[2].role = Role::Primary;
    assert_eq!(w.read(), (Target::Primary, Fresh::NoHealthyStandby));
    let mut none = Freshness::default();
    assert_eq!(
        none.choose(&[], 7),
        (Target::Primary, Fresh::NoHealthyStandby)
    );
}

#[test]
fn a_bound_read_after_the_transaction_resolves_at_once() {
    let mut w = World::new();
    w.poll(1, 50);
    let key = HostKey {
        index: 0,
        incarnation: 1,
    };
    // The pool read the primary's insert position (40) right after the write.
    w.client.finished_bounded(key, w.clock.now(), Lsn(40));
    assert_eq!(w.read(), (w.sb(1), Fresh::CaughtUp));
    assert_eq!(w.client.watermark(), Some(Lsn(40)));
    // Another write at the same clock value, without a bound: pending again (the bound said
    // nothing about it), even though no poll started in between.
    w.ran_on(0);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    w.poll(0, 55);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoStandbyCaughtUp));
    w.poll(2, 60);
    assert_eq!(w.read(), (w.sb(2), Fresh::CaughtUp));
}

#[test]
fn a_stale_primary_never_resolves_the_watermark() {
    let mut w = World::new();
    w.poll(1, 100);
    w.ran_on(0);
    // Host 2 came back claiming to be a primary (split brain), far behind; the checker reports
    // it excluded. Its poll after the write does not bound the write, and it is never read.
    w.hosts[2].role = Role::Excluded;
    w.hosts[2].incarnation = 2;
    w.poll(2, 5);
    assert_eq!(w.read(), (Target::Primary, Fresh::WatermarkPending));
    w.poll(0, 90);
    assert_eq!(w.read(), (w.sb(1), Fresh::CaughtUp));
    w.hosts[1].healthy = false;
    w.poll(2, 500);
    assert_eq!(w.read(), (Target::Primary, Fresh::NoHealthyStandby));
}

#[test]
fn the_client_state_is_small_and_plain() {
    // Kept in each routing client's session by value: no allocation, no atomics.
    fn is_copy<T: Copy>() {}
    is_copy::<Freshness>();
    assert!(std::mem::size_of::<Freshness>() <= 64);
}

/// Not a timing assertion: prints the cost of `choose` over three hosts.
/// `cargo test -p sluice --lib route::tests::freshness_events::bench_choose -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_choose() {
    let mut w = World::new();
    w.poll(0, 100);
    w.poll(1, 100);
    w.poll(2, 100);
    let rounds = 1_000_000u32;
    let start = std::time::Instant::now();
    for i in 0..rounds {
        let key = HostKey {
            index: (i % 3) as usize,
            incarnation: 1,
        };
        w.client.finished(key, w.clock.now());
        std::hint::black_box(w.client.choose(std::hint::black_box(&w.hosts), i as usize));
    }
    println!("finished + choose: {:?}", start.elapsed() / rounds);
}
