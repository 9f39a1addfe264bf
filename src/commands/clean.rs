//! `ipsec-lab clean`: removes what killed runs left behind, and nothing the lab did not create.

use crate::cli::CleanArgs;
use crate::error::{require_net_admin, LabResult};

pub fn run(_args: CleanArgs) -> LabResult<()> {
    require_net_admin()?;
    let report = netns::clean()?;
    for ns in &report.namespaces {
        println!("removed namespace {ns}");
    }
    if report.namespaces.is_empty() {
        println!("nothing to clean");
    }
    Ok(())
}
