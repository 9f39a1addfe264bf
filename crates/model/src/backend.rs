//! What each backend is and what it can do, written once. Every check reads a backend's
//! [`Description`]: the plan's refusals, a server's limits, the sweep's rows, where a run is
//! placed (host or VM), whose CPU a run reports and where a row's crypto ceiling comes from.
//! Adding a backend is a variant here, its description, its evidence module
//! (`evidence::<backend>`) and its module in the lab crate; the compiler names the rest.
//! Messages that list backends build the list from the descriptions
//! ([`Backend::names_where`]).
//!
//! Leaves out how a backend is started (the lab crate's `backend` modules) and the wording of
//! refusals (`plan::PlanError`, `control`'s `RequestError`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::suite::CipherSuite;

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
    /// Real OpenVPN 2.7 whose data channel the kernel's `ovpn` module carries (DCO).
    #[serde(rename = "openvpn-dco")]
    OpenvpnDco,
}

/// Which cipher suites a backend carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suites {
    /// None: the baseline does not encrypt, and cipher options are ignored.
    Unencrypted,
    /// AES-CBC with or without HMAC-SHA256, and AES-GCM (ESP, OpenVPN).
    Aes,
    /// AES and ChaCha20-Poly1305 (the lab's own tunnel).
    AesAndChaCha,
    /// ChaCha20-Poly1305 only (WireGuard).
    ChaCha,
    /// AES-GCM and ChaCha20-Poly1305, no CBC (OpenVPN's data channel offload).
    Aead,
}

/// What a backend needs of the kernel it runs on; where the host's kernel lacks it, the run
/// can go to a VM (`--vm`), and a sweep's VM runs these rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelNeed {
    Esp,
    Wireguard,
    /// OpenVPN's data channel offload, the `ovpn` module (Linux 6.16+).
    Ovpn,
}

/// The backend's own options beyond the suite and the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnOptions {
    None,
    /// `--mode`, `--encap`, `--sas`, `--pcrypt`.
    Xfrm,
    /// `--crypto`, `--tunnel-threads`.
    Userspace,
    /// `--per-cpu-sa`: charon negotiates a CHILD_SA per CPU (strongSwan 6).
    Strongswan,
}

impl OwnOptions {
    /// Whether `--per-cpu-sa` is among them: kernel ESP SAs, per CPU (RFC 9611).
    pub fn per_cpu_sa(self) -> bool {
        matches!(self, OwnOptions::Xfrm | OwnOptions::Strongswan)
    }
}

/// Whose CPU carries the tunnel, so whose time a run reports per interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelCpuSource {
    /// No tunnel of its own (plain).
    NoTunnel,
    /// The kernel's softirq time, charged to nobody.
    Kernel,
    /// Threads of the lab's own process whose names start with this prefix.
    Threads(&'static str),
    /// A daemon the lab starts, a child process of this name.
    Daemon(&'static str),
}

/// Where a row's crypto ceiling comes from: the implementation the backend encrypts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingSource {
    /// The row does not encrypt.
    NoCrypto,
    /// The lab's own implementation, the one the run chose (`--crypto`).
    LabCrypto,
    /// The kernel's crypto API driver, through AF_ALG.
    KernelCrypto,
    /// `openssl speed` of the OpenSSL the daemon links.
    Openssl,
    /// ring's ChaCha20-Poly1305 (boringtun's).
    Ring,
    /// Not timed, and why.
    Untimed(&'static str),
}

/// How a backend spreads a tunnel over cores, for a sweep's `--threads` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// Tunnel threads of its own (`--tunnel-threads`).
    TunnelThreads,
    /// SA pairs, one per stream (`--sas`).
    SaPairs,
    /// No such knob, and why (said in the row at a count above 1).
    None(&'static str),
}

/// Everything the lab knows about one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Description {
    pub backend: Backend,
    pub name: &'static str,
    /// What carries the payload, in a line of the docs' table.
    pub summary: &'static str,
    pub suites: Suites,
    /// Why the backend does not run over IPv6 in the lab; None: it does.
    pub no_ipv6: Option<&'static str>,
    /// Whether it runs between two hosts (`--peer`, `serve`).
    pub two_hosts: bool,
    pub kernel: Option<KernelNeed>,
    pub options: OwnOptions,
    pub cpu: TunnelCpuSource,
    pub ceiling: CeilingSource,
    pub threads: Threads,
    /// The data crosses the link inside a tunnel with addresses of its own (the inner
    /// addresses), rather than between the outer ones. xfrm's transport mode does not.
    pub tunnelled: bool,
    /// What one rekey does under `--rekey-every`, in a line; None: the lab cannot rekey it.
    pub rekey: Option<&'static str>,
}

/// Why the DCO row has no CBC cells, and the plan refuses CBC for it.
pub const DCO_NO_CBC: &str =
    "OpenVPN's data channel offload carries AEAD ciphers only (AES-GCM, ChaCha20-Poly1305): \
                              CBC+HMAC stays in OpenVPN's userspace, which --backend openvpn measures";

const KERNEL_THREADS: &str =
    "the kernel's tunnel has no tunnel threads: each packet is encrypted on the CPU it \
                              is on (one SA pair or peer for every stream here)";
const OWN_WORKERS: &str =
    "the implementation chooses its own worker threads; the lab does not set their number";

const XFRM_REKEY: &str = "a fresh SA pair (new SPIs and keys, same reqid) replaces the old one: \
                          make-before-break adds the new inbound SAs, then the new outbound ones, deletes the old \
                          outbound SAs (the switch) and the old inbound ones 200 ms later; naive deletes the old pair \
                          before adding the new";

const OPENVPN_REKEY: &str = "OpenVPN renegotiates on its own timer, the lab cannot trigger one: end a (the TLS server) \
                             runs with --reneg-sec N N (end b with 0, so one end starts them), and each renegotiation \
                             is read off end a's log: at its \"TLS: soft reset\", the switch lasting until the new TLS \
                             session is up (\"Control Channel:\"), when data moves to the new key; the old key serves \
                             packets in flight for --tran-window";

const STRONGSWAN_REKEY: &str = "charon rekeys on the lab's command (`swanctl --rekey` to the initiator): \
                                a CREATE_CHILD_SA exchange makes a new CHILD_SA (new SPIs and keys, its SAs \
                                installed before the old ones go, RFC 7296's make-before-break), timed until the new \
                                SAs are in the kernel; with --rekey-sa ike the IKE_SA is replaced instead, timed until \
                                charon lists the new one";

const USERSPACE_REKEY: &str = "a fresh static key becomes the next key epoch: both ends (every queue) install it, then \
                               both switch sending to it, and the old epoch is retired 200 ms later; the epoch travels \
                               in each packet id";

const WIREGUARD_REKEY: &str = "WireGuard rekeys on its own, the lab cannot start a handshake without dropping the \
                                session: the end that began the session starts a new handshake once its keys are 120 s \
                                old (REKEY_AFTER_TIME), and the responder keeps the old keys until data arrives under \
                                the new (make-before-break); the lab watches both devices' last handshake and reports \
                                each new one, when it completed (how long it took is not reported)";

const DESCRIPTIONS: [Description; 9] = [
    Description {
        backend: Backend::Plain,
        name: "plain",
        summary: "TCP over the veth, nothing else: the line rate",
        suites: Suites::Unencrypted,
        no_ipv6: None,
        two_hosts: true,
        kernel: None,
        options: OwnOptions::None,
        cpu: TunnelCpuSource::NoTunnel,
        ceiling: CeilingSource::NoCrypto,
        threads: Threads::None("the plain row has no tunnel"),
        tunnelled: false,
        rekey: None,
    },
    Description {
        backend: Backend::Xfrm,
        name: "xfrm",
        summary: "kernel IPsec (ESP SAs and policies over netlink XFRM); `--sas N` SA pairs by data port, `--pcrypt`, `--per-cpu-sa` (6.13+)",
        suites: Suites::Aes,
        no_ipv6: None,
        two_hosts: true,
        kernel: Some(KernelNeed::Esp),
        options: OwnOptions::Xfrm,
        cpu: TunnelCpuSource::Kernel,
        ceiling: CeilingSource::KernelCrypto,
        threads: Threads::SaPairs,
        tunnelled: true,
        rekey: Some(XFRM_REKEY),
    },
    Description {
        backend: Backend::Userspace,
        name: "userspace",
        summary: "the lab's one-thread-per-end TUN+UDP tunnel; `--tunnel-threads N`, `--crypto`",
        suites: Suites::AesAndChaCha,
        no_ipv6: None,
        two_hosts: true,
        kernel: None,
        options: OwnOptions::Userspace,
        cpu: TunnelCpuSource::Threads("ipl-tun-"),
        ceiling: CeilingSource::LabCrypto,
        threads: Threads::TunnelThreads,
        tunnelled: true,
        rekey: Some(USERSPACE_REKEY),
    },
    Description {
        backend: Backend::Openvpn,
        name: "openvpn",
        summary: "OpenVPN 2.6, one process per end, no DCO",
        suites: Suites::Aes,
        no_ipv6: None,
        two_hosts: false,
        kernel: None,
        options: OwnOptions::None,
        cpu: TunnelCpuSource::Daemon("openvpn"),
        ceiling: CeilingSource::Openssl,
        threads: Threads::None("OpenVPN 2.6 moves all of a tunnel's packets on its one thread"),
        tunnelled: true,
        rekey: Some(OPENVPN_REKEY),
    },
    Description {
        backend: Backend::Strongswan,
        name: "strongswan",
        summary: "kernel ESP whose SAs strongSwan's charon negotiated over IKEv2 (PSK, the run's suite as the ESP proposal); reports the negotiated algorithms beside the xfrm row's; `--per-cpu-sa` (strongSwan 6, 6.13+)",
        suites: Suites::Aes,
        no_ipv6: None,
        // Each end would negotiate with the other's charon, which the protocol does not set up.
        two_hosts: false,
        kernel: Some(KernelNeed::Esp),
        options: OwnOptions::Strongswan,
        cpu: TunnelCpuSource::Kernel,
        ceiling: CeilingSource::KernelCrypto,
        threads: Threads::None(KERNEL_THREADS),
        tunnelled: true,
        rekey: Some(STRONGSWAN_REKEY),
    },
    Description {
        backend: Backend::Wireguard,
        name: "wireguard",
        summary: "the kernel's WireGuard (link over rtnetlink, keys over generic netlink)",
        suites: Suites::ChaCha,
        no_ipv6: None,
        // Each end would need the other's public key, which the protocol does not carry.
        two_hosts: false,
        kernel: Some(KernelNeed::Wireguard),
        options: OwnOptions::None,
        cpu: TunnelCpuSource::Kernel,
        ceiling: CeilingSource::KernelCrypto,
        threads: Threads::None(KERNEL_THREADS),
        tunnelled: true,
        rekey: Some(WIREGUARD_REKEY),
    },
    Description {
        backend: Backend::WireguardGo,
        name: "wireguard-go",
        summary: "wireguard-go, one process per end, configured over UAPI",
        suites: Suites::ChaCha,
        no_ipv6: None,
        two_hosts: false,
        kernel: None,
        options: OwnOptions::None,
        cpu: TunnelCpuSource::Daemon("wireguard-go"),
        ceiling: CeilingSource::Untimed(
            "wireguard-go encrypts with Go's golang.org/x/crypto ChaCha20-Poly1305, which this lab cannot \
             time; its speed is not that of any implementation here",
        ),
        threads: Threads::None(OWN_WORKERS),
        tunnelled: true,
        rekey: Some(WIREGUARD_REKEY),
    },
    Description {
        backend: Backend::Boringtun,
        name: "boringtun",
        summary: "boringtun's device, one per end inside the lab's process",
        suites: Suites::ChaCha,
        no_ipv6: None,
        two_hosts: false,
        kernel: None,
        options: OwnOptions::None,
        cpu: TunnelCpuSource::Threads("ipl-boringtun-"),
        ceiling: CeilingSource::Ring,
        threads: Threads::None(OWN_WORKERS),
        tunnelled: true,
        rekey: Some(WIREGUARD_REKEY),
    },
    Description {
        backend: Backend::OpenvpnDco,
        name: "openvpn-dco",
        summary: "OpenVPN 2.7, one process per end, its data channel in the kernel's `ovpn` (DCO, Linux 6.16+)",
        suites: Suites::Aead,
        no_ipv6: None,
        two_hosts: false,
        kernel: Some(KernelNeed::Ovpn),
        options: OwnOptions::None,
        cpu: TunnelCpuSource::Kernel,
        ceiling: CeilingSource::KernelCrypto,
        threads: Threads::None(KERNEL_THREADS),
        tunnelled: true,
        rekey: None,
    },
];

impl Backend {
    pub const ALL: [Backend; 9] = [
        Backend::Plain,
        Backend::Xfrm,
        Backend::Userspace,
        Backend::Openvpn,
        Backend::Strongswan,
        Backend::Wireguard,
        Backend::WireguardGo,
        Backend::Boringtun,
        Backend::OpenvpnDco,
    ];

    /// What this backend is and can do.
    pub fn describe(self) -> &'static Description {
        // DESCRIPTIONS is in declaration order; a test holds it there.
        &DESCRIPTIONS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.describe().name
    }

    /// A WireGuard implementation: its one cipher is ChaCha20-Poly1305.
    pub fn is_wireguard(self) -> bool {
        self.describe().suites == Suites::ChaCha
    }

    /// Whether the backend encrypts (and so honours --key-bits/--hmac/--cipher).
    pub fn encrypts(self) -> bool {
        self.describe().suites != Suites::Unencrypted
    }

    /// The backends that run between two hosts, for messages that list them.
    pub fn two_host_names() -> String {
        let names: Vec<_> = Backend::ALL
            .into_iter()
            .filter(|b| b.describe().two_hosts)
            .map(Backend::name)
            .collect();
        names.join(", ")
    }

    /// The backends whose description passes `keep`, in declaration order, as a message
    /// lists them: `a`, `a or b`, `a, b or c`. Messages that name backends build their
    /// lists so, never by hand.
    pub fn names_where(keep: impl Fn(&Description) -> bool) -> String {
        let names: Vec<&str> = Backend::ALL
            .into_iter()
            .filter(|b| keep(b.describe()))
            .map(Backend::name)
            .collect();
        match names.split_last() {
            None => String::new(),
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }

    /// Why this backend does not carry `suite` in the lab, where it does not (a matrix
    /// cell that is "not run"); `none` is the plain row's business and not judged here.
    pub fn suite_refusal(self, suite: CipherSuite) -> Option<&'static str> {
        let chacha = suite == CipherSuite::ChaCha20Poly1305;
        match self.describe().suites {
            Suites::ChaCha => (!chacha && suite != CipherSuite::None)
                .then_some("WireGuard has one cipher, chacha20-poly1305"),
            Suites::Aes => {
                chacha.then_some("chacha20-poly1305 is WireGuard's cipher; this backend's row runs AES")
            }
            Suites::Aead => matches!(suite, CipherSuite::AesCbc { .. }).then_some(DCO_NO_CBC),
            Suites::Unencrypted | Suites::AesAndChaCha => None,
        }
    }
}

impl Suites {
    /// Whether ChaCha20-Poly1305 is among them.
    pub fn carries_chacha(self) -> bool {
        match self {
            Suites::AesAndChaCha | Suites::ChaCha | Suites::Aead => true,
            Suites::Unencrypted | Suites::Aes => false,
        }
    }

    /// How the docs name the suites.
    pub fn label(self) -> &'static str {
        match self {
            Suites::Unencrypted => "none",
            Suites::Aes => "AES-CBC ± HMAC, AES-GCM",
            Suites::AesAndChaCha => "AES-CBC ± HMAC, AES-GCM, ChaCha20-Poly1305",
            Suites::ChaCha => "ChaCha20-Poly1305",
            Suites::Aead => "AES-GCM, ChaCha20-Poly1305",
        }
    }
}

impl Description {
    /// Whether the run chooses the backend's crypto implementation (`--crypto`): only the
    /// lab's own tunnel reads it; the others' implementation is their own.
    pub fn chooses_crypto(&self) -> bool {
        self.options == OwnOptions::Userspace
    }

    /// Whether a two-host run's tunnel has inner addresses of its own, which the server
    /// chooses (`ServerEnd::tunnel`): a tunnel of the lab's own process. Kernel ESP runs
    /// transport mode between hosts, between the hosts' own addresses.
    pub fn server_chooses_inner_addresses(&self) -> bool {
        self.two_hosts && self.tunnelled && self.kernel.is_none()
    }

    /// Where the backend runs, as the docs say it.
    pub fn placement_label(&self) -> String {
        let kernel = match self.kernel {
            Some(KernelNeed::Esp) => "VM where the host has no ESP",
            Some(KernelNeed::Wireguard) => "VM where the host has no WireGuard",
            Some(KernelNeed::Ovpn) => "VM booting a kernel with `ovpn` where the host has none",
            None => "host",
        };
        match self.two_hosts {
            true => format!("{kernel}; also with `--peer`"),
            false => format!("{kernel}; local runs only"),
        }
    }
}

/// The README's backend table, made from the descriptions (a test holds the README to it).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| `--backend` | what carries the payload | where it runs | suites |\n|---|---|---|---|\n",
    );
    for b in Backend::ALL {
        let d = b.describe();
        out += &format!(
            "| `{}` | {} | {} | {} |\n",
            d.name,
            d.summary,
            d.placement_label(),
            d.suites.label()
        );
    }
    out
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no backend's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend {0:?}: use {list}", list = Backend::names_where(|_| true))]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, UnknownBackend> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownBackend(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_has_its_own_description_under_its_serde_name() {
        for b in Backend::ALL {
            assert_eq!(b.describe().backend, b);
            assert_eq!(serde_json::to_value(b).unwrap(), b.name());
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
        }
        let e = "beet".parse::<Backend>().unwrap_err().to_string();
        for b in Backend::ALL {
            assert!(e.contains(b.name()), "{e} leaves out {b}");
        }
    }

    #[test]
    fn the_descriptions_say_what_the_lab_has_always_done() {
        let two_hosts: Vec<_> = Backend::ALL
            .into_iter()
            .filter(|b| b.describe().two_hosts)
            .collect();
        assert_eq!(two_hosts, [Backend::Plain, Backend::Xfrm, Backend::Userspace]);
        assert_eq!(Backend::two_host_names(), "plain, xfrm, userspace");
        let in_vm: Vec<_> = Backend::ALL
            .into_iter()
            .filter(|b| b.describe().kernel.is_some())
            .collect();
        assert_eq!(
            in_vm,
            [
                Backend::Xfrm,
                Backend::Strongswan,
                Backend::Wireguard,
                Backend::OpenvpnDco
            ]
        );
        let wg: Vec<_> = Backend::ALL.into_iter().filter(|b| b.is_wireguard()).collect();
        assert_eq!(wg, [Backend::Wireguard, Backend::WireguardGo, Backend::Boringtun]);
        assert!(!Backend::Plain.encrypts() && Backend::ALL[1..].iter().all(|b| b.encrypts()));
    }

    #[test]
    fn the_readme_shows_the_backends_as_described() {
        let readme = include_str!("../../../README.md");
        let table = markdown_table();
        assert!(
            readme.contains(&table),
            "README.md's backend table differs from the descriptions; put this in it:\n{table}"
        );
    }
}
