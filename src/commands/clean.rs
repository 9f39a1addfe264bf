//! `ipsec-lab clean`: removes what killed runs left behind, and nothing the lab did not create.

use crate::cli::CleanArgs;
use crate::error::{require_net_admin, LabResult};

pub fn run(_args: CleanArgs) -> LabResult<()> {
    require_net_admin()?;
    let report = netns::clean()?;
    for ns in &report.namespaces {
        println!("removed namespace {ns}");
    }
    // SAs/policies a run left in this namespace (runs between real hosts install them here).
    let xfrm = crate::backends::xfrm::clean_current_namespace()?;
    if xfrm.sas + xfrm.policies > 0 {
        println!(
            "removed {} SAs and {} policies of the lab (reqid/SPI in its range)",
            xfrm.sas, xfrm.policies
        );
    }
    if report.namespaces.is_empty() && xfrm.sas + xfrm.policies == 0 {
        println!("nothing to clean");
    }
    Ok(())
}
