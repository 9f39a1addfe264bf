//! What both namespace test binaries share: the capability check, the topology, the suites,
//! a crafted packet and its sealing, and the checks that nothing is left behind.
#![allow(dead_code)] // each binary uses its own part

use std::net::IpAddr;
use std::time::{Duration, Instant};

use model::{Addressing, CipherSuite, KeyBits};
use netns::{Namespace, Topology, TopologySpec};
use tunnel_proto::{Endpoint, HEADROOM, TAILROOM};

/// Root and a TUN device, or the test skips (fails under CI) saying which is missing.
pub fn capable(test: &str) -> bool {
    testcap::root(test) && testcap::tun(test)
}

pub fn topology() -> Topology {
    topology_of(Addressing::default())
}

pub fn topology_of(addressing: Addressing) -> Topology {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(Topology::create(&TopologySpec {
        run_id: netns::new_run_id(),
        mtu: 1500,
        addressing,
    }))
    .unwrap()
}

pub fn all_suites() -> Vec<CipherSuite> {
    let mut v = vec![CipherSuite::None];
    v.extend(CipherSuite::classic_six());
    v.push(CipherSuite::AesGcm { key: KeyBits::Aes128 });
    v.push(CipherSuite::AesGcm { key: KeyBits::Aes256 });
    v
}

/// True when `name` exists in `ns` (if_nametoindex from a thread inside it).
pub fn link_exists(ns: &Namespace, name: &str) -> bool {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a valid NUL-terminated string.
    ns.run(move || unsafe { libc::if_nametoindex(c.as_ptr()) } != 0)
        .unwrap()
}

/// This process's threads whose names start with `prefix` (the tunnel threads are named
/// after their TUN device).
pub fn threads_named_like(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .filter(|c| c.starts_with(prefix))
        .collect()
}

/// The threads named like `prefix` still listed after they were joined, given a second to
/// go: the kernel wakes a joiner when the thread lets go of its memory, a moment before it
/// reaps the task, so a joined thread can stay in /proc/self/task that long (CI, stop 34).
pub fn threads_left_after_join(prefix: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left = threads_named_like(prefix);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A minimal IPv4/UDP packet from a's inner address to b's inner address, port `port`.
pub fn ip_udp(topo: &Topology, port: u16, payload: &[u8]) -> Vec<u8> {
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

/// `payload` as `ep` seals it: one tunnel datagram.
pub fn seal(ep: &mut Endpoint, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + payload.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
    let r = ep.encap(&mut buf, payload.len()).unwrap();
    buf[r].to_vec()
}

/// The IPv4 plan's address (these tests build IPv4 packets by hand).
pub fn v4(ip: IpAddr) -> std::net::Ipv4Addr {
    match ip {
        IpAddr::V4(v) => v,
        IpAddr::V6(v) => panic!("{v} is not IPv4"),
    }
}
