//! `udpbatch` against `quinn-udp` in one run (issue 26): which batched UDP layer the
//! generator and the tunnel should share.
//!
//! Over loopback, for 64- and 1400-byte IPv4 packets (36 and 1372 bytes of UDP payload):
//!
//! * send paths, each for SECONDS as fast as they go, the same receiver counting:
//!   `udpbatch` with `sendmmsg` (the UDP workload's path: GSO off), `quinn-udp` one
//!   datagram per `sendmsg` (its path without GSO), and both with UDP GSO (64 segments a
//!   call: the tunnel's path);
//! * receive paths, the same `sendmmsg` sender feeding `udpbatch`'s `recvmmsg` and then
//!   `quinn-udp`'s `recv`, each with 64 buffers, GRO off (the UDP workload's receiver).
//!
//! Prints datagrams a second and CPU nanoseconds per datagram of the side compared, then
//! each ratio. Loopback, not veth: no namespaces needed, and both sides share the machine as
//! they do in a run.
//!
//! ```sh
//! cargo run --release -p udpbatch --example vs_quinn_udp [SECONDS]
//! ```

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use procstat::CpuTime;
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use udpbatch::{Received, Udp, GSO_MAX_BYTES};

const BATCH: usize = 64;
const BUFFER: usize = 8 << 20;

/// What one side did: datagrams, and its thread's CPU time for them.
#[derive(Debug, Clone, Copy)]
struct Side {
    datagrams: u64,
    seconds: f64,
    cpu_s: f64,
}

impl Side {
    fn pps(&self) -> f64 {
        self.datagrams as f64 / self.seconds
    }

    fn ns_per_datagram(&self) -> f64 {
        self.cpu_s * 1e9 / self.datagrams.max(1) as f64
    }
}

/// Sleeps until `fd` has something to read (10 ms at most): an idle receiver costs nothing,
/// so its CPU per datagram is its work, not its spinning.
fn wait_readable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on this frame.
    unsafe { libc::poll(&mut p, 1, 10) };
}

fn cpu_s(since: CpuTime) -> f64 {
    let t = CpuTime::this_thread().since(since);
    t.user_s + t.system_s
}

fn pair() -> (SocketAddr, SocketAddr) {
    let free = || UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    (free(), free())
}

/// A std socket bound to `local` and connected to `peer`, with large buffers.
fn std_socket(local: SocketAddr, peer: SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind(local).unwrap();
    s.connect(peer).unwrap();
    let sock = socket2::SockRef::from(&s);
    sock.set_recv_buffer_size(BUFFER).unwrap();
    sock.set_send_buffer_size(BUFFER).unwrap();
    s
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sender {
    Sendmmsg,
    QuinnSendmsg,
    UdpbatchGso,
    QuinnGso,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Receiver {
    Recvmmsg,
    QuinnRecv,
}

/// Runs `sender` against `receiver` for `seconds`: what each side did.
fn measure(sender: Sender, receiver: Receiver, payload: usize, seconds: f64) -> (Side, Side) {
    let (tx_addr, rx_addr) = pair();
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let rx_ready = Arc::new(AtomicBool::new(false));
    let rx = {
        let (stop, received, ready) = (stop.clone(), received.clone(), rx_ready.clone());
        std::thread::spawn(move || receive(receiver, rx_addr, tx_addr, &stop, &received, &ready))
    };
    while !rx_ready.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let sent = send(sender, tx_addr, rx_addr, payload, seconds);
    // Let the receiver drain what is queued, then stop it.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Release);
    let receiving = rx.join().unwrap();
    (sent, receiving)
}

fn send(how: Sender, local: SocketAddr, peer: SocketAddr, payload: usize, seconds: f64) -> Side {
    let datagram = vec![0x5au8; payload];
    let batch: Vec<&[u8]> = vec![&datagram[..]; BATCH];
    // A GSO send holds at most 64 KiB: 47 segments of 1372 bytes, 64 of 36.
    let segments = BATCH.min(GSO_MAX_BYTES / payload);
    let joined = datagram.repeat(segments);
    let (start, cpu) = (Instant::now(), CpuTime::this_thread());
    let limit = Duration::from_secs_f64(seconds);
    let mut datagrams = 0u64;
    match how {
        Sender::Sendmmsg | Sender::UdpbatchGso => {
            let mut udp = Udp::bind(local, peer, BUFFER).unwrap();
            if how == Sender::UdpbatchGso {
                assert!(udp.enable_offload(), "this kernel has no UDP GSO");
            }
            while start.elapsed() < limit {
                let calls = udp.send_batch(&batch);
                datagrams += (BATCH as u64).saturating_sub(calls.refused);
            }
        }
        Sender::QuinnSendmsg | Sender::QuinnGso => {
            let socket = std_socket(local, peer);
            let state = UdpSocketState::new((&socket).into()).unwrap();
            let gso = how == Sender::QuinnGso;
            if gso {
                assert!(state.max_gso_segments() >= BATCH, "quinn-udp sees no GSO here");
            }
            while start.elapsed() < limit {
                if gso {
                    let t = Transmit {
                        destination: peer,
                        ecn: None,
                        contents: &joined,
                        segment_size: Some(payload),
                        src_ip: None,
                    };
                    if state.try_send((&socket).into(), &t).is_ok() {
                        datagrams += segments as u64;
                    }
                } else {
                    for d in &batch {
                        let t = Transmit {
                            destination: peer,
                            ecn: None,
                            contents: d,
                            segment_size: None,
                            src_ip: None,
                        };
                        if state.try_send((&socket).into(), &t).is_ok() {
                            datagrams += 1;
                        }
                    }
                }
            }
        }
    }
    Side {
        datagrams,
        seconds: start.elapsed().as_secs_f64(),
        cpu_s: cpu_s(cpu),
    }
}

fn receive(
    how: Receiver,
    local: SocketAddr,
    peer: SocketAddr,
    stop: &AtomicBool,
    count: &AtomicU64,
    ready: &AtomicBool,
) -> Side {
    let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; 2048]; BATCH];
    let mut datagrams = 0u64;
    let (mut first, mut cpu) = (None, CpuTime::this_thread());
    let mut last = Instant::now();
    match how {
        Receiver::Recvmmsg => {
            let udp = Udp::bind(local, peer, BUFFER).unwrap();
            let mut out = vec![Received::default(); BATCH];
            ready.store(true, Ordering::Release);
            while !stop.load(Ordering::Acquire) {
                let n = udp.recv_batch(&mut bufs, &mut out).unwrap();
                if n == 0 {
                    wait_readable(udp.as_raw_fd());
                    continue;
                }
                if first.is_none() {
                    (first, cpu) = (Some(Instant::now()), CpuTime::this_thread());
                }
                datagrams += out[..n].iter().map(|r| r.datagrams().count() as u64).sum::<u64>();
                last = Instant::now();
            }
        }
        Receiver::QuinnRecv => {
            let socket = std_socket(local, peer);
            socket.set_nonblocking(true).unwrap();
            let state = UdpSocketState::new((&socket).into()).unwrap();
            let mut meta = vec![RecvMeta::default(); BATCH];
            ready.store(true, Ordering::Release);
            while !stop.load(Ordering::Acquire) {
                let mut slices: Vec<IoSliceMut> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
                let n = match state.recv((&socket).into(), &mut slices, &mut meta) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        wait_readable(socket.as_raw_fd());
                        continue;
                    }
                    Err(e) => panic!("quinn-udp recv: {e}"),
                };
                if first.is_none() {
                    (first, cpu) = (Some(Instant::now()), CpuTime::this_thread());
                }
                datagrams += meta[..n]
                    .iter()
                    .map(|m| (m.len / m.stride.max(1)) as u64)
                    .sum::<u64>();
                last = Instant::now();
            }
        }
    }
    count.store(datagrams, Ordering::Release);
    Side {
        datagrams,
        seconds: first.map_or(1.0, |f| last.duration_since(f).as_secs_f64().max(1e-9)),
        cpu_s: cpu_s(cpu),
    }
}

/// `a / b` as "1.23x", or why not.
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.2}x", a / b)
    } else {
        "n/a (nothing measured)".into()
    }
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SECONDS"))
        .unwrap_or(2.0);
    println!("udpbatch vs quinn-udp over loopback, {seconds} s each; pps and CPU ns per datagram of the side compared");
    for (packet, payload) in [(64, 36), (1400, 1372)] {
        println!("\n{packet}-byte packets ({payload} B of UDP payload)");
        let line = |label: &str, s: &Side, r: &Side| {
            println!(
                "  {label:<34} sent {:>10.0} pps, {:>6.0} ns/datagram; received {:>10.0} pps",
                s.pps(),
                s.ns_per_datagram(),
                r.pps()
            )
        };
        let mut sends = Vec::new();
        for (label, how) in [
            ("send: udpbatch sendmmsg", Sender::Sendmmsg),
            ("send: quinn-udp sendmsg", Sender::QuinnSendmsg),
            ("send: udpbatch GSO (64 KiB a call)", Sender::UdpbatchGso),
            ("send: quinn-udp GSO (64 KiB a call)", Sender::QuinnGso),
        ] {
            let (s, r) = measure(how, Receiver::Recvmmsg, payload, seconds);
            line(label, &s, &r);
            sends.push(s);
        }
        let mut receives = Vec::new();
        for (label, how) in [
            ("receive: udpbatch recvmmsg", Receiver::Recvmmsg),
            ("receive: quinn-udp recv", Receiver::QuinnRecv),
        ] {
            let (s, r) = measure(Sender::Sendmmsg, how, payload, seconds);
            println!(
                "  {label:<34} received {:>10.0} pps, {:>6.0} ns/datagram (sender {:.0} pps)",
                r.pps(),
                r.ns_per_datagram(),
                s.pps()
            );
            receives.push(r);
        }
        println!(
            "  udpbatch/quinn-udp: send without GSO {} pps, with GSO {} pps; receive {} pps, quinn-udp's CPU per datagram {} udpbatch's",
            ratio(sends[0].pps(), sends[1].pps()),
            ratio(sends[2].pps(), sends[3].pps()),
            ratio(receives[0].pps(), receives[1].pps()),
            ratio(receives[1].ns_per_datagram(), receives[0].ns_per_datagram()),
        );
    }
}
