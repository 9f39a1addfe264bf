//! Cryptokey routing of the userspace tunnel, with two peers in memory: a peer holding the
//! key can send any inner packet it likes, and the other end delivers only those from the
//! peer's inner address to its own (issue 22: a key holder reached the server's other
//! addresses and the networks behind it). Every other packet is dropped and counted by
//! reason; the sending end does not send what its peer would drop.

use std::net::IpAddr;

use model::{CipherSuite, CryptoChoice, Hmac, KeyBits};
use tunnel_proto::{
    DropCounters, DropReason, Endpoint, Implementation, InnerAddresses, KeyDirection, StaticKey, HEADROOM,
    TAILROOM,
};

const A4: [u8; 4] = [198, 19, 0, 1];
const B4: [u8; 4] = [198, 19, 0, 2];
/// Another address of b's host (the lab's range, RFC 2544).
const OTHER4: [u8; 4] = [198, 18, 9, 9];
const A6: &str = "2001:2:0:1::1";
const B6: &str = "2001:2:0:1::2";
const OTHER6: &str = "2001:2:0:9::9";

fn suites() -> [CipherSuite; 4] {
    [
        CipherSuite::None,
        CipherSuite::AesCbc {
            key: KeyBits::Aes256,
            hmac: Hmac::Sha256,
        },
        CipherSuite::AesGcm { key: KeyBits::Aes256 },
        CipherSuite::ChaCha20Poly1305,
    ]
}

/// A TCP SYN-sized IPv4 packet from `src` to `dst` whose length fields are right.
fn v4(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&40u16.to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p[20..22].copy_from_slice(&40_000u16.to_be_bytes());
    p[22..24].copy_from_slice(&22u16.to_be_bytes());
    p
}

/// The IPv6 counterpart of [`v4`]: a 40-byte header and 20 bytes of TCP.
fn v6(src: &str, dst: &str) -> Vec<u8> {
    let addr = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
    let mut p = vec![0u8; 60];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&20u16.to_be_bytes());
    p[6] = 6;
    p[7] = 64;
    p[8..24].copy_from_slice(&addr(src));
    p[24..40].copy_from_slice(&addr(dst));
    p
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// One end as the tunnel runs it: its endpoint, its inner addresses, its drop counters.
struct End {
    endpoint: Endpoint,
    inner: InnerAddresses,
    drops: DropCounters,
    not_sent: u64,
}

impl End {
    fn new(suite: CipherSuite, key: &StaticKey, dir: KeyDirection, local: IpAddr, peer: IpAddr) -> End {
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        End {
            endpoint: Endpoint::new(suite, imp, key, dir).unwrap(),
            inner: InnerAddresses::new(local, peer).unwrap(),
            drops: DropCounters::default(),
            not_sent: 0,
        }
    }

    /// Encrypts `packet` without asking whether it may be sent: what a key holder who
    /// changed its own end can put on the wire.
    fn seal_anything(&mut self, packet: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; HEADROOM + packet.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + packet.len()].copy_from_slice(packet);
        let r = self.endpoint.encap(&mut buf, packet.len()).unwrap();
        buf[r].to_vec()
    }

    /// The tunnel's send path: only what passes the check is encrypted.
    fn send(&mut self, packet: &[u8]) -> Option<Vec<u8>> {
        match self.inner.check_sending(packet) {
            Ok(()) => Some(self.seal_anything(packet)),
            Err(_) => {
                self.not_sent += 1;
                None
            }
        }
    }

    /// The tunnel's receive path: decrypted, then checked; what is dropped is counted.
    fn receive(&mut self, datagram: &[u8]) -> Result<Vec<u8>, DropReason> {
        let mut buf = datagram.to_vec();
        let got = self
            .endpoint
            .decap(&mut buf)
            .and_then(|r| self.inner.check_received(&buf[r.clone()]).map(|()| r));
        match got {
            Ok(r) => Ok(buf[r].to_vec()),
            Err(reason) => {
                self.drops.count(reason);
                Err(reason)
            }
        }
    }
}

/// Both ends of one tunnel: a at `a`, b at `b`.
fn ends(suite: CipherSuite, a: IpAddr, b: IpAddr) -> (End, End) {
    let key = StaticKey::generate().unwrap();
    (
        End::new(suite, &key, KeyDirection::Normal, a, b),
        End::new(suite, &key, KeyDirection::Inverse, b, a),
    )
}

/// One packet a hostile a sends b, and the reason b must drop it for (None: delivered).
struct Attack {
    what: &'static str,
    packet: Vec<u8>,
    drop: Option<DropReason>,
}

fn attack(what: &'static str, packet: Vec<u8>, drop: Option<DropReason>) -> Attack {
    Attack { what, packet, drop }
}

/// What a hostile a sends b in an IPv4 tunnel.
fn attacks_v4() -> Vec<Attack> {
    let good = v4(A4, B4);
    let mut longer = good.clone();
    longer.push(0);
    let mut garbage = good.clone();
    garbage[0] = 0x00;
    let mut ihl_short = good.clone();
    ihl_short[0] = 0x44;
    let wrong = Some(DropReason::WrongInnerAddress);
    let bad = Some(DropReason::BadInnerHeader);
    vec![
        attack("the peer's own packet", good.clone(), None),
        attack("to another address of b's host", v4(A4, OTHER4), wrong),
        attack("to a network behind b", v4(A4, [203, 0, 113, 9]), wrong),
        attack("spoofing another source", v4(OTHER4, B4), wrong),
        attack("posing as b", v4(B4, B4), wrong),
        attack("b to a, reflected", v4(B4, A4), wrong),
        attack("IPv6 through an IPv4 tunnel", v6(A6, B6), wrong),
        attack("cut inside the fixed header", good[..19].to_vec(), bad),
        attack("cut after the header", good[..30].to_vec(), bad),
        attack("a byte more than its length", longer, bad),
        attack("header length below 20", ihl_short, bad),
        attack("version 0", garbage, bad),
        attack("empty", Vec::new(), bad),
        attack("the peer's own packet again", v4(A4, B4), None),
    ]
}

fn attacks_v6() -> Vec<Attack> {
    let good = v6(A6, B6);
    let mut longer = good.clone();
    longer.push(0);
    let mut version5 = good.clone();
    version5[0] = 0x50;
    let wrong = Some(DropReason::WrongInnerAddress);
    let bad = Some(DropReason::BadInnerHeader);
    vec![
        attack("the peer's own packet", good.clone(), None),
        attack("to another address of b's host", v6(A6, OTHER6), wrong),
        attack("to b's link-local address", v6(A6, "fe80::2"), wrong),
        attack("from a link-local address", v6("fe80::1", B6), wrong),
        attack("spoofing another source", v6(OTHER6, B6), wrong),
        attack("IPv4 through an IPv6 tunnel", v4(A4, B4), wrong),
        attack("cut inside the fixed header", good[..39].to_vec(), bad),
        attack("cut after the header", good[..50].to_vec(), bad),
        attack("a byte more than its length", longer, bad),
        attack("version 5", version5, bad),
        attack("the peer's own packet again", v6(A6, B6), None),
    ]
}

/// Every packet a hostile key holder sends is authenticated and decrypted by b, and b
/// delivers only the ones from a's inner address to its own; the rest is counted by reason.
fn a_key_holder_reaches_only_the_peers_inner_address(a: IpAddr, b: IpAddr, attacks: &[Attack]) {
    for suite in suites() {
        let (mut hostile, mut server) = ends(suite, a, b);
        let mut expected = DropCounters::default();
        for Attack { what, packet, drop } in attacks {
            let datagram = hostile.seal_anything(packet);
            match (server.receive(&datagram), drop) {
                (Ok(delivered), None) => assert_eq!(&delivered, packet, "{suite}: {what}"),
                (got, want) => {
                    assert_eq!(got.err(), *want, "{suite}: {what}");
                    expected.count(want.expect("a drop"));
                }
            }
        }
        assert_eq!(server.drops, expected, "{suite}");
        assert!(server.drops.wrong_inner_address > 0 && server.drops.bad_inner_header > 0);
        // Replies still go back: b's own packet to a passes both ends.
        let reply = server.send(&if a.is_ipv4() { v4(B4, A4) } else { v6(B6, A6) });
        assert!(hostile.receive(&reply.expect("b sends to a")).is_ok(), "{suite}");
    }
}

#[test]
fn a_key_holder_reaches_only_the_peers_inner_address_v4() {
    a_key_holder_reaches_only_the_peers_inner_address(A4.into(), B4.into(), &attacks_v4());
}

#[test]
fn a_key_holder_reaches_only_the_peers_inner_address_v6() {
    a_key_holder_reaches_only_the_peers_inner_address(ip(A6), ip(B6), &attacks_v6());
}

/// The honest end does not send what its peer would drop (a route someone pointed into
/// the tunnel, a router solicitation from the TUN device's link-local address), and sends
/// the rest, which the peer delivers.
#[test]
fn an_end_sends_only_to_the_peers_inner_address() {
    struct Case {
        a: IpAddr,
        b: IpAddr,
        good: Vec<u8>,
        refused: Vec<Vec<u8>>,
    }
    let cases = [
        Case {
            a: A4.into(),
            b: B4.into(),
            good: v4(A4, B4),
            refused: vec![
                v4(A4, OTHER4),
                v4(OTHER4, B4),
                v4(B4, A4),
                v6(A6, B6),
                vec![0x45; 19],
                Vec::new(),
            ],
        },
        Case {
            a: ip(A6),
            b: ip(B6),
            good: v6(A6, B6),
            refused: vec![
                v6(A6, OTHER6),
                v6("fe80::1", "ff02::2"),
                v6(B6, A6),
                v4(A4, B4),
                vec![0x60; 39],
            ],
        },
    ];
    for suite in suites() {
        for Case { a, b, good, refused } in &cases {
            let (mut client, mut server) = ends(suite, *a, *b);
            for p in refused {
                assert!(client.send(p).is_none(), "{suite}: sent {p:02x?}");
            }
            assert_eq!(client.not_sent, refused.len() as u64);
            let d = client.send(good).expect("sent");
            assert_eq!(&server.receive(&d).unwrap(), good, "{suite}");
            assert_eq!(server.drops.total(), 0, "{suite}");
        }
    }
}

/// Sending reads only the addresses: a TSO super-packet from TUN may carry a length field
/// the tunnel rewrites per segment.
#[test]
fn sending_does_not_check_a_super_packets_length() {
    let inner = InnerAddresses::new(A4.into(), B4.into()).unwrap();
    let mut big = v4(A4, B4);
    big.resize(3000, 0);
    assert_eq!(inner.check_sending(&big), Ok(()));
    assert_eq!(inner.check_received(&big), Err(DropReason::BadInnerHeader));
}

#[test]
fn inner_address_drops_are_counted_under_their_own_names() {
    let mut drops = DropCounters::default();
    drops.count(DropReason::WrongInnerAddress);
    drops.count(DropReason::WrongInnerAddress);
    drops.count(DropReason::BadInnerHeader);
    assert_eq!((drops.wrong_inner_address, drops.bad_inner_header), (2, 1));
    assert_eq!(drops.total(), 3);
    assert_eq!(DropReason::WrongInnerAddress.name(), "wrong_inner_address");
    assert_eq!(DropReason::BadInnerHeader.name(), "bad_inner_header");
    assert!(DropReason::ALL.contains(&DropReason::WrongInnerAddress));
    assert!(DropReason::ALL.contains(&DropReason::BadInnerHeader));
}
