//! `ipsec-lab run`: plan → topology → backend → verified transfers → report → teardown.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use model::{Environment, RunPlan, RunReport, Transfer};
use netns::{Topology, TopologySpec};
use traffic::{CancellationToken, Progress, Receiver, TransferConfig};

use crate::backends::{self, DataPath};
use crate::cli::RunArgs;
use crate::error::{require_net_admin, LabError, LabResult};
use crate::{output, reference};

/// Longest silence tolerated on the data path before a run is declared failed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(args: RunArgs) -> LabResult<()> {
    // Stage two of parsing: nothing below this line runs on invalid input.
    let plan = args.request().validate()?;
    for ignored in &plan.ignored {
        eprintln!("note: ignored {ignored}");
    }
    if let Some(json) = &args.json {
        output::check_writable(json, "--json")?;
    }
    require_net_admin()?;
    backends::xfrm::set_show_keys(args.show_keys);
    if plan.peer.is_some() {
        return crate::remote::run(&args, plan);
    }
    let vm_not_needed = plan.vm_is_auto() && (plan.backend != model::Backend::Xfrm || host_has_esp());
    if plan.vm.is_some() && !vm_not_needed {
        return crate::vm::run_in_vm(&args, &plan);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    let show_progress = !args.no_progress && std::io::stderr().is_terminal();
    let report = runtime.block_on(async {
        backends::preflight(&plan).await?;
        if plan.with_iperf3 {
            reference::require_iperf3()?;
        }
        let cancel = CancellationToken::new();
        let interrupted = cancel_on_signal(cancel.clone())?;
        let result = execute(&plan, &cancel, show_progress).await;
        interrupted.abort();
        if cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        result
    })?;
    output::emit(&report, args.json.as_deref())
}

/// Whether this kernel can install an ESP SA (probed in a throw-away namespace).
fn host_has_esp() -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    runtime.is_ok_and(|rt| rt.block_on(xfrm::probe()).is_ok_and(|caps| caps.esp))
}

/// Turns SIGINT and SIGTERM into a cancellation: the run then unwinds through its guards
/// instead of dying with namespaces in place.
pub fn cancel_on_signal(cancel: CancellationToken) -> LabResult<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).map_err(LabError::failed)?;
    let mut term = signal(SignalKind::terminate()).map_err(LabError::failed)?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("\nipsec-lab: interrupted, cleaning up");
        cancel.cancel();
    }))
}

async fn execute(plan: &RunPlan, cancel: &CancellationToken, show_progress: bool) -> LabResult<RunReport> {
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: plan.mtu,
        addressing: plan.addressing,
    };
    // The guard removes the namespaces when dropped: on success, on `?`, on Ctrl-C.
    let topology = Topology::create(&spec).await?;
    let report = run_on(plan, &topology, cancel, show_progress).await?;
    topology.destroy()?;
    Ok(report)
}

/// Runs one plan on a topology that is already up: backend up, `plan.repeat` verified
/// transfers (each followed by iperf3 when asked), backend evidence, backend down. The
/// topology is left as it was, so a sweep can run many plans on one topology.
pub async fn run_on(
    plan: &RunPlan,
    topology: &Topology,
    cancel: &CancellationToken,
    show_progress: bool,
) -> LabResult<RunReport> {
    // OpenVPN takes seconds to come up: on a terminal, say what the wait is.
    let starting = show_progress.then(|| {
        let spinner = ProgressBar::new_spinner().with_message(format!("starting {}…", plan.backend));
        spinner.enable_steady_tick(Duration::from_millis(120));
        spinner
    });
    // The backend guard tears down what the backend made when dropped, also on `?`.
    let backend = backends::start(plan, topology).await;
    if let Some(spinner) = starting {
        spinner.finish_and_clear();
    }
    let mut backend = backend?;
    let mut transfers = Vec::new();
    let mut iperf3_runs = Vec::new();
    for attempt in 1..=plan.repeat {
        if cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        let label = format!("{} {}/{}", plan.backend, attempt, plan.repeat);
        let path = backend.data_path();
        transfers.push(transfer_once(plan, topology, path, cancel, show_progress, label).await?);
        if plan.with_iperf3 {
            // Right after the lab's own transfer, over the same path: the two see the same
            // machine state as nearly as a noisy machine allows.
            iperf3_runs.push(reference::iperf3(topology, path, plan.bytes.0, plan.parallel).await?);
        }
    }
    let details = backend.details().await?;
    let notes = backend.notes();
    drop(backend);
    let mut report =
        RunReport::new(plan.clone(), Environment::detect(), transfers).map_err(LabError::failed)?;
    if !details.is_null() {
        report
            .backend_details
            .insert(plan.backend.name().to_string(), details);
    }
    report.notes.extend(notes);
    let iperf3_rates: Vec<f64> = iperf3_runs.iter().map(|r| r.mb_per_s).collect();
    if let Some(summary) = model::Summary::of(&iperf3_rates) {
        report.references.insert("iperf3".into(), summary);
    }
    if let Some(shortest) = iperf3_runs.iter().map(|r| r.seconds).reduce(f64::min) {
        if shortest < model::MIN_STABLE_SECONDS {
            report.notes.push(format!(
                "an iperf3 transfer lasted {shortest:.3} s: too short for a stable ratio; use a larger --bytes"
            ));
        }
    }
    Ok(report)
}

/// One verified transfer: receiver in namespace b, sender in namespace a, each on its own
/// thread so each side's CPU time is measured on its own.
async fn transfer_once(
    plan: &RunPlan,
    topology: &Topology,
    path: DataPath,
    cancel: &CancellationToken,
    show_progress: bool,
    label: String,
) -> LabResult<Transfer> {
    let config = TransferConfig {
        seed: plan.seed,
        total_bytes: plan.bytes.0,
        streams: plan.parallel,
        idle_timeout: IDLE_TIMEOUT,
    };
    let target = path.target;
    // Bound before the sender starts, so the sender never races the listener.
    let receiver = topology
        .b
        .run(move || Receiver::bind(target))?
        .map_err(LabError::failed)?;
    let progress = Progress::default();
    let (rx_progress, rx_cancel) = (progress.clone(), cancel.clone());
    let receiving = topology.b.spawn("ipl-receiver", move || {
        receiver.run(config, rx_progress, rx_cancel)
    })?;
    let tx_cancel = cancel.clone();
    let sending = topology
        .a
        .spawn("ipl-sender", move || traffic::send(target, config, tx_cancel))?;

    let bar = show_progress.then(|| progress_bar(plan.bytes.0, label));
    let joined = tokio::task::spawn_blocking(move || (receiving.join(), sending.join()));
    tokio::pin!(joined);
    let (received, sent) = loop {
        tokio::select! {
            done = &mut joined => break done.expect("join task"),
            // Why poll: the counters live in the transfer threads; 10 updates a second is
            // smooth for a human and free for the run.
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if let Some(bar) = &bar { bar.set_position(progress.bytes()) }
            }
        }
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let received = received.map_err(|_| LabError::failed(anyhow::anyhow!("receiver thread panicked")))?;
    let sent = sent.map_err(|_| LabError::failed(anyhow::anyhow!("sender thread panicked")))?;
    // The receiver's verdict comes first: it says *what* went wrong with the data; a sender
    // error is usually only the echo of the receiver closing.
    let received = received.map_err(|e| transfer_error("receiver", e))?;
    let sent = sent.map_err(|e| transfer_error("sender", e))?;
    Ok(Transfer {
        bytes: received.bytes,
        seconds: received.seconds,
        streams: plan.parallel,
        verified: true,
        sender_cpu: sent.cpu,
        receiver_cpu: received.cpu,
    })
}

fn transfer_error(side: &str, e: traffic::TrafficError) -> LabError {
    match e {
        traffic::TrafficError::Cancelled => LabError::interrupted(),
        other => LabError::failed(anyhow::Error::new(other).context(format!("{side} failed"))),
    }
}

/// Decimal units (MB = 10^6 bytes), as the tables count them: never indicatif's binary MiB.
const PROGRESS_TEMPLATE: &str =
    "{prefix} [{bar:30}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA {eta}";

fn progress_bar(total: u64, label: String) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(PROGRESS_TEMPLATE)
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_bar_counts_mb_not_mib() {
        let fields: Vec<&str> = PROGRESS_TEMPLATE
            .split('{')
            .filter_map(|f| f.split('}').next())
            .filter(|f| f.contains("bytes"))
            .collect();
        assert_eq!(
            fields,
            ["decimal_bytes", "decimal_total_bytes", "decimal_bytes_per_sec"]
        );
    }
}
