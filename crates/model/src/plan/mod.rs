//! The validated run plan: every decision about a run, checked before anything touches the
//! kernel. The CLI parses raw arguments into a [`RunRequest`]; [`RunRequest::validate`] turns
//! it into a [`RunPlan`] or refuses with a [`PlanError`] that says what to do instead.
//!
//! A plan is split by concern and read through methods: the [`Workload`] (what is sent), the
//! [`Link`] (what it crosses), the [`Placement`] (where the ends run) and the backend's own
//! part ([`BackendPlan`]: xfrm's SAs, the userspace tunnel's crypto and threads). The plain
//! line rate of a run is the same plan with the plain backend part ([`RunPlan::line_rate`]).
//! On disk a plan is one flat object with the field names reports always had: the parts
//! read their own fields (`form`), and the plan writes them in the order reports always had.

mod error;
mod form;
pub mod limits;
mod request;

use std::fmt;
use std::str::FromStr;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::backend::{Backend, OwnOptions};
use crate::encap::Encap;
use crate::family::{Addressing, Family};
use crate::modes::Modes;
use crate::netem::NetemSpec;
use crate::packets::{NdrSearch, UdpWorkload};
use crate::size::ByteSize;
use crate::suite::CipherSuite;

pub use error::PlanError;
pub use limits::{
    DEFAULT_PEER_PORT, MAX_MTU, MAX_REPEAT, MAX_SA_PAIRS, MAX_STREAMS, MAX_TUNNEL_THREADS, MIN_MTU,
    MIN_PAYLOAD,
};
pub use request::{check_payload, parse_seed, PacketsRequest, RekeyRequest, RunRequest};

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
    /// OpenSSL's libcrypto, loaded at run time: what `openssl speed` and OpenVPN compute with.
    Libcrypto,
}

impl CryptoChoice {
    pub const ALL: [CryptoChoice; 5] = [
        CryptoChoice::Auto,
        CryptoChoice::Soft,
        CryptoChoice::Rustcrypto,
        CryptoChoice::AwsLc,
        CryptoChoice::Libcrypto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CryptoChoice::Auto => "auto",
            CryptoChoice::Soft => "soft",
            CryptoChoice::Rustcrypto => "rustcrypto",
            CryptoChoice::AwsLc => "aws-lc",
            CryptoChoice::Libcrypto => "libcrypto",
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

/// What is sent, the same whatever carries it. Fields a report may lack (older reports
/// did not have them) read as their defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Workload {
    pub bytes: ByteSize,
    /// Transfers, each measured on its own (`--repeat`).
    pub repeat: u32,
    /// TCP streams per transfer (`-P`).
    pub parallel: u16,
    /// Seed of the pseudo-random payload; recorded so a failed verification can be replayed.
    pub seed: u64,
    /// The first data port; stream i uses `port + i`.
    pub port: u16,
    /// Data flows from b to a, or from the peer to this host (`--reverse`).
    #[serde(default)]
    pub reverse: bool,
    /// `--time`, `--interval`, `--omit`, `--bidir`; the default: a forward `--bytes` run.
    #[serde(default)]
    pub modes: Modes,
    /// Also measure iperf3 over the same data path, one run after each of the lab's.
    #[serde(default)]
    pub with_iperf3: bool,
    /// `--udp`: timed trials of datagrams instead of TCP streams.
    #[serde(default)]
    pub udp: Option<UdpWorkload>,
    /// `--find-ndr`: the UDP trials search for the highest rate within each loss tolerance.
    #[serde(default)]
    pub ndr: Option<NdrSearch>,
    /// `--latency`: round-trip probes idle and under the run's load.
    #[serde(default)]
    pub latency: bool,
    /// `--rekey-every`: the backend's keys are replaced on this schedule while data flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rekey: Option<crate::rekey::RekeySchedule>,
}

impl Workload {
    /// The UDP port the latency probes go to: the first above the data ports (end B's
    /// responder; end A probes).
    pub fn probe_port(&self) -> u16 {
        self.port.saturating_add(self.parallel)
    }
}

/// What the data crosses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Link {
    pub mtu: u32,
    /// IPv4 or IPv6 (`-6`), outer and inner; reports before the family existed were IPv4.
    #[serde(default)]
    pub family: Family,
    pub addressing: Addressing,
    /// `--netem`: the netem qdisc on both ends of the lab's link; None: the bare veth.
    #[serde(default)]
    pub netem: Option<NetemSpec>,
}

/// Where the two ends run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Two network namespaces of this host.
    Local,
    /// Two namespaces in a VM's kernel (`--vm`).
    Vm(VmKernel),
    /// This host and an `ipsec-lab serve` on another (`--peer`).
    Peer(Peer),
}

/// Which kernel a VM run boots (`--vm`, `--vm KERNEL`, `--vm uml`, `--vm auto`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmKernel {
    /// The stock kernel the lab installs, under virtme-ng (KVM, or TCG emulation).
    Stock,
    /// This kernel image, under virtme-ng.
    Image(String),
    /// User-mode Linux: Debian's `linux.uml`, a kernel that runs as an ordinary process at
    /// native speed, with no KVM and no emulation (one CPU, generic C crypto only). None:
    /// the package's; a release: one `lab/second-uml.sh` installed (`--vm uml:RELEASE`).
    Uml(Option<String>),
    /// A kernel other than this host's only where this one lacks what the backend needs:
    /// KVM's stock kernel where KVM boots it, else UML for what UML carries, else TCG.
    Auto,
}

impl VmKernel {
    /// From `--vm [KERNEL]` as given: no value is the stock kernel, `auto` is [`VmKernel::Auto`].
    pub fn from_arg(kernel: Option<String>) -> VmKernel {
        match kernel {
            None => VmKernel::Stock,
            Some(k) if k == "auto" => VmKernel::Auto,
            Some(k) if k == "uml" => VmKernel::Uml(None),
            Some(k) => match k.strip_prefix("uml:") {
                Some(release) => VmKernel::Uml(Some(release.to_string())),
                None => VmKernel::Image(k),
            },
        }
    }

    /// The kernel as `--vm` takes it ([`VmKernel::from_arg`]'s inverse).
    pub fn arg(&self) -> Option<String> {
        match self {
            VmKernel::Stock => None,
            VmKernel::Image(k) => Some(k.clone()),
            VmKernel::Auto => Some("auto".to_string()),
            VmKernel::Uml(None) => Some("uml".to_string()),
            VmKernel::Uml(Some(release)) => Some(format!("uml:{release}")),
        }
    }

    /// The kernel image to boot; None: the stock kernel.
    pub fn image(&self) -> Option<&str> {
        match self {
            VmKernel::Image(k) => Some(k),
            VmKernel::Stock | VmKernel::Uml(_) | VmKernel::Auto => None,
        }
    }
}

/// The xfrm backend's own options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct XfrmPlan {
    pub mode: IpsecMode,
    /// ESP in UDP (`--encap udp`); None: ESP as IP protocol 50.
    #[serde(default)]
    pub encap: Option<Encap>,
    /// SA pairs (`--sas`), stream i on pair i mod N; 1: one pair for every stream.
    #[serde(default = "one")]
    pub sas: u16,
    /// The SAs on a `pcrypt(rfc4106(gcm(aes)))` instance (`--pcrypt`).
    #[serde(default)]
    pub pcrypt: bool,
    /// Per-CPU SAs (`--per-cpu-sa`, RFC 9611, Linux 6.13): beside the pair, an SA pair per
    /// CPU of the kernel carrying the run, each sending only from its CPU.
    #[serde(default)]
    pub per_cpu_sa: bool,
}

impl Default for XfrmPlan {
    fn default() -> Self {
        XfrmPlan {
            mode: IpsecMode::Tunnel,
            encap: None,
            sas: 1,
            pcrypt: false,
            per_cpu_sa: false,
        }
    }
}

/// The strongswan backend's own options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StrongswanPlan {
    /// Per-CPU CHILD_SAs (`--per-cpu-sa`, RFC 9611: strongSwan 6, Linux 6.13): charon
    /// negotiates one for each CPU whose packets the kernel acquires an SA for, beside the
    /// fallback CHILD_SA without a CPU.
    pub per_cpu_sa: bool,
}

/// The userspace tunnel's own options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct UserspacePlan {
    pub crypto: CryptoChoice,
    /// Threads per end, one per queue of a multi-queue TUN device (1: single-threaded);
    /// plans before the option existed were single-threaded.
    #[serde(default = "one")]
    pub tunnel_threads: u16,
}

/// The backend's own part of a plan: the options its description says it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendPlan {
    /// A backend with no options of its own.
    Bare(Backend),
    Xfrm(XfrmPlan),
    Userspace(UserspacePlan),
    Strongswan(StrongswanPlan),
}

impl BackendPlan {
    /// `backend` with the defaults of its own options.
    pub fn default_for(backend: Backend) -> BackendPlan {
        match backend.describe().options {
            OwnOptions::None => BackendPlan::Bare(backend),
            OwnOptions::Xfrm => BackendPlan::Xfrm(XfrmPlan::default()),
            OwnOptions::Userspace => BackendPlan::Userspace(UserspacePlan {
                crypto: CryptoChoice::Auto,
                tunnel_threads: 1,
            }),
            OwnOptions::Strongswan => BackendPlan::Strongswan(StrongswanPlan::default()),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            BackendPlan::Bare(b) => *b,
            BackendPlan::Xfrm(_) => Backend::Xfrm,
            BackendPlan::Userspace(_) => Backend::Userspace,
            BackendPlan::Strongswan(_) => Backend::Strongswan,
        }
    }
}

/// A run that has passed every check that can be made without touching the kernel.
/// Read flat, each part its own fields (`form`); written below.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RunPlan {
    #[serde(flatten)]
    backend: BackendPlan,
    suite: CipherSuite,
    #[serde(flatten)]
    workload: Workload,
    #[serde(flatten)]
    link: Link,
    #[serde(flatten)]
    placement: Placement,
    /// Options that were given but do not apply to this backend, for the user to see.
    ignored: Vec<String>,
    /// Time the suite's crypto ceiling and the plain line rate in the same run (a local
    /// run of an encrypting backend, unless `--no-ceiling`).
    #[serde(default)]
    ceiling: bool,
}

/// One flat object, each part's fields in the order reports have always had them (a new
/// field goes last), a field at its default left out where older plans did not have it.
impl Serialize for RunPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn unless<S: SerializeStruct, T: Serialize>(
            m: &mut S,
            key: &'static str,
            value: &T,
            skip: impl FnOnce(&T) -> bool,
        ) -> Result<(), S::Error> {
            match skip(value) {
                true => m.skip_field(key),
                false => m.serialize_field(key, value),
            }
        }
        let (w, l) = (&self.workload, &self.link);
        let mut m = s.serialize_struct("RunPlan", 28)?;
        m.serialize_field("backend", &self.backend())?;
        m.serialize_field("suite", &self.suite)?;
        m.serialize_field("crypto", &self.crypto())?;
        m.serialize_field("bytes", &w.bytes)?;
        m.serialize_field("repeat", &w.repeat)?;
        m.serialize_field("parallel", &w.parallel)?;
        m.serialize_field("mtu", &l.mtu)?;
        m.serialize_field("mode", &self.mode())?;
        m.serialize_field("seed", &w.seed)?;
        m.serialize_field("port", &w.port)?;
        m.serialize_field("addressing", &l.addressing)?;
        m.serialize_field("vm", &self.vm().map(VmKernel::arg))?;
        m.serialize_field("with_iperf3", &w.with_iperf3)?;
        m.serialize_field("ignored", &self.ignored)?;
        unless(&mut m, "peer", &self.peer(), Option::is_none)?;
        m.serialize_field("reverse", &w.reverse)?;
        m.serialize_field("tunnel_threads", &self.tunnel_threads())?;
        unless(&mut m, "encap", &self.encap(), Option::is_none)?;
        unless(&mut m, "sas", &self.sas(), is_one)?;
        unless(&mut m, "pcrypt", &self.pcrypt(), |p| !p)?;
        unless(&mut m, "per_cpu_sa", &self.per_cpu_sa(), |p| !p)?;
        m.serialize_field("family", &l.family)?;
        unless(&mut m, "netem", &l.netem, Option::is_none)?;
        unless(&mut m, "modes", &w.modes, Modes::is_default)?;
        m.serialize_field("ceiling", &self.ceiling)?;
        unless(&mut m, "udp", &w.udp, Option::is_none)?;
        unless(&mut m, "ndr", &w.ndr, Option::is_none)?;
        unless(&mut m, "latency", &w.latency, |l| !l)?;
        unless(&mut m, "rekey", &w.rekey, Option::is_none)?;
        m.end()
    }
}

impl RunPlan {
    /// A plan from its parts, for a server that decided them itself; the parts are checked
    /// where they were decided.
    pub fn new(
        backend: BackendPlan,
        suite: CipherSuite,
        workload: Workload,
        link: Link,
        placement: Placement,
    ) -> RunPlan {
        RunPlan {
            backend,
            suite,
            workload,
            link,
            placement,
            ignored: Vec::new(),
            ceiling: false,
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend.backend()
    }

    pub fn backend_plan(&self) -> &BackendPlan {
        &self.backend
    }

    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Options that were given but do not apply to this backend.
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// Whether the run times its crypto ceiling and the plain line rate.
    pub fn times_ceiling(&self) -> bool {
        self.ceiling
    }

    /// The other host of a two-machine run; None for namespaces of one kernel.
    pub fn peer(&self) -> Option<&Peer> {
        match &self.placement {
            Placement::Peer(p) => Some(p),
            _ => None,
        }
    }

    /// The kernel of a VM run; None where the run is not placed in a VM.
    pub fn vm(&self) -> Option<&VmKernel> {
        match &self.placement {
            Placement::Vm(k) => Some(k),
            _ => None,
        }
    }

    /// The xfrm part; None for every other backend.
    pub fn xfrm(&self) -> Option<&XfrmPlan> {
        match &self.backend {
            BackendPlan::Xfrm(x) => Some(x),
            _ => None,
        }
    }

    /// The userspace tunnel's part; None for every other backend.
    pub fn userspace(&self) -> Option<&UserspacePlan> {
        match &self.backend {
            BackendPlan::Userspace(u) => Some(u),
            _ => None,
        }
    }

    /// The userspace tunnel's crypto implementation; `auto` for every other backend.
    pub fn crypto(&self) -> CryptoChoice {
        self.userspace().map_or(CryptoChoice::Auto, |u| u.crypto)
    }

    /// Tunnel threads per end; 1 for every backend without them.
    pub fn tunnel_threads(&self) -> u16 {
        self.userspace().map_or(1, |u| u.tunnel_threads)
    }

    /// xfrm's IPsec mode; tunnel (the default) elsewhere.
    pub fn mode(&self) -> IpsecMode {
        self.xfrm().map_or(IpsecMode::Tunnel, |x| x.mode)
    }

    pub fn encap(&self) -> Option<Encap> {
        self.xfrm().and_then(|x| x.encap)
    }

    /// xfrm SA pairs; 1 elsewhere.
    pub fn sas(&self) -> u16 {
        self.xfrm().map_or(1, |x| x.sas)
    }

    pub fn pcrypt(&self) -> bool {
        self.xfrm().is_some_and(|x| x.pcrypt)
    }

    /// Per-CPU SAs (`--per-cpu-sa`): the xfrm backend installs them, strongSwan's charon
    /// negotiates them.
    pub fn per_cpu_sa(&self) -> bool {
        match &self.backend {
            BackendPlan::Xfrm(x) => x.per_cpu_sa,
            BackendPlan::Strongswan(s) => s.per_cpu_sa,
            BackendPlan::Bare(_) | BackendPlan::Userspace(_) => false,
        }
    }

    /// The plain line rate of this run: the same workload over the same link and
    /// placement, carried by the plain backend, without interval lines. TCP transfers are
    /// timed ([`crate::LINE_RATE_SECONDS`] at least), not sized: the line rate is many times
    /// a tunnel's, and a payload that suits the tunnel is over too soon to time (20 MB over
    /// veth once read 1,936 MB/s, 30 MB 500). UDP trials keep their own time.
    pub fn line_rate(&self) -> RunPlan {
        let modes = self.workload.modes;
        let time_s = match (&self.workload.udp, modes.time_s) {
            (Some(_), t) => t,
            (None, Some(t)) => Some(t.max(crate::LINE_RATE_SECONDS)),
            (None, None) => Some(modes.omit_s + crate::LINE_RATE_SECONDS),
        };
        RunPlan {
            backend: BackendPlan::Bare(Backend::Plain),
            suite: CipherSuite::None,
            workload: Workload {
                modes: Modes {
                    interval_s: None,
                    time_s,
                    ..modes
                },
                rekey: None,
                ..self.workload.clone()
            },
            ignored: Vec::new(),
            ceiling: false,
            ..self.clone()
        }
    }

    /// This plan over another link (a two-host run's, once the hosts agreed on it).
    pub fn with_link(&self, link: Link) -> RunPlan {
        RunPlan { link, ..self.clone() }
    }

    /// This plan placed elsewhere: a VM's guest runs the host's plan in its own namespaces.
    pub fn with_placement(&self, placement: Placement) -> RunPlan {
        RunPlan {
            placement,
            ..self.clone()
        }
    }

    /// This plan with another backend part (a sweep's cell variant: ESP in UDP, pcrypt).
    pub fn with_backend(&self, backend: BackendPlan) -> RunPlan {
        RunPlan {
            backend,
            ..self.clone()
        }
    }
}

/// 1, what a count read from a plan without it was.
fn one() -> u16 {
    1
}

fn is_one(n: &u16) -> bool {
    *n == 1
}

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
