//! The validated run plan: every decision about a run, checked before anything touches the
//! kernel. The CLI parses raw arguments into a [`RunRequest`]; [`RunRequest::validate`] turns
//! it into a [`RunPlan`] or refuses with a [`PlanError`] that says what to do instead.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::size::ByteSize;
use crate::suite::{CipherSuite, Hmac, KeyBits};

/// How the data is carried between the two ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Plain TCP over the link: the line-rate baseline.
    Plain,
    /// Kernel IPsec: ESP SAs and policies programmed over netlink XFRM.
    Xfrm,
    /// The lab's single-threaded TUN+UDP tunnel (OpenVPN-style).
    Userspace,
    /// Real OpenVPN 2.x, static key, point-to-point.
    Openvpn,
    /// Kernel IPsec whose SAs strongSwan's charon negotiated over IKEv2.
    Strongswan,
    /// Kernel WireGuard: a wireguard link configured over generic netlink.
    Wireguard,
    /// wireguard-go (the Go userspace implementation), one process per end, over its UAPI.
    #[serde(rename = "wireguard-go")]
    WireguardGo,
    /// boringtun (Cloudflare's Rust WireGuard), its device in the lab's process, per end.
    Boringtun,
}

impl Backend {
    pub const ALL: [Backend; 8] = [
        Backend::Plain,
        Backend::Xfrm,
        Backend::Userspace,
        Backend::Openvpn,
        Backend::Strongswan,
        Backend::Wireguard,
        Backend::WireguardGo,
        Backend::Boringtun,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Plain => "plain",
            Backend::Xfrm => "xfrm",
            Backend::Userspace => "userspace",
            Backend::Openvpn => "openvpn",
            Backend::Strongswan => "strongswan",
            Backend::Wireguard => "wireguard",
            Backend::WireguardGo => "wireguard-go",
            Backend::Boringtun => "boringtun",
        }
    }

    /// A WireGuard implementation: its one cipher is ChaCha20-Poly1305.
    pub fn is_wireguard(self) -> bool {
        matches!(
            self,
            Backend::Wireguard | Backend::WireguardGo | Backend::Boringtun
        )
    }

    /// Why this backend does not carry `suite` in the lab, where it does not (a matrix
    /// cell that is "not run"); `none` is the plain row's business and not judged here.
    pub fn suite_refusal(self, suite: CipherSuite) -> Option<&'static str> {
        let chacha = suite == CipherSuite::ChaCha20Poly1305;
        match self {
            b if b.is_wireguard() && !chacha && suite != CipherSuite::None => {
                Some("WireGuard has one cipher, chacha20-poly1305")
            }
            Backend::Xfrm | Backend::Openvpn | Backend::Strongswan if chacha => {
                Some("chacha20-poly1305 is WireGuard's cipher; this backend's row runs AES")
            }
            _ => None,
        }
    }

    /// Whether the backend encrypts (and so honours --key-bits/--hmac/--cipher).
    pub fn encrypts(self) -> bool {
        !matches!(self, Backend::Plain)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| PlanError::UnknownBackend(s.to_string()))
    }
}

/// Which crypto implementation a userspace backend uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CryptoChoice {
    /// The fastest implementation for this CPU, hardware AES/SHA where present.
    Auto,
    /// Software AES (hardware AES masked at run time): the "AES-NI off" row.
    Soft,
    /// RustCrypto (aes, cbc, hmac, sha2, aes-gcm), hardware features detected at run time.
    Rustcrypto,
    /// aws-lc-rs (AWS-LC, BoringSSL lineage), hardware features detected at run time.
    AwsLc,
}

impl CryptoChoice {
    pub const ALL: [CryptoChoice; 4] = [
        CryptoChoice::Auto,
        CryptoChoice::Soft,
        CryptoChoice::Rustcrypto,
        CryptoChoice::AwsLc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CryptoChoice::Auto => "auto",
            CryptoChoice::Soft => "soft",
            CryptoChoice::Rustcrypto => "rustcrypto",
            CryptoChoice::AwsLc => "aws-lc",
        }
    }
}

impl fmt::Display for CryptoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CryptoChoice {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        let t = s.trim().to_ascii_lowercase();
        CryptoChoice::ALL
            .into_iter()
            .find(|c| c.name() == t || (t == "awslc" && *c == CryptoChoice::AwsLc))
            .ok_or_else(|| PlanError::UnknownCrypto(s.to_string()))
    }
}

/// IPsec mode for the xfrm backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IpsecMode {
    #[default]
    Tunnel,
    Transport,
}

impl IpsecMode {
    pub const ALL: [IpsecMode; 2] = [IpsecMode::Tunnel, IpsecMode::Transport];

    /// The name `--mode` and `ip xfrm ... mode` use.
    pub fn name(self) -> &'static str {
        match self {
            IpsecMode::Tunnel => "tunnel",
            IpsecMode::Transport => "transport",
        }
    }
}

impl FromStr for IpsecMode {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        let t = s.trim().to_ascii_lowercase();
        IpsecMode::ALL
            .into_iter()
            .find(|m| m.name() == t)
            .ok_or_else(|| PlanError::UnknownMode(s.to_string()))
    }
}

/// The lab's address plan. Defaults come from 198.18.0.0/15 (RFC 2544, benchmarking); the
/// IPv6 plan (2001:2::/48, RFC 5180) is [`crate::Family::addressing`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addressing {
    /// Outer (link) addresses of the two ends, /24 (IPv6: /64) on the veth.
    pub outer_a: IpAddr,
    pub outer_b: IpAddr,
    /// Inner addresses carried through tunnels (tunnel-mode ESP, TUN devices).
    pub inner_a: IpAddr,
    pub inner_b: IpAddr,
    pub prefix_len: u8,
}

impl Addressing {
    /// The family of the outer addresses (the inner ones are the same family).
    pub fn family(&self) -> crate::Family {
        crate::Family::of(self.outer_a)
    }
}

impl Default for Addressing {
    fn default() -> Self {
        Addressing {
            outer_a: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            outer_b: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            inner_a: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
            inner_b: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
            prefix_len: 24,
        }
    }
}

/// Everything a run needs, as typed on the command line but not yet checked together.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub backend: Backend,
    /// `None` where the user gave no value: defaults apply, and nothing is reported as ignored.
    pub key_bits: Option<KeyBits>,
    pub hmac: Option<Hmac>,
    /// A whole suite instead of `key_bits`/`hmac`.
    pub cipher: Option<CipherSuite>,
    pub crypto: Option<CryptoChoice>,
    pub bytes: ByteSize,
    pub repeat: u32,
    pub parallel: u16,
    pub mtu: u32,
    pub mode: Option<IpsecMode>,
    pub seed: Option<u64>,
    pub port: u16,
    /// Run inside a VM booting this kernel image (`Some(None)` = the default stock kernel).
    pub vm: Option<Option<String>>,
    /// Also measure iperf3 over the same data path, one run after each of the lab's.
    pub with_iperf3: bool,
    /// `HOST[:PORT]` of an `ipsec-lab serve` on another machine: the run is between this
    /// host and that one instead of two local namespaces.
    pub peer: Option<String>,
    /// b sends and a receives (with a peer: the peer sends and this host receives).
    pub reverse: bool,
    /// Threads (TUN queues) per end of the userspace tunnel.
    pub tunnel_threads: u16,
    /// `--encap`/`--encap-port`: ESP encapsulated in UDP (xfrm only).
    pub encap: Option<crate::encap::EncapKind>,
    pub encap_port: Option<u16>,
    /// `--sas N` (xfrm): N SA pairs, stream i on pair i mod N, each selected by its port.
    pub sas: u16,
    /// `--pcrypt` (xfrm, AES-GCM): the SAs run on a `pcrypt(rfc4106(gcm(aes)))` instance.
    pub pcrypt: bool,
    /// `-6`/`--family 6`: IPv6 outer and inner addresses.
    pub family: crate::Family,
    /// `--netem SPEC`: the WAN conditions the lab's link gets.
    pub netem: Option<crate::netem::NetemSpec>,
    /// `--time`, `--interval`, `--omit`, `--bidir` (crate::modes).
    pub modes: crate::modes::ModesRequest,
    /// `--no-ceiling`: leave out the crypto ceiling and the line rate.
    pub no_ceiling: bool,
}

impl Default for RunRequest {
    fn default() -> Self {
        RunRequest {
            // The lab's subject: kernel IPsec, AES-256-CBC + HMAC-SHA256.
            backend: Backend::Xfrm,
            key_bits: None,
            hmac: None,
            cipher: None,
            crypto: None,
            bytes: ByteSize(100_000_000),
            repeat: 1,
            parallel: 1,
            mtu: 1500,
            mode: None,
            seed: None,
            port: 5201,
            vm: None,
            with_iperf3: false,
            peer: None,
            reverse: false,
            tunnel_threads: 1,
            encap: None,
            encap_port: None,
            sas: 1,
            pcrypt: false,
            family: crate::Family::Ipv4,
            netem: None,
            modes: Default::default(),
            no_ceiling: false,
        }
    }
}

/// A run that has passed every check that can be made without touching the kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    pub backend: Backend,
    pub suite: CipherSuite,
    pub crypto: CryptoChoice,
    pub bytes: ByteSize,
    pub repeat: u32,
    pub parallel: u16,
    pub mtu: u32,
    pub mode: IpsecMode,
    /// Seed of the pseudo-random payload; recorded so a failed verification can be replayed.
    pub seed: u64,
    pub port: u16,
    pub addressing: Addressing,
    pub vm: Option<Option<String>>,
    #[serde(default)]
    pub with_iperf3: bool,
    /// Options that were given but do not apply to this backend, for the user to see.
    pub ignored: Vec<String>,
    /// The other host of a two-machine run (`--peer`); None for the local namespace pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
    /// Data flows from b to a, or from the peer to this host (`--reverse`).
    #[serde(default)]
    pub reverse: bool,
    /// Threads per end of the userspace tunnel, one per queue of a multi-queue TUN device
    /// (1: the single-threaded tunnel).
    #[serde(default = "one_thread")]
    pub tunnel_threads: u16,
    /// ESP in UDP (`--encap udp`); None: ESP as IP protocol 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encap: Option<crate::encap::Encap>,
    /// xfrm SA pairs (`--sas`), stream i on pair i mod N; 1: one pair for every stream.
    #[serde(default = "one_thread", skip_serializing_if = "is_one")]
    pub sas: u16,
    /// The xfrm SAs on a `pcrypt(rfc4106(gcm(aes)))` instance (`--pcrypt`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pcrypt: bool,
    /// IPv4 or IPv6 (`-6`), outer and inner; reports before it existed were IPv4.
    #[serde(default)]
    pub family: crate::Family,
    /// `--netem`: the netem qdisc on both ends of the lab's link; None: the bare veth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netem: Option<crate::netem::NetemSpec>,
    /// `--time`, `--interval`, `--omit`, `--bidir`; the default: a forward `--bytes` run.
    #[serde(default, skip_serializing_if = "crate::modes::Modes::is_default")]
    pub modes: crate::modes::Modes,
    /// Time the suite's crypto ceiling and the plain line rate in the same run (a local
    /// run of an encrypting backend, unless `--no-ceiling`).
    #[serde(default)]
    pub ceiling: bool,
}

fn one_thread() -> u16 {
    1
}

fn is_one(n: &u16) -> bool {
    *n == 1
}

/// Most queues the kernel gives one TUN device (`MAX_TAP_QUEUES`), so most tunnel threads.
pub const MAX_TUNNEL_THREADS: u16 = 256;

/// Most transfers per run (`--repeat`).
pub const MAX_REPEAT: u32 = 1000;

/// TCP port `ipsec-lab serve` listens on by default.
pub const DEFAULT_PEER_PORT: u16 = 5299;

/// Where `ipsec-lab serve` runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for Peer {
    type Err = PlanError;
    /// `HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT`.
    fn from_str(s: &str) -> Result<Peer, PlanError> {
        let bad = || PlanError::Peer(s.to_string());
        let t = s.trim();
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            match after {
                "" => (host, None),
                p => (host, Some(p.strip_prefix(':').ok_or_else(bad)?)),
            }
        } else {
            match t.split_once(':') {
                Some((h, p)) if !p.contains(':') => (h, Some(p)),
                Some(_) => (t, None),
                None => (t, None),
            }
        };
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
            None => DEFAULT_PEER_PORT,
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
            return Err(bad());
        }
        Ok(Peer {
            host: host.to_string(),
            port,
        })
    }
}

impl RunPlan {
    /// `--vm auto`: run in a VM only where the host kernel lacks what the backend needs.
    pub fn vm_is_auto(&self) -> bool {
        matches!(&self.vm, Some(Some(k)) if k == "auto")
    }
}

/// Smallest payload a run times. Below it the whole payload fits in the two sockets'
/// buffers, so the clock measures memory copies and scheduling rather than the data path:
/// the figure would be noise (or, for a payload read in one go, a division by zero).
pub const MIN_PAYLOAD: ByteSize = ByteSize(1_000_000);

impl RunRequest {
    pub fn validate(self) -> Result<RunPlan, PlanError> {
        let mut ignored = Vec::new();
        check_payload("--bytes", self.bytes)?;
        if self.repeat == 0 || self.repeat > MAX_REPEAT {
            return Err(PlanError::Repeat(self.repeat));
        }
        if self.parallel == 0 || self.parallel > 128 {
            return Err(PlanError::Parallel(self.parallel));
        }
        if !(576..=9000).contains(&self.mtu) {
            return Err(PlanError::Mtu(self.mtu));
        }
        if self.port == 0 || u32::from(self.port) + u32::from(self.parallel) > 65535 {
            return Err(PlanError::Port(self.port));
        }
        if self.tunnel_threads == 0 || self.tunnel_threads > MAX_TUNNEL_THREADS {
            return Err(PlanError::TunnelThreads(self.tunnel_threads));
        }
        // With --peer the server checks the count against its own limit.
        if self.tunnel_threads > 1 && self.backend != Backend::Userspace {
            ignored.push(format!(
                "--tunnel-threads {} (only the userspace backend has tunnel threads)",
                self.tunnel_threads
            ));
        }
        if self.cipher.is_some() && (self.key_bits.is_some() || self.hmac.is_some()) {
            return Err(PlanError::CipherConflict);
        }
        let cbc = CipherSuite::cbc(
            self.key_bits.unwrap_or(KeyBits::Aes256),
            self.hmac.unwrap_or(Hmac::Sha256),
        );
        let suite = match self.backend {
            Backend::Plain => {
                if self.key_bits.is_some() || self.hmac.is_some() || self.cipher.is_some() {
                    ignored.push("--key-bits/--hmac/--cipher (the plain backend does not encrypt)".into());
                }
                CipherSuite::None
            }
            b if b.is_wireguard() => {
                if self.key_bits.is_some() || self.hmac.is_some() {
                    return Err(PlanError::WireguardSuite {
                        backend: b,
                        suite: cbc,
                    });
                }
                self.cipher.unwrap_or(CipherSuite::ChaCha20Poly1305)
            }
            _ => self.cipher.unwrap_or(cbc),
        };
        if self.backend.is_wireguard() && suite != CipherSuite::ChaCha20Poly1305 {
            return Err(PlanError::WireguardSuite {
                backend: self.backend,
                suite,
            });
        }
        // The lab's own tunnel has an AEAD engine for it; ESP and OpenVPN rows are not run.
        if matches!(self.backend, Backend::Xfrm | Backend::Openvpn) && suite == CipherSuite::ChaCha20Poly1305
        {
            return Err(PlanError::NoChaCha(self.backend));
        }
        let crypto = self.crypto.unwrap_or(CryptoChoice::Auto);
        if self.backend != Backend::Userspace && self.crypto.is_some() {
            ignored.push(format!(
                "--crypto {crypto} (only the userspace backend chooses its crypto implementation)"
            ));
        }
        if matches!(self.backend, Backend::Xfrm | Backend::Strongswan) && suite == CipherSuite::None {
            return Err(PlanError::SuiteNotSupported {
                backend: self.backend,
                suite,
            });
        }
        if self.backend != Backend::Xfrm && self.mode.is_some() {
            ignored.push("--mode (only the xfrm backend has IPsec modes)".into());
        }
        let peer = self.peer.as_deref().map(str::parse::<Peer>).transpose()?;
        if let Some(why) = self.family.refusal(self.backend) {
            return Err(PlanError::FamilyBackend {
                backend: self.backend,
                family: self.family,
                why,
            });
        }
        if self.family == crate::Family::Ipv6 {
            if self.mtu < crate::family::MIN_IPV6_MTU {
                return Err(PlanError::FamilyMtu(self.mtu));
            }
            if self.encap.is_some() {
                return Err(PlanError::FamilyEncap);
            }
        }
        let encap = match self.encap {
            Some(kind) => {
                if self.backend != Backend::Xfrm {
                    return Err(PlanError::EncapBackend(self.backend));
                }
                let encap = crate::encap::Encap::from_args(kind, self.encap_port)?;
                // Between real hosts both bind the port: never a system service's.
                let crate::encap::Encap::EspInUdp { port } = encap;
                if peer.is_some() && port < 1024 {
                    return Err(PlanError::EncapPeer(port));
                }
                Some(encap)
            }
            None => {
                if self.encap_port.is_some() {
                    ignored.push("--encap-port (only with --encap udp)".into());
                }
                None
            }
        };
        let sas = crate::sa_pairs::check(&self, suite, peer.is_some(), &mut ignored)?;
        let mut mode = self.mode.unwrap_or_default();
        if peer.is_some() {
            if self.vm.is_some() {
                return Err(PlanError::PeerWithVm);
            }
            if matches!(self.backend, Backend::Openvpn | Backend::Strongswan) || self.backend.is_wireguard() {
                return Err(PlanError::PeerBackend(self.backend));
            }
            // Between real machines only transport mode: its policies select the lab's
            // data port and nothing else, so no other traffic between the hosts is captured.
            if self.mode == Some(IpsecMode::Tunnel) {
                return Err(PlanError::PeerTunnelMode);
            }
            // The xfrm policies select the data ports: never a system service's (SSH is 22).
            if self.port < 1024 {
                return Err(PlanError::PeerPort(self.port));
            }
            if self.netem.is_some() {
                return Err(PlanError::NetemPeer);
            }
            mode = IpsecMode::Transport;
        }
        let modes = self.modes.validate(crate::modes::RunContext {
            peer: peer.is_some(),
            reverse: self.reverse,
            with_iperf3: self.with_iperf3,
            one_way_policies: self.backend == Backend::Xfrm && mode == IpsecMode::Transport,
        })?;
        Ok(RunPlan {
            backend: self.backend,
            suite,
            crypto,
            bytes: self.bytes,
            repeat: self.repeat,
            parallel: self.parallel,
            mtu: self.mtu,
            mode,
            seed: self.seed.unwrap_or_else(seed_from_clock),
            port: self.port,
            addressing: self.family.addressing(),
            vm: self.vm,
            with_iperf3: self.with_iperf3,
            ignored,
            reverse: self.reverse,
            peer,
            tunnel_threads: if self.backend == Backend::Userspace {
                self.tunnel_threads
            } else {
                1
            },
            encap,
            sas,
            pcrypt: self.pcrypt,
            family: self.family,
            netem: self.netem,
            modes,
            ceiling: !self.no_ceiling && self.backend.encrypts() && self.peer.is_none(),
        })
    }
}

/// Refuses a payload below [`MIN_PAYLOAD`]; `flag` names the option in the message.
pub fn check_payload(flag: &'static str, bytes: ByteSize) -> Result<(), PlanError> {
    if bytes < MIN_PAYLOAD {
        return Err(PlanError::PayloadTooSmall { flag, bytes });
    }
    Ok(())
}

/// A payload seed as the lab prints it (`0x18ecd9107f28b6c7`) or in decimal, so the seed of a
/// report can be given back to `--seed` to replay its payload.
pub fn parse_seed(s: &str) -> Result<u64, PlanError> {
    let t = s.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| PlanError::Seed(s.to_string()))
}

fn seed_from_clock() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "unknown backend {0:?}: use plain, xfrm, userspace, openvpn, strongswan, wireguard, wireguard-go or boringtun"
    )]
    UnknownBackend(String),
    #[error("unknown crypto implementation {0:?}: use auto, soft, rustcrypto or aws-lc")]
    UnknownCrypto(String),
    #[error("unknown IPsec mode {0:?}: use tunnel or transport")]
    UnknownMode(String),
    #[error(
        "{flag} {bytes} is too small to time: give at least {min} (below it the payload fits in the sockets' buffers and the clock measures copies, not the data path)",
        min = MIN_PAYLOAD
    )]
    PayloadTooSmall { flag: &'static str, bytes: ByteSize },
    #[error("{0:?} is not a seed: give it as printed (0x18ecd9107f28b6c7) or in decimal")]
    Seed(String),
    #[error("--repeat {0} is out of range: use 1 to {MAX_REPEAT}")]
    Repeat(u32),
    #[error("--parallel {0} is out of range: use 1 to 128 streams")]
    Parallel(u16),
    #[error("--mtu {0} is out of range: use 576 to 9000")]
    Mtu(u32),
    #[error("--port {0} leaves no room for the streams: use a port between 1 and 65535 minus --parallel")]
    Port(u16),
    #[error("--tunnel-threads {0} is out of range: use 1 to {MAX_TUNNEL_THREADS} (the kernel gives a TUN device at most {MAX_TUNNEL_THREADS} queues)")]
    TunnelThreads(u16),
    #[error("--cipher names the whole suite: give either --cipher or --key-bits/--hmac, not both")]
    CipherConflict,
    #[error("the {backend} backend cannot carry cipher {suite}: choose an encrypting suite, or --backend plain for the baseline")]
    SuiteNotSupported { backend: Backend, suite: CipherSuite },
    #[error("the {backend} backend cannot carry {suite}: WireGuard has one cipher, chacha20-poly1305 (give no --cipher/--key-bits/--hmac, or --cipher chacha20-poly1305)")]
    WireguardSuite { backend: Backend, suite: CipherSuite },
    #[error("the {0} backend does not run chacha20-poly1305 in this lab: use --backend wireguard, wireguard-go or userspace for it")]
    NoChaCha(Backend),
    #[error("--peer {0:?} is not HOST, HOST:PORT or [IPV6]:PORT (port 1-65535; default port 5299)")]
    Peer(String),
    #[error("--peer and --vm do not go together: with --peer each end runs on its own host's kernel, not in a VM; where this host's kernel has no ESP, use --backend userspace between the hosts, or boot a kernel with ESP (Debian's linux-image-amd64 has it)")]
    PeerWithVm,
    #[error("the {0} backend does not run between two hosts yet: use --backend xfrm, userspace or plain with --peer")]
    PeerBackend(Backend),
    #[error("--port {0} with --peer: the data ports must be 1024 or above, clear of system services such as SSH, which the run's policies must never select")]
    PeerPort(u16),
    #[error("--mode tunnel is not offered between two hosts: the lab uses transport mode there, whose policies select only its data port")]
    PeerTunnelMode,
    #[error("unknown encapsulation {0:?}: use udp (ESP in UDP, RFC 3948)")]
    UnknownEncap(String),
    #[error(
        "--encap udp needs the xfrm backend (kernel ESP SAs); the {0} backend has no ESP to encapsulate"
    )]
    EncapBackend(Backend),
    #[error("--encap-port {0} is not a port: use 1 to 65535 (default 4500)")]
    EncapPort(u16),
    #[error("--sas {0} is out of range: use 1 to {max} SA pairs", max = crate::sa_pairs::MAX_SA_PAIRS)]
    Sas(u16),
    #[error("--sas {sas} with {parallel} stream(s): each SA pair needs a stream of its own; add -P {sas}")]
    SasStreams { sas: u16, parallel: u16 },
    #[error("--sas above 1 does not run between two hosts yet: the server installs one SA pair")]
    PeerSas,
    #[error("--pcrypt needs the xfrm backend (kernel ESP SAs), not {0}")]
    PcryptBackend(Backend),
    #[error("--pcrypt wraps rfc4106(gcm(aes)): use --cipher aes-128-gcm or aes-256-gcm, not {0}")]
    PcryptSuite(CipherSuite),
    #[error("--pcrypt with --peer is not offered yet: the server does not instantiate crypto templates")]
    PeerPcrypt,
    #[error("--encap-port {0} with --peer: both hosts bind it, so it must be 1024 or above, clear of system services")]
    EncapPeer(u16),
    #[error("unknown address family {0:?}: use 4 or 6 (or -4/-6)")]
    UnknownFamily(String),
    #[error("the {backend} backend does not run over {family} in this lab: {why}; use plain, xfrm, userspace or openvpn with -6, or run it without -6")]
    FamilyBackend {
        backend: Backend,
        family: crate::Family,
        why: &'static str,
    },
    #[error("--mtu {0} with -6: IPv6 needs 1280 bytes inside the tunnels, so give --mtu {min} or more", min = crate::family::MIN_IPV6_MTU)]
    FamilyMtu(u32),
    #[error("--encap udp with -6 is not offered yet: ESP in UDP runs over IPv4")]
    FamilyEncap,
    #[error("--netem shapes the lab's own veth link; between two hosts shape the real link with tc on the machines themselves")]
    NetemPeer,
    #[error(transparent)]
    Netem(#[from] crate::netem::NetemError),
    #[error(transparent)]
    Modes(#[from] crate::modes::ModesError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipsec_modes_parse_from_the_names_json_and_ip_xfrm_use() {
        for m in IpsecMode::ALL {
            assert_eq!(m.name().parse::<IpsecMode>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
        assert_eq!(" Tunnel ".parse::<IpsecMode>().unwrap(), IpsecMode::Tunnel);
        assert!("beet".parse::<IpsecMode>().is_err());
    }

    #[test]
    fn bytes_20kb_is_refused_as_too_small_to_time() {
        for bytes in [1, 20_000, 999_999] {
            let e = RunRequest {
                bytes: ByteSize(bytes),
                ..Default::default()
            }
            .validate()
            .unwrap_err();
            assert!(matches!(e, PlanError::PayloadTooSmall { .. }), "{e}");
            assert!(e.to_string().contains("at least 1.0 MB"), "{e}");
        }
        let one_mb = RunRequest {
            bytes: MIN_PAYLOAD,
            ..Default::default()
        };
        assert!(one_mb.validate().is_ok());
    }

    #[test]
    fn seed_accepts_the_printed_hex_form() {
        assert_eq!(parse_seed("0x18ecd9107f28b6c7"), Ok(0x18ec_d910_7f28_b6c7));
        assert_eq!(parse_seed(&format!("{:#x}", u64::MAX)), Ok(u64::MAX));
        assert_eq!(parse_seed("42"), Ok(42));
        assert!(parse_seed("0xZZ").unwrap_err().to_string().contains("as printed"));
        assert!(parse_seed("-1").is_err());
    }

    #[test]
    fn ipv6_plans_take_the_ipv6_addresses_or_are_refused() {
        let v6 = |backend| RunRequest {
            backend,
            family: crate::Family::Ipv6,
            ..Default::default()
        };
        let plan = v6(Backend::Userspace).validate().unwrap();
        assert_eq!(plan.family, crate::Family::Ipv6);
        assert_eq!(plan.addressing, crate::Family::Ipv6.addressing());
        assert_eq!(plan.addressing.family(), crate::Family::Ipv6);
        assert!(v6(Backend::Strongswan).validate().is_ok());
        let small = RunRequest {
            mtu: 1280,
            ..v6(Backend::Xfrm)
        };
        assert_eq!(small.validate(), Err(PlanError::FamilyMtu(1280)));
        let encap = RunRequest {
            encap: Some(crate::encap::EncapKind::Udp),
            ..v6(Backend::Xfrm)
        };
        assert_eq!(encap.validate(), Err(PlanError::FamilyEncap));
        // Reports written before the family existed read as IPv4.
        let mut json = serde_json::to_value(RunRequest::default().validate().unwrap()).unwrap();
        json.as_object_mut().unwrap().remove("family");
        let old: RunPlan = serde_json::from_value(json).unwrap();
        assert_eq!(old.family, crate::Family::Ipv4);
    }

    #[test]
    fn defaults_validate_to_the_main_use() {
        let plan = RunRequest {
            backend: Backend::Xfrm,
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(plan.suite, CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256));
        assert_eq!(plan.bytes, ByteSize(100_000_000));
        assert!(plan.ignored.is_empty());
    }

    #[test]
    fn strongswan_needs_an_encrypting_suite_and_runs_locally_only() {
        let swan = || RunRequest {
            backend: Backend::Strongswan,
            ..Default::default()
        };
        assert!(swan().validate().is_ok());
        let none = RunRequest {
            cipher: Some(CipherSuite::None),
            ..swan()
        };
        assert!(matches!(
            none.validate(),
            Err(PlanError::SuiteNotSupported { .. })
        ));
        let peer = RunRequest {
            peer: Some("192.0.2.1".into()),
            ..swan()
        };
        assert_eq!(peer.validate(), Err(PlanError::PeerBackend(Backend::Strongswan)));
    }

    #[test]
    fn plain_ignores_cipher_options_and_says_so() {
        let plain = || RunRequest {
            backend: Backend::Plain,
            ..Default::default()
        };
        let plan = plain().validate().unwrap();
        assert_eq!(plan.suite, CipherSuite::None);
        assert!(plan.ignored.is_empty(), "nothing given, nothing ignored");
        let plan = RunRequest {
            key_bits: Some(KeyBits::Aes128),
            ..plain()
        }
        .validate()
        .unwrap();
        assert!(plan.ignored.iter().any(|i| i.contains("--key-bits")));
    }

    #[test]
    fn cipher_overrides_key_bits_and_hmac() {
        let req = RunRequest {
            backend: Backend::Userspace,
            cipher: Some(CipherSuite::AesGcm { key: KeyBits::Aes128 }),
            ..Default::default()
        };
        assert_eq!(
            req.validate().unwrap().suite,
            CipherSuite::AesGcm { key: KeyBits::Aes128 }
        );
    }

    #[test]
    fn out_of_range_numbers_are_refused() {
        let bad = [
            RunRequest {
                repeat: 0,
                ..Default::default()
            },
            RunRequest {
                parallel: 0,
                ..Default::default()
            },
            RunRequest {
                mtu: 100,
                ..Default::default()
            },
            RunRequest {
                port: 65535,
                parallel: 4,
                ..Default::default()
            },
            RunRequest {
                backend: Backend::Xfrm,
                cipher: Some(CipherSuite::None),
                ..Default::default()
            },
        ];
        for req in bad {
            assert!(req.clone().validate().is_err(), "{req:?} accepted");
        }
    }

    #[test]
    fn tunnel_threads_within_the_kernels_queues_and_only_for_the_userspace_backend() {
        let req = |backend, tunnel_threads| RunRequest {
            backend,
            tunnel_threads,
            ..Default::default()
        };
        assert_eq!(RunRequest::default().validate().unwrap().tunnel_threads, 1);
        let plan = req(Backend::Userspace, MAX_TUNNEL_THREADS).validate().unwrap();
        assert_eq!(plan.tunnel_threads, 256);
        for n in [0, MAX_TUNNEL_THREADS + 1] {
            assert_eq!(
                req(Backend::Userspace, n).validate(),
                Err(PlanError::TunnelThreads(n))
            );
            // Out of range is refused whatever the backend.
            assert_eq!(req(Backend::Xfrm, n).validate(), Err(PlanError::TunnelThreads(n)));
        }
        let xfrm = req(Backend::Xfrm, 2).validate().unwrap();
        assert_eq!(xfrm.tunnel_threads, 1);
        assert!(
            xfrm.ignored[0].starts_with("--tunnel-threads 2"),
            "{:?}",
            xfrm.ignored
        );
        let peer = RunRequest {
            peer: Some("198.18.0.2".into()),
            ..req(Backend::Userspace, 2)
        };
        // Between two hosts the server decides how many it allows.
        assert_eq!(peer.validate().unwrap().tunnel_threads, 2);
        // A plan written before the field existed reads as single-threaded.
        let mut json = serde_json::to_value(&plan).unwrap();
        json.as_object_mut().unwrap().remove("tunnel_threads");
        assert_eq!(serde_json::from_value::<RunPlan>(json).unwrap().tunnel_threads, 1);
    }

    #[test]
    fn peers_parse_with_the_default_port() {
        for (text, host, port) in [
            ("192.0.2.7", "192.0.2.7", DEFAULT_PEER_PORT),
            ("hostb:6000", "hostb", 6000),
            ("[2001:db8::1]:7", "2001:db8::1", 7),
            ("[2001:db8::1]", "2001:db8::1", DEFAULT_PEER_PORT),
        ] {
            let p: Peer = text.parse().unwrap();
            assert_eq!((p.host.as_str(), p.port), (host, port), "{text}");
        }
        for bad in ["", "h:0", "h:x", "h:70000", "[::1", "[::1]x", "a b"] {
            assert!(bad.parse::<Peer>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_peer_means_transport_mode_and_refuses_what_cannot_cross_hosts() {
        let req = |backend, mode, vm| RunRequest {
            backend,
            mode,
            vm,
            peer: Some("198.18.0.2".into()),
            reverse: true,
            ..Default::default()
        };
        let plan = req(Backend::Xfrm, None, None).validate().unwrap();
        assert_eq!(plan.mode, IpsecMode::Transport);
        assert!(plan.reverse);
        assert_eq!(plan.peer.unwrap().to_string(), "198.18.0.2:5299");
        let low_port = RunRequest {
            port: 22,
            ..req(Backend::Xfrm, None, None)
        };
        for bad in [
            low_port,
            req(Backend::Xfrm, Some(IpsecMode::Tunnel), None),
            req(Backend::Openvpn, None, None),
            req(Backend::Plain, None, Some(None)),
        ] {
            assert!(bad.validate().is_err());
        }
        // A local run has a direction too: b sends.
        let local = RunRequest {
            reverse: true,
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert!(local.reverse && local.ignored.is_empty());
    }

    #[test]
    fn names_parse() {
        assert_eq!("XFRM".parse::<Backend>().unwrap(), Backend::Xfrm);
        assert_eq!("strongswan".parse::<Backend>().unwrap(), Backend::Strongswan);
        assert_eq!("wireguard".parse::<Backend>().unwrap(), Backend::Wireguard);
        assert_eq!("WireGuard-Go".parse::<Backend>().unwrap(), Backend::WireguardGo);
        assert_eq!("boringtun".parse::<Backend>().unwrap(), Backend::Boringtun);
        let json = serde_json::to_string(&Backend::WireguardGo).unwrap();
        assert_eq!(json, "\"wireguard-go\"");
        assert_eq!("aws-lc".parse::<CryptoChoice>().unwrap(), CryptoChoice::AwsLc);
        assert!("nonsense".parse::<CryptoChoice>().is_err());
    }

    #[test]
    fn wireguard_carries_chacha20_poly1305_only() {
        let wg = |cipher, key_bits| RunRequest {
            backend: Backend::Wireguard,
            cipher,
            key_bits,
            ..Default::default()
        };
        assert_eq!(
            wg(None, None).validate().unwrap().suite,
            CipherSuite::ChaCha20Poly1305
        );
        assert_eq!(
            wg(Some(CipherSuite::ChaCha20Poly1305), None)
                .validate()
                .unwrap()
                .suite,
            CipherSuite::ChaCha20Poly1305
        );
        for bad in [
            wg(Some(CipherSuite::AesGcm { key: KeyBits::Aes256 }), None),
            wg(None, Some(KeyBits::Aes128)),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(matches!(e, PlanError::WireguardSuite { .. }), "{e}");
            assert!(e.to_string().contains("chacha20-poly1305"), "{e}");
        }
        let chacha = |backend| RunRequest {
            backend,
            cipher: Some(CipherSuite::ChaCha20Poly1305),
            ..Default::default()
        };
        assert!(chacha(Backend::Userspace).validate().is_ok());
        for b in [Backend::Xfrm, Backend::Openvpn] {
            assert_eq!(chacha(b).validate().unwrap_err(), PlanError::NoChaCha(b));
        }
        let peer = RunRequest {
            peer: Some("198.18.0.2".into()),
            ..wg(None, None)
        };
        assert_eq!(
            peer.validate().unwrap_err(),
            PlanError::PeerBackend(Backend::Wireguard)
        );
    }
}
