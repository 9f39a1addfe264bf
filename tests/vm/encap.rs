//! ESP in UDP (`--encap udp`, RFC 3948) on a stock kernel, checked in the guest (tests/vm/main.rs
//! boots it). There one xfrm run with `--encap udp` moves two verified payloads; held after
//! the first (tests/common/hold.rs), `ip xfrm state` in its own namespace shows both SAs with
//! `encap type espinudp sport 4500 dport 4500` and a packet socket there starts watching
//! the veth, so it sees the second payload and the iperf3 runs whole: the ESP travels as UDP
//! 4500 carrying the run's SPIs (no bare ESP, no plaintext data), the report states the
//! encapsulation and
//! its 8 bytes, and nothing is left afterwards.
//!
//! Bad input (`--encap` with a backend other than xfrm, bad ports) is checked on the host.

use crate::common;

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::hold::{iperf3_or_skip, Hold};
use common::*;

/// Boot (about 30 s under TCG) and one small run.
const NATT: u16 = 4500;

#[test]
fn encap_bad_input_exits_2_and_creates_nothing() {
    assert_usage_errors(&[
        (
            &["run", "--backend", "userspace", "--encap", "udp"][..],
            "needs the xfrm backend",
        ),
        (
            &["run", "--backend", "plain", "--encap", "udp"][..],
            "needs the xfrm backend",
        ),
        (
            &["run", "--backend", "openvpn", "--encap", "udp"][..],
            "needs the xfrm backend",
        ),
        (&["run", "--encap", "tcp"][..], "use udp"),
        (&["run", "--encap", "udp", "--encap-port", "0"][..], "1 to 65535"),
        (&["run", "--encap", "udp", "--encap-port", "70000"][..], "70000"),
        (
            &[
                "run",
                "--encap",
                "udp",
                "--encap-port",
                "500",
                "--peer",
                "192.0.2.1",
            ][..],
            "1024 or above",
        ),
        (
            &["matrix", "--backends", "userspace", "--encap", "udp"][..],
            "include xfrm",
        ),
    ]);
}

/// What the packet socket saw on the run's namespace's links, outer IPv4 only.
#[derive(Debug, Default)]
struct Seen {
    /// UDP to or from the encap port whose payload starts with a non-zero SPI (RFC 3948).
    esp_in_udp: u64,
    spis: BTreeSet<u32>,
    /// Bare ESP (IP protocol 50): must be none with encapsulation.
    bare_esp: u64,
    /// TCP on the data port leaving the namespace outside ESP: must be none.
    plaintext_data_out: u64,
    /// TCP on the data port arriving in clear: the kernel re-injects what it decapsulated
    /// in tunnel mode on the same link, so the packet socket sees it after the ESP-in-UDP.
    decapsulated_in: u64,
}

/// An `AF_PACKET` socket for every frame of the calling thread's namespace.
fn packet_socket() -> std::io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: plain socket(2); the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    let rcvbuf: libc::c_int = 8 << 20;
    // SAFETY: valid fd; option values of the sizes passed.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    Ok(fd)
}

/// Sorts one Ethernet frame into `seen`.
fn classify(frame: &[u8], outgoing: bool, seen: &mut Seen, data_port: u16) {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] {
        return;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip.len() < ihl + 8 {
        return;
    }
    let l4 = &ip[ihl..];
    let ports = (
        u16::from_be_bytes([l4[0], l4[1]]),
        u16::from_be_bytes([l4[2], l4[3]]),
    );
    match ip[9] {
        50 => seen.bare_esp += 1,
        17 if (ports.0 == NATT || ports.1 == NATT) && l4.len() >= 12 => {
            let spi = u32::from_be_bytes([l4[8], l4[9], l4[10], l4[11]]);
            if spi != 0 {
                seen.esp_in_udp += 1;
                seen.spis.insert(spi);
            }
        }
        6 if ports.0 == data_port || ports.1 == data_port => match outgoing {
            true => seen.plaintext_data_out += 1,
            false => seen.decapsulated_in += 1,
        },
        _ => {}
    }
}

/// Enters `ns`, says so on `ready` once its packet socket is open, and counts frames until
/// `stop`.
fn capture(ns: String, ready: std::sync::mpsc::Sender<()>, stop: Arc<AtomicBool>, data_port: u16) -> Seen {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    let fd = packet_socket().expect("AF_PACKET socket");
    ready.send(()).unwrap();
    let mut seen = Seen::default();
    let mut buf = vec![0u8; 65536];
    loop {
        // SAFETY: zeroed sockaddr_ll is valid.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut from_len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: valid fd, buffer and address of the given lengths.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_ll).cast(),
                &mut from_len,
            )
        };
        if n < 0 {
            if stop.load(Ordering::Relaxed) {
                break; // drained: the timeout expired after the run ended
            }
            continue;
        }
        let outgoing = from.sll_pkttype == libc::PACKET_OUTGOING;
        classify(&buf[..n as usize], outgoing, &mut seen, data_port);
    }
    seen
}

/// The `encap` lines of `ip xfrm state` in `ns` (the listing also holds the keys).
fn encap_lines(ns: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-n", ns, "xfrm", "state", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("encap "))
        .map(String::from)
        .collect()
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_encap_checks() {
    if std::env::var_os(common::IN_VM).is_none() {
        eprintln!(
            "skipped: guest_encap_checks only runs inside the VM started by the in_vm_ tests of main.rs"
        );
        return;
    }
    if !iperf3_or_skip("encap::guest_encap_checks") {
        return;
    }
    let out = PathBuf::from(std::env::var("IPSEC_LAB_VM_OUT").unwrap());
    let json = out.join("encap.json");
    let data_port = 5201;
    // Held after its first payload, the run waits while the SAs are read and the packet
    // socket opens: a watcher that raced a 2 MB run for its namespace could miss it.
    let hold = Hold::new();
    let mut run = hold
        .lab()
        .args(["run", "--backend", "xfrm", "--encap", "udp", "--bytes", "2MB"])
        .args(["--repeat", "2", "--with-iperf3"])
        .args(["--port", &data_port.to_string(), "--no-progress", "--json"])
        .arg(&json)
        // The line rate after the tunnel is plain TCP on the same port, by design; the
        // capture here is about the tunnel's packets only.
        .arg("--no-ceiling")
        .spawn()
        .unwrap();
    let ns = hold.wait(&mut run, Duration::from_secs(120));
    let encap_lines = encap_lines(&ns);
    let stop = Arc::new(AtomicBool::new(false));
    let (ready, opened) = std::sync::mpsc::channel();
    let capturing = {
        let stop = stop.clone();
        std::thread::spawn(move || capture(ns, ready, stop, data_port))
    };
    opened
        .recv_timeout(Duration::from_secs(30))
        .expect("the packet socket opened in the run's namespace");
    hold.release();
    let status = run.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let seen = capturing.join().unwrap();
    assert!(status.success(), "run --encap udp: {status}");
    eprintln!("guest: packet socket saw {seen:?}");

    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        report["plan"]["encap"],
        serde_json::json!({"kind": "esp-in-udp", "port": 4500})
    );
    // Verified: the receiver compared every byte with the seeded stream.
    let transfer = &report["transfers"][0];
    assert_eq!(transfer["bytes"], 2_000_000, "{transfer}");
    let x = &report["backend_details"]["xfrm"];
    assert_eq!(x["encap"], "ESP in UDP port 4500", "{x}");
    // AES-256-CBC + HMAC-SHA256 tunnel: 20 outer IP + 8 ESP + 16 IV + pad + 16 ICV, + 8 UDP.
    assert_eq!(x["esp_overhead_bytes_per_packet"], 76, "{x}");
    let report_spis: BTreeSet<u32> = x["sas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sa| u32::from_str_radix(sa["spi"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
        .collect();
    let sent = &x["sas"][0];
    assert!(sent["packets"].as_u64().unwrap() > 500, "{sent}");
    assert!(x["sas"][1]["packets"].as_u64().unwrap() > 0, "{x}");

    assert!(seen.esp_in_udp > 500, "{seen:?}");
    assert_eq!(seen.spis, report_spis, "ESP-in-UDP SPIs vs the report's SAs");
    assert_eq!(seen.bare_esp, 0, "ESP outside UDP: {seen:?}");
    assert_eq!(seen.plaintext_data_out, 0, "data sent outside ESP: {seen:?}");
    assert_eq!(
        encap_lines, ["encap type espinudp sport 4500 dport 4500 addr 0.0.0.0"; 2],
        "ip xfrm state"
    );

    assert!(
        lab_namespaces().is_empty(),
        "namespaces left: {:?}",
        lab_namespaces()
    );
    let states = Command::new("ip")
        .args(["xfrm", "state", "list"])
        .output()
        .unwrap();
    assert!(states.stdout.is_empty(), "SAs left in the root namespace");
    eprintln!(
        "guest: encap ok: {} MB/s with ESP in UDP, {} ESP-in-UDP frames seen",
        report["mb_per_s"]["median"], seen.esp_in_udp
    );
}
