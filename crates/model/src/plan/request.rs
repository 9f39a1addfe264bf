//! The run as typed on the command line ([`RunRequest`]), and the one place it is checked
//! together and turned into a [`RunPlan`].

use super::{
    BackendPlan, CryptoChoice, IpsecMode, Link, Peer, Placement, PlanError, RunPlan, StrongswanPlan,
    UserspacePlan, VmKernel, Workload, XfrmPlan,
};
use crate::backend::{Backend, KernelNeed, OwnOptions, Suites};
use crate::encap::{Encap, EncapKind};
use crate::family::{Family, MIN_IPV6_MTU};
use crate::modes::{ModesRequest, RunContext};
use crate::netem::NetemSpec;
use crate::packets::{self, NdrSearch, PacketSize, Rate, UdpWorkload};
use crate::plan::limits::{
    MAX_MTU, MAX_PAYLOAD, MAX_REPEAT, MAX_SA_PAIRS, MAX_STREAMS, MAX_TUNNEL_THREADS, MIN_MTU, MIN_PAYLOAD,
};
use crate::rekey::{RekeyOrder, RekeySchedule, RekeyTarget, MAX_REKEY_RUN_S, MIN_EVERY_S, WIREGUARD_EVERY_S};
use crate::size::ByteSize;
use crate::suite::{CipherSuite, Hmac, KeyBits};

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
    pub encap: Option<EncapKind>,
    pub encap_port: Option<u16>,
    /// `--sas N` (xfrm): N SA pairs, stream i on pair i mod N, each selected by its port.
    pub sas: u16,
    /// `--pcrypt` (xfrm, AES-GCM): the SAs run on a `pcrypt(rfc4106(gcm(aes)))` instance.
    pub pcrypt: bool,
    /// `--per-cpu-sa` (xfrm, strongswan): an SA pair per CPU beside the pair (RFC 9611).
    pub per_cpu_sa: bool,
    /// `-6`/`--family 6`: IPv6 outer and inner addresses.
    pub family: Family,
    /// `--netem SPEC`: the WAN conditions the lab's link gets.
    pub netem: Option<NetemSpec>,
    /// `--time`, `--interval`, `--omit`, `--bidir` (crate::modes).
    pub modes: ModesRequest,
    /// `--no-ceiling`: leave out the crypto ceiling and the line rate.
    pub no_ceiling: bool,
    /// `--udp`, `--packet-size`, `--rate`, `--find-ndr`, `--latency`.
    pub packets: PacketsRequest,
    /// `--rekey-every`, `--rekey-order`, `--rekey-sa`.
    pub rekey: RekeyRequest,
}

/// The rekey options as typed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RekeyRequest {
    pub every_s: Option<f64>,
    pub order: Option<RekeyOrder>,
    pub sa: Option<RekeyTarget>,
}

/// The packet and latency options as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PacketsRequest {
    pub udp: bool,
    pub packet_size: Option<PacketSize>,
    pub rate: Option<Rate>,
    /// `--find-ndr [TOLERANCES]`: loss tolerances in percent.
    pub find_ndr: Option<Vec<f64>>,
    pub latency: bool,
}

/// The packet size `--udp` sends without `--packet-size`: a full packet inside a tunnel at
/// the usual 1500-byte MTU.
pub const DEFAULT_PACKET_SIZE: PacketSize = PacketSize::Fixed(1400);
/// Seconds of one of NDR's search trials.
pub const NDR_TRIAL_SECONDS: f64 = 0.5;
/// NDR's search stops when its bounds are within this share of the upper one.
pub const NDR_PRECISION: f64 = 0.02;

impl PacketsRequest {
    /// The UDP workload and NDR search, checked against the rest of the run.
    fn validate(
        &self,
        request: &RunRequest,
        modes: &crate::modes::Modes,
    ) -> Result<(Option<UdpWorkload>, Option<NdrSearch>), PlanError> {
        let refuse = |s: &str| Err(PlanError::Packets(s.to_string()));
        let udp = self.udp || self.find_ndr.is_some();
        if !udp {
            if self.packet_size.is_some() || self.rate.is_some() {
                return refuse("--packet-size and --rate set UDP datagrams: add --udp");
            }
            return Ok((None, None));
        }
        if request.parallel > 1 {
            return refuse("--udp sends one flow of datagrams: leave out -P");
        }
        if modes.bidir || modes.interval_s.is_some() || modes.omit_s > 0.0 || request.with_iperf3 {
            return refuse(
                "--udp reports each trial whole (--json-stream streams them): leave out --bidir, --interval, --omit and --with-iperf3",
            );
        }
        // The command line times a run that names neither --bytes nor --time.
        let Some(seconds) = modes.time_s else {
            return refuse("UDP trials are timed, not sized: give --time SECONDS instead of --bytes");
        };
        let packet_size = self.packet_size.unwrap_or(DEFAULT_PACKET_SIZE);
        let (smallest, largest) = (packet_size.smallest(), packet_size.largest());
        let least = packets::min_packet_size(request.family);
        if smallest < least {
            return Err(PlanError::Packets(format!(
                "--packet-size {smallest} is below the {least} bytes that hold the {family} and UDP headers and the lab's 16-byte header: give {least} or more",
                family = request.family
            )));
        }
        if largest > request.mtu {
            return Err(PlanError::Packets(format!(
                "--packet-size {largest} is larger than the link's MTU ({mtu}): give at most {mtu}, or raise --mtu",
                mtu = request.mtu
            )));
        }
        let ndr = match &self.find_ndr {
            Some(tolerances) => {
                if self.rate.is_some() {
                    return refuse("--find-ndr chooses the rates itself: leave out --rate");
                }
                Some(NdrSearch {
                    tolerances_pct: if tolerances.is_empty() {
                        vec![0.0, 0.5]
                    } else {
                        tolerances.clone()
                    },
                    trial_seconds: NDR_TRIAL_SECONDS.min(seconds),
                    precision: NDR_PRECISION,
                })
            }
            None => None,
        };
        Ok((
            Some(UdpWorkload {
                packet_size,
                rate: self.rate,
                seconds,
            }),
            ndr,
        ))
    }
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
            per_cpu_sa: false,
            family: Family::Ipv4,
            netem: None,
            modes: Default::default(),
            no_ceiling: false,
            packets: PacketsRequest::default(),
            rekey: RekeyRequest::default(),
        }
    }
}

/// What OpenVPN can do of a rekey schedule: renegotiate a TLS-mode (AEAD) tunnel every whole
/// number of seconds (`--reneg-sec` counts seconds), in its own order.
fn openvpn_rekey(every_s: f64, order: Option<RekeyOrder>, suite: CipherSuite) -> Result<(), String> {
    if !matches!(suite, CipherSuite::AesGcm { .. } | CipherSuite::ChaCha20Poly1305) {
        return Err(format!(
            "OpenVPN runs {suite} in static-key mode (--secret), which has no renegotiation: \
             use --cipher aes-256-gcm (TLS mode, which renegotiates its data channel key)"
        ));
    }
    if order.is_some() {
        return Err(
            "OpenVPN switches keys in its own order (the old key serves packets in flight for \
             its --tran-window after a renegotiation): leave out --rekey-order"
                .into(),
        );
    }
    if every_s < 1.0 || every_s.fract() != 0.0 {
        return Err(format!(
            "--rekey-every {every_s} with OpenVPN: its --reneg-sec counts whole seconds; \
             give a whole number of seconds, 1 or more"
        ));
    }
    Ok(())
}

impl RunRequest {
    pub fn validate(self) -> Result<RunPlan, PlanError> {
        let mut ignored = Vec::new();
        check_payload("--bytes", self.bytes)?;
        if self.repeat == 0 || self.repeat > MAX_REPEAT {
            return Err(PlanError::Repeat(self.repeat));
        }
        if self.parallel == 0 || self.parallel > MAX_STREAMS {
            return Err(PlanError::Parallel(self.parallel));
        }
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(PlanError::Mtu(self.mtu));
        }
        if self.port == 0 || u32::from(self.port) + u32::from(self.parallel) > 65535 {
            return Err(PlanError::Port(self.port));
        }
        if self.tunnel_threads == 0 || self.tunnel_threads > MAX_TUNNEL_THREADS {
            return Err(PlanError::TunnelThreads(self.tunnel_threads));
        }
        let description = self.backend.describe();
        let suite = self.suite(&mut ignored)?;
        let peer = self.peer.as_deref().map(str::parse::<Peer>).transpose()?;
        if let Some(why) = self.family.refusal(self.backend) {
            return Err(PlanError::FamilyBackend {
                backend: self.backend,
                family: self.family,
                why,
            });
        }
        if self.family == Family::Ipv6 {
            if self.mtu < MIN_IPV6_MTU {
                return Err(PlanError::FamilyMtu(self.mtu));
            }
            if self.encap.is_some() {
                return Err(PlanError::FamilyEncap);
            }
        }
        let placement = match (&peer, &self.vm) {
            (Some(_), Some(_)) => return Err(PlanError::PeerWithVm),
            (Some(peer), None) => {
                if !description.two_hosts {
                    return Err(PlanError::PeerBackend(self.backend));
                }
                // The xfrm policies select the data ports: never a system service's (SSH is 22).
                if self.port < 1024 {
                    return Err(PlanError::PeerPort(self.port));
                }
                if self.netem.is_some() {
                    return Err(PlanError::NetemPeer);
                }
                Placement::Peer(peer.clone())
            }
            (None, Some(kernel)) => {
                let kernel = VmKernel::from_arg(kernel.clone());
                // UML has no WireGuard module; its ESP, TUN and namespaces carry the rest.
                if matches!(kernel, VmKernel::Uml(_))
                    && matches!(description.kernel, Some(KernelNeed::Wireguard | KernelNeed::Ovpn))
                {
                    return Err(PlanError::UmlBackend(self.backend));
                }
                Placement::Vm(kernel)
            }
            (None, None) => Placement::Local,
        };
        let backend = match description.options {
            OwnOptions::None => BackendPlan::Bare(self.backend),
            OwnOptions::Xfrm => BackendPlan::Xfrm(self.xfrm(suite, peer.is_some())?),
            OwnOptions::Userspace => BackendPlan::Userspace(UserspacePlan {
                crypto: self.crypto.unwrap_or(CryptoChoice::Auto),
                tunnel_threads: self.tunnel_threads,
            }),
            OwnOptions::Strongswan => BackendPlan::Strongswan(StrongswanPlan {
                per_cpu_sa: self.per_cpu_sa,
            }),
        };
        self.not_for(&backend, &mut ignored)?;
        let one_way_policies = matches!(backend, BackendPlan::Xfrm(x) if x.mode == IpsecMode::Transport);
        let modes = self.modes.validate(RunContext {
            peer: peer.is_some(),
            udp: self.packets.udp || self.packets.find_ndr.is_some(),
            reverse: self.reverse,
            with_iperf3: self.with_iperf3,
            one_way_policies,
        })?;
        let (udp, ndr) = self.packets.validate(&self, &modes)?;
        let rekey = self.rekey(&modes, peer.is_some(), suite)?;
        let udp_run = udp.is_some();
        Ok(RunPlan {
            backend,
            suite,
            workload: Workload {
                bytes: self.bytes,
                repeat: self.repeat,
                parallel: self.parallel,
                seed: self.seed.unwrap_or_else(seed_from_clock),
                port: self.port,
                reverse: self.reverse,
                modes,
                with_iperf3: self.with_iperf3,
                // A UDP run's own time is its trials'; TCP's stop and time modes do not apply.
                udp,
                ndr,
                latency: self.packets.latency,
                rekey,
            },
            link: Link {
                mtu: self.mtu,
                family: self.family,
                addressing: self.family.addressing(),
                netem: self.netem,
            },
            placement,
            ignored,
            // The ceiling compares MB/s of a TCP transfer; a UDP run has its own baseline.
            ceiling: !self.no_ceiling && self.backend.encrypts() && peer.is_none() && !udp_run,
        })
    }

    /// `--rekey-every`/`--rekey-order`, checked against what a rekey run can report: one
    /// timed way whose timeline the rekeys are read off.
    fn rekey(
        &self,
        modes: &crate::modes::Modes,
        peer: bool,
        suite: CipherSuite,
    ) -> Result<Option<RekeySchedule>, PlanError> {
        let refuse = |s: String| Err(PlanError::Rekey(s));
        let Some(every_s) = self.rekey.every_s else {
            if self.rekey.order.is_some() {
                return refuse(
                    "--rekey-order says how --rekey-every rekeys: add --rekey-every SECONDS".into(),
                );
            }
            if self.rekey.sa.is_some() {
                return refuse("--rekey-sa says what --rekey-every rekeys: add --rekey-every SECONDS".into());
            }
            return Ok(None);
        };
        let b = self.backend;
        let description = b.describe();
        if description.rekey.is_none() {
            return refuse(format!(
                "the lab cannot rekey the {b} backend yet: use --backend {}",
                Backend::names_where(|d| d.rekey.is_some())
            ));
        }
        // OpenVPN's own refusals (its order among them) say what OpenVPN does instead.
        if b == Backend::Openvpn {
            openvpn_rekey(every_s, self.rekey.order, suite).map_err(PlanError::Rekey)?;
        }
        if b.is_wireguard() && every_s != WIREGUARD_EVERY_S {
            return refuse(format!(
                "--rekey-every {every_s} with {b}: WireGuard rekeys on its own, every {WIREGUARD_EVERY_S} s (the \
                 protocol's REKEY_AFTER_TIME), and nothing outside a device can start a new handshake without \
                 dropping the session; give --rekey-every {WIREGUARD_EVERY_S} and a --time above it (e.g. --time 125)"
            ));
        }
        if self.rekey.order.is_some() && description.options != OwnOptions::Xfrm {
            let own = match b {
                Backend::Strongswan => "charon rekeys its SAs make-before-break per RFC 7296",
                Backend::Userspace => {
                    "it always switches make-before-break: both ends install the new key, then both switch sending to it, then the old key is retired"
                }
                b if b.is_wireguard() => "the responder keeps the old keys until data arrives under the new",
                _ => "it switches make-before-break",
            };
            return refuse(format!(
                "--rekey-order is the order of the lab's own xfrm rekey; the {b} backend rekeys in its own order ({own}): leave out --rekey-order"
            ));
        }
        let sa = self.rekey.sa.unwrap_or_default();
        if sa == RekeyTarget::Ike && b != Backend::Strongswan {
            return refuse(format!(
                "--rekey-sa ike rekeys an IKE_SA, which only the strongswan backend has (the {b} backend has none); use --backend strongswan or leave out --rekey-sa"
            ));
        }
        if !(MIN_EVERY_S..=MAX_REKEY_RUN_S).contains(&every_s) {
            return refuse(format!(
                "--rekey-every {every_s} is out of range: give {MIN_EVERY_S} to {MAX_REKEY_RUN_S} seconds"
            ));
        }
        if peer {
            return refuse(
                "--rekey-every runs between two local namespaces: the server would have to rekey its end in step; leave out --peer".into(),
            );
        }
        if self.packets.find_ndr.is_some() || modes.bidir {
            return refuse("a rekey run follows one timed flow: leave out --find-ndr and --bidir".into());
        }
        if self.sas > 1 || self.pcrypt || self.per_cpu_sa {
            return refuse(
                "--rekey-every replaces the run's one SA pair: leave out --sas, --pcrypt and --per-cpu-sa"
                    .into(),
            );
        }
        let Some(time_s) = modes.time_s else {
            return refuse(
                "a rekey run is timed: give --time SECONDS (at least two rekey periods) instead of --bytes"
                    .into(),
            );
        };
        if time_s > MAX_REKEY_RUN_S {
            return refuse(format!(
                "--time {time_s} with --rekey-every: a rekey run records a 10 ms timeline for at most {MAX_REKEY_RUN_S} s; give a shorter --time"
            ));
        }
        if every_s >= time_s {
            return refuse(format!(
                "--rekey-every {every_s} with --time {time_s}: no rekey would happen; give a period below the run's time (e.g. --time {})",
                every_s * 3.5
            ));
        }
        Ok(Some(RekeySchedule {
            every_s,
            order: self.rekey.order.unwrap_or_default(),
            sa,
        }))
    }

    /// The suite the backend carries, from `--cipher` or `--key-bits`/`--hmac`.
    fn suite(&self, ignored: &mut Vec<String>) -> Result<CipherSuite, PlanError> {
        if self.cipher.is_some() && (self.key_bits.is_some() || self.hmac.is_some()) {
            return Err(PlanError::CipherConflict);
        }
        let cbc = CipherSuite::cbc(
            self.key_bits.unwrap_or(KeyBits::Aes256),
            self.hmac.unwrap_or(Hmac::Sha256),
        );
        let backend = self.backend;
        let suite = match backend.describe().suites {
            Suites::Unencrypted => {
                if self.key_bits.is_some() || self.hmac.is_some() || self.cipher.is_some() {
                    ignored.push("--key-bits/--hmac/--cipher (the plain backend does not encrypt)".into());
                }
                return Ok(CipherSuite::None);
            }
            Suites::ChaCha => {
                if self.key_bits.is_some() || self.hmac.is_some() {
                    return Err(PlanError::WireguardSuite { backend, suite: cbc });
                }
                let suite = self.cipher.unwrap_or(CipherSuite::ChaCha20Poly1305);
                if suite != CipherSuite::ChaCha20Poly1305 {
                    return Err(PlanError::WireguardSuite { backend, suite });
                }
                suite
            }
            Suites::Aes => {
                let suite = self.cipher.unwrap_or(cbc);
                // The lab's own tunnel has an AEAD engine for it; ESP and OpenVPN rows are not run.
                if suite == CipherSuite::ChaCha20Poly1305 {
                    return Err(PlanError::NoChaCha(backend));
                }
                suite
            }
            Suites::AesAndChaCha => self.cipher.unwrap_or(cbc),
            Suites::Aead => {
                if self.key_bits.is_some() || self.hmac.is_some() {
                    return Err(PlanError::DcoSuite(cbc));
                }
                let suite = self
                    .cipher
                    .unwrap_or(CipherSuite::AesGcm { key: KeyBits::Aes256 });
                if !matches!(suite, CipherSuite::AesGcm { .. } | CipherSuite::ChaCha20Poly1305) {
                    return Err(PlanError::DcoSuite(suite));
                }
                suite
            }
        };
        // A kernel SA without a cipher is no tunnel.
        if suite == CipherSuite::None && backend.describe().kernel.is_some() {
            return Err(PlanError::SuiteNotSupported { backend, suite });
        }
        Ok(suite)
    }

    /// xfrm's own part: its mode, encapsulation, SA pairs and pcrypt.
    fn xfrm(&self, suite: CipherSuite, peer: bool) -> Result<XfrmPlan, PlanError> {
        if self.sas == 0 || self.sas > MAX_SA_PAIRS {
            return Err(PlanError::Sas(self.sas));
        }
        let encap = match self.encap {
            Some(kind) => {
                let encap = Encap::from_args(kind, self.encap_port)?;
                // Between real hosts both bind the port: never a system service's.
                let Encap::EspInUdp { port } = encap;
                if peer && port < 1024 {
                    return Err(PlanError::EncapPeer(port));
                }
                Some(encap)
            }
            None => None,
        };
        if self.pcrypt {
            if !matches!(suite, CipherSuite::AesGcm { .. }) {
                return Err(PlanError::PcryptSuite(suite));
            }
            if peer {
                return Err(PlanError::PeerPcrypt);
            }
        }
        if self.per_cpu_sa {
            if peer {
                return Err(PlanError::PeerPerCpuSa);
            }
            if self.sas > 1 {
                return Err(PlanError::PerCpuSaWithSas(self.sas));
            }
        }
        if self.sas > 1 {
            if peer {
                return Err(PlanError::PeerSas);
            }
            // A pair without a stream would carry nothing: its counters would prove nothing.
            if self.sas > self.parallel {
                return Err(PlanError::SasStreams {
                    sas: self.sas,
                    parallel: self.parallel,
                });
            }
        }
        // Between real machines only transport mode: its policies select the lab's data
        // port and nothing else, so no other traffic between the hosts is captured.
        let mode = match (peer, self.mode) {
            (true, Some(IpsecMode::Tunnel)) => return Err(PlanError::PeerTunnelMode),
            (true, _) => IpsecMode::Transport,
            (false, mode) => mode.unwrap_or_default(),
        };
        Ok(XfrmPlan {
            mode,
            encap,
            sas: self.sas,
            pcrypt: self.pcrypt,
            per_cpu_sa: self.per_cpu_sa,
        })
    }

    /// Options given for another backend's part: refused where they would change what the
    /// user measures, noted in `ignored` where they would not.
    fn not_for(&self, backend: &BackendPlan, ignored: &mut Vec<String>) -> Result<(), PlanError> {
        let b = self.backend;
        if !matches!(backend, BackendPlan::Xfrm(_)) {
            if self.encap.is_some() {
                return Err(PlanError::EncapBackend(b));
            }
            if self.sas == 0 || self.sas > MAX_SA_PAIRS {
                return Err(PlanError::Sas(self.sas));
            }
            if self.pcrypt {
                return Err(PlanError::PcryptBackend(b));
            }
            if self.per_cpu_sa && !b.describe().options.per_cpu_sa() {
                return Err(PlanError::PerCpuSaBackend(b));
            }
            if self.sas > 1 {
                ignored.push(format!("--sas {} (only the xfrm backend has SAs)", self.sas));
            }
            if self.mode.is_some() {
                ignored.push("--mode (only the xfrm backend has IPsec modes)".into());
            }
        }
        if self.encap.is_none() && self.encap_port.is_some() {
            ignored.push("--encap-port (only with --encap udp)".into());
        }
        if !matches!(backend, BackendPlan::Userspace(_)) {
            // With --peer the server checks the count against its own limit.
            if self.tunnel_threads > 1 {
                ignored.push(format!(
                    "--tunnel-threads {} (only the userspace backend has tunnel threads)",
                    self.tunnel_threads
                ));
            }
            if let Some(crypto) = self.crypto {
                ignored.push(format!(
                    "--crypto {crypto} (only the userspace backend chooses its crypto implementation)"
                ));
            }
        }
        Ok(())
    }
}

/// Refuses a payload below [`MIN_PAYLOAD`] or above [`MAX_PAYLOAD`]; `flag` names the
/// option in the message.
pub fn check_payload(flag: &'static str, bytes: ByteSize) -> Result<(), PlanError> {
    if bytes < MIN_PAYLOAD {
        return Err(PlanError::PayloadTooSmall { flag, bytes });
    }
    if bytes > MAX_PAYLOAD {
        return Err(PlanError::PayloadTooLarge { flag, bytes });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::DEFAULT_PEER_PORT;

    #[test]
    fn ipsec_modes_parse_from_the_names_json_and_ip_xfrm_use() {
        for m in IpsecMode::ALL {
            assert_eq!(m.name().parse::<IpsecMode>().unwrap(), m);
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
        assert_eq!(" Tunnel ".parse::<IpsecMode>().unwrap(), IpsecMode::Tunnel);
        assert!("beet".parse::<IpsecMode>().is_err());
    }

    /// `run`'s line rate after the tunnel is timed as `matrix`'s plain row is: a sized
    /// plain transfer of a tunnel's payload is over too soon (20 MB once read 1,936 MB/s).
    #[test]
    fn the_line_rate_of_a_sized_run_is_timed_and_a_timed_one_keeps_its_time() {
        let sized = RunRequest {
            bytes: ByteSize(20_000_000),
            repeat: 3,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let line = sized.line_rate();
        assert_eq!(line.backend(), Backend::Plain);
        assert_eq!(line.workload().modes.time_s, Some(crate::LINE_RATE_SECONDS));
        assert_eq!(line.workload().repeat, 3);
        let timed = |time_s| {
            RunRequest {
                modes: crate::ModesRequest {
                    time_s: Some(time_s),
                    ..Default::default()
                },
                ..Default::default()
            }
            .validate()
            .unwrap()
            .line_rate()
            .workload()
            .modes
            .time_s
        };
        assert_eq!(timed(5.0), Some(5.0));
        assert_eq!(timed(0.5), Some(crate::LINE_RATE_SECONDS));
        // UDP trials (the bare link's NDR search) keep their own time.
        let udp = RunRequest {
            packets: PacketsRequest {
                udp: true,
                ..Default::default()
            },
            modes: crate::ModesRequest {
                time_s: Some(0.5),
                ..Default::default()
            },
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(udp.line_rate().workload().modes.time_s, Some(0.5));
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
    fn bytes_above_a_terabyte_are_refused_with_the_bound_and_time_suggested() {
        let e = RunRequest {
            bytes: "10TB".parse().unwrap(),
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(matches!(e, PlanError::PayloadTooLarge { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("at most 1000.00 GB") && text.contains("--time"),
            "{text}"
        );
        let largest = RunRequest {
            bytes: MAX_PAYLOAD,
            ..Default::default()
        };
        assert!(largest.validate().is_ok());
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
        assert_eq!(plan.link().family, crate::Family::Ipv6);
        assert_eq!(plan.link().addressing, crate::Family::Ipv6.addressing());
        assert_eq!(plan.link().addressing.family(), crate::Family::Ipv6);
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
        assert_eq!(old.link().family, crate::Family::Ipv4);
    }

    #[test]
    fn defaults_validate_to_the_main_use() {
        let plan = RunRequest {
            backend: Backend::Xfrm,
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(plan.suite(), CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256));
        assert_eq!(plan.workload().bytes, ByteSize(100_000_000));
        assert!(plan.ignored().is_empty());
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
        assert_eq!(plan.suite(), CipherSuite::None);
        assert!(plan.ignored().is_empty(), "nothing given, nothing ignored");
        let plan = RunRequest {
            key_bits: Some(KeyBits::Aes128),
            ..plain()
        }
        .validate()
        .unwrap();
        assert!(plan.ignored().iter().any(|i| i.contains("--key-bits")));
    }

    #[test]
    fn cipher_overrides_key_bits_and_hmac() {
        let req = RunRequest {
            backend: Backend::Userspace,
            cipher: Some(CipherSuite::AesGcm { key: KeyBits::Aes128 }),
            ..Default::default()
        };
        assert_eq!(
            req.validate().unwrap().suite(),
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
        assert_eq!(RunRequest::default().validate().unwrap().tunnel_threads(), 1);
        let plan = req(Backend::Userspace, MAX_TUNNEL_THREADS).validate().unwrap();
        assert_eq!(plan.tunnel_threads(), 256);
        for n in [0, MAX_TUNNEL_THREADS + 1] {
            assert_eq!(
                req(Backend::Userspace, n).validate(),
                Err(PlanError::TunnelThreads(n))
            );
            // Out of range is refused whatever the backend.
            assert_eq!(req(Backend::Xfrm, n).validate(), Err(PlanError::TunnelThreads(n)));
        }
        let xfrm = req(Backend::Xfrm, 2).validate().unwrap();
        assert_eq!(xfrm.tunnel_threads(), 1);
        assert!(
            xfrm.ignored()[0].starts_with("--tunnel-threads 2"),
            "{:?}",
            xfrm.ignored()
        );
        let peer = RunRequest {
            peer: Some("198.18.0.2".into()),
            ..req(Backend::Userspace, 2)
        };
        // Between two hosts the server decides how many it allows.
        assert_eq!(peer.validate().unwrap().tunnel_threads(), 2);
        // A plan written before the field existed reads as single-threaded.
        let mut json = serde_json::to_value(&plan).unwrap();
        json.as_object_mut().unwrap().remove("tunnel_threads");
        assert_eq!(
            serde_json::from_value::<RunPlan>(json).unwrap().tunnel_threads(),
            1
        );
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
        assert_eq!(plan.mode(), IpsecMode::Transport);
        assert!(plan.workload().reverse);
        assert_eq!(plan.peer().unwrap().to_string(), "198.18.0.2:5299");
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
        assert!(local.workload().reverse && local.ignored().is_empty());
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
            wg(None, None).validate().unwrap().suite(),
            CipherSuite::ChaCha20Poly1305
        );
        assert_eq!(
            wg(Some(CipherSuite::ChaCha20Poly1305), None)
                .validate()
                .unwrap()
                .suite(),
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

    fn sas_req(backend: Backend, sas: u16, parallel: u16) -> RunRequest {
        RunRequest {
            backend,
            sas,
            parallel,
            ..Default::default()
        }
    }

    #[test]
    fn sas_within_range_and_the_streams_and_only_for_xfrm() {
        assert_eq!(RunRequest::default().validate().unwrap().sas(), 1);
        assert_eq!(sas_req(Backend::Xfrm, 4, 4).validate().unwrap().sas(), 4);
        assert_eq!(sas_req(Backend::Xfrm, 2, 5).validate().unwrap().sas(), 2);
        assert_eq!(sas_req(Backend::Xfrm, 0, 1).validate(), Err(PlanError::Sas(0)));
        assert_eq!(
            sas_req(Backend::Xfrm, 65, 128).validate(),
            Err(PlanError::Sas(65))
        );
        assert_eq!(
            sas_req(Backend::Xfrm, 3, 2).validate(),
            Err(PlanError::SasStreams { sas: 3, parallel: 2 })
        );
        let userspace = sas_req(Backend::Userspace, 2, 2).validate().unwrap();
        assert_eq!(userspace.sas(), 1);
        assert!(
            userspace.ignored()[0].contains("--sas 2"),
            "{:?}",
            userspace.ignored()
        );
        let peer = RunRequest {
            peer: Some("192.0.2.1".into()),
            ..sas_req(Backend::Xfrm, 2, 2)
        };
        assert_eq!(peer.validate(), Err(PlanError::PeerSas));
    }

    #[test]
    fn pcrypt_needs_xfrm_with_aes_gcm_locally() {
        let gcm = CipherSuite::AesGcm { key: KeyBits::Aes128 };
        let pcrypt = |backend, cipher| RunRequest {
            backend,
            cipher: Some(cipher),
            pcrypt: true,
            ..Default::default()
        };
        assert!(pcrypt(Backend::Xfrm, gcm).validate().unwrap().pcrypt());
        assert!(!RunRequest::default().validate().unwrap().pcrypt());
        assert_eq!(
            pcrypt(Backend::Userspace, gcm).validate(),
            Err(PlanError::PcryptBackend(Backend::Userspace))
        );
        let cbc = CipherSuite::cbc(KeyBits::Aes256, crate::suite::Hmac::Sha256);
        assert_eq!(
            pcrypt(Backend::Xfrm, cbc).validate(),
            Err(PlanError::PcryptSuite(cbc))
        );
        let peer = RunRequest {
            peer: Some("192.0.2.1".into()),
            ..pcrypt(Backend::Xfrm, gcm)
        };
        assert_eq!(peer.validate(), Err(PlanError::PeerPcrypt));
    }

    /// `--per-cpu-sa`: xfrm's and strongswan's alone, a local run's, not with --sas or
    /// --rekey-every; the plan keeps it through its JSON (the VM's guest reads the plan so).
    #[test]
    fn per_cpu_sa_is_a_local_xfrm_or_strongswan_runs() {
        let req = |backend| RunRequest {
            backend,
            per_cpu_sa: true,
            parallel: 2,
            ..Default::default()
        };
        let plan = req(Backend::Xfrm).validate().unwrap();
        assert!(plan.per_cpu_sa());
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["per_cpu_sa"], true);
        let back: crate::RunPlan = serde_json::from_value(json).unwrap();
        assert!(back.per_cpu_sa());
        assert!(!RunRequest::default().validate().unwrap().per_cpu_sa());
        // strongSwan's charon negotiates them: its own part of the plan, the same flat field.
        let plan = req(Backend::Strongswan).validate().unwrap();
        assert_eq!(
            plan.backend_plan(),
            &BackendPlan::Strongswan(StrongswanPlan { per_cpu_sa: true })
        );
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["per_cpu_sa"], true);
        let back: crate::RunPlan = serde_json::from_value(json).unwrap();
        assert_eq!(back, plan);
        let plain_strongswan = RunRequest {
            backend: Backend::Strongswan,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let json = serde_json::to_value(&plain_strongswan).unwrap();
        assert!(json.get("per_cpu_sa").is_none(), "{json}");
        assert!(!serde_json::from_value::<crate::RunPlan>(json)
            .unwrap()
            .per_cpu_sa());
        assert!(matches!(
            RunRequest {
                rekey: RekeyRequest {
                    every_s: Some(2.0),
                    ..Default::default()
                },
                modes: crate::modes::ModesRequest {
                    time_s: Some(8.0),
                    ..Default::default()
                },
                ..req(Backend::Strongswan)
            }
            .validate(),
            Err(PlanError::Rekey(m)) if m.contains("--per-cpu-sa")
        ));
        assert_eq!(
            req(Backend::Userspace).validate(),
            Err(PlanError::PerCpuSaBackend(Backend::Userspace))
        );
        assert_eq!(
            RunRequest {
                sas: 2,
                ..req(Backend::Xfrm)
            }
            .validate(),
            Err(PlanError::PerCpuSaWithSas(2))
        );
        assert_eq!(
            RunRequest {
                peer: Some("192.0.2.1".into()),
                ..req(Backend::Xfrm)
            }
            .validate(),
            Err(PlanError::PeerPerCpuSa)
        );
    }

    #[test]
    fn plans_without_the_options_read_as_before() {
        let plan = RunRequest::default().validate().unwrap();
        let json = serde_json::to_value(&plan).unwrap();
        assert!(
            json.get("sas").is_none() && json.get("pcrypt").is_none(),
            "{json}"
        );
        let back: crate::RunPlan = serde_json::from_value(json).unwrap();
        assert_eq!((back.sas(), back.pcrypt()), (1, false));
    }

    fn rekey_request(every_s: f64, time_s: Option<f64>) -> RunRequest {
        RunRequest {
            modes: crate::ModesRequest {
                time_s,
                ..Default::default()
            },
            rekey: RekeyRequest {
                every_s: Some(every_s),
                order: Some(RekeyOrder::Naive),
                sa: None,
            },
            ..Default::default()
        }
    }

    /// A rekey plan carries its schedule to a guest (`--plan-file`) and back in reports.
    #[test]
    fn a_rekey_schedule_travels_with_the_plan() {
        let plan = rekey_request(1.0, Some(3.5)).validate().unwrap();
        let schedule = plan.workload().rekey.unwrap();
        assert_eq!((schedule.every_s, schedule.order), (1.0, RekeyOrder::Naive));
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["rekey"]["order"], "naive");
        let back: crate::RunPlan = serde_json::from_value(json).unwrap();
        assert_eq!(back, plan);
        // The plain line rate of the same run does not rekey.
        assert_eq!(plan.line_rate().workload().rekey, None);
    }

    /// The lab's own tunnel rekeys too, in its one order.
    #[test]
    fn the_userspace_tunnel_rekeys_make_before_break() {
        let plan = RunRequest {
            backend: Backend::Userspace,
            rekey: RekeyRequest {
                every_s: Some(1.0),
                order: None,
                sa: None,
            },
            ..rekey_request(1.0, Some(3.5))
        }
        .validate()
        .unwrap();
        let schedule = plan.workload().rekey.unwrap();
        assert_eq!(
            (schedule.every_s, schedule.order),
            (1.0, RekeyOrder::MakeBeforeBreak)
        );
    }

    /// Each WireGuard rekeys on its own, every 120 s: that period is watched, any other
    /// refused with the reason, and so is an order.
    #[test]
    fn wireguard_rekeys_only_on_its_own_schedule() {
        for backend in [Backend::Wireguard, Backend::WireguardGo, Backend::Boringtun] {
            let wireguard = |every_s: f64, order: Option<RekeyOrder>| RunRequest {
                backend,
                rekey: RekeyRequest {
                    every_s: Some(every_s),
                    order,
                    sa: None,
                },
                ..rekey_request(every_s, Some(125.0))
            };
            let plan = wireguard(120.0, None).validate().unwrap();
            assert_eq!(plan.workload().rekey.unwrap().every_s, 120.0, "{backend}");
            let e = wireguard(1.0, None).validate().unwrap_err().to_string();
            for says in [
                "rekeys on its own, every 120 s",
                "REKEY_AFTER_TIME",
                "--rekey-every 120",
            ] {
                assert!(e.contains(says), "{backend}: {e:?} should say {says:?}");
            }
            let e = wireguard(120.0, Some(RekeyOrder::Naive))
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains("keeps the old keys"), "{backend}: {e:?}");
        }
    }

    /// Every rekey option that could not act is refused with what to do instead.
    #[test]
    fn rekey_options_that_cannot_act_are_refused_with_the_fix() {
        let refused = |r: RunRequest, says: &str| {
            let e = r.validate().unwrap_err().to_string();
            assert!(e.contains(says), "{e:?} should say {says:?}");
        };
        refused(rekey_request(1.0, None), "give --time SECONDS");
        refused(rekey_request(4.0, Some(3.0)), "no rekey would happen");
        refused(rekey_request(0.01, Some(3.0)), "out of range");
        refused(rekey_request(1.0, Some(4000.0)), "give a shorter --time");
        refused(
            RunRequest {
                backend: Backend::Plain,
                ..rekey_request(1.0, Some(3.0))
            },
            "use --backend xfrm",
        );
        refused(
            RunRequest {
                peer: Some("192.0.2.1".into()),
                ..rekey_request(1.0, None)
            },
            "leave out --peer",
        );
        refused(
            RunRequest {
                sas: 2,
                parallel: 2,
                ..rekey_request(1.0, Some(3.0))
            },
            "leave out --sas",
        );
        refused(
            RunRequest {
                rekey: RekeyRequest {
                    every_s: None,
                    order: Some(RekeyOrder::Naive),
                    sa: None,
                },
                ..Default::default()
            },
            "add --rekey-every",
        );
        refused(
            RunRequest {
                backend: Backend::Userspace,
                ..rekey_request(1.0, Some(3.0))
            },
            "always switches make-before-break",
        );
        let mut bidir = rekey_request(1.0, Some(3.0));
        bidir.modes.bidir = true;
        refused(bidir, "leave out --find-ndr and --bidir");
    }

    /// OpenVPN renegotiates in TLS mode only, every whole number of seconds, in its own order.
    #[test]
    fn openvpn_rekeys_refuse_static_key_suites_fractions_and_an_order() {
        let openvpn = |cipher: Option<CipherSuite>, every_s: f64, order: Option<RekeyOrder>| RunRequest {
            backend: Backend::Openvpn,
            cipher,
            rekey: RekeyRequest {
                every_s: Some(every_s),
                order,
                sa: None,
            },
            ..rekey_request(every_s, Some(3.5))
        };
        let gcm = Some(CipherSuite::AesGcm { key: KeyBits::Aes256 });
        let refused = |r: RunRequest, says: &[&str]| {
            let e = r.validate().unwrap_err().to_string();
            for s in says {
                assert!(e.contains(s), "{e:?} should say {s:?}");
            }
        };
        let cbc = Some(CipherSuite::AesCbc {
            key: KeyBits::Aes256,
            hmac: Hmac::Sha256,
        });
        refused(
            openvpn(cbc, 1.0, None),
            &["static-key mode", "no renegotiation", "use --cipher aes-256-gcm"],
        );
        // The backend's default suite is CBC too.
        refused(openvpn(None, 1.0, None), &["use --cipher aes-256-gcm"]);
        refused(openvpn(Some(CipherSuite::None), 1.0, None), &["static-key mode"]);
        refused(
            openvpn(gcm, 1.0, Some(RekeyOrder::MakeBeforeBreak)),
            &["--tran-window", "leave out --rekey-order"],
        );
        refused(openvpn(gcm, 0.5, None), &["whole seconds", "1 or more"]);
        refused(openvpn(gcm, 1.5, None), &["whole seconds"]);
        let plan = openvpn(gcm, 1.0, None).validate().unwrap();
        let schedule = plan.workload().rekey.unwrap();
        assert_eq!(schedule.every_s, 1.0);
    }

    /// strongswan rekeys in charon's order, the CHILD_SA or the IKE_SA; an IKE_SA only
    /// strongswan has, the order only the lab's own xfrm rekey takes.
    #[test]
    fn charon_rekeys_in_its_own_order_and_only_strongswan_has_an_ike_sa() {
        let swan = |order, sa| RunRequest {
            backend: Backend::Strongswan,
            cipher: Some(crate::CipherSuite::AesGcm {
                key: crate::KeyBits::Aes256,
            }),
            rekey: RekeyRequest {
                every_s: Some(1.0),
                order,
                sa,
            },
            ..rekey_request(1.0, Some(3.5))
        };
        let e = swan(Some(RekeyOrder::Naive), None)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("charon rekeys") && e.contains("make-before-break per RFC 7296"),
            "{e}"
        );
        for sa in [None, Some(RekeyTarget::Child), Some(RekeyTarget::Ike)] {
            let plan = swan(None, sa).validate().unwrap();
            assert_eq!(plan.workload().rekey.unwrap().sa, sa.unwrap_or_default());
        }
        let mut xfrm = rekey_request(1.0, Some(3.5));
        xfrm.rekey.sa = Some(RekeyTarget::Ike);
        let e = xfrm.validate().unwrap_err().to_string();
        assert!(e.contains("only the strongswan backend has"), "{e}");
        let mut no_every = RunRequest::default();
        no_every.rekey.sa = Some(RekeyTarget::Ike);
        let e = no_every.validate().unwrap_err().to_string();
        assert!(e.contains("add --rekey-every"), "{e}");
    }
}
