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
//! Adding a backend: a module here with `preflight`, its end type (`start`, `finish`) and
//! its evidence, a variant of [`End`] and of `model::Backend`.

mod daemon;
pub mod openvpn;
pub mod site;
pub mod strongswan;
pub mod userspace;
pub mod wireguard;
pub mod xfrm;

use control::RunKeys;
use model::{Backend, RunPlan};

use model::evidence::EndEvidence;
pub use site::{data_addr, Hosts, Side, Site};

use crate::error::{LabError, LabResult};

/// What both ends of a run share, made once per run.
pub struct RunSecrets {
    /// SA identifiers and keys, the tunnel's static key: what a client sends a server.
    pub keys: RunKeys,
    /// OpenVPN's key file or certificates for both ends (local runs only).
    pub openvpn: Option<openvpn::Material>,
    /// strongSwan's PSK and the charons' directory (local runs only).
    pub strongswan: Option<strongswan::Material>,
    /// Both WireGuard ends' key pairs (local runs only).
    pub wireguard: Option<wireguard::Keys>,
    /// xfrm SA pairs 1 to N-1 with `--sas N` (local runs only).
    pub xfrm_more_pairs: Vec<control::XfrmKeys>,
    /// The run's pcrypt instance with `--pcrypt` (local runs only): made before the ends,
    /// dropped after them (crypto instances are the kernel's, not an end's).
    pub pcrypt: Option<xfrm::PcryptGuard>,
}

impl RunSecrets {
    /// Fresh secrets for `plan`, by the end that decides them (a local run, a client).
    pub fn generate(plan: &RunPlan) -> LabResult<RunSecrets> {
        let mut keys = RunKeys::default();
        match plan.backend() {
            Backend::Xfrm => keys.xfrm = Some(xfrm::generate_keys(plan)?),
            Backend::Userspace => keys.tunnel = Some(userspace::generate_key()?),
            Backend::Plain
            | Backend::Openvpn
            | Backend::Strongswan
            | Backend::Wireguard
            | Backend::WireguardGo
            | Backend::Boringtun => {}
        }
        let openvpn = match plan.backend() {
            Backend::Openvpn => Some(openvpn::Material::create(plan)?),
            _ => None,
        };
        let strongswan = match plan.backend() {
            Backend::Strongswan => Some(strongswan::Material::create(plan)?),
            _ => None,
        };
        let wireguard = match plan.backend().is_wireguard() {
            true => Some(wireguard::Keys::generate()?),
            false => None,
        };
        let xfrm_more_pairs = match &keys.xfrm {
            Some(first) if plan.sas() > 1 => xfrm::generate_more_pairs(plan, first)?,
            _ => Vec::new(),
        };
        let pcrypt = match plan.backend() == Backend::Xfrm && plan.pcrypt() {
            true => Some(xfrm::PcryptGuard::create()?),
            false => None,
        };
        Ok(RunSecrets {
            keys,
            openvpn,
            strongswan,
            wireguard,
            xfrm_more_pairs,
            pcrypt,
        })
    }

    /// What a server received: keys only.
    pub fn received(keys: RunKeys) -> RunSecrets {
        RunSecrets {
            keys,
            openvpn: None,
            strongswan: None,
            wireguard: None,
            xfrm_more_pairs: Vec::new(),
            pcrypt: None,
        }
    }
}

/// Checks that the backend can run here, creating nothing that outlives the check.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    match plan.backend() {
        Backend::Plain => Ok(()),
        Backend::Xfrm => xfrm::preflight(plan).await,
        Backend::Userspace => userspace::preflight(plan).await,
        Backend::Openvpn => openvpn::preflight(plan).await,
        Backend::Strongswan => strongswan::preflight(plan).await,
        Backend::Wireguard => wireguard::kernel::preflight(plan).await,
        Backend::WireguardGo => wireguard::go::preflight(plan).await,
        Backend::Boringtun => wireguard::boring::preflight(plan).await,
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
        match plan.backend() {
            Backend::Plain => Ok(End::Plain),
            Backend::Xfrm => Ok(End::Xfrm(
                xfrm::XfrmEnd::start(plan, &secrets.keys, &secrets.xfrm_more_pairs, site, show).await?,
            )),
            Backend::Userspace => Ok(End::Userspace(userspace::UserspaceEnd::start(
                plan,
                &secrets.keys,
                site,
            )?)),
            Backend::Openvpn => {
                let material = secrets.openvpn.as_ref().ok_or_else(|| {
                    LabError::usage(anyhow::anyhow!(
                        "the openvpn backend does not run between two hosts"
                    ))
                })?;
                Ok(End::Openvpn(openvpn::OpenvpnEnd::start(plan, material, site)?))
            }
            Backend::Strongswan => {
                let material = secrets.strongswan.as_ref().ok_or_else(|| {
                    LabError::usage(anyhow::anyhow!(
                        "the strongswan backend does not run between two hosts"
                    ))
                })?;
                Ok(End::Strongswan(
                    strongswan::StrongswanEnd::start(plan, material, site).await?,
                ))
            }
            Backend::Wireguard | Backend::WireguardGo | Backend::Boringtun => {
                let keys = secrets.wireguard.as_ref().ok_or_else(|| {
                    LabError::usage(anyhow::anyhow!(
                        "the {} backend does not run between two hosts",
                        plan.backend()
                    ))
                })?;
                Ok(match plan.backend() {
                    Backend::Wireguard => {
                        End::Wireguard(wireguard::kernel::KernelEnd::start(plan, keys, site).await?)
                    }
                    Backend::Boringtun => {
                        End::Boringtun(wireguard::boring::BoringEnd::start(plan, keys, site).await?)
                    }
                    _ => End::WireguardGo(wireguard::go::GoEnd::start(plan, keys, site).await?),
                })
            }
        }
    }

    /// Waits until the end carries data (OpenVPN's handshake); the others are ready at once
    /// (strongSwan's end b waits for IKE in its start).
    pub fn wait_ready(&mut self) -> LabResult<()> {
        match self {
            End::Openvpn(end) => end.wait_ready(),
            _ => Ok(()),
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
