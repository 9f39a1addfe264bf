//! `ipsec-lab setup-rate`: XFRM SAs and policies installed per second as the kernel's
//! tables grow, batched and one by one, a flow's lookup cost with them installed, the
//! flush time and kernel memory per SA (issue 46), measured in user-mode Linux by
//! [`lab::setup_rate`]. Bad input exits 2 before anything boots; SIGINT/SIGTERM stop it
//! within a second, with nothing left behind, and exit 130/143.

use std::path::PathBuf;

use clap::Args;
use lab::{LabError, LabResult};
use model::setup_rate::{SetupRatePlan, TableSize};
use model::CipherSuite;

/// XFRM SAs and policies installed per second as the tables grow.
#[derive(Debug, Clone, Args)]
pub struct SetupRateArgs {
    /// Table sizes, comma-separated: how many SAs (and as many policies) each step installs,
    /// with k for thousands and m for millions (at most 200k; the guest's memory grows with
    /// the largest).
    #[arg(long, value_delimiter = ',', default_value = "1k,10k,100k")]
    pub sizes: Vec<TableSize>,
    /// Every SA's cipher suite: aes-128-gcm, aes-256-gcm, aes-256-cbc-hmac-sha256, ...
    #[arg(long, default_value = "aes-256-gcm", value_parser = crate::values::cipher(), hide_possible_values = true)]
    pub cipher: CipherSuite,
    /// Requests per socket write in the batched installs (1 to 4096; the one-by-one
    /// installs send 1).
    #[arg(long, default_value_t = 256, allow_negative_numbers = true)]
    pub window: u32,
    /// Length of each of the lookup flow's trials, in seconds.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub flow_seconds: f64,
    /// Where: `uml` (user-mode Linux, the one that runs here) or `uml:RELEASE`.
    #[arg(long, default_value = "uml", value_name = "uml[:RELEASE]")]
    pub vm: String,
    /// Write the JSON report to FILE, or to stdout with `-` (the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Internal: measure in this process's kernel (the guest's run).
    #[arg(long, hide = true)]
    pub in_guest: bool,
}

pub fn run(args: SetupRateArgs) -> LabResult<()> {
    let plan = SetupRatePlan::validate(args.sizes.clone(), args.cipher, args.window, args.flow_seconds)
        .map_err(|e| LabError::usage(anyhow::anyhow!(e)))?;
    let Some(release) = lab::vm::uml_kernel(Some(&args.vm)) else {
        return Err(LabError::usage(anyhow::anyhow!(
            "--vm {}: setup-rate runs in user-mode Linux: --vm uml or uml:RELEASE",
            args.vm
        )));
    };
    let json = args.json.as_deref();
    if let Some(json) = json {
        crate::output::check_writable(json, "--json")?;
    }
    let report = if args.in_guest {
        speed::stop::on_signals().map_err(LabError::failed)?;
        let measured = lab::setup_rate::measure_here(&plan);
        if let Some(signal) = speed::stop::requested() {
            std::process::exit(128 + signal);
        }
        measured?
    } else {
        lab::setup_rate::measure(&plan, release.as_deref())?
    };
    if !args.in_guest {
        crate::output::print_human(&report::setup_rate::render(&report), json);
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report).map_err(LabError::failed)?;
        crate::output::write_text(path, &(text + "\n"))?;
    }
    Ok(())
}
