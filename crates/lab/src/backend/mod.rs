//! Backends: what carries the payload between the two ends of the lab topology.
//!
//! Each backend has a preflight check (run before anything is created, so a missing
//! capability is refused with nothing to undo) and a `start` that brings it up on a built
//! topology. What `start` returns owns everything the backend made and removes it on drop,
//! so an error or Ctrl-C at any later point cleans up the same way success does. What a
//! backend makes outside a recorded namespace (processes, key files, SAs in the current
//! namespace) is recorded in this process's state file (crate `owner`) for `clean`.

mod openvpn;
mod plain;
pub mod userspace;
pub mod xfrm;

use std::net::SocketAddr;

use futures::future::BoxFuture;
use model::{Backend, RunPlan};
use netns::Topology;

use crate::error::LabResult;

/// Which end of a run something belongs to: `A` is namespace a of the local lab, or the
/// client of a two-host run (`run --peer`); `B` is namespace b, or the server (`serve`).
/// Both kinds of run build each end with the same per-end code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// Where the payload flows once the backend is up: the receiver listens on `target` inside
/// namespace `b`, the sender connects to it from namespace `a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPath {
    pub target: SocketAddr,
}

/// A running backend. Dropping it tears it down.
pub trait ActiveBackend: Send {
    fn data_path(&self) -> DataPath;

    /// Evidence for the report, read after the transfers (SA counters, drivers, tunnel
    /// thread CPU, ...). The shape is the backend's own and documented with it.
    fn details(&mut self) -> BoxFuture<'_, LabResult<serde_json::Value>>;

    /// Lines for the human reader, e.g. that a VM's speeds are emulated.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Checks that the backend can run here, creating nothing that outlives the check.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    match plan.backend {
        Backend::Plain => Ok(()),
        Backend::Xfrm => xfrm::preflight(plan).await,
        Backend::Userspace => userspace::preflight(plan).await,
        Backend::Openvpn => openvpn::preflight(plan).await,
    }
}

pub async fn start(
    plan: &RunPlan,
    topology: &Topology,
    show: xfrm::ShowKeys,
) -> LabResult<Box<dyn ActiveBackend>> {
    match plan.backend {
        Backend::Plain => Ok(Box::new(plain::Plain::new(plan, topology))),
        Backend::Xfrm => Ok(Box::new(xfrm::Xfrm::start(plan, topology, show).await?)),
        Backend::Userspace => Ok(Box::new(userspace::Userspace::start(plan, topology)?)),
        Backend::Openvpn => Ok(Box::new(openvpn::Openvpn::start(plan, topology)?)),
    }
}
