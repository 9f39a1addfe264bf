//! `ipsec-lab clean`: removes what killed runs left ([`lab::clean`]) and says what it did
//! and what it left alone.

use lab::{LabError, LabResult};

use crate::cli::CleanArgs;

pub fn run(_args: CleanArgs) -> LabResult<()> {
    lab::require_net_admin()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    let summary = runtime.block_on(lab::clean::clean_dead_owners())?;
    for line in &summary.lines {
        println!("{line}");
    }
    let recorded_by_live: Vec<&str> = summary.live_namespaces.iter().map(String::as_str).collect();
    let unrecorded: Vec<String> = netns::lab_namespaces()
        .into_iter()
        .filter(|n| !recorded_by_live.contains(&n.as_str()))
        .collect();
    if !unrecorded.is_empty() {
        println!(
            "left alone: {} namespace(s) named ipl-* that no run recorded: {} (made by hand, by another \
             tool or by an older ipsec-lab; if nothing uses them, remove each with `ip netns del NAME`)",
            unrecorded.len(),
            unrecorded.join(", ")
        );
    }
    if summary.lines.is_empty() && unrecorded.is_empty() {
        println!("nothing to clean");
    }
    if summary.failures.is_empty() {
        Ok(())
    } else {
        Err(LabError::failed(anyhow::anyhow!(
            "could not remove everything killed runs left (kept in their state files for the next \
             `ipsec-lab clean`): {}",
            summary.failures.join("; ")
        )))
    }
}
