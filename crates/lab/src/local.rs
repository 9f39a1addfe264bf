//! A run between two namespaces of this host: plan → topology → backend → verified
//! transfers → report → teardown.

use std::time::Instant;

use model::ceiling::{LineRate, RunCeiling};
use model::evidence::Evidence;
use model::{Environment, RunPlan, RunReport};
use netns::{Topology, TopologySpec};
use traffic::CancellationToken;

use crate::backend::xfrm::ShowKeys;
use crate::backend::{self, data_addr, End, RunSecrets, Side, Site};
use crate::error::{LabError, LabResult};
use crate::flow::{self, Bench};
use crate::packets;
use crate::progress::Progress;
use crate::reference;

/// A first byte slower than this after the transfer started is a first packet lost, not a
/// tunnel's connection (one round trip through it, milliseconds even in a TCG VM).
const SLOW_FIRST_BYTE_MS: f64 = 500.0;

/// Whether this kernel can install an ESP SA (probed in a throw-away namespace).
pub fn host_has_esp() -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    runtime.is_ok_and(|rt| rt.block_on(xfrm::probe()).is_ok_and(|caps| caps.esp))
}

/// Runs `plan` on a fresh topology (preflight first: a refusal creates nothing); SIGINT and
/// SIGTERM unwind it. The caller builds the runtime.
pub async fn run(plan: &RunPlan, show: ShowKeys, progress: &dyn Progress) -> LabResult<RunReport> {
    backend::preflight(plan).await?;
    crate::netem::preflight(plan.link().netem.as_ref())?;
    if plan.workload().with_iperf3 {
        reference::require_iperf3()?;
    }
    let cancel = CancellationToken::new();
    let interrupted = crate::signal::cancel_on_signal(cancel.clone())?;
    let result = execute(plan, &cancel, show, progress).await;
    interrupted.abort();
    if cancel.is_cancelled() {
        return Err(LabError::interrupted());
    }
    result
}

async fn execute(
    plan: &RunPlan,
    cancel: &CancellationToken,
    show: ShowKeys,
    progress: &dyn Progress,
) -> LabResult<RunReport> {
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: plan.link().mtu,
        addressing: plan.link().addressing,
    };
    // The guard removes the namespaces when dropped: on success, on `?`, on Ctrl-C.
    let topology = Topology::create(&spec).await?;
    let bench = Bench {
        topology: &topology,
        cancel,
        progress,
    };
    let (mut report, evidence) = run_on(bench, plan, show).await?;
    if plan.times_ceiling() {
        if crate::ceiling::is_timed(plan) {
            progress.note("timing the suite's crypto ceiling at the tunnel's packet size");
        }
        let crypto = crate::ceiling::measure_async(plan, &evidence).await;
        // After the backend is down (its SAs, policies and processes gone), on the same
        // topology: the run's own objects come up first, as without a ceiling.
        let line_rate = line_rate(bench, plan).await?;
        report.ceiling = Some(RunCeiling::new(report.mb_per_s.median, crypto, line_rate));
    }
    topology.destroy()?;
    Ok(report)
}

/// The plain line rate of this topology: as many plain TCP transfers as the run has, of
/// the same payload, streams and directions, between the same two namespaces, over the same
/// `--netem` conditions. A failed one is recorded as the reason there is no line rate;
/// Ctrl-C ends the run.
async fn line_rate(bench: Bench<'_>, plan: &RunPlan) -> LabResult<LineRate> {
    let topology = bench.topology;
    let plain = plan.line_rate();
    // The link as the run had it: shaped again for the plain transfers, unshaped after.
    let conditions = match &plan.link().netem {
        Some(spec) => Some(crate::netem::shape(topology, spec).await?),
        None => None,
    };
    let measured = plain_rates(bench, &plain).await;
    if conditions.is_some() {
        crate::netem::unshape(topology).await?;
    }
    let rates = match measured {
        Ok(rates) => rates,
        Err(e) if e.kind == crate::ExitKind::Interrupted => return Err(e),
        // A failed plain transfer is the reason there is no line rate, not the run's failure.
        Err(e) => {
            return Ok(LineRate::None {
                reason: format!("the plain transfer failed: {e:#}"),
            })
        }
    };
    Ok(match model::Summary::of(&rates) {
        Some(s) if s.median.is_finite() && s.median > 0.0 => LineRate::Measured {
            mb_per_s: s.median,
            transfers: s.n as u32,
        },
        _ => LineRate::None {
            reason: "the plain transfers gave no rate".into(),
        },
    })
}

/// `plan.workload().repeat` plain transfers' MB/s; the first failure (or Ctrl-C) ends them.
async fn plain_rates(bench: Bench<'_>, plain: &RunPlan) -> LabResult<Vec<f64>> {
    let mut rates = Vec::new();
    for attempt in 1..=plain.workload().repeat {
        if bench.cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        let label = format!("plain (line rate) {attempt}/{}", plain.workload().repeat);
        rates.push(
            flow::transfer(bench, plain, &[], attempt, label)
                .await?
                .transfer
                .mb_per_s(),
        );
    }
    Ok(rates)
}

/// Runs one plan on a topology that is already up: the link shaped (`--netem`), both ends
/// up, `plan.workload().repeat` verified transfers (each followed by iperf3 when asked), the ends'
/// evidence, the ends down, the link unshaped. The topology is left as it was, so a sweep
/// can run many plans on one topology.
pub async fn run_on(bench: Bench<'_>, plan: &RunPlan, show: ShowKeys) -> LabResult<(RunReport, Evidence)> {
    let topology = bench.topology;
    let Some(spec) = &plan.link().netem else {
        return run_ends(bench, plan, show).await;
    };
    let result = match crate::netem::shape(topology, spec).await {
        Ok(conditions) => run_ends(bench, plan, show).await.map(|(mut report, evidence)| {
            report.notes.push(conditions.line());
            report.conditions = Some(conditions);
            (report, evidence)
        }),
        Err(e) => Err(e),
    };
    let unshaped = crate::netem::unshape(topology).await;
    let done = result?;
    unshaped?;
    Ok(done)
}

async fn run_ends(bench: Bench<'_>, plan: &RunPlan, show: ShowKeys) -> LabResult<(RunReport, Evidence)> {
    let Bench {
        topology,
        cancel,
        progress,
    } = bench;
    let hosts = bench.hosts();
    let sites = [
        Site {
            side: Side::A,
            namespace: &topology.a,
            hosts,
            lab_link: Some(&topology.veth_a),
        },
        Site {
            side: Side::B,
            namespace: &topology.b,
            hosts,
            lab_link: Some(&topology.veth_b),
        },
    ];
    // The same search over the bare link first: it shows whether the generator or the
    // tunnel sets the tunnel's bound.
    let baseline = match &plan.workload().ndr {
        Some(search) if plan.backend().encrypts() => {
            let plain = plan.line_rate();
            progress.note("searching the bare link's NDR first (the generator's bound)");
            let no_rekeys = packets::Rekeys::default();
            let mut trial = packets::local_trial(bench, &plain, &no_rekeys);
            Some(packets::blocking(|| {
                packets::search_ndr(&plain, search, progress, &mut trial, &mut Vec::new())
            })?)
        }
        _ => None,
    };
    progress.backend_starting(plan.backend().name());
    // Declared before the ends, so dropped after them: OpenVPN's and charon's processes
    // stop before their directory goes.
    let secrets = RunSecrets::generate(plan)?;
    let mut ends = Vec::new();
    // The setup's first step: from here to both ends ready is the time to first packet's
    // first part (the secrets above are the lab's, made before any tunnel work).
    let setup_began = Instant::now();
    let started = async {
        for site in &sites {
            // An error drops `ends`, which tears down the end already up.
            ends.push(End::start(plan, &secrets, site, show).await?);
        }
        ends.iter_mut().try_for_each(End::wait_ready)
    }
    .await;
    let setup = setup_began.elapsed();
    progress.backend_started();
    started?;
    let target = data_addr(plan, hosts, Side::B);
    let latency = match plan.workload().latency {
        true => Some(packets::blocking(|| packets::Latency::start(bench, plan))?),
        false => None,
    };
    let mut transfers = Vec::new();
    let mut measured = Vec::new();
    let mut iperf3_runs = Vec::new();
    let mut udp = None;
    let mut rekey_runs = Vec::new();
    // The machine's busy CPU over the lab's own transfers (not iperf3's), added up; none if
    // /proc/stat could not be read around one of them.
    let mut machine = Some(procstat::MachineCpu::default());
    if plan.workload().udp.is_some() {
        let prober = latency.as_ref().map(|l| l.prober());
        let trial_rekeys = packets::Rekeys {
            ends: &ends,
            runs: Default::default(),
        };
        let mut trial = packets::local_trial(bench, plan, &trial_rekeys);
        let run = packets::blocking(|| packets::run(plan, prober, progress, &mut trial))?;
        rekey_runs = trial_rekeys.runs.take();
        transfers = run.transfers;
        udp = Some(model::packets::UdpReport {
            baseline,
            ..run.report
        });
    } else if let Some(l) = &latency {
        l.prober().phase("under TCP load", None);
    }
    // A UDP run's trials were its transfers.
    let tcp_transfers = match udp {
        Some(_) => 0,
        None => plan.workload().repeat,
    };
    for attempt in 1..=tcp_transfers {
        if cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        let label = format!("{} {}/{}", plan.backend(), attempt, plan.workload().repeat);
        let before = procstat::MachineTimes::now();
        let m = flow::transfer(bench, plan, &ends, attempt, label).await?;
        machine = machine
            .zip(before.zip(procstat::MachineTimes::now()))
            .map(|(cpu, (before, after))| cpu.plus(before.busy_since(&after)));
        transfers.push(m.transfer.clone());
        rekey_runs.extend(m.rekey.clone());
        measured.push(m);
        if plan.workload().with_iperf3 {
            // Right after the lab's own transfer, over the same path: the two see the same
            // machine state as nearly as a noisy machine allows.
            iperf3_runs.push(
                reference::iperf3(
                    topology,
                    target,
                    plan.workload().bytes.0,
                    plan.workload().parallel,
                )
                .await?,
            );
        }
    }
    // The first transfer's first byte ends the time to first packet (a UDP run's trials
    // time no first byte).
    let first_packet = measured
        .first()
        .and_then(|m| m.first_byte)
        .map(|first_byte| model::startup::FirstPacket::new(setup, first_byte));
    let latency = latency.map(|l| packets::blocking(|| l.finish())).transpose()?;
    let evidence = backend::local_evidence(plan, &mut ends, &secrets).await?;
    drop(ends);
    let mut report =
        RunReport::new(plan.clone(), Environment::detect(), transfers).map_err(LabError::failed)?;
    if udp.is_none() {
        report.modes = flow::report(plan, &measured);
    }
    report.udp = udp;
    report.latency = latency;
    if let Some(f) = first_packet.filter(|f| f.first_byte_ms > SLOW_FIRST_BYTE_MS) {
        report.notes.push(format!(
            "the first verified byte came {} after the transfer started: a first packet lost waits out a \
             retransmission timeout (1 s for TCP's SYN), so the time to first packet says more of that loss \
             than of the tunnel",
            model::startup::ms(f.first_byte_ms)
        ));
    }
    report.first_packet = first_packet;
    if report.udp.is_none() {
        report.machine_cost = machine.and_then(|cpu| {
            let bytes = measured.iter().map(|m| m.transfer.bytes).sum();
            let seconds = measured.iter().map(|m| m.transfer.seconds).sum();
            model::MachineCost::new(bytes, seconds, cpu.user_s, cpu.system_s, cpu.irq_s)
        });
    }
    if let Some(schedule) = plan.workload().rekey {
        let rekey = model::rekey::RekeyReport {
            schedule,
            label: schedule.label(plan.backend()).to_string(),
            how: plan.backend().describe().rekey.unwrap_or_default().to_string(),
            runs: rekey_runs,
        };
        report.notes.extend(rekey.notes());
        report.rekey = Some(rekey);
    }
    if !evidence.is_none() {
        report
            .backend_details
            .evidence
            .insert(plan.backend(), evidence.clone());
    }
    report.notes.extend(evidence.lines());
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
    Ok((report, evidence))
}
