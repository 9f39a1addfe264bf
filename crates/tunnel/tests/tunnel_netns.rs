//! The tunnel between two real namespaces (root and /dev/net/tun needed; skipped with a
//! reason otherwise): verified TCP through every suite, crafted datagrams injected on the
//! veth, and nothing left behind.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use model::{Addressing, CipherSuite, CryptoChoice, Hmac, KeyBits};
use netns::{Namespace, Topology, TopologySpec};
use tunnel::{inner_mtu, Batching, Tunnel, TunnelConfig, TunnelStats};
use tunnel_proto::{Endpoint, Implementation, KeyDirection, StaticKey, HEADROOM, TAILROOM};

const PORT: u16 = 41_194;

/// Root and a TUN device, or the test skips (fails under CI) saying which is missing.
fn capable(test: &str) -> bool {
    testcap::root(test) && testcap::tun(test)
}

fn topology() -> Topology {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(Topology::create(&TopologySpec {
        run_id: netns::new_run_id(),
        mtu: 1500,
        addressing: Addressing::default(),
    }))
    .unwrap()
}

struct Pair {
    a: Tunnel,
    b: Tunnel,
}

/// Starts both ends; their TUN devices (and threads) are called `{prefix}-a` and `{prefix}-b`.
fn start_pair(
    topo: &Topology,
    prefix: &str,
    suite: CipherSuite,
    key: &StaticKey,
    batching: Batching,
) -> Pair {
    let ad = topo.addressing;
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let cfg = |name: &str, local: IpAddr, peer: IpAddr, inner: IpAddr| TunnelConfig {
        tun_name: name.into(),
        local: SocketAddr::new(local, PORT),
        peer: SocketAddr::new(peer, PORT),
        inner,
        prefix_len: ad.prefix_len,
        inner_mtu: inner_mtu(topo.mtu, suite),
        cpu: None,
        batching,
        queue: None,
    };
    let a = Tunnel::start(
        &topo.a,
        cfg(&format!("{prefix}-a"), ad.outer_a, ad.outer_b, ad.inner_a),
        Endpoint::new(suite, imp, key, KeyDirection::Normal).unwrap(),
    )
    .unwrap();
    let b = Tunnel::start(
        &topo.b,
        cfg(&format!("{prefix}-b"), ad.outer_b, ad.outer_a, ad.inner_b),
        Endpoint::new(suite, imp, key, KeyDirection::Inverse).unwrap(),
    )
    .unwrap();
    Pair { a, b }
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Sends `len` bytes over TCP from a to b's inner address; true when every byte arrived intact.
fn tcp_transfer(topo: &Topology, len: usize) -> bool {
    let inner_b = topo.addressing.inner_b;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = topo
        .b
        .spawn("ipl-test-rx", move || {
            let l = TcpListener::bind((inner_b, 5001)).unwrap();
            ready_tx.send(()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut got = 0usize;
            let mut ok = true;
            let mut buf = vec![0u8; 65536];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                ok &= buf[..n].iter().enumerate().all(|(i, b)| *b == pattern(got + i));
                got += n;
            }
            ok && got == len
        })
        .unwrap();
    ready_rx.recv().unwrap();
    topo.a
        .run(move || {
            let mut s = TcpStream::connect_timeout(&(inner_b, 5001).into(), Duration::from_secs(5)).unwrap();
            let data: Vec<u8> = (0..len).map(pattern).collect();
            s.write_all(&data).unwrap();
        })
        .unwrap();
    receiver.join().unwrap()
}

/// True when `name` exists in `ns` (if_nametoindex from a thread inside it).
fn link_exists(ns: &Namespace, name: &str) -> bool {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a valid NUL-terminated string.
    ns.run(move || unsafe { libc::if_nametoindex(c.as_ptr()) } != 0)
        .unwrap()
}

fn all_suites() -> Vec<CipherSuite> {
    let mut v = vec![CipherSuite::None];
    v.extend(CipherSuite::classic_six());
    v.push(CipherSuite::AesGcm { key: KeyBits::Aes128 });
    v.push(CipherSuite::AesGcm { key: KeyBits::Aes256 });
    v
}

fn check_clean_stats(suite: CipherSuite, s: &TunnelStats) {
    assert_eq!(s.drops.total(), 0, "{suite} {}: {:?}", s.tun_name, s.drops);
    assert_eq!(
        s.errors.encap + s.errors.tun_write + s.errors.offload,
        0,
        "{suite} {}: {:?}",
        s.tun_name,
        s.errors
    );
    assert!(s.cpu.total_s() > 0.0, "{suite} {}", s.tun_name);
}

#[test]
fn verified_tcp_through_every_suite_and_nothing_left() {
    if !capable("verified_tcp_through_every_suite_and_nothing_left") {
        return;
    }
    let topo = topology();
    for suite in all_suites() {
        for batching in [Batching::Offload, Batching::Gso, Batching::Mmsg] {
            let key = StaticKey::generate().unwrap();
            let pair = start_pair(&topo, "ipl-tun", suite, &key, batching);
            assert!(link_exists(&topo.a, "ipl-tun-a") && thread_named("ipl-tun-a"));
            assert!(
                tcp_transfer(&topo, 2_000_000),
                "{suite} {batching:?}: payload corrupted or short"
            );
            let a = pair.a.stop().unwrap();
            let b = pair.b.stop().unwrap();
            for s in [&a, &b] {
                check_clean_stats(suite, s);
            }
            assert!(a.sent.bytes >= 2_000_000, "{suite}: {:?}", a.sent);
            assert!(b.delivered.bytes >= 2_000_000, "{suite}: {:?}", b.delivered);
            assert!(
                a.sent.packets > a.send_calls,
                "{suite} {batching:?}: no batching ({} packets in {} calls)",
                a.sent.packets,
                a.send_calls
            );
            assert_eq!(a.batching, batching, "{suite}: fell back");
            if batching == Batching::Offload {
                // Super-packets came out of TUN a and joined packets went into TUN b.
                assert!(
                    a.tun_reads < a.sent.packets && b.tun_writes < b.delivered.packets,
                    "{suite}: no offload (a: {} reads for {} packets; b: {} writes for {})",
                    a.tun_reads,
                    a.sent.packets,
                    b.tun_writes,
                    b.delivered.packets
                );
            }
            // The TUN devices went with their threads.
            assert!(!link_exists(&topo.a, "ipl-tun-a"), "{suite}: TUN left in a");
            assert!(!link_exists(&topo.b, "ipl-tun-b"), "{suite}: TUN left in b");
            assert!(
                !thread_named("ipl-tun-a") && !thread_named("ipl-tun-b"),
                "{suite}: thread left"
            );
        }
    }
}

/// Whether a thread of this process carries `name` (the tunnel threads are named after their
/// TUN device).
fn thread_named(name: &str) -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .any(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).is_ok_and(|c| c.trim() == name))
}

/// A minimal IPv4/UDP packet from a's inner address to b's inner address, port `port`.
fn ip_udp(topo: &Topology, port: u16, payload: &[u8]) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&v4(topo.addressing.inner_a).octets());
    p[16..20].copy_from_slice(&v4(topo.addressing.inner_b).octets());
    let mut sum = 0u32;
    for w in p[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&port.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload); // UDP checksum 0: none
    p
}

fn seal(ep: &mut Endpoint, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + payload.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
    let r = ep.encap(&mut buf, payload.len()).unwrap();
    buf[r].to_vec()
}

/// Datagrams crafted with the run's key and injected into b's tunnel socket from inside
/// namespace a: from another port than a's tunnel it is never read (the socket is connected);
/// from a's port a fresh one is delivered, its replay and a tampered one are dropped and
/// counted, and neither reaches the application.
#[test]
fn injected_replayed_and_tampered_datagrams_are_counted_not_delivered() {
    if !capable("injected_replayed_and_tampered_datagrams_are_counted_not_delivered") {
        return;
    }
    let topo = topology();
    for suite in [
        CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256),
        CipherSuite::AesGcm { key: KeyBits::Aes256 },
    ] {
        let key = StaticKey::generate().unwrap();
        let pair = start_pair(&topo, "ipl-inj", suite, &key, Batching::Offload);
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        // The forger holds a's key and jumps past any id a's own tunnel may have used.
        let mut forger = Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap();
        for _ in 0..10_000 {
            seal(&mut forger, b"");
        }
        let genuine = seal(&mut forger, &ip_udp(&topo, 9999, b"genuine"));
        let mut tampered = seal(&mut forger, &ip_udp(&topo, 9999, b"tampered"));
        let last = tampered.len() - 20;
        tampered[last] ^= 0x01;

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
                    got.push(buf[..n].to_vec());
                }
                got
            })
            .unwrap();
        ready_rx.recv().unwrap();
        let target = SocketAddr::new(topo.addressing.outer_b, PORT);
        let outer_a = topo.addressing.outer_a;
        // b's socket is connected to a's: only datagrams from a's address AND port are read.
        // a's end steps aside so the forger can take its port.
        pair.a.stop().unwrap();
        topo.a
            .run(move || {
                let stranger = UdpSocket::bind((outer_a, 0)).unwrap();
                stranger.send_to(&genuine, target).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                let s = UdpSocket::bind((outer_a, PORT)).unwrap();
                for d in [&genuine, &genuine, &tampered] {
                    s.send_to(d, target).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .unwrap();
        let got = listener.join().unwrap();
        let b = pair.b.stop().unwrap();
        assert_eq!(
            got,
            vec![b"genuine".to_vec()],
            "{suite}: what reached the application"
        );
        // One replay: the stranger's copy never reached the decryption.
        assert_eq!(b.drops.replay, 1, "{suite}: {:?}", b.drops);
        assert_eq!(b.drops.bad_mac, 1, "{suite}: {:?}", b.drops);
    }
}

/// The IPv4 plan's address (these tests build IPv4 packets by hand).
fn v4(ip: IpAddr) -> std::net::Ipv4Addr {
    match ip {
        IpAddr::V4(v) => v,
        IpAddr::V6(v) => panic!("{v} is not IPv4"),
    }
}
