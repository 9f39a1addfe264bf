//! `ipsec-lab setup-rate`: how fast a backend sets up what its tunnels need as their number
//! grows (issue 46): XFRM SAs and policies installed per second, batched and one by one,
//! a flow's lookup cost with them installed, the flush time and kernel memory per SA,
//! measured in user-mode Linux by [`lab::setup_rate`]; strongSwan IKE_SAs per second;
//! wireguard-go peers added and handshakes completed per second. Bad input exits 2 before
//! anything starts; SIGINT/SIGTERM stop it within a second, with nothing left behind, and
//! exit 130/143.

use std::path::PathBuf;

use clap::Args;
use lab::{LabError, LabResult};
use model::setup_rate::{SetupBackend, SetupRatePlan, SetupRateRequest, TableSize};
use model::CipherSuite;

/// SAs, IKE_SAs or WireGuard peers set up per second as their number grows.
#[derive(Debug, Clone, Args)]
pub struct SetupRateArgs {
    /// What is set up: xfrm (SAs and policies over netlink, in user-mode Linux), strongswan
    /// (IKE_SAs between two charons) or wireguard-go (peers added and handshakes).
    #[arg(long, default_value = "xfrm", value_name = "xfrm|strongswan|wireguard-go")]
    pub backend: SetupBackend,
    /// Sizes, comma-separated: how many SAs (and as many policies), IKE_SAs or peers each
    /// step sets up, with k for thousands (xfrm: at most 200k, default 1k,10k,100k;
    /// strongswan: at most 10k, default 100,1k; wireguard-go: at most 100k, default 1k,10k).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<TableSize>>,
    /// xfrm: every SA's cipher suite: aes-128-gcm, aes-256-gcm (default),
    /// aes-256-cbc-hmac-sha256, ...
    #[arg(long, value_parser = crate::values::cipher(), hide_possible_values = true)]
    pub cipher: Option<CipherSuite>,
    /// xfrm: requests per socket write in the batched installs (1 to 4096, default 256);
    /// strongswan and wireguard-go: exchanges in flight (1 to 1024, default 32 and 64).
    #[arg(long, allow_negative_numbers = true)]
    pub window: Option<u32>,
    /// xfrm: length of each of the lookup flow's trials, in seconds (default 0.5).
    #[arg(long, allow_negative_numbers = true)]
    pub flow_seconds: Option<f64>,
    /// xfrm: where, `uml` (user-mode Linux, the one that runs here; the default) or
    /// `uml:RELEASE`.
    #[arg(long, value_name = "uml[:RELEASE]")]
    pub vm: Option<String>,
    /// Write the JSON report to FILE, or to stdout with `-` (the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Internal: measure in this process's kernel (the guest's run).
    #[arg(long, hide = true)]
    pub in_guest: bool,
}

pub fn run(args: SetupRateArgs) -> LabResult<()> {
    let plan = SetupRatePlan::validate(SetupRateRequest {
        backend: args.backend,
        sizes: args.sizes.clone(),
        suite: args.cipher,
        window: args.window,
        flow_seconds: args.flow_seconds,
    })
    .map_err(|e| LabError::usage(anyhow::anyhow!(e)))?;
    let vm = args.vm.as_deref().unwrap_or("uml");
    let release = match (plan.backend, lab::vm::uml_kernel(Some(vm))) {
        (SetupBackend::Xfrm, Some(release)) => release,
        (SetupBackend::Xfrm, None) => {
            return Err(LabError::usage(anyhow::anyhow!(
                "--vm {vm}: setup-rate runs in user-mode Linux: --vm uml or uml:RELEASE"
            )))
        }
        (backend, _) if args.vm.is_some() => {
            return Err(LabError::usage(anyhow::anyhow!(
                "--vm is for setup-rate --backend xfrm: {backend} needs no ESP and runs in two namespaces of this host"
            )))
        }
        _ => None,
    };
    let json = args.json.as_deref();
    if let Some(json) = json {
        crate::output::check_writable(json, "--json")?;
    }
    let report = if args.in_guest || plan.backend != SetupBackend::Xfrm {
        speed::stop::on_signals().map_err(LabError::failed)?;
        let measured = match plan.backend {
            SetupBackend::Xfrm => lab::setup_rate::measure_here(&plan),
            _ => lab::setup_rate::measure_on_host(&plan),
        };
        // Everything the run made is gone by now (its guards dropped on the way out).
        if let Some(signal) = speed::stop::requested() {
            if !args.in_guest {
                eprintln!("ipsec-lab: interrupted; everything the run created was removed");
            }
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
