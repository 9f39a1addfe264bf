//! strongSwan: kernel IPsec whose SAs a real IKE daemon negotiated. One charon per
//! namespace, each with its own configuration, VICI socket, log and state in its own
//! directory (nothing of /etc is read, charon-systemd writes no pid file); end b initiates
//! IKEv2 to end a with PSK authentication and the run's suite as the only ESP proposal, in
//! tunnel mode between the inner addresses (as the lab's xfrm backend does).
//!
//! The row shows what the daemon installed: after the transfers the ESP SAs are read back
//! over netlink in end a's namespace (crate `xfrm`'s dump) and set beside what the lab's
//! own xfrm backend installs for the suite ([`xfrm::lab_algorithms`]); any difference is
//! said in words.
//!
//! Evidence (`backend_details.strongswan`, [`StrongswanEvidence`]): `version`,
//! `ike_version`, `ike_proposal`, `esp_proposal`, `auth`, per SA `spi`, `direction`,
//! `packets`, `bytes`, `replay_drops`, `integrity_failures`, `reqid`, `mode`, `algorithms`
//! (`name`, `key_bits`, `icv_bits`), then `lab_xfrm_installs` and `differences`.
//!
//! With `--rekey-every` charon itself rekeys the CHILD_SA (or with `--rekey-sa ike` the
//! IKE_SA) on the lab's command ([`rekey`]); the evidence then shows the current CHILD_SA's
//! SAs and `rekeys`: how many of each charon did, and how many SAs of earlier CHILD_SAs
//! were still in the kernel (charon deletes a rekeyed inbound SA some seconds later).
//!
//! With `--per-cpu-sa` (RFC 9611; strongSwan 6.0 and Linux 6.13 or later) both ends' CHILD_SA
//! config says `per_cpu_sas = yes` with `start_action = trap`: b initiates the fallback
//! CHILD_SA (no CPU), and from then on a packet leaving from a CPU without an SA of its own
//! goes out on the fallback and makes the kernel acquire one for that CPU, which charon
//! negotiates (CREATE_CHILD_SA) and installs with the CPU (`XFRMA_SA_PCPU`); a responder
//! gives its outbound SA of such a CHILD_SA a CPU of its own choosing. The run starts the
//! strongSwan 6 that `lab/strongswan6.sh` unpacked beside the host's 5.9 (or the PATH's where
//! it is 6.x; [`charon::Programs`]); the evidence then says each SA's CPU as the kernel
//! reports it, and how many packets left on each CPU's SAs.
//!
//! Local runs only: between two hosts it is refused when the plan is validated.

mod charon;
mod config;
mod negotiated;
pub mod rate;
pub mod rekey;
mod vici;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::evidence::{Algorithm, CharonRekeys, StrongswanEvidence};
use model::RunPlan;
use netns::Topology;
use xfrm::{AuthTrunc, Protection, XfrmHandle};
use zeroize::Zeroizing;

use super::site::{Hosts, Side, Site};
use crate::error::{LabError, LabResult};
use charon::{failed, Charon, Programs};
use config::{Paths, Peer, CONN, IKE_PROPOSAL};

const INSTALL: &str = "strongSwan is not installed: install it with \
     `apt-get install charon-systemd strongswan-swanctl` (Debian/Ubuntu; lab/setup.sh does)";
/// How long the initiator's IKE_SA_INIT and IKE_AUTH exchanges may take.
const INITIATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a CHILD_SA may take to appear in the kernel once IKE says it is up.
const INSTALLED_TIMEOUT: Duration = Duration::from_secs(10);
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// How long charon may take to negotiate a CHILD_SA for every CPU (one CREATE_CHILD_SA
/// each; TCG guests are slow).
const PER_CPU_TIMEOUT: Duration = Duration::from_secs(30);
/// Where the datagrams that make the kernel acquire per-CPU SAs go: discard, which nothing
/// in the lab's namespaces listens on.
const ACQUIRE_PORT: u16 = 9;
const PSK_BYTES: usize = 32;

/// Refuses, before anything is created: strongSwan missing (with the install command), or
/// with `--per-cpu-sa` one before 6.0 (with how to get 6.x beside it), then a kernel without
/// ESP or without the suite, or with `--per-cpu-sa` one before 6.13 (as the xfrm backend,
/// naming `--vm`).
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    programs(plan)?;
    if config::esp_proposal(plan.suite()).is_none() {
        return Err(LabError::usage(anyhow::anyhow!(
            "the strongswan backend negotiates encrypted ESP: choose an encrypting suite"
        )));
    }
    super::xfrm::preflight(plan).await
}

/// The charon and swanctl `plan` runs: the PATH's, or for `--per-cpu-sa` a strongSwan of
/// 6.0 or later; refused (a missing capability) where there is none. A guest sees this
/// host's files, so a VM run asks before it boots, and the guest again.
pub fn programs(plan: &RunPlan) -> LabResult<Programs> {
    if !plan.per_cpu_sa() {
        return Programs::path().ok_or_else(|| LabError::capability(anyhow::anyhow!(INSTALL)));
    }
    Programs::per_cpu().map_err(|here| {
        LabError::capability(anyhow::anyhow!(
            "--per-cpu-sa with --backend strongswan needs strongSwan {}.{} or later (charon negotiates \
             per-CPU CHILD_SAs, swanctl's per_cpu_sas, from 6.0 on); here {here}: `lab/setup.sh \
             --second-kernel` (or `bash lab/strongswan6.sh`) unpacks Debian sid's into {}, beside the \
             host's, which stays as it is",
            charon::PER_CPU_SINCE.0,
            charon::PER_CPU_SINCE.1,
            charon::LAB_STRONGSWAN,
        ))
    })
}

/// What both ends share, made once per run: each end's PSK (the same one, unless a test
/// gives them different ones) and the run's private directory, one subdirectory per end.
pub struct Material {
    esp: String,
    suite: model::CipherSuite,
    /// The charon and swanctl both ends start.
    programs: Programs,
    /// `--per-cpu-sa`: per-CPU CHILD_SAs.
    per_cpu: bool,
    /// Hex digits of each end's PSK (a, b).
    psk: [Zeroizing<String>; 2],
    /// Configurations, sockets and logs of both charons: private, recorded, removed when the
    /// run ends (after the charons: a local run drops its ends before its secrets).
    dir: owner::PrivateDir,
}

impl Material {
    /// A fresh random PSK for both ends.
    pub fn create(plan: &RunPlan) -> LabResult<Material> {
        let psk = xfrm::Secret::random(PSK_BYTES).map_err(LabError::failed)?;
        let hex = psk.to_hex();
        Material::with_psks(plan, hex.trim_start_matches("0x"), hex.trim_start_matches("0x"))
    }

    /// Each end with its own PSK, in hex digits: equal ones for a run, different ones to
    /// show that authentication fails.
    pub fn with_psks(plan: &RunPlan, psk_a: &str, psk_b: &str) -> LabResult<Material> {
        let esp = config::esp_proposal(plan.suite()).ok_or_else(|| {
            LabError::usage(anyhow::anyhow!(
                "the strongswan backend needs an encrypting suite"
            ))
        })?;
        let valid = |k: &str| !k.is_empty() && k.len() % 2 == 0 && k.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid(psk_a) || !valid(psk_b) {
            return Err(LabError::usage(anyhow::anyhow!(
                "a PSK is given as an even number of hex digits"
            )));
        }
        let programs = programs(plan)?;
        let dir = owner::PrivateDir::new("ipl-strongswan-")?;
        for side in [Side::A, Side::B] {
            std::fs::create_dir(dir.join(side.name())).map_err(failed)?;
        }
        Ok(Material {
            esp,
            suite: plan.suite(),
            programs,
            per_cpu: plan.per_cpu_sa(),
            psk: [Zeroizing::new(psk_a.into()), Zeroizing::new(psk_b.into())],
            dir,
        })
    }

    fn end_dir(&self, side: Side) -> std::path::PathBuf {
        self.dir.join(side.name())
    }

    fn log(&self, side: Side) -> std::path::PathBuf {
        Paths {
            dir: &self.end_dir(side),
        }
        .log()
    }

    /// Both charons' last log lines, each headed by its path.
    fn logs(&self) -> String {
        [Side::A, Side::B]
            .iter()
            .map(|s| {
                let log = self.log(*s);
                format!("[{}]\n{}", log.display(), charon::log_tail(&log, 10))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// One end: its charon, and a netlink handle on its namespace. Dropping it stops charon,
/// which removes the SAs and policies it installed (the lab's namespace goes anyway).
pub struct StrongswanEnd {
    charon: Charon,
    handle: XfrmHandle,
    hosts: Hosts,
    esp: String,
    suite: model::CipherSuite,
    version: String,
    /// The end's lab namespace, where its SAs are.
    namespace: std::path::PathBuf,
    /// Whether the run rekeys (`--rekey-every`): the evidence then says how it went.
    rekeying: bool,
    /// `--per-cpu-sa`: the evidence says each SA's CPU and where the packets left.
    per_cpu: bool,
    /// The rekeys seen done (counted on end a's, which gives the evidence).
    rekeys: Arc<rekey::Rekeys>,
}

impl StrongswanEnd {
    /// Starts the end's charon with its configuration loaded. End b, started second,
    /// initiates and waits until its CHILD_SA is in the kernel.
    pub async fn start(plan: &RunPlan, material: &Material, site: &Site<'_>) -> LabResult<StrongswanEnd> {
        let link = site.lab_link.ok_or_else(|| {
            LabError::usage(anyhow::anyhow!(
                "the strongswan backend does not run between two hosts"
            ))
        })?;
        let ad = plan.link().addressing;
        let peer_of = |side: Side| Peer {
            id: format!("ipl-{}", side.name()),
            outer: site.hosts.of(side),
            inner: match side {
                Side::A => ad.inner_a,
                Side::B => ad.inner_b,
            },
        };
        let (me, peer) = (peer_of(site.side), peer_of(site.side.other()));
        // The inner address lives on the veth; the route's source makes the sender use it,
        // so its packets match charon's policy (the same as the xfrm backend's tunnel mode).
        let host = if me.inner.is_ipv4() { 32 } else { 128 };
        Topology::add_address(site.namespace, link, me.inner, host).await?;
        Topology::add_route(site.namespace, peer.inner, host, link, Some(me.inner)).await?;

        let dir = material.end_dir(site.side);
        let paths = Paths { dir: &dir };
        write_private(&paths.strongswan_conf(), &config::strongswan_conf(&paths))?;
        let psk = &material.psk[site.side as usize];
        let child = config::Child {
            esp: &material.esp,
            per_cpu: material.per_cpu,
        };
        let swanctl = Zeroizing::new(config::swanctl_conf(&me, &peer, &child, psk));
        write_private(&paths.swanctl_conf(), &swanctl)?;
        drop(swanctl);

        let charon = Charon::start(site.namespace, &paths, &material.programs)?;
        charon.swanctl(&["--load-all", "--noprompt"], LOAD_TIMEOUT)?;
        let version = charon.daemon_version();
        // What answers on the socket is what negotiates: per-CPU SAs need 6.x there too.
        if material.per_cpu && !charon::per_cpu_version(&version) {
            return Err(failed(format!(
                "{} answered as {version:?}, not strongSwan 6.0 or later: it cannot negotiate per-CPU SAs",
                material.programs.daemon.display()
            )));
        }
        let handle = XfrmHandle::open_in(&site.namespace.path())?;
        let end = StrongswanEnd {
            charon,
            handle,
            hosts: site.hosts,
            esp: material.esp.clone(),
            suite: material.suite,
            version,
            namespace: site.namespace.path(),
            rekeying: plan.workload().rekey.is_some(),
            per_cpu: material.per_cpu,
            rekeys: Arc::default(),
        };
        if site.side == Side::B {
            end.initiate(material).await?;
            if material.per_cpu {
                end.negotiate_per_cpu(material, site.namespace, (me.inner, peer.inner))
                    .await?;
            }
        }
        Ok(end)
    }

    /// Per-CPU CHILD_SAs before the transfer, not during it: the first packets from a CPU
    /// without an SA of its own are dropped while the kernel acquires one (seen in
    /// user-mode Linux 7.2.7: a TCP flow's SYN lost, its first byte a second late). A
    /// datagram from each online CPU of end b (this end) to a's inner address makes b's
    /// kernel acquire an SA for that CPU, and charon negotiates it; a, the responder, gives
    /// its outbound SA of each a CPU of its own, each a different one while some is left.
    /// Waits until b has an outbound SA per CPU and a CHILD_SA per CPU beside the
    /// fallback (its inbound SAs, one per CHILD_SA).
    async fn negotiate_per_cpu(
        &self,
        material: &Material,
        namespace: &netns::Namespace,
        (from, to): (std::net::IpAddr, std::net::IpAddr),
    ) -> LabResult<()> {
        let cpus = super::xfrm::online_cpus()?;
        let deadline = Instant::now() + PER_CPU_TIMEOUT;
        loop {
            let sas = self.handle.list_sas().await?;
            let out_cpus: std::collections::BTreeSet<u32> = sas
                .iter()
                .filter(|sa| sa.id.src == self.hosts.b && sa.id.dst == self.hosts.a)
                .filter_map(|sa| sa.pcpu)
                .collect();
            let child_sas = sas
                .iter()
                .filter(|sa| sa.id.src == self.hosts.a && sa.id.dst == self.hosts.b)
                .count();
            let missing: Vec<u32> = cpus.iter().copied().filter(|c| !out_cpus.contains(c)).collect();
            if missing.is_empty() && child_sas > cpus.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "charon negotiated no per-CPU SA for CPU(s) {missing:?} of end b, or fewer CHILD_SAs \
                     ({child_sas}) than the fallback and one per CPU ({} CPUs), within \
                     {PER_CPU_TIMEOUT:?}; charon's logs (removed with the run):\n{}",
                    cpus.len(),
                    material.logs()
                )));
            }
            for cpu in missing {
                acquire_from(namespace, cpu, from, to)?;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// IKEv2 to the other end, then the CHILD_SA's two SAs in this end's kernel.
    async fn initiate(&self, material: &Material) -> LabResult<()> {
        let args = ["--initiate", "--child", CONN, "--ike", CONN, "--timeout"];
        let timeout = INITIATE_TIMEOUT.as_secs().to_string();
        let args = [&args[..], &[timeout.as_str()]].concat();
        if let Err(e) = self
            .charon
            .try_swanctl(&args, INITIATE_TIMEOUT + Duration::from_secs(5))
        {
            return Err(failed(format!(
                "IKEv2 from b to a did not establish the CHILD_SA: {e}\ncharon's logs (removed with the run):\n{}",
                material.logs()
            )));
        }
        let deadline = Instant::now() + INSTALLED_TIMEOUT;
        loop {
            let sas = self.handle.list_sas().await?;
            let found = negotiated::negotiated_sas(&sas, self.hosts.a, self.hosts.b);
            if found.len() >= 2 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "IKE established, but the CHILD_SA's two SAs were not in the kernel after \
                     {INSTALLED_TIMEOUT:?} ({} found); charon's logs (removed with the run):\n{}",
                    found.len(),
                    material.logs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// charon's rekeys of a local run (`--rekey-every`): commanded on end b's charon (the
    /// initiator), seen done in end b's kernel or charon's list, counted on end a's evidence.
    pub fn rekey(
        a: &StrongswanEnd,
        b: &StrongswanEnd,
        sa: model::rekey::RekeyTarget,
    ) -> LabResult<rekey::CharonRekey> {
        rekey::CharonRekey::new(
            &b.namespace,
            b.charon.control(),
            [a.hosts.a, a.hosts.b],
            sa,
            a.rekeys.clone(),
        )
    }

    /// What charon installed in this end's kernel, beside what the lab's xfrm backend
    /// installs for the same suite; read after the transfers, so the counters show them.
    /// The current CHILD_SA's SAs only, as charon lists it (all of them where it lists none).
    pub async fn evidence(&self) -> LabResult<StrongswanEvidence> {
        let mut dump = self.handle.list_sas().await?;
        let all = negotiated::negotiated_sas(&dump, self.hosts.a, self.hosts.b).len();
        let current = self
            .charon
            .try_swanctl(&["--list-sas", "--noblock"], Duration::from_secs(10))
            .map(|listing| rekey::installed_child_spis(&listing))
            .unwrap_or_default();
        if !current.is_empty() {
            dump.retain(|sa| current.contains(&sa.id.spi.0));
        }
        let sas = negotiated::negotiated_sas(&dump, self.hosts.a, self.hosts.b);
        let rekeys = self.rekeying.then(|| CharonRekeys {
            child_sa: self.rekeys.child_sa.load(Ordering::Relaxed),
            ike_sa: self.rekeys.ike_sa.load(Ordering::Relaxed),
            earlier_sas: (all - sas.len()) as u32,
        });
        let lab = Protection::generate(self.suite, AuthTrunc::Bits128).map_err(LabError::failed)?;
        let lab_xfrm_installs: Vec<Algorithm> = xfrm::lab_algorithms(&lab)
            .iter()
            .map(negotiated::algorithm)
            .collect();
        let differences = negotiated::differences(&sas, &lab_xfrm_installs, self.per_cpu);
        Ok(StrongswanEvidence {
            version: self.version.clone(),
            ike_version: 2,
            ike_proposal: IKE_PROPOSAL.into(),
            esp_proposal: self.esp.clone(),
            auth: "psk".into(),
            sas,
            lab_xfrm_installs,
            differences,
            rekeys,
            per_cpu_sas: self.per_cpu,
        })
    }
}

/// Sends a datagram from `from` to `to` (the inner addresses: the CHILD_SA's selectors) on
/// `cpu`, in `namespace`: where that CPU has no SA of its own, the kernel acquires one.
/// Whether the datagram leaves is not asked (the kernel drops it while the SA is larval).
fn acquire_from(
    namespace: &netns::Namespace,
    cpu: u32,
    from: std::net::IpAddr,
    to: std::net::IpAddr,
) -> LabResult<()> {
    let sent = namespace
        .spawn("ipl-acquire", move || -> std::io::Result<()> {
            tunnel::pin_current_thread(cpu as usize)?;
            let socket = std::net::UdpSocket::bind((from, 0))?;
            let _ = socket.send_to(b"ipsec-lab: a per-CPU SA, please", (to, ACQUIRE_PORT));
            Ok(())
        })
        .map_err(failed)?
        .join()
        .map_err(|_| failed("the thread sending on one CPU panicked"))?;
    sent.map_err(|e| failed(format!("a datagram from {from} on CPU {cpu}: {e}")))
}

/// swanctl.conf holds the PSK: only root may read it.
fn write_private(path: &std::path::Path, text: &str) -> LabResult<()> {
    crate::backend::daemon::write_private(path, text)
        .map_err(|e| failed(format!("write {}: {e}", path.display())))
}
