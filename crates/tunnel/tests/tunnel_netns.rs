//! The tunnel between two real namespaces (root and /dev/net/tun needed; skipped with a
//! reason otherwise): verified TCP through every suite, crafted datagrams injected on the
//! veth, a key holder reaching for other addresses of b's host, a running pair rekeyed through its
//! key control, and nothing left behind.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use model::{CipherSuite, CryptoChoice, Hmac, KeyBits};
use netns::Topology;
use tunnel::{inner_mtu, Batching, Tunnel, TunnelConfig, TunnelStats};
use tunnel_proto::{Endpoint, Implementation, KeyDirection, StaticKey};

use common::*;

const PORT: u16 = 41_194;

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
        peer_inner: if inner == ad.inner_a {
            ad.inner_b
        } else {
            ad.inner_a
        },
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
            assert!(link_exists(&topo.a, "ipl-tun-a") && threads_named_like("ipl-tun-a") == ["ipl-tun-a"]);
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
            check_time(suite, batching, &a, &b);
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
            assert_eq!(
                threads_left_after_join("ipl-tun-"),
                Vec::<String>::new(),
                "{suite}"
            );
        }
    }
}

/// Each end's phases add up to its life, and each path's phases were timed where it ran.
fn check_time(suite: CipherSuite, batching: Batching, a: &TunnelStats, b: &TunnelStats) {
    for s in [a, b] {
        let total = s.time.total_s();
        assert!(
            (total - s.wall_s).abs() <= 0.01 * s.wall_s + 0.001,
            "{suite} {batching:?} {}: phases add up to {total} s of a {} s life: {:?}",
            s.tun_name,
            s.wall_s,
            s.time
        );
        assert!(s.time.run_queue_s.is_some_and(|q| q >= 0.0), "{:?}", s.time);
    }
    let (ta, tb) = (&a.time, &b.time);
    // a read and sent the payload, b received and wrote it; each encrypted or decrypted it.
    for (what, t) in [
        ("a's TUN reads", ta.tun_read_s),
        ("a's encryption", ta.crypto_s),
        ("a's UDP sends", ta.udp_send_s),
        ("b's UDP receives", tb.udp_recv_s),
        ("b's decryption", tb.crypto_s),
        ("b's TUN writes", tb.tun_write_s),
    ] {
        assert!(
            t > 0.0,
            "{suite} {batching:?}: {what} took no time: a {ta:?}, b {tb:?}"
        );
    }
    assert!(b.recv_buffers > 0 && b.recv_buffers <= b.datagrams_in, "{b:?}");
    if batching == Batching::Offload {
        assert!(ta.segmenting_s > 0.0 && tb.joining_s > 0.0, "a {ta:?}, b {tb:?}");
    }
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

/// The Internet checksum of `parts` laid end to end (each of even length but the last).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        for w in part.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP (IPv4) or ICMPv6 echo request from `src` to `dst`, checksums filled in.
fn echo_request(src: IpAddr, dst: IpAddr, seq: u16) -> Vec<u8> {
    let mut icmp = vec![0u8; 16];
    icmp[4..6].copy_from_slice(&0x1a5u16.to_be_bytes());
    icmp[6..8].copy_from_slice(&seq.to_be_bytes());
    icmp[8..].copy_from_slice(b"ipl-acl!");
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            icmp[0] = 8;
            let c = checksum(&[&icmp]);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let mut p = vec![0u8; 20];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
            p[8] = 64;
            p[9] = 1;
            p[12..16].copy_from_slice(&s.octets());
            p[16..20].copy_from_slice(&d.octets());
            let c = checksum(&[&p]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p.extend(icmp);
            p
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            icmp[0] = 128;
            let len = (icmp.len() as u32).to_be_bytes();
            let c = checksum(&[&s.octets(), &d.octets(), &len, &[0, 0, 0, 58], &icmp]);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let mut p = vec![0u8; 40];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&(icmp.len() as u16).to_be_bytes());
            p[6] = 58;
            p[7] = 64;
            p[8..24].copy_from_slice(&s.octets());
            p[24..40].copy_from_slice(&d.octets());
            p.extend(icmp);
            p
        }
        _ => panic!("{src} and {dst} are of two families"),
    }
}

/// The source and sequence number of an echo reply; None for any other packet.
fn echo_reply(p: &[u8]) -> Option<(IpAddr, u16)> {
    let seq = |icmp: &[u8]| u16::from_be_bytes([icmp[6], icmp[7]]);
    match p.first()? >> 4 {
        4 if p.len() >= 28 && p[9] == 1 && p[20] == 0 => {
            let src: [u8; 4] = p[12..16].try_into().unwrap();
            Some((IpAddr::from(src), seq(&p[20..])))
        }
        6 if p.len() >= 48 && p[6] == 58 && p[40] == 129 => {
            let src: [u8; 16] = p[8..24].try_into().unwrap();
            Some((IpAddr::from(src), seq(&p[40..])))
        }
        _ => None,
    }
}

/// Collects, for `how_long`, the echo replies among the datagrams b sends to `s`.
fn listen(s: &UdpSocket, holder: &mut Endpoint, how_long: Duration, replies: &mut Vec<(IpAddr, u16)>) {
    let until = std::time::Instant::now() + how_long;
    let mut buf = [0u8; 2048];
    while std::time::Instant::now() < until {
        if let Ok(n) = s.recv(&mut buf) {
            if let Ok(r) = holder.decap(&mut buf[..n]) {
                replies.extend(echo_reply(&buf[r]));
            }
        }
    }
}

/// Issue 22: a key holder reached the server's other addresses (and the networks behind
/// it) through the userspace tunnel, whose receive path wrote every decrypted packet to
/// TUN. Here a holds the key but runs no honest end: it seals echo requests of its own
/// making and sends them from a's tunnel port. b answers the one to its inner address;
/// the one to another address of b's host (on its loopback) and the one from a spoofed
/// source are dropped and counted, and no answer comes back. IPv4 and IPv6.
#[test]
fn a_key_holder_reaches_only_the_peers_inner_address() {
    if !capable("a_key_holder_reaches_only_the_peers_inner_address") {
        return;
    }
    // Offload joins what passed before writing it; GSO alone writes packet by packet.
    let cases = [model::Family::Ipv4, model::Family::Ipv6]
        .into_iter()
        .flat_map(|f| [(f, Batching::Offload), (f, Batching::Gso)]);
    for (family, batching) in cases {
        let ad = family.addressing();
        let topo = topology_of(ad);
        let (other, spoofed): (IpAddr, IpAddr) = match family {
            model::Family::Ipv4 => ("198.18.9.9".parse().unwrap(), "198.18.7.7".parse().unwrap()),
            model::Family::Ipv6 => ("2001:2:0:9::9".parse().unwrap(), "2001:2:0:7::7".parse().unwrap()),
        };
        // Another address of b's host, one a route in a could point into the tunnel.
        let added = std::process::Command::new("ip")
            .args([
                "-n",
                topo.b.name(),
                "address",
                "add",
                &other.to_string(),
                "dev",
                "lo",
            ])
            .status()
            .unwrap();
        assert!(added.success());
        let suite = CipherSuite::AesGcm { key: KeyBits::Aes256 };
        let key = StaticKey::generate().unwrap();
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        let b = Tunnel::start(
            &topo.b,
            TunnelConfig {
                tun_name: "ipl-acl-b".into(),
                local: SocketAddr::new(ad.outer_b, PORT),
                peer: SocketAddr::new(ad.outer_a, PORT),
                inner: ad.inner_b,
                prefix_len: ad.prefix_len,
                peer_inner: ad.inner_a,
                inner_mtu: inner_mtu(topo.mtu, suite),
                cpu: None,
                batching,
                queue: None,
            },
            Endpoint::new(suite, imp, &key, KeyDirection::Inverse).unwrap(),
        )
        .unwrap();
        let (outer_a, outer_b) = (ad.outer_a, ad.outer_b);
        let (inner_a, inner_b) = (ad.inner_a, ad.inner_b);
        // Returns (requests to b's inner address sent, their replies, replies from anywhere else).
        let (honest_sent, answered, leaked) = topo
            .a
            .run(move || {
                let mut holder = Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap();
                let s = UdpSocket::bind((outer_a, PORT)).unwrap();
                s.connect((outer_b, PORT)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                let mut replies = Vec::new();
                // b's inner address answers (an IPv6 one once its address is usable).
                let mut honest_sent = 0;
                for seq in 0..30 {
                    s.send(&seal(&mut holder, &echo_request(inner_a, inner_b, seq)))
                        .unwrap();
                    honest_sent += 1;
                    listen(&s, &mut holder, Duration::from_millis(200), &mut replies);
                    if !replies.is_empty() {
                        break;
                    }
                }
                let answered = std::mem::take(&mut replies);
                s.send(&seal(&mut holder, &echo_request(inner_a, other, 100)))
                    .unwrap();
                s.send(&seal(&mut holder, &echo_request(spoofed, inner_b, 101)))
                    .unwrap();
                listen(&s, &mut holder, Duration::from_millis(1500), &mut replies);
                (honest_sent, answered, replies)
            })
            .unwrap();
        let stats = b.stop().unwrap();
        assert!(
            answered.iter().any(|(from, _)| *from == inner_b),
            "{family} {batching:?}: b's inner address never answered: {stats:?}"
        );
        assert_eq!(
            leaked,
            vec![],
            "{family} {batching:?}: answers from beyond b's inner address"
        );
        assert_eq!(
            stats.drops.wrong_inner_address, 2,
            "{family} {batching:?}: {:?}",
            stats.drops
        );
        assert_eq!(stats.drops.total(), 2, "{family} {batching:?}: {:?}", stats.drops);
        assert_eq!(
            stats.delivered.packets, honest_sent,
            "{family} {batching:?}: only a's own packets reach b"
        );
    }
}

/// Inner addresses that cannot be a tunnel's pair (two families, one address twice) are
/// refused before the end creates its socket or TUN device.
#[test]
fn an_impossible_inner_pair_is_refused_before_anything_is_created() {
    if !capable("an_impossible_inner_pair_is_refused_before_anything_is_created") {
        return;
    }
    let topo = topology();
    let ad = topo.addressing;
    let suite = CipherSuite::AesGcm { key: KeyBits::Aes256 };
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let v6: IpAddr = "2001:2:0:1::2".parse().unwrap();
    for peer_inner in [v6, ad.inner_a] {
        let refused = Tunnel::start(
            &topo.a,
            TunnelConfig {
                tun_name: "ipl-acl-bad".into(),
                local: SocketAddr::new(ad.outer_a, PORT),
                peer: SocketAddr::new(ad.outer_b, PORT),
                inner: ad.inner_a,
                prefix_len: ad.prefix_len,
                peer_inner,
                inner_mtu: 1400,
                cpu: None,
                batching: Batching::Offload,
                queue: None,
            },
            Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap(),
        );
        let e = refused.err().expect("refused");
        assert!(
            matches!(e, tunnel::TunnelError::InnerAddresses { .. }),
            "{peer_inner}: {e}"
        );
        assert!(e.to_string().contains(&peer_inner.to_string()), "{e}");
        assert!(!link_exists(&topo.a, "ipl-acl-bad"));
    }
}

/// Key commands reach the real loop, asleep in `poll` or moving data: both ends install a
/// fresh key, switch to it and retire the old one between two verified transfers, and each
/// counts its switch with nothing dropped.
#[test]
fn a_running_tunnel_is_rekeyed_through_its_key_control() {
    if !capable("a_running_tunnel_is_rekeyed_through_its_key_control") {
        return;
    }
    let topo = topology();
    let suite = CipherSuite::AesGcm { key: KeyBits::Aes256 };
    let pair = start_pair(
        &topo,
        "ipl-tkc",
        suite,
        &StaticKey::generate().unwrap(),
        Batching::Offload,
    );
    let (ka, kb) = (pair.a.keys(), pair.b.keys());
    assert!(tcp_transfer(&topo, 1_000_000));
    for epoch in 1..=2u8 {
        let key = StaticKey::generate().unwrap();
        assert_eq!(ka.install_next(&key).unwrap(), epoch);
        assert_eq!(kb.install_next(&key).unwrap(), epoch);
        assert_eq!(ka.switch_send().unwrap(), epoch);
        assert_eq!(kb.switch_send().unwrap(), epoch);
        assert!(
            tcp_transfer(&topo, 1_000_000),
            "epoch {epoch}: payload corrupted or short"
        );
        assert_eq!(ka.retire_previous().unwrap(), epoch - 1);
        assert_eq!(kb.retire_previous().unwrap(), epoch - 1);
    }
    // Out of order: refused with the endpoint's reason, the tunnel unharmed.
    let e = ka.retire_previous().unwrap_err();
    assert!(e.to_string().contains("nothing to retire"), "{e}");
    let (a, b) = (pair.a.stop().unwrap(), pair.b.stop().unwrap());
    for s in [&a, &b] {
        assert_eq!(s.key_switches, 2, "{}", s.tun_name);
        assert_eq!(s.drops.total(), 0, "{}: {:?}", s.tun_name, s.drops);
    }
    // Stopped: a command is refused at once.
    assert!(matches!(
        kb.switch_send(),
        Err(tunnel::KeyControlError::Stopped { .. })
    ));
}
