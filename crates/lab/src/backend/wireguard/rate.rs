//! `setup-rate --backend wireguard-go`: peers a wireguard-go device takes per second over
//! its UAPI socket, and handshakes it completes per second. The device runs in end a's
//! namespace of this host; per size N it is given N peers (each with one /32 allowed-ips
//! entry, no endpoint: learnt from the handshake) in one `set` and, on a fresh device, one
//! `set` per peer. Then up to [`MAX_HANDSHAKES`] of the N peers handshake with it: in end
//! b's namespace, one thread plays all of them with boringtun's sans-IO noise (`Tunn`),
//! one UDP socket, the plan's window of initiations in flight. Each response is answered
//! with the keepalive that confirms the session to the device, and the device's own `get`
//! must then show a handshake for every one of them.
//!
//! The initiators and the device share this host's CPUs: the rate is what one host does
//! as both sides together, a lower bound of the device's.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use boringtun::noise::{Tunn, TunnResult};
use boringtun::x25519::{PublicKey as NoisePublic, StaticSecret};
use model::setup_rate::{per_second, PeerRates, SetupRatePlan};
use netns::Topology;
use wgnl::{AllowedIp, KeyPair};

use super::go::GoProcess;
use super::{ifname, uapi, PORT};
use crate::backend::site::Side;
use crate::error::{LabError, LabResult};

/// The most initiators a size's handshakes use (each a `Tunn` in memory).
pub const MAX_HANDSHAKES: usize = 10_000;
/// A set of N peers: wireguard-go computes a Diffie-Hellman per peer it adds.
const SET_TIMEOUT: Duration = Duration::from_secs(120);
/// An initiation not answered within this is sent again (wireguard-go drops what its
/// queue cannot hold).
const RESEND_AFTER: Duration = Duration::from_secs(1);
/// The first of the peers' allowed-ips addresses: 10.128.0.0/9 holds every size.
const ALLOWED_FIRST: u32 = u32::from_be_bytes([10, 128, 0, 0]);

const MSG_RESPONSE: u8 = 2;
const MSG_COOKIE: u8 = 3;

/// What the run found out besides the rates.
pub struct PeerRun {
    pub rates: Vec<PeerRates>,
    /// wireguard-go's implementation line (its Debian version where the lab installed it).
    pub implementation: String,
    /// Cookie replies seen (wireguard-go under load) and initiations sent again, all sizes.
    pub cookies: u64,
    pub resent: u64,
}

/// Refuses, before anything is created, where wireguard-go or /dev/net/tun is missing.
pub fn preflight() -> LabResult<()> {
    super::go::preflight_device()
}

/// Measures every size of `plan` on a device in end a of `topology`, its initiators in end
/// b. Stops within a fraction of a second when SIGINT or SIGTERM arrived.
pub fn measure(
    plan: &SetupRatePlan,
    topology: &Topology,
    rt: &tokio::runtime::Runtime,
) -> LabResult<PeerRun> {
    let implementation = super::go::GoBinary::find()
        .map(|p| p.implementation())
        .unwrap_or_else(|| "wireguard-go".into());
    let mut run = PeerRun {
        rates: Vec::new(),
        implementation,
        cookies: 0,
        resent: 0,
    };
    // Each phase's device has a name of its own: a device stopped a moment ago may still
    // hold its name while the kernel removes its TUN.
    let (first, second) = (ifname(Side::A), ifname(Side::B));
    for size in &plan.sizes {
        let n = size.0 as usize;
        let device_key = KeyPair::generate().map_err(LabError::failed)?;
        let peers: Vec<KeyPair> = (0..n)
            .map(|_| KeyPair::generate().map_err(LabError::failed))
            .collect::<LabResult<_>>()?;
        let entries: Vec<(wgnl::PublicKey, AllowedIp)> = peers
            .iter()
            .enumerate()
            .map(|(i, k)| (k.public, allowed_ip(i)))
            .collect();
        let what = format!("wireguard-go ({first}, {n} peers)");

        // All N in one set, then their handshakes on the same device.
        let device = fresh_device(&topology.a, &first, &device_key, &what)?;
        let before = procstat::resident_bytes(device.pid());
        eprintln!("ipsec-lab: adding {n} peers to wireguard-go in one set");
        let started = Instant::now();
        uapi::set(
            device.socket(),
            &wgnl::uapi::add_peers_request(&entries),
            &what,
            SET_TIMEOUT,
        )?;
        let added_per_s = per_second(n, started.elapsed().as_secs_f64());
        let after = procstat::resident_bytes(device.pid());
        stopped()?;
        rt.block_on(Topology::set_link_up(&topology.a, &first))?;
        let h = n.min(MAX_HANDSHAKES);
        eprintln!("ipsec-lab: {h} handshakes, {} in flight", plan.window);
        let server = SocketAddr::new(topology.addressing.outer_a, PORT);
        let device_public = NoisePublic::from(device_key.public.0);
        let initiators: Vec<StaticSecret> = peers[..h]
            .iter()
            .map(|k| StaticSecret::from(*k.private()))
            .collect();
        let window = plan.window as usize;
        let flood = topology
            .b
            .run(move || handshakes(initiators, device_public, server, window))??;
        run.cookies += flood.cookies;
        run.resent += flood.resent;
        confirmed(device.socket(), &peers[..h], &what)?;
        drop(device);

        // One set per peer, on a fresh device.
        let what = format!("wireguard-go ({second}, {n} peers one by one)");
        let device = fresh_device(&topology.a, &second, &device_key, &what)?;
        eprintln!("ipsec-lab: adding {n} peers to wireguard-go one by one");
        let started = Instant::now();
        for entry in &entries {
            stopped()?;
            let one = wgnl::uapi::add_peers_request(std::slice::from_ref(entry));
            uapi::set(device.socket(), &one, &what, SET_TIMEOUT)?;
        }
        let added_one_by_one_per_s = per_second(n, started.elapsed().as_secs_f64());
        drop(device);

        run.rates.push(PeerRates {
            size: *size,
            added_per_s,
            added_one_by_one_per_s,
            handshakes: h as u32,
            handshakes_per_s: flood.per_s,
            process_bytes_per_peer: match (before, after) {
                (Some(b), Some(a)) if a > b => Some((a - b) as f64 / n as f64),
                _ => None,
            },
        });
    }
    Ok(run)
}

/// A new wireguard-go device `name` in `ns` with `key` and the port, no peer yet.
fn fresh_device(ns: &netns::Namespace, name: &str, key: &KeyPair, what: &str) -> LabResult<GoProcess> {
    let device = GoProcess::spawn(ns, name, what)?;
    uapi::set(
        device.socket(),
        &wgnl::uapi::device_request(key, PORT),
        what,
        SET_TIMEOUT,
    )?;
    Ok(device)
}

/// The note every wireguard-go rate report carries.
pub fn note(plan: &SetupRatePlan, run: &PeerRun) -> String {
    format!(
        "handshakes: up to {MAX_HANDSHAKES} of the N peers, initiated by boringtun's noise from one address, \
         {} in flight, in a namespace of this host sharing its CPUs with the device; {} cookie replies, {} \
         initiations sent again",
        plan.window, run.cookies, run.resent
    )
}

/// The i-th peer's allowed-ips entry.
fn allowed_ip(i: usize) -> AllowedIp {
    AllowedIp {
        addr: IpAddr::V4(Ipv4Addr::from(ALLOWED_FIRST + i as u32)),
        prefix_len: 32,
    }
}

fn stopped() -> LabResult<()> {
    match crate::signal::any_requested() {
        true => Err(LabError::interrupted()),
        false => Ok(()),
    }
}

/// What the initiators saw.
struct Flood {
    per_s: f64,
    cookies: u64,
    resent: u64,
}

/// One handshake per key in `keys` with the device at `server`, at most `window` waiting
/// for their response; handshakes per second from the first initiation to the last
/// response. Runs in the initiators' namespace (blocking: one thread, one socket).
fn handshakes(
    keys: Vec<StaticSecret>,
    device: NoisePublic,
    server: SocketAddr,
    window: usize,
) -> LabResult<Flood> {
    let io = |what: &str, e: std::io::Error| {
        LabError::failed(anyhow::anyhow!("handshake initiators: {what}: {e}"))
    };
    let socket =
        UdpSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)).map_err(|e| io("bind", e))?;
    socket.connect(server).map_err(|e| io("connect", e))?;
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| io("timeout", e))?;
    let n = keys.len();
    let mut tunnels: Vec<Tunn> = keys
        .into_iter()
        .enumerate()
        .map(|(i, key)| Tunn::new(key, device, None, None, i as u32, None))
        .collect();
    let mut done = vec![false; n];
    // Initiations waiting for their response, oldest first: (index, sent at).
    let mut waiting: VecDeque<(usize, Instant)> = VecDeque::new();
    let (mut next, mut completed, mut cookies, mut resent) = (0, 0, 0u64, 0u64);
    let mut out = vec![0u8; 2048];
    let mut packet = vec![0u8; 2048];
    // Far beyond what a handshake takes, even resent: 10 ms each and 30 s more.
    let deadline = Duration::from_secs(30) + Duration::from_millis(10) * n as u32;
    let started = Instant::now();
    let send = |tunn: &mut Tunn, out: &mut [u8], force: bool| -> LabResult<()> {
        match tunn.format_handshake_initiation(out, force) {
            TunnResult::WriteToNetwork(p) => {
                // A full socket buffer drops it; the resend timer sends it again.
                let _ = socket.send(p);
                Ok(())
            }
            TunnResult::Err(e) => Err(LabError::failed(anyhow::anyhow!("handshake initiation: {e:?}"))),
            _ => Ok(()),
        }
    };
    while completed < n {
        stopped()?;
        while next < n && waiting.len() < window {
            send(&mut tunnels[next], &mut out, false)?;
            waiting.push_back((next, Instant::now()));
            next += 1;
        }
        match socket.recv(&mut packet) {
            Ok(len) => {
                let datagram = &packet[..len];
                let index = match (datagram.first(), len) {
                    (Some(&MSG_RESPONSE), 92) => {
                        u32::from_le_bytes(datagram[8..12].try_into().unwrap_or_default())
                    }
                    (Some(&MSG_COOKIE), 64) => {
                        u32::from_le_bytes(datagram[4..8].try_into().unwrap_or_default())
                    }
                    _ => continue,
                } as usize
                    >> 8;
                let Some(tunn) = tunnels.get_mut(index) else {
                    continue;
                };
                if done[index] {
                    continue;
                }
                match tunn.decapsulate(Some(server.ip()), datagram, &mut out) {
                    // The response, answered with the keepalive that confirms the session.
                    TunnResult::WriteToNetwork(keepalive) => {
                        let _ = socket.send(keepalive);
                        done[index] = true;
                        completed += 1;
                    }
                    // A cookie reply: the next initiation carries it.
                    TunnResult::Done if datagram[0] == MSG_COOKIE => {
                        cookies += 1;
                        send(tunn, &mut out, true)?;
                    }
                    _ => {}
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(io("receive", e)),
        }
        // The answered leave the queue; the unanswered for too long are sent again.
        while let Some(&(i, at)) = waiting.front() {
            if done[i] {
                waiting.pop_front();
            } else if at.elapsed() > RESEND_AFTER {
                waiting.pop_front();
                send(&mut tunnels[i], &mut out, true)?;
                waiting.push_back((i, Instant::now()));
                resent += 1;
            } else {
                break;
            }
        }
        if started.elapsed() > deadline {
            return Err(LabError::failed(anyhow::anyhow!(
                "{completed} of {n} handshakes done after {:.1} s ({cookies} cookie replies, {resent} sent again)",
                started.elapsed().as_secs_f64()
            )));
        }
    }
    Ok(Flood {
        per_s: per_second(n, started.elapsed().as_secs_f64()),
        cookies,
        resent,
    })
}

/// Waits (at most 10 s) until the device reports a handshake with every peer in `peers`
/// (it marks one done when the keepalive after its response arrives).
fn confirmed(socket: &std::path::Path, peers: &[KeyPair], what: &str) -> LabResult<()> {
    let wanted: std::collections::HashSet<[u8; 32]> = peers.iter().map(|k| k.public.0).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = uapi::exchange(socket, wgnl::uapi::GET_REQUEST, what, SET_TIMEOUT)?;
        let listed = wgnl::uapi::peers(&reply)
            .map_err(|e| LabError::failed(anyhow::anyhow!("{what}: UAPI get: {e}")))?;
        let shook = listed
            .iter()
            .filter(|p| p.last_handshake.is_some() && wanted.contains(&p.public_key.0))
            .count();
        if shook == wanted.len() {
            return Ok(());
        }
        stopped()?;
        if Instant::now() > deadline {
            return Err(LabError::failed(anyhow::anyhow!(
                "{what}: the initiators completed {} handshakes, the device reports {shook}",
                wanted.len()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
