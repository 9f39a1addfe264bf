//! `ipsec-lab run`: arguments → validated plan → one lab call (local, VM or two hosts) →
//! the report printed.

use lab::{LabError, LabResult};

use crate::cli::RunArgs;
use crate::progress::{Live, Show};
use crate::runtime::runtime;
use crate::{output, progress};

pub fn run(args: RunArgs) -> LabResult<()> {
    // Stage two of parsing: nothing below this line runs on invalid input. A plan file is a
    // `--vm` host's plan, validated there (which said what it ignored).
    let plan = match &args.plan_file {
        Some(path) => lab::child::read_plan::<model::RunPlan>(path)?,
        None => args.request().validate()?,
    };
    if args.plan_file.is_none() {
        for ignored in plan.ignored() {
            eprintln!("note: ignored {ignored}");
        }
    }
    if let Some(json) = &args.json {
        if args.json_stream && output::is_std_stream(json) {
            return Err(LabError::usage(anyhow::anyhow!(
                "--json-stream writes its objects to stdout: give --json a FILE, not -"
            )));
        }
        output::check_writable(json, "--json")?;
    }
    // How intervals are shown: JSON objects, or lines beside the table (on stderr where
    // stdout carries the JSON report).
    // A UDP run streams its trials (it has no intervals).
    let show = match (args.json_stream, plan.workload().modes.interval_s) {
        (true, _) => Some(Show::JsonStream),
        (false, Some(period_s)) => Some(Show::Lines {
            to_stderr: args.json.as_deref().is_some_and(output::is_std_stream),
            period_s,
        }),
        (false, None) => None,
    };
    lab::require_net_admin()?;
    let keys = lab::backend::xfrm::ShowKeys(args.show_keys);
    let report = if plan.peer().is_some() {
        let psk = lab::remote::client::load_psk(args.plan.psk_file.as_deref())?;
        lab::remote::client::check_local(&plan, args.plan.link.mtu)?;
        let watcher: Box<dyn lab::progress::Progress> = match show {
            Some(shown) => Box::new(Live { show: shown }),
            None => Box::new(lab::progress::Quiet),
        };
        runtime()?.block_on(lab::remote::client::run(&plan, &psk, keys, watcher.as_ref()))?
    } else if lab::vm::wanted(&plan) {
        let report = lab::vm::run_in_vm(&plan)?;
        // The guest's console is not ours: its intervals are shown once it is back.
        if let Some(shown) = show {
            progress::replay(shown, &report);
        }
        report
    } else {
        // Interval lines are the progress: no bar between them.
        let watcher: Box<dyn lab::progress::Progress> = match show {
            Some(shown) => Box::new(Live { show: shown }),
            None => progress::for_run(args.no_progress),
        };
        runtime()?.block_on(lab::local::run(&plan, keys, watcher.as_ref()))?
    };
    if args.json_stream {
        // stdout carries the stream: the table goes to stderr, the report ends the stream.
        eprint!("{}", report::run::table(&report));
        if let Some(json) = args.json.as_deref() {
            output::write_text(json, &(output::to_json(&report)? + "\n"))?;
        }
        return output::end_of_stream(&report);
    }
    output::emit(&report, args.json.as_deref())
}
