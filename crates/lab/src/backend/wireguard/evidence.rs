//! A local WireGuard run's evidence: both ends, named by the implementation that carried
//! them (which the children know; the shared helpers in `mod.rs` do not need them).

use model::{Backend, RunPlan};

use super::{boring, go, kernel, new_evidence, WireguardEnd, WireguardEvidence};

/// Both ends' evidence as one local run's.
pub fn local_evidence(plan: &RunPlan, a: WireguardEnd, b: WireguardEnd) -> WireguardEvidence {
    let implementation = match plan.backend() {
        Backend::WireguardGo => {
            // The binary the ends were started from: the lab's build wins wherever it is.
            let program = go::GoBinary::find();
            let implementation = program.as_ref().map_or_else(
                || "wireguard-go (binary not found after the run)".into(),
                model::evidence::GoProgram::implementation,
            );
            let mut evidence = new_evidence(plan, implementation, [a, b]);
            evidence.program = program;
            return evidence;
        }
        Backend::Boringtun => boring::implementation(),
        Backend::Wireguard => kernel::implementation(),
        // Not WireGuard: the run's secrets are WireGuard keys only for the three above, so
        // their ends never come here.
        Backend::Plain
        | Backend::Xfrm
        | Backend::Userspace
        | Backend::Openvpn
        | Backend::OpenvpnDco
        | Backend::Strongswan => plan.backend().name().to_string(),
    };
    new_evidence(plan, implementation, [a, b])
}
