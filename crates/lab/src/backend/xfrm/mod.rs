//! Kernel IPsec: one end's ESP SAs and policies, programmed over netlink XFRM.
//!
//! Tunnel mode (the local lab's default): the payload flows between the inner addresses
//! (198.19.0.x), which the policies send through ESP between the outer (veth) addresses.
//! Transport mode (always between two hosts): the payload flows between the outer
//! addresses and the policies select only TCP on the data ports, so nothing else between
//! the two ends is captured.
//!
//! Evidence (`backend_details.xfrm`, [`XfrmEvidence`]): `mode`, `suite`, `reqid`, per-SA
//! `spi`, `direction`, `packets`, `bytes` (the kernel's counters, read over netlink after
//! the transfers), `esp_overhead_bytes_per_packet` (computed for a 1400-byte inner packet,
//! outer IPv4 (20) or IPv6 (40) header included in tunnel mode, UDP header included with `--encap udp`),
//! `encap` (e.g. `ESP in UDP port 4500`, absent for plain ESP) and `kernel_drivers`
//! (/proc/crypto after use).
//!
//! Several SA pairs (`--sas N`, see [`set`]): stream i on pair i mod N, each pair with its
//! own reqid, SPIs and keys (a key is never shared between SAs: GCM nonces would repeat);
//! every SA's counters are in the evidence, with `pair`. `--pcrypt` ([`pcrypt`]): the
//! AES-GCM SAs on a pcrypt instance made for the run (`pcrypt` in the evidence).
//! `--per-cpu-sa` (see [`set`]): beside the pair, a pair for each online CPU (up to 126),
//! refused before anything is made on kernels before 6.13; each SA's evidence says its CPU.
//!
//! ESP in UDP (`--encap udp`, RFC 3948): both SAs carry `XFRMA_ENCAP` and each end holds a
//! UDP socket on its outer address and the encap port with `UDP_ENCAP_ESPINUDP` set, as an
//! IKE daemon does, for as long as its SAs exist: the kernel decapsulates what arrives
//! there. The socket is a file of this process, so it goes with it; nothing to record.

mod installed;
mod pcrypt;
pub mod rekey;
mod set;

use std::net::IpAddr;

use control::{KeyMaterial, XfrmKeys};
use model::{IpsecMode, RunPlan};
use netns::Topology;
use xfrm::{AuthTrunc, EspInUdpSocket, KeyInput, Protection, ReqId, RunIds, Spi, UdpEncap, XfrmHandle};

pub use installed::{policy_id, policy_record, sa_record, Installed};
use model::evidence::{XfrmEvidence, OVERHEAD_REFERENCE_LEN};
pub use pcrypt::PcryptGuard;
pub use set::{CpuPair, SaPair, SaSet};

use super::site::{data_addr, Side, Site};
use crate::error::{LabError, LabResult};

/// Whether `--show-keys` asked to print the SAs with their keys (never printed otherwise).
#[derive(Debug, Clone, Copy, Default)]
pub struct ShowKeys(pub bool);

const NO_ESP: &str = "this kernel has no ESP support (CONFIG_INET_ESP); add --vm auto to run the kernel backend \
                      where one has it (user-mode Linux at native speed, or a stock kernel in a VM; --vm uml asks for \
                      user-mode Linux alone), or use --backend userspace on this kernel";

/// Between two hosts there is no VM to fall back to (`--peer` refuses `--vm`).
const NO_ESP_WITH_PEER: &str = "this kernel has no ESP support (CONFIG_INET_ESP), and with --peer the kernel backend \
     runs on each host's own kernel (--peer does not go with --vm): between these hosts use --backend userspace; \
     for kernel ESP on this host alone, run without --peer and with --vm auto (both ends in user-mode Linux \
     or a VM); or boot this host into a kernel with ESP (Debian's linux-image-amd64 has it)";

/// What to do on a kernel without ESP, for a local run or one with a peer.
fn no_esp_hint(plan: &RunPlan) -> &'static str {
    match plan.peer() {
        Some(_) => NO_ESP_WITH_PEER,
        None => NO_ESP,
    }
}

/// Refuses, before anything is created, when the kernel cannot do what the plan asks.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    if plan.pcrypt() {
        pcrypt::preflight()?;
    }
    if plan.per_cpu_sa() {
        per_cpu_preflight()?;
    }
    let caps = xfrm::probe().await?;
    if !caps.esp {
        return Err(LabError::capability(anyhow::anyhow!(no_esp_hint(plan))));
    }
    if !caps.supports(plan.suite()) {
        return Err(LabError::capability(anyhow::anyhow!(
            "this kernel cannot run {} in ESP: {:?}; load the crypto modules (e.g. `modprobe aesni_intel`) or \
             use --vm auto",
            plan.suite(),
            caps.algorithms
        )));
    }
    Ok(())
}

/// The first kernel with per-CPU SAs (RFC 9611).
const PER_CPU_SA_SINCE: (u32, u32) = (6, 13);

/// Refuses `--per-cpu-sa` on a kernel before 6.13: it would take the SAs' CPUs and ignore
/// them, and the run would measure one SA pair while claiming per-CPU ones.
pub fn per_cpu_preflight() -> LabResult<()> {
    let release = model::env::kernel_release();
    match has_per_cpu_sas(&release) {
        true => Ok(()),
        false => Err(LabError::capability(anyhow::anyhow!(
            "--per-cpu-sa needs Linux {}.{} or later (per-CPU SAs, RFC 9611); this kernel is {release}: \
             run it in a VM booting a newer kernel (`lab/setup.sh --second-kernel` fetches Debian sid's into \
             /var/lib/ipsec-lab/kernels; then --vm RELEASE) or in user-mode Linux 7.x (--vm uml:RELEASE; one \
             CPU, so one instance)",
            PER_CPU_SA_SINCE.0,
            PER_CPU_SA_SINCE.1,
        ))),
    }
}

/// Whether kernel `release` (`7.2.13+deb14-amd64`) has per-CPU SAs.
pub fn has_per_cpu_sas(release: &str) -> bool {
    release_version(release).is_some_and(|v| v >= PER_CPU_SA_SINCE)
}

/// `7.2.13+deb14-amd64` → (7, 2).
fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The CPUs this kernel has online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub(crate) fn online_cpus() -> LabResult<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(|e| LabError::failed(anyhow::anyhow!("/sys/devices/system/cpu/online: {e}")))?;
    parse_cpu_list(text.trim()).ok_or_else(|| {
        LabError::failed(anyhow::anyhow!(
            "/sys/devices/system/cpu/online: cannot read {text:?}"
        ))
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let (first, last): (u32, u32) = (first.parse().ok()?, last.parse().ok()?);
        if last < first {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

/// What both ends of an xfrm run share.
pub struct Secrets {
    /// The first SA pair's identifiers and keys: what a client sends its server.
    pub first: XfrmKeys,
    /// SA pairs 1 to N-1 with `--sas N` (local runs only).
    pub more_pairs: Vec<XfrmKeys>,
    /// `--per-cpu-sa` (local runs only): each online CPU's pair, with pair 0's reqid.
    pub per_cpu: Vec<(u32, XfrmKeys)>,
    /// The run's pcrypt instance with `--pcrypt` (local runs only): made before the ends,
    /// dropped after them (crypto instances are the kernel's, not an end's).
    pub pcrypt: Option<PcryptGuard>,
}

impl Secrets {
    /// Fresh keys for every SA pair of `plan`, and its pcrypt instance where it asks for one.
    pub fn generate(plan: &RunPlan) -> LabResult<Secrets> {
        let first = generate_keys(plan)?;
        let more_pairs = match plan.sas() > 1 {
            true => generate_more_pairs(plan, &first)?,
            false => Vec::new(),
        };
        let per_cpu = match plan.per_cpu_sa() {
            true => generate_per_cpu(plan, &first)?,
            false => Vec::new(),
        };
        let pcrypt = match plan.pcrypt() {
            true => Some(PcryptGuard::create()?),
            false => None,
        };
        Ok(Secrets {
            first,
            more_pairs,
            per_cpu,
            pcrypt,
        })
    }

    /// What a server received: one pair's keys.
    pub fn received(first: XfrmKeys) -> Secrets {
        Secrets {
            first,
            more_pairs: Vec::new(),
            per_cpu: Vec::new(),
            pcrypt: None,
        }
    }

    /// End a's evidence (it sees both SAs' counters) as the local run's: with `--pcrypt`,
    /// the run's instance as /proc/crypto shows it while the SAs exist.
    pub fn local_evidence(&self, a: XfrmEvidence) -> XfrmEvidence {
        XfrmEvidence {
            pcrypt: self.pcrypt.as_ref().map(|p| p.evidence()),
            ..a
        }
    }
}

/// A run's SA identifiers and keys: fresh from the OS RNG, in the lab's ranges.
pub fn generate_keys(plan: &RunPlan) -> LabResult<XfrmKeys> {
    keys_for(plan, RunIds::random())
}

/// The identifiers and keys of the run's further SA pairs (`--sas N`: pairs 1 to N-1),
/// each pair's keys fresh: pairs never share a key.
pub fn generate_more_pairs(plan: &RunPlan, first: &XfrmKeys) -> LabResult<Vec<XfrmKeys>> {
    let ids = ids_of(first);
    (1..plan.sas().min(RunIds::MAX_PAIRS))
        .map(|i| keys_for(plan, ids.pair(i)))
        .collect()
}

/// Each online CPU's SA pair (`--per-cpu-sa`): SPIs of pairs 1, 2, … with pair 0's reqid
/// (the policies name that one), fresh keys each. CPUs past the run's SPIs (126 pairs) send
/// on pair 0, as the kernel does for a CPU without an SA of its own.
fn generate_per_cpu(plan: &RunPlan, first: &XfrmKeys) -> LabResult<Vec<(u32, XfrmKeys)>> {
    let ids = ids_of(first);
    online_cpus()?
        .into_iter()
        .zip(1..RunIds::MAX_PAIRS)
        .map(|(cpu, i)| {
            let pair = RunIds {
                reqid: ids.reqid,
                ..ids.pair(i)
            };
            Ok((cpu, keys_for(plan, pair)?))
        })
        .collect()
}

fn ids_of(k: &XfrmKeys) -> RunIds {
    RunIds {
        reqid: ReqId(k.reqid),
        spi_a_to_b: Spi(k.spi_a_to_b),
        spi_b_to_a: Spi(k.spi_b_to_a),
    }
}

fn keys_for(plan: &RunPlan, ids: RunIds) -> LabResult<XfrmKeys> {
    let p = Protection::generate(plan.suite(), AuthTrunc::Bits128).map_err(LabError::usage)?;
    let (enc, auth) = match &p {
        Protection::AesCbc { key, auth } => (key, auth.as_ref().map(|a| &a.key)),
        Protection::AesGcm { key } => (key, None),
    };
    Ok(XfrmKeys {
        reqid: ids.reqid.0,
        spi_a_to_b: ids.spi_a_to_b.0,
        spi_b_to_a: ids.spi_b_to_a.0,
        enc: secret_bytes(enc),
        auth: auth.map(secret_bytes),
    })
}

/// The bytes of an xfrm secret, through its (wiped) hex form: the crate shows keys only so.
fn secret_bytes(s: &xfrm::Secret) -> KeyMaterial {
    let hex = s.to_hex();
    let digits = hex.trim_start_matches("0x").as_bytes();
    let bytes: zeroize::Zeroizing<Vec<u8>> = zeroize::Zeroizing::new(
        digits
            .chunks(2)
            .map(|p| {
                let v = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                v(p[0]) << 4 | v(p[1])
            })
            .collect(),
    );
    KeyMaterial::new(&bytes)
}

/// One end's SAs and policies, and what its evidence reports. Dropping it removes them.
pub struct XfrmEnd {
    installed: Installed,
    mode: IpsecMode,
    /// Every pair's reqid, pair 0 first.
    reqids: Vec<ReqId>,
    /// Every pair's data ports.
    ports: Vec<Vec<u16>>,
    protection: Protection,
    encap: Option<model::Encap>,
    /// The outer header a tunnel-mode packet gains is this family's.
    family: model::Family,
    /// The first pair's SAs as installed (a→b, b→a), and the lab namespace they are in
    /// (None: this host's own): what a rekey replaces.
    first_pair: [xfrm::SaSpec; 2],
    namespace: Option<std::path::PathBuf>,
    udp_encap: Option<UdpEncap>,
    /// Held open for as long as the SAs exist (dropped after them: fields drop in order).
    _encap_socket: Option<EspInUdpSocket>,
}

impl XfrmEnd {
    /// `secrets.more_pairs`: the keys of SA pairs 1 to N-1 with `--sas N` (local runs only).
    pub async fn start(
        plan: &RunPlan,
        secrets: &Secrets,
        site: &Site<'_>,
        show: ShowKeys,
    ) -> LabResult<XfrmEnd> {
        let (k, more_pairs) = (&secrets.first, &secrets.more_pairs);
        if more_pairs.len() + 1 != usize::from(plan.sas()) {
            return Err(LabError::usage(anyhow::anyhow!(
                "{} SA pairs planned but keys for {}",
                plan.sas(),
                more_pairs.len() + 1
            )));
        }
        let pairs = std::iter::once(k)
            .chain(more_pairs)
            .map(|k| pair_of(plan, k))
            .collect::<LabResult<Vec<SaPair>>>()?;
        let mode = plan.mode();
        let hosts = site.hosts;
        let sender = Side::receiver(plan).other();
        let data = |side| data_addr(plan, hosts, side).ip();
        let set = SaSet {
            mode,
            addr_a: hosts.a,
            addr_b: hosts.b,
            flows: SaSet::flows(
                plan,
                mode,
                data(sender),
                data(sender.other()),
                pairs.len(),
                sender == Side::A,
            ),
            pairs,
            per_cpu: secrets
                .per_cpu
                .iter()
                .map(|(cpu, k)| {
                    Ok(CpuPair {
                        cpu: *cpu,
                        pair: pair_of(plan, k)?,
                    })
                })
                .collect::<LabResult<Vec<CpuPair>>>()?,
            sender,
            encap: plan
                .encap()
                .map(|model::Encap::EspInUdp { port }| UdpEncap::symmetric(port)),
        };
        if site.side == Side::A {
            show_keys(&set, show);
        }
        let handle = match site.lab_link {
            Some(link) => {
                if mode == IpsecMode::Tunnel {
                    // The inner address lives on the veth; the route's source makes the
                    // sender use it, so its packets match the policy.
                    let (here, there) = (data(site.side), data(site.side.other()));
                    let host = if here.is_ipv4() { 32 } else { 128 };
                    Topology::add_address(site.namespace, link, here, host).await?;
                    Topology::add_route(site.namespace, there, host, link, Some(here)).await?;
                }
                XfrmHandle::open_in(&site.namespace.path())?
            }
            None => {
                if site.side == Side::receiver(plan) {
                    ports_are_free(plan, hosts.of(site.side))?;
                }
                XfrmHandle::open()?
            }
        };
        // The socket comes first: once the SAs exist the peer may already be sending.
        let encap_socket = match plan.encap() {
            Some(model::Encap::EspInUdp { port }) => Some(encap_socket(site, port)?),
            None => None,
        };
        let installed = Installed::install(handle, site.side, &set, site.lab_link.is_none()).await?;
        let sas = set.sas(site.side);
        let ports = (0..set.pairs.len())
            .map(|pair| {
                (0..plan.workload().parallel)
                    .filter(|i| usize::from(*i) % set.pairs.len() == pair)
                    .map(|i| plan.workload().port + i)
                    .collect()
            })
            .collect();
        Ok(XfrmEnd {
            installed,
            mode,
            reqids: set.pairs.iter().map(|p| p.ids.reqid).collect(),
            ports,
            protection: set.first().protection.clone(),
            encap: plan.encap(),
            family: model::Family::of(hosts.a.to_canonical()),
            first_pair: [sas[0].clone(), sas[1].clone()],
            namespace: site.lab_link.map(|_| site.namespace.path()),
            udp_encap: set.encap,
            _encap_socket: encap_socket,
        })
    }

    /// The rekey of a local run's pair: end a's and end b's SAs replaced together.
    pub fn rekey(a: &XfrmEnd, b: &XfrmEnd, order: model::rekey::RekeyOrder) -> LabResult<rekey::XfrmRekey> {
        let end = |e: &XfrmEnd| -> LabResult<rekey::EndSas> {
            let namespace = e.namespace.clone().ok_or_else(|| {
                LabError::usage(anyhow::anyhow!(
                    "--rekey-every replaces SAs in the lab's namespaces only, not on this host's own"
                ))
            })?;
            Ok(rekey::EndSas {
                namespace,
                book: e.installed.book(),
            })
        };
        rekey::XfrmRekey::new([end(a)?, end(b)?], a.first_pair.clone(), a.udp_encap, order)
    }

    /// Both SAs' counters now, as this end sees them (`--interval` reads them as it goes).
    pub async fn sa_counters(&self) -> LabResult<Vec<model::evidence::SaEvidence>> {
        self.installed.counters(&self.ports).await
    }

    /// What this end's SAs carried (it sees both directions' counters), and how.
    pub async fn evidence(&self) -> LabResult<XfrmEvidence> {
        let sas = self.installed.counters(&self.ports).await?;
        let tunnel_header = if self.mode == IpsecMode::Tunnel {
            self.family.ip_header_len()
        } else {
            0
        };
        let crypto = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
        let mut names: Vec<&str> = self.protection.algorithms().iter().map(|a| a.name()).collect();
        // ESP runs CBC+HMAC as one authenc instance: that driver is the one that did the work.
        if matches!(
            self.protection.suite(),
            model::CipherSuite::AesCbc {
                hmac: model::Hmac::Sha256,
                ..
            }
        ) {
            names.push("authenc(hmac(sha256),cbc(aes))");
        }
        let drivers = model::env::preferred_drivers(&model::env::parse_proc_crypto(&crypto), &names);
        Ok(XfrmEvidence {
            mode: self.mode.name().into(),
            suite: self.protection.suite().name(),
            reqid: self
                .reqids
                .iter()
                .map(ReqId::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            sas,
            esp_overhead_bytes_per_packet: self.protection.esp_overhead(OVERHEAD_REFERENCE_LEN)
                + tunnel_header
                + self.encap.map_or(0, |e| e.overhead()),
            encap: self.encap.map(|e| e.to_string()),
            kernel_drivers: drivers.into_iter().collect(),
            // The run's instance is the local run's to report (`local`); here: none.
            pcrypt: None,
        })
    }
}

/// One SA pair from its keys, refused outside the lab's ranges: a run can never touch SAs
/// it does not own.
fn pair_of(plan: &RunPlan, k: &XfrmKeys) -> LabResult<SaPair> {
    let ids = ids_of(k);
    if !(ids.reqid.is_lab() && ids.spi_a_to_b.is_lab() && ids.spi_b_to_a.is_lab()) {
        return Err(LabError::usage(anyhow::anyhow!(
            "reqid/SPIs outside the lab's ranges: {ids:?}"
        )));
    }
    let protection = Protection::from_keys(
        plan.suite(),
        AuthTrunc::Bits128,
        KeyInput {
            enc: k.enc.expose(),
            auth: k.auth.as_ref().map(KeyMaterial::expose),
        },
    )
    .map_err(LabError::usage)?;
    Ok(SaPair { ids, protection })
}

/// This end's `UDP_ENCAP_ESPINUDP` socket on its outer address: where the peer's
/// ESP-in-UDP packets arrive.
fn encap_socket(site: &Site<'_>, port: u16) -> LabResult<EspInUdpSocket> {
    let addr = site.hosts.of(site.side);
    let socket = match site.lab_link {
        Some(_) => EspInUdpSocket::bind_in(&site.namespace.path(), addr, port),
        None => EspInUdpSocket::bind(addr, port),
    };
    socket.map_err(|e| {
        LabError::failed(anyhow::anyhow!(
            "ESP-in-UDP socket on {addr}:{port} (UDP_ENCAP_ESPINUDP): {e}; choose another --encap-port"
        ))
    })
}

/// Prints the SAs with keys where `--show-keys` asked for it.
fn show_keys(set: &SaSet, show: ShowKeys) {
    if show.0 {
        for sa in set.sas(Side::A) {
            let mut args = sa.iproute2_args_with_keys();
            if let Some(encap) = &set.encap {
                args.extend(encap.iproute2_args());
            }
            eprintln!("key: ip xfrm state add {}", args.join(" "));
        }
    }
}

/// Refuses a run whose data ports something on the receiving host already listens on:
/// the policies would select that service's traffic too.
fn ports_are_free(plan: &RunPlan, addr: IpAddr) -> LabResult<()> {
    // Counted in u32: the last port of a range ending at 65535 must not wrap to 0.
    let first = u32::from(plan.workload().port);
    for port in first..first + u32::from(plan.workload().parallel) {
        let port =
            u16::try_from(port).map_err(|_| LabError::usage(anyhow::anyhow!("data ports run past 65535")))?;
        if let Err(e) = std::net::TcpListener::bind((addr, port)) {
            return Err(LabError::usage(anyhow::anyhow!(
                "data port {addr}:{port} is in use on the receiving host ({e}); choose a free --port: \
                 the run's policies would capture that service's traffic"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: `run --peer` on a client without ESP was told to use --vm, which --peer
    /// refuses; a local run is pointed at --vm auto (native speed where it can be), not at
    /// --vm alone (an emulated stock kernel on a machine without KVM).
    #[test]
    fn without_esp_a_peer_run_is_pointed_at_what_works_between_hosts() {
        let request = |peer: Option<&str>| model::RunRequest {
            backend: model::Backend::Xfrm,
            peer: peer.map(String::from),
            ..Default::default()
        };
        let local = request(None).validate().unwrap();
        assert!(no_esp_hint(&local).contains("add --vm auto"));
        let remote = request(Some("192.0.2.1")).validate().unwrap();
        let hint = no_esp_hint(&remote);
        assert!(!hint.contains("add --vm"), "{hint}");
        assert!(hint.contains("without --peer and with --vm auto"), "{hint}");
        assert!(hint.contains("--backend userspace"), "{hint}");
        // The alternative it names is one --peer accepts.
        let userspace = model::RunRequest {
            backend: model::Backend::Userspace,
            ..request(Some("192.0.2.1"))
        };
        userspace.validate().unwrap();
    }

    #[test]
    fn cpu_lists_and_releases_read_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(release_version("7.2.13+deb14-amd64"), Some((7, 2)));
        assert_eq!(release_version("6.1.0-57-amd64"), Some((6, 1)));
        assert!(release_version("6.12.95+deb12-amd64").unwrap() < PER_CPU_SA_SINCE);
        assert!(release_version("6.13.0").unwrap() >= PER_CPU_SA_SINCE);
        assert_eq!(release_version("x"), None);
    }
}
