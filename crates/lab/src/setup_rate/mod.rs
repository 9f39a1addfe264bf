//! `ipsec-lab setup-rate`: how fast a backend sets up what its tunnels need, as the
//! number grows. `xfrm` ([`xfrm`]): SAs and policies over netlink, in user-mode Linux (the
//! host has no ESP). `strongswan`: IKE_SAs between two charons; `wireguard-go`: peers added
//! and handshakes completed. Those two need no ESP and run in two namespaces of this host
//! ([`measure_on_host`]); their protocol work is each backend's own module's
//! (`backend::strongswan::rate`, `backend::wireguard::rate`).

pub mod xfrm;

pub use xfrm::{measure, measure_here};

use model::setup_rate::{SetupBackend, SetupRatePlan, SetupRateReport};
use netns::{Topology, TopologySpec};

use crate::backend::{strongswan, wireguard};
use crate::error::{LabError, LabResult};

/// Refuses, before anything is created, where the plan's backend is not installed.
pub fn preflight(plan: &SetupRatePlan) -> LabResult<()> {
    match plan.backend {
        SetupBackend::Xfrm => Ok(()),
        SetupBackend::Strongswan => strongswan::rate::preflight(),
        SetupBackend::WireguardGo => wireguard::rate::preflight(),
    }
}

/// strongswan's or wireguard-go's rates, between two namespaces of this host made for the
/// run and removed with everything in them when it ends (also on SIGINT/SIGTERM, which stop
/// it between exchanges).
pub fn measure_on_host(plan: &SetupRatePlan) -> LabResult<SetupRateReport> {
    preflight(plan)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: 1500,
        addressing: model::Addressing::default(),
    };
    let topology = rt.block_on(Topology::create(&spec))?;
    let mut report = SetupRateReport {
        environment: model::Environment::detect(),
        plan: plan.clone(),
        tables: Vec::new(),
        ike: Vec::new(),
        peers: Vec::new(),
        implementation: None,
        notes: Vec::new(),
    };
    match plan.backend {
        SetupBackend::Xfrm => unreachable!("xfrm runs in user-mode Linux: measure"),
        SetupBackend::Strongswan => {
            let run = strongswan::rate::measure(plan, &topology)?;
            report.ike = run.rates;
            report.implementation = Some(run.version);
            report.notes.push(strongswan::rate::note(plan));
        }
        SetupBackend::WireguardGo => {
            let run = wireguard::rate::measure(plan, &topology, &rt)?;
            report.notes.push(wireguard::rate::note(plan, &run));
            report.peers = run.rates;
            report.implementation = Some(run.implementation);
        }
    }
    Ok(report)
}
