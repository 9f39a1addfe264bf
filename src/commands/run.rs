//! `ipsec-lab run`: arguments → validated plan → one lab call (local, VM or two hosts) →
//! the report printed.

use lab::{LabError, LabResult};

use crate::cli::RunArgs;
use crate::{output, progress};

pub fn run(args: RunArgs) -> LabResult<()> {
    // Stage two of parsing: nothing below this line runs on invalid input.
    let plan = args.request().validate()?;
    for ignored in &plan.ignored {
        eprintln!("note: ignored {ignored}");
    }
    if let Some(json) = &args.json {
        output::check_writable(json, "--json")?;
    }
    lab::require_net_admin()?;
    let show = lab::backend::xfrm::ShowKeys(args.show_keys);
    let report = if plan.peer.is_some() {
        let psk = lab::remote::client::load_psk(args.psk_file.as_deref())?;
        lab::remote::client::check_local(&plan, args.mtu)?;
        runtime()?.block_on(lab::remote::client::run(&plan, &psk, show))?
    } else if lab::vm::wanted(&plan) {
        lab::vm::run_in_vm(&plan)?
    } else {
        let watcher = progress::for_run(args.no_progress);
        runtime()?.block_on(lab::local::run(&plan, show, watcher.as_ref()))?
    };
    output::emit(&report, args.json.as_deref())
}

pub fn runtime() -> LabResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(LabError::failed)
}
