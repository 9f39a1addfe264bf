//! The lab's own userspace tunnel (OpenVPN-style): one thread per end (pinned where there are
//! cores to spare) moves every packet between a TUN device and a UDP socket on the veth,
//! encrypting with the `--crypto` implementation. The payload flows between the inner
//! addresses (198.19.0.x) through it, and only between them: each end delivers decrypted
//! packets only from the peer's inner address to its own (`drops.wrong_inner_address`,
//! `drops.bad_inner_header`) and sends only to the peer's (`errors.not_to_peer`). With
//! `--tunnel-threads N` each end has N threads, one per queue of a multi-queue TUN device,
//! queue i on UDP port 1194 + i with its own packet-id space (`tunnel::MultiQueue`); the
//! kernel spreads the flows over the queues.
//!
//! `--rekey-every` ([`UserspaceRekey`]): a fresh key installed as the next key epoch on both
//! ends' threads, then sent with, the old epoch retired [`crate::rekey::GRACE`] later; each end's
//! `key_switches` counts the epochs it went through.
//!
//! Evidence (`backend_details.userspace`, [`UserspaceEvidence`]): `suite`, `implementation` (`choice`,
//! `library`, `hardware_aes`, `label`), `inner_mtu`, `batching` (offload, gso or mmsg, as
//! used), per end (`a` encrypts the payload, `b` decrypts it) `cpu` (`user_s`, `system_s`,
//! `percent_of_core` over the thread's life), `pinned_cpu` (null: not pinned), `wall_s`,
//! `packets_per_s` (both directions, over the thread's life), `sent`/`delivered` (`packets`,
//! `bytes` of payload), `datagrams_in`, `drops` by reason, `errors`, `send_calls`,
//! `recv_calls`, `recv_buffers`, `tun_reads`, `tun_writes`, `time` (where the thread's wall
//! time went, phase by phase, and how long it waited for a CPU) (with N threads: the queues' sums, CPU added, and
//! `queues`, the same per thread with its `queue` number, and `steering`); and `efficiency`: the encrypting thread's payload
//! MB per CPU-second beside the same implementation's single-core speed on 1400-byte packets,
//! measured in this process after the transfers, also per CPU-second of the thread that
//! measured it (`crypto_wall_mb_per_s` and `crypto_cpu_share` give the wall-clock figure and
//! the share of a core it had).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use control::KeyMaterial;
use crypto::{AeadAlgorithm, Implementation};
use model::evidence::{
    CryptoReference, Efficiency, Encrypting, TunnelEnd, UserspaceEndEvidence, UserspaceEvidence,
};
use model::{CipherSuite, Hmac, RunPlan};
use procstat::CpuTime;
use tunnel::{inner_mtu_over, Batching, KeyControl, MultiQueue, TunnelConfig, TunnelStats};
use tunnel_proto::{DropReason, Endpoint, KeyDirection, StaticKey, STATIC_KEY_LEN};

use super::site::{Side, Site};
use crate::error::{LabError, LabResult};
use crate::rekey::Rekey;

/// UDP port of the tunnel on both outer addresses (OpenVPN's registered port).
pub const TUNNEL_PORT: u16 = 1194;
/// How long the in-run crypto reference measurement runs.
const SPEED_SAMPLE: Duration = Duration::from_millis(1000);
const PACKET_BYTES: usize = 1400;

/// Refuses, before anything is created, what cannot work here: no TUN device, or a
/// `--crypto` choice this process cannot honour. For `--crypto soft` this restarts the
/// process with hardware AES masked (see `crypto::soft`), before any namespace exists.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err(LabError::capability(anyhow::anyhow!(
            "no /dev/net/tun: load the tun module (`modprobe tun`) to use --backend userspace"
        )));
    }
    crypto::soft::reexec_if_needed(plan.crypto()).map_err(LabError::capability)?;
    let imp = implementation(plan)?;
    crypto::self_test(&imp).map_err(LabError::failed)?;
    Ok(())
}

pub fn implementation(plan: &RunPlan) -> LabResult<Implementation> {
    Implementation::new(plan.crypto()).map_err(|e| match (e, crypto::libcrypto::load_error()) {
        // The loader's own words name the file that was tried and why it failed.
        (crypto::CryptoError::LibraryMissing { .. }, Some(why)) => {
            LabError::capability(anyhow::anyhow!("--crypto libcrypto: {why}"))
        }
        (e, _) => LabError::capability(e),
    })
}

/// A run's tunnel key: fresh from the OS RNG.
pub fn generate_key() -> LabResult<KeyMaterial> {
    KeyMaterial::random(STATIC_KEY_LEN).map_err(LabError::failed)
}

/// One end of the tunnel: its threads, until [`UserspaceEnd::finish`] stops them.
pub struct UserspaceEnd {
    tunnel: Option<MultiQueue>,
}

impl UserspaceEnd {
    /// Starts the end at `site`: end `A` (key direction 0) at the inner address a, end `B`
    /// (direction 1) at b; the UDP socket runs between the two outer addresses.
    /// `key`: the run's static key.
    pub fn start(plan: &RunPlan, key: &KeyMaterial, site: &Site<'_>) -> LabResult<UserspaceEnd> {
        let array: [u8; STATIC_KEY_LEN] = key
            .expose()
            .try_into()
            .map_err(|_| LabError::usage(anyhow::anyhow!("the tunnel key must be {STATIC_KEY_LEN} bytes")))?;
        let key = StaticKey::from_bytes(array);
        let implementation = implementation(plan)?;
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let ad = plan.link().addressing;
        let (inner, peer_inner, dir, first_cpu) = match site.side {
            Side::A => (ad.inner_a, ad.inner_b, KeyDirection::Normal, 0),
            Side::B => (ad.inner_b, ad.inner_a, KeyDirection::Inverse, 1),
        };
        let threads = usize::from(plan.tunnel_threads().max(1));
        let (local, peer) = outer_pair(site.hosts.of(site.side), site.hosts.of(site.side.other()))?;
        let config = TunnelConfig {
            tun_name: format!("ipl-tun-{}", site.side.name()),
            local: SocketAddr::new(local, TUNNEL_PORT),
            peer: SocketAddr::new(peer, TUNNEL_PORT),
            inner,
            prefix_len: ad.prefix_len,
            // The end delivers only the peer's packets to it and sends only to the peer: a
            // key holder reaches this end's inner address, nothing else of this host.
            peer_inner,
            inner_mtu: tunnel_mtu(plan, local),
            // Set per queue below.
            cpu: None,
            // TUN offload (super-packets segmented and joined by the tunnel), UDP GSO/GRO.
            batching: Batching::Offload,
            queue: None,
        };
        // Pinned only where each tunnel thread gets a core of its own and two remain for the
        // sender and receiver. With fewer, a pinned thread waits behind whatever else runs
        // on its core while another may be idle: measured on 2 shared cores, pinning halved
        // the throughput (docs/userspace.md). Unpinned it is still one thread per queue.
        let pin = cpus >= 2 * threads + 2;
        let queues = (0..threads)
            .map(|i| {
                // One thread: the whole id space, as the single-queue tunnel always had.
                let endpoint = if threads == 1 {
                    Endpoint::new(plan.suite(), implementation, &key, dir)
                } else {
                    Endpoint::for_queue(plan.suite(), implementation, &key, dir, i as u8)
                };
                Ok((
                    endpoint.map_err(LabError::failed)?,
                    pin.then_some(first_cpu + 2 * i),
                ))
            })
            .collect::<LabResult<Vec<_>>>()?;
        let tunnel = MultiQueue::start(site.namespace, config, queues).map_err(LabError::failed)?;
        Ok(UserspaceEnd { tunnel: Some(tunnel) })
    }

    /// The key commands of every thread of this end (None once stopped).
    pub fn keys(&self) -> Option<KeyControl> {
        self.tunnel.as_ref().map(MultiQueue::keys)
    }

    /// Stops the threads and returns what they counted: one thread's counts, or the
    /// queues' sums with each queue's own.
    pub fn finish(&mut self) -> LabResult<UserspaceEndEvidence> {
        let tunnel = self
            .tunnel
            .take()
            .ok_or_else(|| LabError::failed(anyhow::anyhow!("userspace tunnel stopped twice")))?;
        let queues = tunnel.stop().map_err(LabError::failed)?;
        let total = TunnelStats::sum(&queues)
            .ok_or_else(|| LabError::failed(anyhow::anyhow!("userspace tunnel without a thread")))?;
        let mut end = UserspaceEndEvidence {
            implementation: total.implementation.clone(),
            batching: total.batching,
            end: tunnel_end(&total),
        };
        if queues.len() > 1 {
            end.end.queues = queues.iter().map(tunnel_end).collect();
            end.end.steering = match &queues[0].steering {
                Some(Ok(())) => Some("ports".into()),
                Some(Err(why)) => Some(format!("flow hash: {why}")),
                None => None,
            };
        }
        Ok(end)
    }
}

/// `--rekey-every` on the lab's tunnel: both ends' threads rekeyed through their
/// [`KeyControl`]s, make-before-break (`tunnel_proto::epoch`'s lossless order). The control
/// channel is the confirmation the order asks for: each install is answered before either
/// end switches.
pub struct UserspaceRekey {
    /// End a's threads, then end b's.
    ends: [KeyControl; 2],
}

impl UserspaceRekey {
    pub fn new(a: &UserspaceEnd, b: &UserspaceEnd) -> LabResult<UserspaceRekey> {
        let stopped = || LabError::failed(anyhow::anyhow!("rekeying a userspace tunnel that has stopped"));
        Ok(UserspaceRekey {
            ends: [a.keys().ok_or_else(stopped)?, b.keys().ok_or_else(stopped)?],
        })
    }
}

impl Rekey for UserspaceRekey {
    fn switch(&mut self) -> LabResult<()> {
        // Never a key used before: each rekey's packet ids start again from 1.
        let key = StaticKey::generate().map_err(LabError::failed)?;
        // Both ends accept the new epoch before either sends with it.
        for end in &self.ends {
            end.install_next(&key).map_err(LabError::failed)?;
        }
        for end in &self.ends {
            end.switch_send().map_err(LabError::failed)?;
        }
        Ok(())
    }

    fn retire(&mut self) -> LabResult<()> {
        for end in &self.ends {
            end.retire_previous().map_err(LabError::failed)?;
        }
        Ok(())
    }

    fn grace(&self) -> Duration {
        crate::rekey::GRACE
    }
}

/// The tunnel's outer addresses, IPv4 or IPv6 alike (an IPv4-mapped IPv6 address, as a
/// dual-stack server sees an IPv4 client, counts as IPv4); both ends of one family.
fn outer_pair(local: IpAddr, peer: IpAddr) -> LabResult<(IpAddr, IpAddr)> {
    let (local, peer) = (local.to_canonical(), peer.to_canonical());
    if local.is_ipv4() != peer.is_ipv4() {
        return Err(LabError::usage(anyhow::anyhow!(
            "the userspace tunnel needs both ends in one address family: this host is {local}, the peer {peer}"
        )));
    }
    Ok((local, peer))
}

/// The TUN device's MTU: the link's less the outer headers of `outer`'s family and the suite.
fn tunnel_mtu(plan: &RunPlan, outer: IpAddr) -> u32 {
    inner_mtu_over(plan.link().mtu, plan.suite(), model::Family::of(outer))
}

/// The speed benchmark's suite for a tunnel suite; None for `none`.
fn speed_suite(suite: CipherSuite) -> Option<speed::SpeedSuite> {
    match suite {
        CipherSuite::None => None,
        CipherSuite::AesCbc {
            key,
            hmac: Hmac::None,
        } => Some(speed::SpeedSuite::AesCbc(key)),
        CipherSuite::AesCbc {
            key,
            hmac: Hmac::Sha256,
        } => Some(speed::SpeedSuite::AesCbcHmacSha256(key)),
        CipherSuite::AesGcm { key } => AeadAlgorithm::aes_gcm(key).map(speed::SpeedSuite::Aead),
        CipherSuite::ChaCha20Poly1305 => Some(speed::SpeedSuite::Aead(AeadAlgorithm::ChaCha20Poly1305)),
    }
}

fn tunnel_end(s: &TunnelStats) -> TunnelEnd {
    TunnelEnd {
        tun: s.tun_name.clone(),
        pinned_cpu: s.pinned_cpu,
        queue: s.queue,
        cpu: model::CpuUsage::new(s.cpu.user_s, s.cpu.system_s, s.wall_s),
        wall_s: s.wall_s,
        packets_per_s: s.packets_per_s(),
        sent: s.sent,
        delivered: s.delivered,
        datagrams_in: s.datagrams_in,
        drops: DropReason::ALL
            .iter()
            .map(|r| (r.name().to_string(), s.drops.get(*r)))
            .collect(),
        errors: s.errors,
        send_calls: s.send_calls,
        recv_calls: s.recv_calls,
        tun_reads: s.tun_reads,
        tun_writes: s.tun_writes,
        recv_buffers: s.recv_buffers,
        key_switches: s.key_switches,
        time: s.time,
        queues: Vec::new(),
        steering: None,
    }
}

/// The local lab's evidence from both ends, with the encrypting end's efficiency: its
/// payload MB per CPU-second beside the same implementation's single-core speed, measured
/// now in this process (same implementation, same hardware-AES state as the tunnel).
pub async fn local_evidence(
    plan: &RunPlan,
    a: UserspaceEndEvidence,
    b: UserspaceEndEvidence,
) -> LabResult<UserspaceEvidence> {
    let batching = a.batching;
    let (a, b) = (a.end, b.end);
    let implementation = implementation(plan)?;
    let (encrypting, enc) = match (plan.workload().modes.bidir, plan.workload().reverse) {
        (true, _) => (Encrypting::Both, &a),
        (false, true) => (Encrypting::B, &b),
        (false, false) => (Encrypting::A, &a),
    };
    let enc_cpu_s = (enc.cpu.user_s + enc.cpu.system_s).max(1e-9);
    let tunnel_payload_mb_per_cpu_s = enc.sent.bytes as f64 / 1e6 / enc_cpu_s;
    let suite = plan.suite();
    let crypto = match speed_suite(suite) {
        Some(s) => {
            // Per CPU-second like the tunnel's figure: on a shared machine the benchmark
            // thread gets only a share of a core, which wall time hides.
            let (wall_mb_per_s, cpu_share) = tokio::task::spawn_blocking(move || {
                let (cpu0, t0) = (CpuTime::this_thread(), Instant::now());
                let batch = tunnel::largest_batch(suite, PACKET_BYTES);
                let mb = speed::single_core_mb_per_s(&implementation, s, PACKET_BYTES, batch, SPEED_SAMPLE)?;
                let share = CpuTime::this_thread().since(cpu0).total_s() / t0.elapsed().as_secs_f64();
                Ok::<_, speed::SpeedError>((mb, share.clamp(1e-3, 1.0)))
            })
            .await
            .map_err(LabError::failed)??;
            let single_core = wall_mb_per_s / cpu_share;
            Some(CryptoReference {
                crypto_single_core_mb_per_s: single_core,
                crypto_wall_mb_per_s: wall_mb_per_s,
                crypto_cpu_share: cpu_share,
                packet_bytes: PACKET_BYTES,
                ratio: tunnel_payload_mb_per_cpu_s / single_core,
            })
        }
        None => None,
    };
    Ok(UserspaceEvidence {
        suite: plan.suite(),
        implementation: implementation.info(),
        inner_mtu: tunnel_mtu(plan, plan.link().addressing.outer_a.to_canonical()),
        batching,
        a,
        b,
        encrypting,
        efficiency: Efficiency {
            tunnel_payload_mb_per_cpu_s,
            crypto,
        },
    })
}
