//! A run between two namespaces of this host: plan → topology → backend → verified
//! transfers → report → teardown.

use std::time::Duration;

use std::net::{IpAddr, SocketAddr};

use model::ceiling::{LineRate, RunCeiling};
use model::{Environment, RunPlan, RunReport, Transfer};
use netns::{Topology, TopologySpec};
use traffic::{CancellationToken, Receiver};

use crate::backend::xfrm::ShowKeys;
use crate::backend::{self, data_addr, userspace, End, Hosts, RunSecrets, Side, Site};
use crate::error::{LabError, LabResult};
use crate::evidence::{EndEvidence, Evidence};
use crate::progress::Progress;
use crate::reference;
use crate::session;

/// Whether this kernel can install an ESP SA (probed in a throw-away namespace).
pub fn host_has_esp() -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    runtime.is_ok_and(|rt| rt.block_on(xfrm::probe()).is_ok_and(|caps| caps.esp))
}

/// Runs `plan` on a fresh topology (preflight first: a refusal creates nothing); SIGINT and
/// SIGTERM unwind it. The caller builds the runtime.
pub async fn run(plan: &RunPlan, show: ShowKeys, progress: &dyn Progress) -> LabResult<RunReport> {
    backend::preflight(plan).await?;
    if plan.with_iperf3 {
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
        mtu: plan.mtu,
        addressing: plan.addressing,
    };
    // The guard removes the namespaces when dropped: on success, on `?`, on Ctrl-C.
    let topology = Topology::create(&spec).await?;
    let (mut report, evidence) = run_on(plan, &topology, cancel, show, progress).await?;
    if plan.ceiling {
        progress.note("timing the suite's crypto ceiling at the tunnel's packet size");
        let crypto = crate::ceiling::measure_async(plan, &evidence).await;
        // After the backend is down (its SAs, policies and processes gone), on the same
        // topology: the run's own objects come up first, as without a ceiling.
        let line_rate = line_rate(plan, &topology, cancel, progress).await?;
        report.ceiling = Some(RunCeiling::new(report.mb_per_s.median, crypto, line_rate));
    }
    topology.destroy()?;
    Ok(report)
}

/// The plain line rate of this topology: as many plain TCP transfers as the run has, of
/// the same payload and streams, between the same two namespaces. A failed one is
/// recorded as the reason there is no line rate; Ctrl-C ends the run.
async fn line_rate(
    plan: &RunPlan,
    topology: &Topology,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> LabResult<LineRate> {
    let plain = RunPlan {
        backend: model::Backend::Plain,
        suite: model::CipherSuite::None,
        tunnel_threads: 1,
        encap: None,
        ..plan.clone()
    };
    let ad = topology.addressing;
    let hosts = Hosts {
        a: IpAddr::V4(ad.outer_a),
        b: IpAddr::V4(ad.outer_b),
    };
    let target = data_addr(&plain, hosts, Side::B);
    let mut rates = Vec::new();
    for attempt in 1..=plan.repeat {
        if cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        let label = format!("plain (line rate) {attempt}/{}", plan.repeat);
        match transfer_once(&plain, topology, target, cancel, progress, label).await {
            Ok(t) => rates.push(t.mb_per_s()),
            Err(e) if e.kind == crate::ExitKind::Interrupted => return Err(e),
            Err(e) => {
                return Ok(LineRate::None {
                    reason: format!("the plain transfer failed: {e:#}"),
                })
            }
        }
    }
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

/// Runs one plan on a topology that is already up: both ends up, `plan.repeat` verified
/// transfers (each followed by iperf3 when asked), the ends' evidence, the ends down. The
/// topology is left as it was, so a sweep can run many plans on one topology.
pub async fn run_on(
    plan: &RunPlan,
    topology: &Topology,
    cancel: &CancellationToken,
    show: ShowKeys,
    progress: &dyn Progress,
) -> LabResult<(RunReport, Evidence)> {
    let ad = topology.addressing;
    let hosts = Hosts {
        a: IpAddr::V4(ad.outer_a),
        b: IpAddr::V4(ad.outer_b),
    };
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
    progress.backend_starting(plan.backend.name());
    // Declared before the ends, so dropped after them: OpenVPN's and charon's processes
    // stop before their directory goes.
    let secrets = RunSecrets::generate(plan)?;
    let mut ends = Vec::new();
    let started = async {
        for site in &sites {
            // An error drops `ends`, which tears down the end already up.
            ends.push(End::start(plan, &secrets, site, show).await?);
        }
        ends.iter_mut().try_for_each(End::wait_ready)
    }
    .await;
    progress.backend_started();
    started?;
    let target = data_addr(plan, hosts, Side::B);
    let mut transfers = Vec::new();
    let mut iperf3_runs = Vec::new();
    for attempt in 1..=plan.repeat {
        if cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        let label = format!("{} {}/{}", plan.backend, attempt, plan.repeat);
        transfers.push(transfer_once(plan, topology, target, cancel, progress, label).await?);
        if plan.with_iperf3 {
            // Right after the lab's own transfer, over the same path: the two see the same
            // machine state as nearly as a noisy machine allows.
            iperf3_runs.push(reference::iperf3(topology, target, plan.bytes.0, plan.parallel).await?);
        }
    }
    let evidence = evidence(plan, &mut ends, &secrets).await?;
    drop(ends);
    let mut report =
        RunReport::new(plan.clone(), Environment::detect(), transfers).map_err(LabError::failed)?;
    if !evidence.is_none() {
        report
            .backend_details
            .insert(plan.backend.name().to_string(), evidence.to_json());
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

/// Both ends' evidence as one run's (stops the tunnels).
async fn evidence(plan: &RunPlan, ends: &mut [End], secrets: &RunSecrets) -> LabResult<Evidence> {
    let mut each = Vec::new();
    for end in ends.iter_mut() {
        each.push(end.finish().await?);
    }
    let mut each = each.into_iter();
    Ok(match (each.next(), each.next()) {
        // End a sees both SAs' counters.
        (Some(EndEvidence::Xfrm(a)), _) => Evidence::Xfrm(a),
        (Some(EndEvidence::Strongswan(a)), _) => Evidence::Strongswan(a),
        (Some(EndEvidence::Userspace(a)), Some(EndEvidence::Userspace(b))) => {
            Evidence::Userspace(Box::new(userspace::local_evidence(plan, *a, *b).await?))
        }
        (Some(EndEvidence::Openvpn(a)), Some(EndEvidence::Openvpn(b))) => match &secrets.openvpn {
            Some(material) => Evidence::Openvpn(material.evidence([a, b])),
            None => Evidence::None,
        },
        (Some(EndEvidence::Wireguard(a)), Some(EndEvidence::Wireguard(b))) => {
            Evidence::Wireguard(backend::wireguard::local_evidence(plan, a, b))
        }
        _ => Evidence::None,
    })
}

/// One verified transfer: receiver in namespace b, sender in namespace a, each on its own
/// thread so each side's CPU time is measured on its own.
async fn transfer_once(
    plan: &RunPlan,
    topology: &Topology,
    target: SocketAddr,
    cancel: &CancellationToken,
    progress: &dyn Progress,
    label: String,
) -> LabResult<Transfer> {
    let config = session::transfer_config(plan);
    // Bound before the sender starts, so the sender never races the listener.
    let receiver = topology
        .b
        .run(move || Receiver::bind(target, config.streams))?
        .map_err(LabError::failed)?;
    let counter = traffic::Progress::default();
    let (rx_progress, rx_cancel) = (counter.clone(), cancel.clone());
    let receiving = topology.b.spawn("ipl-receiver", move || {
        receiver.run(config, rx_progress, rx_cancel)
    })?;
    let tx_cancel = cancel.clone();
    let sending = topology
        .a
        .spawn("ipl-sender", move || traffic::send(target, config, tx_cancel))?;

    progress.transfer_started(&label, plan.bytes.0);
    let joined = tokio::task::spawn_blocking(move || (receiving.join(), sending.join()));
    tokio::pin!(joined);
    let (received, sent) = loop {
        tokio::select! {
            done = &mut joined => break done.expect("join task"),
            // Why poll: the counters live in the transfer threads; 10 updates a second is
            // smooth for a human and free for the run.
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                progress.transfer_bytes(counter.bytes())
            }
        }
    };
    progress.transfer_finished();
    let received = received.map_err(|_| LabError::failed(anyhow::anyhow!("receiver thread panicked")))?;
    let sent = sent.map_err(|_| LabError::failed(anyhow::anyhow!("sender thread panicked")))?;
    // The receiver's verdict comes first: it says *what* went wrong with the data; a sender
    // error is usually only the echo of the receiver closing.
    let received = received.map_err(|e| LabError::transfer("receiver", e))?;
    let sent = sent.map_err(|e| LabError::transfer("sender", e))?;
    Ok(session::record(plan, received, sent))
}
