//! Why a request is not a plan: every refusal says what to do instead.

use crate::backend::{Backend, Description, OwnOptions, Suites, UnknownBackend};
use crate::encap::EncapError;
use crate::family::{Family, UnknownFamily, MIN_IPV6_MTU};
use crate::modes::ModesError;
use crate::netem::NetemError;
use crate::plan::limits::{MAX_PAYLOAD, MAX_REPEAT, MAX_SA_PAIRS, MAX_TUNNEL_THREADS, MIN_PAYLOAD};
use crate::size::ByteSize;
use crate::suite::CipherSuite;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Backend(#[from] UnknownBackend),
    #[error("unknown crypto implementation {0:?}: use auto, soft, rustcrypto, aws-lc or libcrypto")]
    UnknownCrypto(String),
    #[error("unknown IPsec mode {0:?}: use tunnel or transport")]
    UnknownMode(String),
    #[error(
        "{flag} {bytes} is too small to time: give at least {min} (below it the payload fits in the sockets' buffers and the clock measures copies, not the data path)",
        min = MIN_PAYLOAD
    )]
    PayloadTooSmall { flag: &'static str, bytes: ByteSize },
    #[error(
        "{flag} {bytes} is more than one run moves: give at most {max}, or --time SECONDS for a long run (it says how long it takes)",
        max = MAX_PAYLOAD
    )]
    PayloadTooLarge { flag: &'static str, bytes: ByteSize },
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
    #[error("the {0} backend does not run chacha20-poly1305 in this lab: use --backend {list} for it", list = Backend::names_where(carries_chacha))]
    NoChaCha(Backend),
    #[error("--peer {0:?} is not HOST, HOST:PORT or [IPV6]:PORT (port 1-65535; default port 5299)")]
    Peer(String),
    #[error("--vm uml cannot run the {0} backend: user-mode Linux has no {module} module; use --vm {kernel} for it", module = uml_lacks(*.0).0, kernel = uml_lacks(*.0).1)]
    UmlBackend(Backend),
    #[error("the openvpn-dco backend cannot carry {0}: {why} (give --cipher aes-128-gcm, aes-256-gcm or chacha20-poly1305)", why = crate::backend::DCO_NO_CBC)]
    DcoSuite(CipherSuite),
    #[error("--peer and --vm do not go together: with --peer each end runs on its own host's kernel, not in a VM; where this host's kernel has no ESP, use --backend {list} between the hosts, or boot a kernel with ESP (Debian's linux-image-amd64 has it)", list = Backend::names_where(encrypts_between_hosts_without_esp))]
    PeerWithVm,
    #[error("the {0} backend does not run between two hosts yet: use --backend {list} with --peer", list = Backend::two_host_names())]
    PeerBackend(Backend),
    #[error("--port {0} with --peer: the data ports must be 1024 or above, clear of system services such as SSH, which the run's policies must never select")]
    PeerPort(u16),
    #[error("--mode tunnel is not offered between two hosts: the lab uses transport mode there, whose policies select only its data port")]
    PeerTunnelMode,
    #[error(transparent)]
    Encap(#[from] EncapError),
    #[error(
        "--encap udp needs the {xfrm} backend (kernel ESP SAs); the {0} backend has no ESP to encapsulate",
        xfrm = Backend::names_where(has_sas)
    )]
    EncapBackend(Backend),
    #[error("--sas {0} is out of range: use 1 to {max} SA pairs", max = MAX_SA_PAIRS)]
    Sas(u16),
    #[error("--sas {sas} with {parallel} stream(s): each SA pair needs a stream of its own; add -P {sas}")]
    SasStreams { sas: u16, parallel: u16 },
    #[error("--sas above 1 does not run between two hosts yet: the server installs one SA pair")]
    PeerSas,
    #[error("--pcrypt needs the {xfrm} backend (kernel ESP SAs), not {0}", xfrm = Backend::names_where(has_sas))]
    PcryptBackend(Backend),
    #[error("--pcrypt wraps rfc4106(gcm(aes)): use --cipher aes-128-gcm or aes-256-gcm, not {0}")]
    PcryptSuite(CipherSuite),
    #[error("--per-cpu-sa needs the {list} backend (kernel ESP SAs), not {0}", list = Backend::names_where(has_per_cpu_sas))]
    PerCpuSaBackend(Backend),
    #[error("--per-cpu-sa with --sas {0}: per-CPU SAs are another way to spread one tunnel over the CPUs; give one of the two")]
    PerCpuSaWithSas(u16),
    #[error("--per-cpu-sa does not run between two hosts yet: the server installs one SA pair")]
    PeerPerCpuSa,
    /// `--rekey-every`/`--rekey-order` that cannot act; the message says what to do.
    #[error("{0}")]
    Rekey(String),
    #[error("--pcrypt with --peer is not offered yet: the server does not instantiate crypto templates")]
    PeerPcrypt,
    #[error("--encap-port {0} with --peer: both hosts bind it, so it must be 1024 or above, clear of system services")]
    EncapPeer(u16),
    #[error(transparent)]
    Family(#[from] UnknownFamily),
    #[error("the {backend} backend does not run over {family} in this lab: {why}; use {list} with -6, or run it without -6", list = Backend::names_where(runs_over_ipv6))]
    FamilyBackend {
        backend: Backend,
        family: Family,
        why: &'static str,
    },
    #[error("--mtu {0} with -6: IPv6 needs 1280 bytes inside the tunnels, so give --mtu {min} or more", min = MIN_IPV6_MTU)]
    FamilyMtu(u32),
    #[error("--encap udp with -6 is not offered yet: ESP in UDP runs over IPv4")]
    FamilyEncap,
    #[error("--netem shapes the lab's own veth link; between two hosts shape the real link with tc on the machines themselves")]
    NetemPeer,
    #[error(transparent)]
    Netem(#[from] NetemError),
    #[error(transparent)]
    Modes(#[from] ModesError),
    #[error(transparent)]
    Packet(#[from] crate::packets::PacketError),
    /// A packet or latency option that does not fit the rest of the run; says what to do.
    #[error("{0}")]
    Packets(String),
}

// What the messages' lists of backends are made from: each backend's description.

/// The module user-mode Linux lacks for `backend`, and the `--vm` kernel that has it.
fn uml_lacks(backend: Backend) -> (&'static str, &'static str) {
    match backend.describe().kernel {
        Some(crate::backend::KernelNeed::Ovpn) => (
            "ovpn",
            "RELEASE (a kernel of 6.16 or later: `lab/setup.sh --second-kernel` fetches Debian sid's)",
        ),
        _ => ("WireGuard", "(the stock kernel)"),
    }
}

fn carries_chacha(d: &Description) -> bool {
    d.suites.carries_chacha()
}

fn runs_over_ipv6(d: &Description) -> bool {
    d.no_ipv6.is_none()
}

/// The backends whose own options are xfrm's (`--encap`, `--sas`, `--pcrypt`): kernel ESP SAs.
fn has_sas(d: &Description) -> bool {
    d.options == OwnOptions::Xfrm
}

/// The backends that take `--per-cpu-sa`: kernel ESP SAs, per CPU.
fn has_per_cpu_sas(d: &Description) -> bool {
    d.options.per_cpu_sa()
}

/// What carries an encrypted run between two hosts on a kernel without ESP.
fn encrypts_between_hosts_without_esp(d: &Description) -> bool {
    d.two_hosts && d.kernel.is_none() && d.suites != Suites::Unencrypted
}

#[cfg(test)]
mod tests {
    //! Every message that lists backends, against every backend's description: a backend
    //! is named exactly where what the message says of it is true.

    use super::*;
    use crate::family::Family;

    /// The backends a message names in its `a, b or c` list between `after` and `before`
    /// (`""`: the end of the message).
    fn listed(message: &str, after: &str, before: &str) -> Vec<String> {
        let start = message
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} not in {message}"))
            + after.len();
        let rest = &message[start..];
        let end = match before {
            "" => rest.len(),
            _ => rest
                .find(before)
                .unwrap_or_else(|| panic!("{before:?} not in {message}")),
        };
        let list = &rest[..end];
        list.replace(" or ", ", ")
            .split(", ")
            .map(str::to_string)
            .collect()
    }

    fn check(message: &str, after: &str, before: &str, should: impl Fn(Backend) -> bool) {
        let names = listed(message, after, before);
        for b in Backend::ALL {
            assert_eq!(
                names.iter().any(|n| n == b.name()),
                should(b),
                "{b} is {}listed where it should {}be: {message}",
                if should(b) { "not " } else { "" },
                if should(b) { "" } else { "not " }
            );
        }
        assert!(
            names.iter().all(|n| n.parse::<Backend>().is_ok()),
            "{names:?}: {message}"
        );
    }

    /// The message left out boringtun, which carries only chacha20-poly1305.
    #[test]
    fn no_chacha_names_every_backend_that_carries_chacha() {
        let message = PlanError::NoChaCha(Backend::Xfrm).to_string();
        check(&message, "use --backend ", " for it", |b| {
            b.encrypts() && b.suite_refusal(CipherSuite::ChaCha20Poly1305).is_none()
        });
        assert!(message
            .ends_with("use --backend userspace, wireguard, wireguard-go, boringtun or openvpn-dco for it"));
    }

    /// The message named four backends as the ones that run with -6, a rule no backend has:
    /// every one runs over IPv6.
    #[test]
    fn family_backend_names_every_backend_that_runs_over_ipv6() {
        let message = PlanError::FamilyBackend {
            backend: Backend::Xfrm,
            family: Family::Ipv6,
            why: "WHY",
        }
        .to_string();
        check(&message, "WHY; use ", " with -6", |b| {
            Family::Ipv6.refusal(b).is_none()
        });
    }

    #[test]
    fn peer_backend_names_the_backends_that_run_between_two_hosts() {
        let message = PlanError::PeerBackend(Backend::Openvpn).to_string();
        check(&message, "use --backend ", " with --peer", |b| {
            b.describe().two_hosts
        });
    }

    #[test]
    fn peer_with_vm_names_what_encrypts_between_hosts_without_esp() {
        let message = PlanError::PeerWithVm.to_string();
        check(&message, "use --backend ", " between the hosts", |b| {
            b.describe().two_hosts && b.encrypts() && b.describe().kernel.is_none()
        });
    }

    #[test]
    fn encap_and_pcrypt_name_the_backend_with_sas() {
        let has_sas = |b: Backend| b.describe().options == OwnOptions::Xfrm;
        let message = PlanError::EncapBackend(Backend::Userspace).to_string();
        check(&message, "needs the ", " backend (kernel ESP SAs)", has_sas);
        let message = PlanError::PcryptBackend(Backend::Userspace).to_string();
        check(&message, "needs the ", " backend (kernel ESP SAs)", has_sas);
        let message = PlanError::PerCpuSaBackend(Backend::Userspace).to_string();
        check(&message, "needs the ", " backend (kernel ESP SAs)", |b| {
            matches!(b, Backend::Xfrm | Backend::Strongswan)
        });
    }

    #[test]
    fn unknown_backend_names_them_all() {
        let message = "beet".parse::<Backend>().unwrap_err().to_string();
        check(&message, "\": use ", "", |_| true);
    }
}
