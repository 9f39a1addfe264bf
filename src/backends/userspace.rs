//! The lab's own userspace tunnel (OpenVPN-style): one thread per end (pinned where there are
//! cores to spare) moves every packet between a TUN device and a UDP socket on the veth,
//! encrypting with the `--crypto` implementation. The payload flows between the inner
//! addresses (198.19.0.x) through it.
//!
//! Details in the report (`backend_details.userspace`): `suite`, `implementation` (`choice`,
//! `library`, `hardware_aes`, `label`), `inner_mtu`, `batching` (offload, gso or mmsg, as
//! used), per end (`a` encrypts the payload, `b` decrypts it) `cpu` (`user_s`, `system_s`,
//! `percent_of_core` over the thread's life), `pinned_cpu` (null: not pinned), `wall_s`,
//! `packets_per_s` (both directions, over the thread's life), `sent`/`delivered` (`packets`,
//! `bytes` of payload), `datagrams_in`, `drops` by reason, `errors`, `send_calls`,
//! `recv_calls`, `tun_reads`, `tun_writes`; and `efficiency`: the encrypting thread's payload
//! MB per CPU-second beside the same implementation's single-core speed on 1400-byte packets,
//! measured in this process after the transfers, also per CPU-second of the thread that
//! measured it (`crypto_wall_mb_per_s` and `crypto_cpu_share` give the wall-clock figure and
//! the share of a core it had).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use crypto::{AeadAlgorithm, Implementation};
use futures::future::BoxFuture;
use model::{Addressing, CipherSuite, Hmac, RunPlan};
use netns::{Namespace, Topology};
use serde_json::{json, Value};
use tunnel::{inner_mtu, Batching, ThreadCpu, Tunnel, TunnelConfig, TunnelStats};
use tunnel_proto::{DropReason, Endpoint, KeyDirection, StaticKey};

use super::{ActiveBackend, DataPath, Side};
use crate::error::{LabError, LabResult};

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
    crypto::soft::reexec_if_needed(plan.crypto).map_err(LabError::capability)?;
    let imp = implementation(plan)?;
    crypto::self_test(&imp).map_err(LabError::failed)?;
    Ok(())
}

pub fn implementation(plan: &RunPlan) -> LabResult<Implementation> {
    Implementation::new(plan.crypto).map_err(LabError::capability)
}

pub struct Userspace {
    path: DataPath,
    suite: CipherSuite,
    implementation: Implementation,
    inner_mtu: u32,
    a: Option<Tunnel>,
    b: Option<Tunnel>,
    stats: Option<(TunnelStats, TunnelStats)>,
}

/// Starts one end of the tunnel in `ns`: end `A` (key direction 0) at `inner_a`, end `B`
/// (direction 1) at `inner_b`; `local`/`peer` are the outer addresses the UDP socket uses.
/// The local lab starts both ends; a two-host run starts one on each host.
#[allow(clippy::too_many_arguments)]
pub fn start_end(
    ns: &Namespace,
    side: Side,
    suite: CipherSuite,
    imp: Implementation,
    key: &StaticKey,
    addressing: Addressing,
    link_mtu: u32,
    local: Ipv4Addr,
    peer: Ipv4Addr,
) -> LabResult<Tunnel> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let (name, inner, dir, cpu) = match side {
        Side::A => ("a", addressing.inner_a, KeyDirection::Normal, 0),
        Side::B => ("b", addressing.inner_b, KeyDirection::Inverse, 1),
    };
    let config = TunnelConfig {
        tun_name: format!("ipl-tun-{name}"),
        local: SocketAddrV4::new(local, TUNNEL_PORT),
        peer: SocketAddrV4::new(peer, TUNNEL_PORT),
        inner,
        prefix_len: addressing.prefix_len,
        inner_mtu: inner_mtu(link_mtu, suite),
        // Pinned only where each tunnel thread gets a core of its own and two remain for the
        // sender and receiver. With fewer, a pinned thread waits behind whatever else runs on
        // its core while the other may be idle: measured on 2 shared cores, pinning halved
        // the throughput (docs/userspace.md). Unpinned it is still one thread per end.
        cpu: (cpus >= 4).then_some(cpu),
        // TUN offload (super-packets segmented and joined by the tunnel), UDP GSO/GRO.
        batching: Batching::Offload,
    };
    let endpoint = Endpoint::new(suite, imp, key, dir).map_err(LabError::failed)?;
    Tunnel::start(ns, config, endpoint).map_err(LabError::failed)
}

impl Userspace {
    pub fn start(plan: &RunPlan, topology: &Topology) -> LabResult<Userspace> {
        let imp = implementation(plan)?;
        let suite = plan.suite;
        let ad = topology.addressing;
        let mtu = inner_mtu(topology.mtu, suite);
        // Random per run; both ends are threads of this process, so they share it in memory.
        let key = StaticKey::generate().map_err(LabError::failed)?;
        let end =
            |ns, side, local, peer| start_end(ns, side, suite, imp, &key, ad, topology.mtu, local, peer);
        let a = end(&topology.a, Side::A, ad.outer_a, ad.outer_b)?;
        // On error `a` is dropped here, which stops it and removes its TUN device.
        let b = end(&topology.b, Side::B, ad.outer_b, ad.outer_a)?;
        Ok(Userspace {
            path: DataPath {
                target: (ad.inner_b, plan.port).into(),
            },
            suite,
            implementation: imp,
            inner_mtu: mtu,
            a: Some(a),
            b: Some(b),
            stats: None,
        })
    }

    /// Stops both threads (once) and keeps what they counted.
    fn stop(&mut self) -> LabResult<&(TunnelStats, TunnelStats)> {
        if self.stats.is_none() {
            let a = self.a.take().map(Tunnel::stop);
            let b = self.b.take().map(Tunnel::stop);
            match (a, b) {
                (Some(a), Some(b)) => {
                    self.stats = Some((a.map_err(LabError::failed)?, b.map_err(LabError::failed)?));
                }
                _ => {
                    return Err(LabError::failed(anyhow::anyhow!(
                        "userspace tunnel stopped twice"
                    )))
                }
            }
        }
        Ok(self.stats.as_ref().expect("just set"))
    }
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
    }
}

pub fn end_json(s: &TunnelStats) -> Value {
    let drops: serde_json::Map<String, Value> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), json!(s.drops.get(*r))))
        .collect();
    json!({
        "tun": s.tun_name,
        "pinned_cpu": s.pinned_cpu,
        "cpu": model::CpuUsage::new(s.cpu.user_s, s.cpu.system_s, s.wall_s),
        "wall_s": s.wall_s,
        "packets_per_s": s.packets_per_s(),
        "sent": s.sent,
        "delivered": s.delivered,
        "datagrams_in": s.datagrams_in,
        "drops": drops,
        "errors": s.errors,
        "send_calls": s.send_calls,
        "recv_calls": s.recv_calls,
        "tun_reads": s.tun_reads,
        "tun_writes": s.tun_writes,
    })
}

impl ActiveBackend for Userspace {
    fn data_path(&self) -> DataPath {
        self.path
    }

    fn details(&mut self) -> BoxFuture<'_, LabResult<Value>> {
        Box::pin(async move {
            let (a, b) = self.stop()?.clone();
            let tunnel_mb_per_cpu_s = a.sent.bytes as f64 / 1e6 / a.cpu.total_s().max(1e-9);
            let efficiency = match speed_suite(self.suite) {
                Some(s) => {
                    let imp = self.implementation;
                    // Same process, same implementation, same hardware-AES state as the tunnel.
                    // Per CPU-second like the tunnel's figure: on a shared machine the
                    // benchmark thread gets only a share of a core, which wall time hides.
                    let (wall_mb_per_s, cpu_share) = tokio::task::spawn_blocking(move || {
                        let (cpu0, t0) = (ThreadCpu::now(), Instant::now());
                        let mb = speed::single_core_mb_per_s(&imp, s, PACKET_BYTES, SPEED_SAMPLE)?;
                        let share = ThreadCpu::now().since(cpu0).total_s() / t0.elapsed().as_secs_f64();
                        Ok::<_, speed::SpeedError>((mb, share.clamp(1e-3, 1.0)))
                    })
                    .await
                    .map_err(LabError::failed)?
                    .map_err(LabError::failed)?;
                    let crypto = wall_mb_per_s / cpu_share;
                    json!({
                        "tunnel_payload_mb_per_cpu_s": tunnel_mb_per_cpu_s,
                        "crypto_single_core_mb_per_s": crypto,
                        "crypto_wall_mb_per_s": wall_mb_per_s,
                        "crypto_cpu_share": cpu_share,
                        "packet_bytes": PACKET_BYTES,
                        "ratio": tunnel_mb_per_cpu_s / crypto,
                    })
                }
                None => json!({ "tunnel_payload_mb_per_cpu_s": tunnel_mb_per_cpu_s }),
            };
            Ok(json!({
                "suite": self.suite,
                "implementation": self.implementation.info(),
                "inner_mtu": self.inner_mtu,
                "batching": a.batching,
                "a": end_json(&a),
                "b": end_json(&b),
                "efficiency": efficiency,
            }))
        })
    }

    fn notes(&self) -> Vec<String> {
        let Some((a, b)) = &self.stats else {
            return Vec::new();
        };
        let mut notes = vec![format!(
            "userspace tunnel: {}, inner MTU {}, {:?} batching",
            self.implementation, self.inner_mtu, a.batching
        )];
        for (role, s) in [("encrypting", a), ("decrypting", b)] {
            let drops: Vec<String> = DropReason::ALL
                .iter()
                .filter(|r| s.drops.get(**r) > 0)
                .map(|r| format!("{} {}", r.name(), s.drops.get(*r)))
                .collect();
            notes.push(format!(
                "{role} thread {}: {:.2} s user + {:.2} s system ({:.0} % of a core), {:.0} packets/s, drops: {}",
                s.tun_name,
                s.cpu.user_s,
                s.cpu.system_s,
                s.cpu.total_s() / s.wall_s.max(1e-9) * 100.0,
                s.packets_per_s(),
                if drops.is_empty() { "none".into() } else { drops.join(", ") }
            ));
        }
        notes
    }
}
