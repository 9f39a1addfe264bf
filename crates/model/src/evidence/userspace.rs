//! The lab's userspace tunnel's evidence: each end's threads and their counters, where
//! their time went, and how close the encrypting end came to the cipher's own speed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{Batching, Flow, ImplementationInfo, IoErrors, ThreadTime};
use crate::suite::CipherSuite;
use crate::transfer::CpuUsage;

/// One end of a userspace tunnel: its thread's counters over its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunnelEnd {
    pub tun: String,
    pub pinned_cpu: Option<usize>,
    /// The queue this thread served, in a multi-queue end's `queues`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u16>,
    pub cpu: CpuUsage,
    pub wall_s: f64,
    pub packets_per_s: f64,
    pub sent: Flow,
    pub delivered: Flow,
    pub datagrams_in: u64,
    /// Drop reason → count, every reason listed.
    pub drops: BTreeMap<String, u64>,
    pub errors: IoErrors,
    pub send_calls: u64,
    pub recv_calls: u64,
    pub tun_reads: u64,
    pub tun_writes: u64,
    /// Receive buffers the socket filled (with UDP GRO, each holds several datagrams).
    #[serde(default)]
    pub recv_buffers: u64,
    /// Times the end switched sending to a new key epoch (`--rekey-every`: one per rekey;
    /// a multi-queue end: what every queue went through). 0: the run's one key throughout.
    #[serde(default)]
    pub key_switches: u64,
    /// Where the thread's wall time went.
    #[serde(default)]
    pub time: ThreadTime,
    /// A multi-queue end (`--tunnel-threads N`): each thread's own counts; the fields above
    /// are their sums (CPU added, so above 100 % of a core where threads ran in parallel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<TunnelEnd>,
    /// A multi-queue end: how flows were spread over its queues: `ports` (the lab's eBPF
    /// program: stream i on queue (port + i) mod N), or `flow hash: WHY` where the kernel
    /// refused the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steering: Option<String>,
}

/// One end of a userspace tunnel as it reports itself (a two-host report shows each end so):
/// the implementation it encrypted with, how it batched, and its threads' counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserspaceEndEvidence {
    pub implementation: ImplementationInfo,
    pub batching: Batching,
    pub end: TunnelEnd,
}

/// The local lab's userspace tunnel: both ends and how close the encrypting end came to
/// the cipher's own speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserspaceEvidence {
    pub suite: CipherSuite,
    pub implementation: ImplementationInfo,
    pub inner_mtu: u32,
    pub batching: Batching,
    /// `a` encrypts the payload, `b` decrypts it, unless `encrypting` says otherwise.
    pub a: TunnelEnd,
    pub b: TunnelEnd,
    /// The end whose thread encrypts the payload: a, b (`--reverse`) or both (`--bidir`).
    pub encrypting: Encrypting,
    /// Of the encrypting end (end a's in a two-way run, whose thread also decrypts).
    pub efficiency: Efficiency,
}

/// Which end's thread encrypts the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encrypting {
    A,
    B,
    Both,
}

/// The encrypting thread's payload MB per CPU-second beside the same implementation's
/// single-core speed, measured in this process after the transfers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Efficiency {
    pub tunnel_payload_mb_per_cpu_s: f64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub crypto: Option<CryptoReference>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CryptoReference {
    /// Per CPU-second of the thread that measured it, like the tunnel's figure.
    pub crypto_single_core_mb_per_s: f64,
    pub crypto_wall_mb_per_s: f64,
    /// The share of a core the measuring thread had.
    pub crypto_cpu_share: f64,
    pub packet_bytes: usize,
    /// Tunnel MB per CPU-second over the cipher's.
    pub ratio: f64,
}

impl UserspaceEvidence {
    pub fn lines(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "userspace tunnel: {}, inner MTU {}, {:?} batching",
            self.implementation.label, self.inner_mtu, self.batching
        )];
        let threads = |end: &'_ TunnelEnd| -> Vec<TunnelEnd> {
            if end.queues.is_empty() {
                vec![end.clone()]
            } else {
                end.queues.clone()
            }
        };
        let (a, b) = (threads(&self.a), threads(&self.b));
        for (end, s) in [("a", &self.a), ("b", &self.b)] {
            if let Some(steering) = &s.steering {
                notes.push(format!(
                    "end {end}: {} tunnel threads, flows spread by {steering}",
                    s.queues.len()
                ));
            }
        }
        let (role_a, role_b) = match self.encrypting {
            Encrypting::Both => ("encrypting and decrypting", "encrypting and decrypting"),
            Encrypting::B => ("decrypting", "encrypting"),
            Encrypting::A => ("encrypting", "decrypting"),
        };
        let roles = a.iter().map(|s| (role_a, s)).chain(b.iter().map(|s| (role_b, s)));
        for (role, s) in roles {
            let drops: Vec<String> = s
                .drops
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            let queue = s.queue.map(|q| format!("/{q}")).unwrap_or_default();
            let rekeyed = match s.key_switches {
                0 => String::new(),
                n => format!(", {n} key switches"),
            };
            notes.push(format!(
                "{role} thread {}{queue}: {:.2} s user + {:.2} s system ({:.0} % of a core), {:.0} packets/s ({} sent, {} delivered), drops: {}{rekeyed}",
                s.tun,
                s.cpu.user_s,
                s.cpu.system_s,
                (s.cpu.user_s + s.cpu.system_s) / s.wall_s.max(1e-9) * 100.0,
                s.packets_per_s,
                s.sent.packets,
                s.delivered.packets,
                if drops.is_empty() { "none".into() } else { drops.join(", ") },
            ));
            notes.push(format!(
                "  its time: {}; out {} packets per TUN read and {} per UDP send, in {} datagrams per receive buffer and {} packets per TUN write",
                s.time.line(),
                per_call(s.sent.packets, s.tun_reads),
                per_call(s.sent.packets, s.send_calls),
                per_call(s.datagrams_in, s.recv_buffers),
                per_call(s.delivered.packets, s.tun_writes),
            ));
        }
        notes
    }
}

/// `items` per call to one decimal, or `-` where no call was made.
fn per_call(items: u64, calls: u64) -> String {
    if calls == 0 {
        "-".into()
    } else {
        format!("{:.1}", items as f64 / calls as f64)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::evidence::Library;
    use crate::plan::CryptoChoice;

    pub(crate) fn tunnel_end(tun: &str) -> TunnelEnd {
        TunnelEnd {
            tun: tun.into(),
            pinned_cpu: Some(1),
            queue: None,
            cpu: CpuUsage::new(0.5, 0.25, 1.0),
            wall_s: 1.0,
            packets_per_s: 70_000.5,
            sent: Flow {
                packets: 70_000,
                bytes: 100_000_000,
            },
            delivered: Flow {
                packets: 3,
                bytes: 180,
            },
            datagrams_in: 3,
            drops: BTreeMap::from([("replay".to_string(), 0)]),
            errors: IoErrors::default(),
            send_calls: 1100,
            recv_calls: 3,
            tun_reads: 900,
            tun_writes: 3,
            recv_buffers: 2,
            key_switches: 0,
            time: ThreadTime {
                crypto_s: 0.5,
                udp_send_s: 0.3,
                tun_read_s: 0.15,
                other_s: 0.05,
                run_queue_s: Some(0.1),
                ..ThreadTime::default()
            },
            queues: Vec::new(),
            steering: None,
        }
    }

    pub(crate) fn implementation() -> ImplementationInfo {
        ImplementationInfo {
            choice: CryptoChoice::Auto,
            library: Library::AwsLc,
            hardware_aes: true,
            label: "auto (aws-lc-rs, AES-NI)".into(),
        }
    }

    #[test]
    fn a_threads_time_reads_largest_phase_first_with_its_wait_for_a_cpu() {
        let t = tunnel_end("ipl-tun-a").time;
        assert_eq!(
            t.line(),
            "crypto 50 %, UDP send 30 %, TUN read 15 %, other 5 %, of all that, waiting for a CPU 10 %"
        );
        let summed = t.plus(&ThreadTime {
            idle_s: 1.0,
            run_queue_s: None,
            ..ThreadTime::default()
        });
        assert_eq!(summed.total_s(), 2.0);
        // One thread without schedstat: the sum cannot say how long both waited.
        assert_eq!(
            summed.line(),
            "idle 50 %, crypto 25 %, UDP send 15 %, TUN read 8 %, other 2 %"
        );
        assert_eq!(ThreadTime::default().line(), "not timed");
    }

    #[test]
    fn a_userspace_end_says_where_its_time_went_and_its_batch_sizes() {
        let e = UserspaceEvidence {
            suite: CipherSuite::ChaCha20Poly1305,
            implementation: implementation(),
            inner_mtu: 1418,
            batching: Batching::Offload,
            a: tunnel_end("ipl-tun-a"),
            b: TunnelEnd {
                tun_writes: 0,
                ..tunnel_end("ipl-tun-b")
            },
            encrypting: Encrypting::A,
            efficiency: Efficiency {
                tunnel_payload_mb_per_cpu_s: 133.3,
                crypto: None,
            },
        };
        let lines = e.lines();
        assert_eq!(
            lines[2],
            "  its time: crypto 50 %, UDP send 30 %, TUN read 15 %, other 5 %, of all that, waiting for a CPU 10 %; \
             out 77.8 packets per TUN read and 63.6 per UDP send, in 1.5 datagrams per receive buffer and 1.0 packets per TUN write"
        );
        assert!(
            lines[4].ends_with("in 1.5 datagrams per receive buffer and - packets per TUN write"),
            "{}",
            lines[4]
        );
    }
}
