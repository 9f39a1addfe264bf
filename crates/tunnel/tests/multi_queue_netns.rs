//! Multi-queue tunnel ends between two real namespaces (root and /dev/net/tun needed; skipped
//! with a reason otherwise): every suite with 2 and 3 queues, verified TCP over six flows
//! on consecutive ports spread evenly over the queues by the port-steering program, crafted
//! datagrams injected into every queue's socket (replayed,
//! tampered, carried over from another queue) dropped and counted by that queue, and nothing
//! left behind.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use model::{CipherSuite, CryptoChoice, KeyBits};
use netns::Topology;
use tunnel::{inner_mtu, Batching, MultiQueue, TunnelConfig, TunnelStats};
use tunnel_proto::{Endpoint, Implementation, KeyDirection, StaticKey};

use common::*;

const PORT: u16 = 41_294;
/// Flows in the transfer, to ports 5001.. (as the lab's streams): 3 per queue of 2, 2 per
/// queue of 3.
const STREAMS: usize = 6;
const DATA_PORT: u16 = 5001;
const STREAM_BYTES: usize = 400_000;

/// Both ends with `n` queues each; the device is `{prefix}-a`/`-b`, queue i's thread
/// `{prefix}-a/i`.
fn start_pair(
    topo: &Topology,
    prefix: &str,
    suite: CipherSuite,
    key: &StaticKey,
    n: u8,
) -> (MultiQueue, MultiQueue) {
    let ad = topo.addressing;
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let cfg = |name: String, local: IpAddr, peer: IpAddr, inner: IpAddr| TunnelConfig {
        tun_name: name,
        local: SocketAddr::new(local, PORT),
        peer: SocketAddr::new(peer, PORT),
        inner,
        prefix_len: ad.prefix_len,
        peer_inner: if inner == ad.inner_a {
            ad.inner_b
        } else {
            ad.inner_a
        },
        inner_mtu: inner_mtu(topo.mtu, suite),
        cpu: None,
        batching: Batching::Offload,
        queue: None,
    };
    let queues = |dir| {
        (0..n)
            .map(|q| (Endpoint::for_queue(suite, imp, key, dir, q).unwrap(), None))
            .collect::<Vec<_>>()
    };
    let a = MultiQueue::start(
        &topo.a,
        cfg(format!("{prefix}-a"), ad.outer_a, ad.outer_b, ad.inner_a),
        queues(KeyDirection::Normal),
    )
    .unwrap();
    let b = MultiQueue::start(
        &topo.b,
        cfg(format!("{prefix}-b"), ad.outer_b, ad.outer_a, ad.inner_b),
        queues(KeyDirection::Inverse),
    )
    .unwrap();
    assert_eq!((a.len(), b.len()), (usize::from(n), usize::from(n)));
    (a, b)
}

fn pattern(stream: usize, i: usize) -> u8 {
    ((i + stream * 7919).wrapping_mul(2_654_435_761) >> 13) as u8
}

/// [`STREAMS`] TCP connections from a to b's inner address at once, each carrying its own
/// pattern; true when every stream arrived whole and intact.
fn tcp_transfer(topo: &Topology) -> bool {
    let inner_b = topo.addressing.inner_b;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = topo
        .b
        .spawn("ipl-test-rx", move || {
            let listeners: Vec<TcpListener> = (0..STREAMS)
                .map(|i| TcpListener::bind((inner_b, DATA_PORT + i as u16)).unwrap())
                .collect();
            ready_tx.send(()).unwrap();
            let readers: Vec<_> = listeners
                .into_iter()
                .map(|l| {
                    std::thread::spawn(move || {
                        let (mut s, _) = l.accept().unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                        let mut id = [0u8; 1];
                        s.read_exact(&mut id).unwrap();
                        let stream = usize::from(id[0]);
                        let (mut got, mut ok) = (0usize, true);
                        let mut buf = vec![0u8; 65536];
                        loop {
                            let n = s.read(&mut buf).unwrap();
                            if n == 0 {
                                break;
                            }
                            ok &= buf[..n]
                                .iter()
                                .enumerate()
                                .all(|(i, b)| *b == pattern(stream, got + i));
                            got += n;
                        }
                        ok && got == STREAM_BYTES
                    })
                })
                .collect();
            readers.into_iter().all(|r| r.join().unwrap())
        })
        .unwrap();
    ready_rx.recv().unwrap();
    let senders: Vec<_> = (0..STREAMS)
        .map(|stream| {
            topo.a
                .spawn("ipl-test-tx", move || {
                    let to = (inner_b, DATA_PORT + stream as u16).into();
                    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                    let data: Vec<u8> = (0..STREAM_BYTES).map(|i| pattern(stream, i)).collect();
                    s.write_all(&[stream as u8]).unwrap();
                    s.write_all(&data).unwrap();
                })
                .unwrap()
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    receiver.join().unwrap()
}

fn check_clean(suite: CipherSuite, s: &TunnelStats) {
    assert_eq!(s.drops.total(), 0, "{suite} queue {:?}: {:?}", s.queue, s.drops);
    assert_eq!(
        s.errors.encap + s.errors.tun_write + s.errors.offload,
        0,
        "{suite} queue {:?}: {:?}",
        s.queue,
        s.errors
    );
}

#[test]
fn every_suite_over_two_and_three_queues_verified_spread_and_nothing_left() {
    if !capable("every_suite_over_two_and_three_queues_verified_spread_and_nothing_left") {
        return;
    }
    let topo = topology();
    for n in [2u8, 3] {
        for suite in all_suites() {
            let key = StaticKey::generate().unwrap();
            let (a, b) = start_pair(&topo, "ipl-mq", suite, &key, n);
            let threads = threads_named_like("ipl-mq-");
            assert_eq!(threads.len(), 2 * usize::from(n), "{suite} n={n}: {threads:?}");
            assert!(tcp_transfer(&topo), "{suite} n={n}: payload corrupted or short");
            let a = a.stop().unwrap();
            let b = b.stop().unwrap();
            for (q, s) in a.iter().chain(&b).enumerate() {
                check_clean(suite, s);
                assert_eq!(s.queue, Some((q % usize::from(n)) as u16));
                assert_eq!(s.batching, Batching::Offload, "{suite} n={n}: fell back");
                assert!(s.cpu.total_s() > 0.0, "{suite} n={n} queue {q}");
            }
            let sent = TunnelStats::sum(&a).unwrap();
            let delivered = TunnelStats::sum(&b).unwrap();
            let total = (STREAMS * (STREAM_BYTES + 1)) as u64;
            assert!(sent.sent.bytes >= total, "{suite} n={n}: {:?}", sent.sent);
            assert!(
                delivered.delivered.bytes >= total,
                "{suite} n={n}: {:?}",
                delivered.delivered
            );
            // Steered by port: every queue carried its share of the flows, each way.
            assert_eq!(a[0].steering, Some(Ok(())), "{suite} n={n}");
            assert_eq!(b[0].steering, Some(Ok(())), "{suite} n={n}");
            let share = (STREAMS / usize::from(n) * STREAM_BYTES) as u64;
            let spread = |v: &[TunnelStats], f: fn(&TunnelStats) -> u64| v.iter().all(|s| f(s) >= share);
            assert!(
                spread(&a, |s| s.sent.bytes) && spread(&b, |s| s.delivered.bytes),
                "{suite} n={n}: flows not spread: a sent {:?}, b delivered {:?}",
                a.iter().map(|s| s.sent.bytes).collect::<Vec<_>>(),
                b.iter().map(|s| s.delivered.bytes).collect::<Vec<_>>()
            );
            // Queue i of a talks to queue i of b only.
            for (qa, qb) in a.iter().zip(&b) {
                assert!(qb.delivered.packets <= qa.sent.packets, "{suite} n={n}");
            }
            assert!(!link_exists(&topo.a, "ipl-mq-a"), "{suite}: TUN left in a");
            assert!(!link_exists(&topo.b, "ipl-mq-b"), "{suite}: TUN left in b");
            assert_eq!(
                threads_left_after_join("ipl-mq-"),
                Vec::<String>::new(),
                "{suite}"
            );
        }
    }
}

/// Into each queue q of b, from a's port for q: a genuine datagram of queue q's id space
/// (delivered), the same again (replay), a tampered one (authenticated suites), and a
/// genuine one of the next queue's space (wrong queue). Each is counted by queue q alone.
#[test]
fn injected_datagrams_are_dropped_and_counted_by_the_queue_they_reach() {
    if !capable("injected_datagrams_are_dropped_and_counted_by_the_queue_they_reach") {
        return;
    }
    let topo = topology();
    for n in [2u8, 3] {
        for suite in all_suites() {
            let key = StaticKey::generate().unwrap();
            let (a, b) = start_pair(&topo, "ipl-mqi", suite, &key, n);
            let imp = Implementation::new(CryptoChoice::Auto).unwrap();
            let mut forgers: Vec<Endpoint> = (0..n)
                .map(|q| {
                    let mut f = Endpoint::for_queue(suite, imp, &key, KeyDirection::Normal, q).unwrap();
                    for _ in 0..10_000 {
                        seal(&mut f, b"");
                    }
                    f
                })
                .collect();
            let mut per_queue: Vec<Vec<Vec<u8>>> = Vec::new();
            for q in 0..usize::from(n) {
                let genuine = seal(
                    &mut forgers[q],
                    &ip_udp(&topo, 9999, format!("genuine {q}").as_bytes()),
                );
                let mut datagrams = vec![genuine.clone(), genuine];
                if suite.authenticates() {
                    let mut tampered = seal(&mut forgers[q], &ip_udp(&topo, 9999, b"tampered"));
                    let at = tampered.len() - 20;
                    tampered[at] ^= 0x01;
                    datagrams.push(tampered);
                }
                let other = (q + 1) % usize::from(n);
                datagrams.push(seal(&mut forgers[other], &ip_udp(&topo, 9999, b"other queue")));
                per_queue.push(datagrams);
            }
            let inner_b = topo.addressing.inner_b;
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let listener = topo
                .b
                .spawn("ipl-test-udp", move || {
                    let s = UdpSocket::bind((inner_b, 9999)).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(700))).unwrap();
                    ready_tx.send(()).unwrap();
                    let mut got = Vec::new();
                    let mut buf = [0u8; 2048];
                    while let Ok(n) = s.recv(&mut buf) {
                        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    }
                    got
                })
                .unwrap();
            ready_rx.recv().unwrap();
            // a's queues step aside so the forger can take their ports.
            a.stop().unwrap();
            let (outer_a, outer_b) = (topo.addressing.outer_a, topo.addressing.outer_b);
            topo.a
                .run(move || {
                    for (q, datagrams) in per_queue.iter().enumerate() {
                        let port = PORT + q as u16;
                        let s = UdpSocket::bind((outer_a, port)).unwrap();
                        for d in datagrams {
                            s.send_to(d, SocketAddr::new(outer_b, port)).unwrap();
                            std::thread::sleep(Duration::from_millis(30));
                        }
                    }
                })
                .unwrap();
            let mut got = listener.join().unwrap();
            got.sort();
            let want: Vec<String> = (0..n).map(|q| format!("genuine {q}")).collect();
            assert_eq!(got, want, "{suite} n={n}: what reached the application");
            let b = b.stop().unwrap();
            for (q, s) in b.iter().enumerate() {
                let tampered = u64::from(suite.authenticates());
                assert_eq!(
                    (
                        s.drops.replay,
                        s.drops.bad_mac,
                        s.drops.wrong_queue,
                        s.drops.total()
                    ),
                    (1, tampered, 1, 2 + tampered),
                    "{suite} n={n} queue {q}: {:?}",
                    s.drops
                );
                // The genuine one; the kernel's own chatter from a's device (IPv6 router
                // solicitations while it was up) may add one or two.
                assert!(s.delivered.packets >= 1, "{suite} n={n} queue {q}");
            }
            assert!(!link_exists(&topo.b, "ipl-mqi-b"), "{suite}: TUN left in b");
            assert_eq!(
                threads_left_after_join("ipl-mqi-"),
                Vec::<String>::new(),
                "{suite}"
            );
        }
    }
}

#[test]
fn zero_or_too_many_queues_and_ports_past_65535_are_refused_before_any_device() {
    if !capable("zero_or_too_many_queues_and_ports_past_65535_are_refused_before_any_device") {
        return;
    }
    let topo = topology();
    let ad = topo.addressing;
    let suite = CipherSuite::AesGcm { key: KeyBits::Aes256 };
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let cfg = |port: u16| TunnelConfig {
        tun_name: "ipl-mqbad".into(),
        local: SocketAddr::new(ad.outer_a, port),
        peer: SocketAddr::new(ad.outer_b, port),
        inner: ad.inner_a,
        prefix_len: ad.prefix_len,
        peer_inner: ad.inner_b,
        inner_mtu: 1400,
        cpu: None,
        batching: Batching::Offload,
        queue: None,
    };
    let queues = |n: usize| {
        (0..n)
            .map(|q| {
                (
                    Endpoint::for_queue(suite, imp, &key, KeyDirection::Normal, q as u8).unwrap(),
                    None,
                )
            })
            .collect::<Vec<_>>()
    };
    assert!(MultiQueue::start(&topo.a, cfg(PORT), Vec::new()).is_err());
    let mut too_many = queues(256);
    too_many.push((
        Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap(),
        None,
    ));
    assert!(MultiQueue::start(&topo.a, cfg(PORT), too_many).is_err());
    assert!(MultiQueue::start(&topo.a, cfg(65_535), queues(2)).is_err());
    assert!(!link_exists(&topo.a, "ipl-mqbad"));
}
