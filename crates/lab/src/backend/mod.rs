//! Backends: what carries the payload between the two ends of a run.
//!
//! A backend starts ONE end ([`End::start`]): a local run starts two (namespaces a and b
//! of this host), a two-host run one on each host. Both ends of a run share its secrets
//! ([`RunSecrets`]), made once: by the local run, or by the client, which sends them to the
//! server inside the control channel. Each backend has a preflight check (run before
//! anything is created, so a missing capability is refused with nothing to undo). An
//! [`End`] owns everything it made and removes it on drop, so an error or Ctrl-C at any
//! later point cleans up the same way success does. What an end makes outside a recorded
//! namespace (processes, key files, SAs in a real host's namespace) is recorded in this
//! process's state file (crate `owner`) for `clean`.
//!
//! Adding a backend: a module here with `preflight` and its end type (`start`, `finish`),
//! its evidence types in `model::evidence`'s module of the same name, a variant of
//! `model::Backend` with its description, of [`End`] and (where it has secrets of its own)
//! of [`RunSecrets`]. No match over backends, ends, secrets or evidence here has a wildcard
//! arm, so the compiler then names every place that must say what the new one does: its
//! preflight and start, its secrets (made, sent to a server, received), the end evidence
//! that fits it, how [`local_evidence`] merges its ends', and with an `Evidence` variant of
//! its own its tunnel CPU, sentences and the ceiling's packet size.

mod daemon;
pub mod openvpn;
pub mod site;
pub mod strongswan;
pub mod userspace;
pub mod wireguard;
pub mod xfrm;

use control::{KeyMaterial, RunKeys};
use model::evidence::{EndEvidence, Evidence};
use model::{Backend, RunPlan};

pub use site::{data_addr, Hosts, Side, Site};

use crate::error::{LabError, LabResult};

/// What both ends of a run share, made once per run: the backend's own secrets, one
/// variant per kind of secret, so an end sees only its own backend's.
pub enum RunSecrets {
    /// The baseline shares nothing.
    Plain,
    /// SA identifiers and keys (the first pair is what a client sends a server), further
    /// pairs with `--sas N` and the run's pcrypt instance (local runs only).
    Xfrm(xfrm::Secrets),
    /// The userspace tunnel's static key (a client sends it to its server).
    Userspace(KeyMaterial),
    /// OpenVPN's key file or certificates for both ends (local runs only).
    Openvpn(openvpn::Material),
    /// strongSwan's PSK and the charons' directory (local runs only).
    Strongswan(strongswan::Material),
    /// Both WireGuard ends' key pairs, whichever implementation (local runs only).
    Wireguard(wireguard::Keys),
}

impl RunSecrets {
    /// Fresh secrets for `plan`, by the end that decides them (a local run, a client).
    pub fn generate(plan: &RunPlan) -> LabResult<RunSecrets> {
        Ok(match plan.backend() {
            Backend::Plain => RunSecrets::Plain,
            Backend::Xfrm => RunSecrets::Xfrm(xfrm::Secrets::generate(plan)?),
            Backend::Userspace => RunSecrets::Userspace(userspace::generate_key()?),
            Backend::Openvpn | Backend::OpenvpnDco => RunSecrets::Openvpn(openvpn::Material::create(plan)?),
            Backend::Strongswan => RunSecrets::Strongswan(strongswan::Material::create(plan)?),
            Backend::Wireguard | Backend::WireguardGo | Backend::Boringtun => {
                RunSecrets::Wireguard(wireguard::Keys::generate()?)
            }
        })
    }

    /// What a client sends its server: the keys of a backend that runs between two hosts.
    pub fn keys(&self) -> RunKeys {
        match self {
            RunSecrets::Xfrm(x) => RunKeys {
                xfrm: Some(x.first.clone()),
                tunnel: None,
            },
            RunSecrets::Userspace(key) => RunKeys {
                xfrm: None,
                tunnel: Some(key.clone()),
            },
            RunSecrets::Plain
            | RunSecrets::Openvpn(_)
            | RunSecrets::Strongswan(_)
            | RunSecrets::Wireguard(_) => RunKeys::default(),
        }
    }

    /// What a server received, as the secrets of its plan's backend; refused where the keys
    /// it needs are missing or the backend does not run between two hosts.
    pub fn received(plan: &RunPlan, keys: RunKeys) -> LabResult<RunSecrets> {
        let missing = |what: &str| LabError::usage(anyhow::anyhow!("no {what} in the run's secrets"));
        match plan.backend() {
            Backend::Plain => Ok(RunSecrets::Plain),
            Backend::Xfrm => {
                let first = keys.xfrm.ok_or_else(|| missing("xfrm keys"))?;
                Ok(RunSecrets::Xfrm(xfrm::Secrets::received(first)))
            }
            Backend::Userspace => keys
                .tunnel
                .map(RunSecrets::Userspace)
                .ok_or_else(|| missing("tunnel key")),
            Backend::Openvpn
            | Backend::OpenvpnDco
            | Backend::Strongswan
            | Backend::Wireguard
            | Backend::WireguardGo
            | Backend::Boringtun => Err(LabError::usage(anyhow::anyhow!(
                "the {} backend does not run between two hosts",
                plan.backend()
            ))),
        }
    }
}

/// Checks that the backend can run here, creating nothing that outlives the check.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    match plan.backend() {
        Backend::Plain => Ok(()),
        Backend::Xfrm => xfrm::preflight(plan).await,
        Backend::Userspace => userspace::preflight(plan).await,
        Backend::Openvpn | Backend::OpenvpnDco => openvpn::preflight(plan).await,
        Backend::Strongswan => strongswan::preflight(plan).await,
        Backend::Wireguard => wireguard::kernel::preflight(plan).await,
        Backend::WireguardGo => wireguard::go::preflight(plan).await,
        Backend::Boringtun => wireguard::boring::preflight(plan).await,
    }
}

/// What a run in a guest needs of this host's files (a guest sees them read-only), checked
/// before it boots: strongSwan 6 for the strongswan backend's per-CPU SAs. The guest's own
/// preflight checks its kernel.
pub fn guest_preflight(plan: &RunPlan) -> LabResult<()> {
    match plan.backend() {
        Backend::Strongswan => strongswan::programs(plan).map(drop),
        _ => Ok(()),
    }
}

/// One end of a running backend. Dropping it tears it down.
pub enum End {
    Plain,
    Xfrm(xfrm::XfrmEnd),
    Userspace(userspace::UserspaceEnd),
    Openvpn(openvpn::OpenvpnEnd),
    Strongswan(strongswan::StrongswanEnd),
    Wireguard(wireguard::kernel::KernelEnd),
    WireguardGo(wireguard::go::GoEnd),
    Boringtun(wireguard::boring::BoringEnd),
}

impl End {
    /// Brings up the end at `site` for `plan` with the run's secrets. `show` prints the
    /// SAs with their keys (`--show-keys`; never otherwise).
    pub async fn start(
        plan: &RunPlan,
        secrets: &RunSecrets,
        site: &Site<'_>,
        show: xfrm::ShowKeys,
    ) -> LabResult<End> {
        // Each backend takes its own secrets; another's are a bug in the caller.
        let theirs = || {
            LabError::usage(anyhow::anyhow!(
                "the run's secrets are not the {} backend's",
                plan.backend()
            ))
        };
        match (plan.backend(), secrets) {
            (Backend::Plain, RunSecrets::Plain) => Ok(End::Plain),
            (Backend::Xfrm, RunSecrets::Xfrm(x)) => {
                Ok(End::Xfrm(xfrm::XfrmEnd::start(plan, x, site, show).await?))
            }
            (Backend::Userspace, RunSecrets::Userspace(key)) => {
                Ok(End::Userspace(userspace::UserspaceEnd::start(plan, key, site)?))
            }
            (Backend::Openvpn | Backend::OpenvpnDco, RunSecrets::Openvpn(material)) => {
                Ok(End::Openvpn(openvpn::OpenvpnEnd::start(plan, material, site)?))
            }
            (Backend::Strongswan, RunSecrets::Strongswan(material)) => Ok(End::Strongswan(
                strongswan::StrongswanEnd::start(plan, material, site).await?,
            )),
            (Backend::Wireguard, RunSecrets::Wireguard(keys)) => Ok(End::Wireguard(
                wireguard::kernel::KernelEnd::start(plan, keys, site).await?,
            )),
            (Backend::WireguardGo, RunSecrets::Wireguard(keys)) => Ok(End::WireguardGo(
                wireguard::go::GoEnd::start(plan, keys, site).await?,
            )),
            (Backend::Boringtun, RunSecrets::Wireguard(keys)) => Ok(End::Boringtun(
                wireguard::boring::BoringEnd::start(plan, keys, site).await?,
            )),
            (
                Backend::Plain
                | Backend::Xfrm
                | Backend::Userspace
                | Backend::Openvpn
                | Backend::OpenvpnDco
                | Backend::Strongswan
                | Backend::Wireguard
                | Backend::WireguardGo
                | Backend::Boringtun,
                _,
            ) => Err(theirs()),
        }
    }

    /// Waits until the end carries data (OpenVPN's handshake); the others are ready at once
    /// (strongSwan's end b waits for IKE in its start).
    pub fn wait_ready(&mut self) -> LabResult<()> {
        match self {
            End::Openvpn(end) => end.wait_ready(),
            End::Plain
            | End::Xfrm(_)
            | End::Userspace(_)
            | End::Strongswan(_)
            | End::Wireguard(_)
            | End::WireguardGo(_)
            | End::Boringtun(_) => Ok(()),
        }
    }

    /// This end's evidence for the report. Stops a tunnel, so call it after the transfers.
    pub async fn finish(&mut self) -> LabResult<EndEvidence> {
        match self {
            End::Plain => Ok(EndEvidence::None),
            End::Xfrm(end) => Ok(EndEvidence::Xfrm(end.evidence().await?)),
            End::Userspace(end) => Ok(EndEvidence::Userspace(Box::new(end.finish()?))),
            End::Openvpn(end) => Ok(EndEvidence::Openvpn(end.finish())),
            End::Strongswan(end) => Ok(EndEvidence::Strongswan(end.evidence().await?)),
            End::Wireguard(end) => Ok(EndEvidence::Wireguard(end.evidence().await?)),
            End::WireguardGo(end) => Ok(EndEvidence::Wireguard(end.evidence()?)),
            End::Boringtun(end) => Ok(EndEvidence::Wireguard(end.evidence()?)),
        }
    }
}

/// Both ends' evidence as one local run's (stops the tunnels): each backend merges its own
/// from its ends' and its secrets.
pub async fn local_evidence(plan: &RunPlan, ends: &mut [End], secrets: &RunSecrets) -> LabResult<Evidence> {
    let mut each = Vec::new();
    for end in ends.iter_mut() {
        each.push(end.finish().await?);
    }
    let mut each = each.into_iter();
    let (a, b) = (each.next(), each.next());
    let theirs = || {
        LabError::failed(anyhow::anyhow!(
            "the ends' evidence is not the {} backend's",
            plan.backend()
        ))
    };
    Ok(match secrets {
        RunSecrets::Plain => Evidence::None,
        // End a sees both SAs' counters.
        RunSecrets::Xfrm(x) => match a {
            Some(EndEvidence::Xfrm(a)) => Evidence::Xfrm(x.local_evidence(a)),
            _ => return Err(theirs()),
        },
        RunSecrets::Strongswan(_) => match a {
            Some(EndEvidence::Strongswan(a)) => Evidence::Strongswan(a),
            _ => return Err(theirs()),
        },
        RunSecrets::Userspace(_) => match (a, b) {
            (Some(EndEvidence::Userspace(a)), Some(EndEvidence::Userspace(b))) => {
                Evidence::Userspace(Box::new(userspace::local_evidence(plan, *a, *b).await?))
            }
            _ => return Err(theirs()),
        },
        RunSecrets::Openvpn(material) => match (a, b) {
            (Some(EndEvidence::Openvpn(a)), Some(EndEvidence::Openvpn(b))) => {
                Evidence::Openvpn(material.evidence([a, b]))
            }
            _ => return Err(theirs()),
        },
        RunSecrets::Wireguard(_) => match (a, b) {
            (Some(EndEvidence::Wireguard(a)), Some(EndEvidence::Wireguard(b))) => {
                Evidence::Wireguard(wireguard::local_evidence(plan, a, b))
            }
            _ => return Err(theirs()),
        },
    })
}

/// The rekey `plan` asks for (`--rekey-every`) of a local run's two ends, made before its
/// data flows so a backend that cannot rekey fails the run before it starts: the schedule
/// and the backend's switch. The plan refused it for backends that cannot.
pub fn rekey(
    plan: &RunPlan,
    ends: &[End],
) -> LabResult<Option<(model::rekey::RekeySchedule, Box<dyn crate::rekey::Rekey>)>> {
    let Some(schedule) = plan.workload().rekey else {
        return Ok(None);
    };
    let cannot = || {
        LabError::usage(anyhow::anyhow!(
            "the lab cannot rekey the {} backend",
            plan.backend()
        ))
    };
    let rekey: Box<dyn crate::rekey::Rekey> = match plan.backend() {
        Backend::Xfrm => match ends {
            [End::Xfrm(a), End::Xfrm(b)] => Box::new(xfrm::XfrmEnd::rekey(a, b, schedule.order)?),
            _ => return Err(cannot()),
        },
        Backend::Openvpn => match ends {
            [End::Openvpn(a), End::Openvpn(_)] => Box::new(openvpn::OpenvpnEnd::rekey(a)),
            _ => return Err(cannot()),
        },
        // Its description has no rekey: the plan refuses --rekey-every for it.
        Backend::OpenvpnDco => return Err(cannot()),
        Backend::Strongswan => match ends {
            [End::Strongswan(a), End::Strongswan(b)] => {
                Box::new(strongswan::StrongswanEnd::rekey(a, b, schedule.sa)?)
            }
            _ => return Err(cannot()),
        },
        Backend::Userspace => match ends {
            [End::Userspace(a), End::Userspace(b)] => Box::new(userspace::UserspaceRekey::new(a, b)?),
            _ => return Err(cannot()),
        },
        // WireGuard's own rekey, watched: nothing outside a device starts one.
        Backend::Wireguard | Backend::WireguardGo | Backend::Boringtun => {
            let asks: [wireguard::rekey::Ask; 2] = match ends {
                [End::Wireguard(a), End::Wireguard(b)] => [a.last_handshake()?, b.last_handshake()?],
                [End::WireguardGo(a), End::WireguardGo(b)] => [a.last_handshake(), b.last_handshake()],
                [End::Boringtun(a), End::Boringtun(b)] => [a.last_handshake(), b.last_handshake()],
                _ => return Err(cannot()),
            };
            Box::new(wireguard::rekey::Handshakes::watch(asks)?)
        }
        Backend::Plain => return Err(cannot()),
    };
    Ok(Some((schedule, rekey)))
}
