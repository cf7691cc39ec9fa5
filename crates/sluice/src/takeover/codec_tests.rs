//! Tests of `codec.rs`: every message round-trips, bad frames are errors.

use super::*;

/// A client state with every field set (tests of this module and `link.rs`).
pub(crate) fn sample_client() -> ClientState {
    ClientState {
        id: 42,
        peer: PeerAddr::Tcp("127.0.0.1:5555".parse().unwrap()),
        local_addr: Some("127.0.0.1:6432".parse().unwrap()),
        database: "app".into(),
        user: "alice".into(),
        params: vec![
            ("application_name".into(), "pgbench".into()),
            ("TimeZone".into(), "UTC".into()),
        ],
        tracked_sets: vec![("statement_timeout".into(), "SET statement_timeout = '5s'".into())],
        statements: vec![StatementState {
            name: "s0".into(),
            query: "select $1::int".into(),
            param_types: vec![23],
        }],
        cancel_key: [0x7f, 1, 2, 3, 4, 5, 6, 7],
        pending: b"Q\0\0".to_vec(),
        server_secret: Some(StoredSecret::parse(
            "SCRAM-SHA-256$4096:sXoRBasYG/pUV3MLPsWShA==$YiZ8LeQyeYYlvqvPlHMbNClIlkvk4mPh8OcjQh5/ULM=:MVFDsdzE5mmPZAz/ubOk1EspJJg3TaytX86m21yy8/I=",
        )),
        scram_keys: Some(ScramKeys {
            client_key: [1; 32],
            server_key: [2; 32],
        }),
    }
}

fn every_message() -> Vec<Msg> {
    let mut unix = sample_client();
    unix.peer = PeerAddr::Unix { pid: Some(1234) };
    unix.local_addr = None;
    unix.server_secret = Some(StoredSecret::Md5("md5abc".into()));
    unix.scram_keys = None;
    let mut plain = sample_client();
    plain.peer = PeerAddr::Unix { pid: None };
    plain.server_secret = Some(StoredSecret::Plain("hunter2".into()));
    plain.statements.clear();
    plain.pending.clear();
    vec![
        Msg::Hello { version: 1, pid: 7 },
        Msg::Refused {
            reason: "another takeover is in progress".into(),
        },
        Msg::Offer {
            pid: 9,
            active_workers: 3,
            listeners: vec![
                ListenerDesc {
                    kind: ListenerKind::Tcp,
                    worker: 0,
                    steers: true,
                    addr: "127.0.0.1:6432".into(),
                },
                ListenerDesc {
                    kind: ListenerKind::Unix,
                    worker: 0,
                    steers: false,
                    addr: "/tmp/.s.PGSQL.6432".into(),
                },
                ListenerDesc {
                    kind: ListenerKind::Metrics,
                    worker: 0,
                    steers: false,
                    addr: "127.0.0.1:9127".into(),
                },
                ListenerDesc {
                    kind: ListenerKind::Control,
                    worker: 3,
                    steers: false,
                    addr: "/tmp/.s.PGSQL.6432.takeover".into(),
                },
            ],
        },
        Msg::Take,
        Msg::Taken,
        Msg::Client(Box::new(sample_client())),
        Msg::Client(Box::new(unix)),
        Msg::Client(Box::new(plain)),
        Msg::Ack {
            id: 42,
            taken: false,
            reason: "no such database".into(),
        },
        Msg::Cancel {
            seq: 3,
            key: [9; 8],
        },
        Msg::CancelDone { seq: 3 },
    ]
}

#[test]
fn every_message_round_trips_and_a_stream_splits_into_them() {
    let msgs = every_message();
    let mut stream = Vec::new();
    for m in &msgs {
        let frame = m.encode();
        assert_eq!(Msg::decode(&frame).unwrap(), Some((m.clone(), frame.len())));
        // Every strict prefix is incomplete, never an error.
        for cut in 0..frame.len() {
            assert_eq!(
                Msg::decode(&frame[..cut]).unwrap(),
                None,
                "{m:?} cut at {cut}"
            );
        }
        stream.extend_from_slice(&frame);
    }
    let mut at = 0;
    let mut back = Vec::new();
    while let Some((m, used)) = Msg::decode(&stream[at..]).unwrap() {
        back.push(m);
        at += used;
    }
    assert_eq!(back, msgs);
    assert_eq!(at, stream.len());
}

#[test]
fn descriptors_travel_with_offers_and_clients_only() {
    let counts: Vec<usize> = every_message().iter().map(Msg::fd_count).collect();
    assert_eq!(counts, [0, 0, 4, 0, 0, 1, 1, 1, 0, 0, 0]);
}

#[test]
fn bad_frames_are_errors_not_panics_or_allocations() {
    assert_eq!(
        Msg::decode(&[b'?', 0, 0, 0, 0]),
        Err(CodecError::UnknownTag(b'?'))
    );
    let mut huge = vec![tag::CLIENT];
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(Msg::decode(&huge), Err(CodecError::TooLong(_))));
    // A list that claims four billion entries in a short body.
    let mut offer = vec![tag::OFFER, 0, 0, 0, 10];
    offer.extend_from_slice(&1u32.to_be_bytes());
    offer.extend_from_slice(&2u16.to_be_bytes());
    offer.extend_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(Msg::decode(&offer), Err(CodecError::Malformed("Offer")));
    // Trailing bytes, a bad bool, bad UTF-8.
    let mut take = Msg::Take.encode();
    take[4] = 1;
    take.push(0);
    assert!(Msg::decode(&take).is_err());
    let mut ack = Msg::Ack {
        id: 1,
        taken: true,
        reason: String::new(),
    }
    .encode();
    ack[13] = 2;
    assert_eq!(Msg::decode(&ack), Err(CodecError::Malformed("Ack")));
    let mut refused = Msg::Refused {
        reason: "ab".into(),
    }
    .encode();
    refused[9] = 0xff;
    assert_eq!(Msg::decode(&refused), Err(CodecError::Malformed("Refused")));
    // Every truncation of a client's body (with the length fixed up) is malformed.
    let frame = Msg::Client(Box::new(sample_client())).encode();
    for cut in HEADER..frame.len() {
        let mut f = frame[..cut].to_vec();
        f[1..5].copy_from_slice(&((cut - HEADER) as u32).to_be_bytes());
        assert!(Msg::decode(&f).is_err(), "cut at {cut}");
    }
}
