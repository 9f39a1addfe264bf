//! The small data types the measuring crates fill in and the report shows as they are:
//! [`SaCounters`] (crate `xfrm`), [`Flow`], [`IoErrors`], [`Batching`] and [`ThreadTime`]
//! (crate `tunnel`), [`Library`] and [`ImplementationInfo`] (crate `crypto`). Several
//! backends' evidence holds them; none of them names a backend.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::plan::CryptoChoice;

/// A library that computes the ciphers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Library {
    /// RustCrypto crates: aes, cbc, hmac, sha2, aes-gcm, chacha20poly1305.
    RustCrypto,
    /// aws-lc-rs over AWS-LC.
    AwsLc,
    /// OpenSSL's libcrypto, loaded at run time (the library `openssl speed` times).
    Libcrypto,
}

impl Library {
    pub fn name(self) -> &'static str {
        match self {
            Library::RustCrypto => "rustcrypto",
            Library::AwsLc => "aws-lc-rs",
            Library::Libcrypto => "libcrypto",
        }
    }
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a report says about the implementation that produced a number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImplementationInfo {
    /// The `--crypto` value: auto, soft, rustcrypto, aws-lc, libcrypto.
    pub choice: CryptoChoice,
    pub library: Library,
    /// Whether the library used the CPU's AES instructions in the process that measured.
    pub hardware_aes: bool,
    /// Human label, e.g. `auto (aws-lc-rs, AES-NI)`.
    pub label: String,
}

/// How datagrams leave and arrive.
/// Ordered from the least batching to the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// `sendmmsg`/`recvmmsg`: one system call per batch, one trip through the stack per datagram.
    Mmsg,
    /// UDP GSO/GRO: one system call and one trip through the stack per batch of equal-sized
    /// datagrams. Falls back to [`Batching::Mmsg`] where the kernel refuses it.
    Gso,
    /// [`Batching::Gso`] plus TUN offload: TCP super-packets from the TUN device, segmented
    /// (and each segment encrypted) by the tunnel; decrypted segments joined before the TUN
    /// write. Falls back to [`Batching::Gso`] where the kernel refuses it.
    Offload,
}

/// Payload packets and bytes that went one way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    pub packets: u64,
    pub bytes: u64,
}

impl Flow {
    pub fn add(&mut self, packets: usize, bytes: usize) {
        self.packets += packets as u64;
        self.bytes += bytes as u64;
    }
}

/// Per-packet failures that are not a [`tunnel_proto::DropReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoErrors {
    /// Packets read from TUN that could not be encrypted.
    pub encap: u64,
    /// Batches (or the rest of one) the socket refused.
    pub send: u64,
    /// Decrypted packets the TUN device refused.
    pub tun_write: u64,
    /// Packets from TUN (offload) that could not be segmented or checksummed.
    pub offload: u64,
    /// Packets (with offload, super-packets) from TUN not from this end's inner address to
    /// the peer's: not sent, as the peer would drop them (an IPv6 router solicitation from
    /// the device's link-local address, or a route someone pointed into the tunnel).
    pub not_to_peer: u64,
}

/// Packets and bytes an SA has processed (`ip -s xfrm state`: the "current" lifetime),
/// and the packets it dropped. Serialised as the lab's report shows them, these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SaCounters {
    pub packets: u64,
    pub bytes: u64,
    pub replay_drops: u32,
    pub integrity_failures: u32,
}

/// Where a tunnel thread's wall time went, in seconds. The thread reads the clock at every
/// boundary between phases (a batch at a time, never a packet at a time where a batch
/// exists), so the phases add up to its life. Time runnable but without a CPU falls inside
/// whatever phase it interrupted; `run_queue_s` says how much that was in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadTime {
    /// Reading from the TUN device (a packet, or with offload a super-packet, per call).
    pub tun_read_s: f64,
    /// Cutting super-packets into segments (offload), copying and checking inner packets.
    pub segmenting_s: f64,
    /// Encrypting and decrypting (with the replay and inner-address checks).
    pub crypto_s: f64,
    pub udp_send_s: f64,
    pub udp_recv_s: f64,
    /// Joining decrypted segments into super-packets (offload).
    pub joining_s: f64,
    pub tun_write_s: f64,
    /// Asleep in `poll`: nothing to do either way.
    pub idle_s: f64,
    /// The loop itself and anything between the phases.
    pub other_s: f64,
    /// Runnable but waiting for a CPU (the kernel's `schedstat`); None where not readable.
    #[serde(default)]
    pub run_queue_s: Option<f64>,
}

impl ThreadTime {
    /// The phases by name, in the order a packet meets them.
    pub fn phases(&self) -> [(&'static str, f64); 9] {
        [
            ("TUN read", self.tun_read_s),
            ("segmenting", self.segmenting_s),
            ("crypto", self.crypto_s),
            ("UDP send", self.udp_send_s),
            ("UDP receive", self.udp_recv_s),
            ("joining", self.joining_s),
            ("TUN write", self.tun_write_s),
            ("idle", self.idle_s),
            ("other", self.other_s),
        ]
    }

    pub fn total_s(&self) -> f64 {
        self.phases().iter().map(|(_, s)| s).sum()
    }

    /// Two threads' times added (a multi-queue end's sum).
    pub fn plus(&self, other: &ThreadTime) -> ThreadTime {
        ThreadTime {
            tun_read_s: self.tun_read_s + other.tun_read_s,
            segmenting_s: self.segmenting_s + other.segmenting_s,
            crypto_s: self.crypto_s + other.crypto_s,
            udp_send_s: self.udp_send_s + other.udp_send_s,
            udp_recv_s: self.udp_recv_s + other.udp_recv_s,
            joining_s: self.joining_s + other.joining_s,
            tun_write_s: self.tun_write_s + other.tun_write_s,
            idle_s: self.idle_s + other.idle_s,
            other_s: self.other_s + other.other_s,
            run_queue_s: self.run_queue_s.zip(other.run_queue_s).map(|(a, b)| a + b),
        }
    }

    /// e.g. `crypto 41 %, UDP send 28 %, …, waiting for a CPU 12 %`: the phases above 0.5 %
    /// of the total, largest first.
    pub fn line(&self) -> String {
        let total = self.total_s();
        if total <= 0.0 {
            return "not timed".into();
        }
        let mut phases: Vec<(&str, f64)> = self
            .phases()
            .into_iter()
            .filter(|(_, s)| s / total >= 0.005)
            .collect();
        phases.sort_by(|x, y| y.1.total_cmp(&x.1));
        let mut parts: Vec<String> = phases
            .iter()
            .map(|(name, s)| format!("{name} {:.0} %", s / total * 100.0))
            .collect();
        if let Some(q) = self.run_queue_s {
            parts.push(format!(
                "of all that, waiting for a CPU {:.0} %",
                (q / total * 100.0).min(100.0)
            ));
        }
        parts.join(", ")
    }
}
