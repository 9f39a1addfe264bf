//! `ipsec-lab run --peer HOST`: the client (end A) of a two-host run against
//! `ipsec-lab serve` ([`super::server`]).

use std::net::SocketAddr;
use std::path::Path;

use control::text::untrusted;
use control::{Channel, ControlError, Message, Psk, TrialRequest};
use model::evidence::{EndEvidence, Evidence, TunnelPair, TwoHostsPath};
use model::packets::{UdpReport, UdpTrial};
use model::{Backend, CryptoChoice, Environment, Family, Link, RunPlan, RunReport, Transfer};
use netns::Namespace;
use tokio::net::TcpStream;
use traffic::CancellationToken;

use super::datagrams::{self, Receiving};
use super::{addressing, link_mtu, peer_request, prefixes_in_use, receiver, STEP_TIMEOUT};
use crate::backend::xfrm::ShowKeys;
use crate::backend::{self, data_addr, End, Hosts, RunSecrets, Side, Site};
use crate::error::{ExitKind, LabError, LabResult};
use crate::progress::Progress;
use crate::session::{self, IDLE_TIMEOUT};

fn unexpected(got: &Message, waiting_for: &str) -> LabError {
    match got {
        Message::Failed { reason } => {
            LabError::failed(anyhow::anyhow!("the peer failed: {}", untrusted(reason)))
        }
        other => LabError::failed(anyhow::anyhow!(
            "protocol error: the peer sent {:?} while this host waited for {waiting_for}",
            other.kind()
        )),
    }
}

/// What `run --peer` refuses before contacting anyone (exit 2).
pub fn check_local(plan: &RunPlan, mtu_flag: u32) -> LabResult<()> {
    if plan.backend() == Backend::Userspace && plan.crypto() == CryptoChoice::Soft {
        return Err(LabError::usage(anyhow::anyhow!(
            "--crypto soft does not run with --peer: it needs both processes restarted with hardware AES \
             masked, which a server does not do; use it in a local run"
        )));
    }
    if mtu_flag != model::RunRequest::default().mtu {
        return Err(LabError::usage(anyhow::anyhow!(
            "--mtu sets the MTU of the local lab's veth link; between two hosts the link is theirs and \
             the run uses its path MTU (reported as plan.link().mtu): leave --mtu out with --peer"
        )));
    }
    Ok(())
}

/// The pre-shared key `--psk-file` names (exit 2 when missing, unreadable or exposed).
pub fn load_psk(psk_file: Option<&Path>) -> LabResult<Psk> {
    let psk_file = psk_file.ok_or_else(|| {
        LabError::usage(anyhow::anyhow!(
            "--peer needs --psk-file FILE: the key shared with the server (`ipsec-lab psk generate`)"
        ))
    })?;
    Psk::load(psk_file).map_err(LabError::usage)
}

/// `ipsec-lab run --peer`, after plan validation and [`check_local`]: SIGINT and SIGTERM
/// unwind it; the server sees the connection close and removes its end.
pub async fn run(plan: &RunPlan, psk: &Psk, show: ShowKeys, progress: &dyn Progress) -> LabResult<RunReport> {
    // Refused here, before the server is contacted: nothing exists on either side yet.
    backend::preflight(plan).await?;
    let cancel = CancellationToken::new();
    let interrupted = crate::signal::cancel_on_signal(cancel.clone())?;
    let result = tokio::select! {
        r = execute(plan, psk, show, progress, &cancel) => r,
        // Dropping `execute` drops this host's end and the channel: the server sees the
        // connection close and removes its end. The transfer threads it started stop on
        // the token.
        _ = cancel.cancelled() => Err(LabError::interrupted()),
    };
    interrupted.abort();
    // A step that blocks this task (a UDP trial, the search) may end after the signal with
    // a result: it is not the run's.
    if cancel.is_cancelled() {
        return Err(LabError::interrupted());
    }
    result
}

async fn connect(plan: &RunPlan) -> LabResult<TcpStream> {
    let peer = plan.peer().expect("remote runs have a peer");
    let addrs: Vec<SocketAddr> = tokio::time::timeout(
        STEP_TIMEOUT,
        tokio::net::lookup_host((peer.host.as_str(), peer.port)),
    )
    .await
    .map_err(|_| LabError::failed(anyhow::anyhow!("resolving {peer}: timed out")))?
    .map_err(|e| LabError::usage(anyhow::anyhow!("resolving {peer}: {e}")))?
    .collect();
    // `-6` takes only an IPv6 address; otherwise IPv4 first, IPv6 where that is all there
    // is (`--peer [2001:db8::1]` runs over IPv6 as written).
    let addr = match plan.link().family {
        Family::Ipv6 => addrs.iter().find(|a| a.is_ipv6()).copied().ok_or_else(|| {
            LabError::usage(anyhow::anyhow!(
                "-6: {peer} has no IPv6 address ({})",
                if addrs.is_empty() {
                    "none at all".to_string()
                } else {
                    format!("only {addrs:?}")
                }
            ))
        })?,
        Family::Ipv4 => addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| LabError::usage(anyhow::anyhow!("{peer} has no address")))?,
    };
    let stream = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| LabError::failed(anyhow::anyhow!("connecting to {peer}: timed out")))?
        .map_err(|e| {
            LabError::failed(anyhow::anyhow!(
                "connecting to {peer}: {e} (is `ipsec-lab serve` running there?)"
            ))
        })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

async fn execute(
    plan: &RunPlan,
    psk: &Psk,
    show: ShowKeys,
    progress: &dyn Progress,
    cancel: &CancellationToken,
) -> LabResult<RunReport> {
    let peer = plan.peer().cloned().expect("remote runs have a peer");
    let stream = connect(plan).await?;
    let hosts = Hosts {
        a: stream.local_addr().map_err(LabError::failed)?.ip().to_canonical(),
        b: stream.peer_addr().map_err(LabError::failed)?.ip().to_canonical(),
    };
    // The run's family is the connection's: what the user wrote decided it.
    let plan = &plan.with_link(Link {
        family: Family::of(hosts.b),
        ..plan.link().clone()
    });
    let request = peer_request(plan, link_mtu(&stream)?);
    let mut chan = Channel::initiate(stream, psk, control::HANDSHAKE_TIMEOUT)
        .await
        .map_err(|e| match e {
            ControlError::Closed { .. } | ControlError::Authentication => LabError::failed(anyhow::anyhow!(
                "handshake with {peer} failed: the server closed the connection — the pre-shared keys \
                 differ, its --allow does not include {}, or it is flooded with connections that wait \
                 to authenticate (then trying again helps; its log says which)",
                hosts.a
            )),
            ControlError::NotIpsecLab => LabError::failed(anyhow::anyhow!(
                "{peer} is not an ipsec-lab server (or runs another version)"
            )),
            other => LabError::from(other),
        })?;
    let secrets = RunSecrets::generate(plan)?;
    chan.send(&Message::Hello {
        request: request.clone(),
        keys: secrets.keys(),
    })
    .await
    .map_err(LabError::from)?;
    let (peer_environment, server_end) = match chan.recv(STEP_TIMEOUT, "waiting for the server's end").await {
        Ok(Message::Ready { environment, end }) => (*environment, end),
        Ok(Message::Busy) => {
            return Err(LabError::failed(anyhow::anyhow!(
                "{peer} is busy with another run; try again when it has finished"
            )))
        }
        Ok(Message::Refused { kind, reason }) => {
            return Err(LabError::new(
                ExitKind::from(kind),
                anyhow::anyhow!("{peer} refused the run: {}", untrusted(&reason)),
            ));
        }
        Ok(other) => return Err(unexpected(&other, "ready")),
        Err(e) => return Err(LabError::from(e)),
    };
    // The server's end is up; ours now, from what it sent, checked first. An error drops
    // `chan`, and the server cleans up.
    server_end
        .check(&request)
        .map_err(|e| LabError::failed(anyhow::Error::new(e).context(format!("{peer} sent a bad answer"))))?;
    if let Some(tunnel) = server_end.tunnel {
        let net = tunnel.network();
        if let Some(route) = control::request::overlapping(&net, &prefixes_in_use().await?) {
            return Err(LabError::failed(anyhow::anyhow!(
                "{peer} chose the tunnel network {net}, which overlaps {route} on this host"
            )));
        }
    }
    let plan = &plan.with_link(Link {
        addressing: addressing(hosts, server_end.tunnel),
        mtu: server_end.link_mtu,
        ..plan.link().clone()
    });
    let namespace = Namespace::current()?;
    let site = Site {
        side: Side::A,
        namespace: &namespace,
        hosts,
        lab_link: None,
    };
    let mut end = End::start(plan, &secrets, &site, show).await?;
    drop(secrets);
    let latency = match plan.workload().latency {
        true => Some(probe(plan, hosts).await?),
        false => None,
    };
    let prober = latency.as_ref();
    let mut transfers = Vec::new();
    let mut udp = None;
    if let Some(max_pps) = server_end.max_pps {
        let run = trials(plan, hosts, &mut chan, prober, progress, max_pps, cancel)?;
        transfers = run.transfers;
        udp = Some(run.report);
    } else {
        if let Some(p) = prober {
            p.phase("under TCP load", None);
        }
        for attempt in 1..=plan.workload().repeat {
            transfers.push(transfer(plan, hosts, &mut chan, attempt, cancel).await?);
        }
    }
    let latency = latency
        .map(|p| p.finish().map_err(|e| LabError::transfer("latency prober", e)))
        .transpose()?
        .map(|phases| model::packets::LatencyReport {
            probe_interval_ms: crate::packets::PROBE_INTERVAL.as_secs_f64() * 1e3,
            phases,
        });
    chan.send(&Message::Finish).await.map_err(LabError::from)?;
    let server_details = match chan.recv(STEP_TIMEOUT, "waiting for the server's report").await {
        // Typed on the wire already; of this run's backend, or the server is not to be believed.
        Ok(Message::Finished { details }) if details.fits(plan.backend()) => details,
        Ok(Message::Finished { .. }) => {
            return Err(LabError::failed(anyhow::anyhow!(
                "{peer} sent evidence of another backend than {}",
                plan.backend()
            )))
        }
        Ok(other) => return Err(unexpected(&other, "finished")),
        Err(e) => return Err(LabError::from(e)),
    };
    let (client, server) = (end.finish().await?, server_details);
    drop(end);
    let mut report =
        RunReport::new(plan.clone(), Environment::detect(), transfers).map_err(LabError::failed)?;
    if udp.as_ref().is_some_and(|u: &UdpReport| u.ndr.is_some()) && plan.backend().encrypts() {
        report.notes.push(
            "no bare-link search between two hosts: `run --peer ... --backend plain --find-ndr` against \
             the same server shows whether the generator or the tunnel sets the bound"
                .into(),
        );
    }
    report.udp = udp;
    report.latency = latency;
    let peer_line = describe_peer(&peer_environment);
    report.peer_environment = Some(peer_environment);
    // The plain backend has no evidence at either end.
    if !matches!((&client, &server), (EndEvidence::None, EndEvidence::None)) {
        let evidence = Evidence::TwoHosts {
            client: Box::new(client),
            server: Box::new(server),
        };
        report.backend_details.evidence.insert(plan.backend(), evidence);
    }
    let (from, to) = if plan.workload().reverse {
        (hosts.b, hosts.a)
    } else {
        (hosts.a, hosts.b)
    };
    report.backend_details.remote = Some(TwoHostsPath {
        peer: peer.to_string(),
        client_address: hosts.a,
        server_address: hosts.b,
        sender: from,
        receiver: to,
        link_mtu: plan.link().mtu,
        tunnel: server_end.tunnel.map(|t| TunnelPair {
            client: t.client,
            server: t.server,
        }),
    });
    report.notes.push(format!(
        "two hosts: {from} (sender) -> {to} (receiver), served by {peer}"
    ));
    report.notes.push(peer_line);
    Ok(report)
}

/// The peer's conditions, for the table (this host's have their own line there).
fn describe_peer(env: &Environment) -> String {
    let drivers: Vec<String> = env
        .kernel_drivers
        .iter()
        .map(|(alg, driver)| format!("{alg}={driver}"))
        .collect();
    let drivers = if drivers.is_empty() {
        String::new()
    } else {
        format!(", kernel drivers {}", drivers.join(" "))
    };
    untrusted(&format!("peer measured on {}{drivers}", env.describe()))
}

/// One verified transfer between the hosts; the receiver's clock times it, as locally.
async fn transfer(
    plan: &RunPlan,
    hosts: Hosts,
    chan: &mut Channel<TcpStream>,
    attempt: u32,
    run: &CancellationToken,
) -> LabResult<Transfer> {
    let config = session::transfer_config(plan);
    // Its threads outlive this future when Ctrl-C drops it: the run's token ends them.
    let cancel = run.child_token();
    if plan.workload().reverse {
        let receiver = receiver(plan, hosts, Side::A)?;
        chan.send(&Message::Send { attempt })
            .await
            .map_err(LabError::from)?;
        let rx_cancel = cancel.clone();
        let local = tokio::task::spawn_blocking(move || {
            receiver.run(config, traffic::Progress::default(), rx_cancel)
        });
        let (local, remote) = alongside(chan, local, &cancel).await?;
        let received = local.map_err(|e| LabError::transfer("receiver", e))?;
        let sent = match remote {
            Message::Sent { transfer } => transfer,
            other => return Err(unexpected(&other, "sent")),
        };
        Ok(session::record(plan, received, sent))
    } else {
        until_listening(chan, Message::Receive { attempt }).await?;
        let target = data_addr(plan, hosts, Side::B);
        let tx_cancel = cancel.clone();
        let local = tokio::task::spawn_blocking(move || traffic::send(target, config, tx_cancel));
        let (local, remote) = alongside(chan, local, &cancel).await?;
        let received = match remote {
            Message::Received { transfer } => transfer,
            other => return Err(unexpected(&other, "received")),
        };
        // The receiver's verdict first: it says what went wrong with the data.
        let sent = local.map_err(|e| LabError::transfer("sender", e))?;
        Ok(session::record(plan, received, sent))
    }
}

/// Starts probing the server's responder over the run's data path (from this host's data
/// address to the server's, on the probe port) and probes the idle path for a while.
async fn probe(plan: &RunPlan, hosts: Hosts) -> LabResult<traffic::latency::ProberHandle> {
    let target = SocketAddr::new(data_addr(plan, hosts, Side::B).ip(), plan.workload().probe_port());
    let prober = traffic::latency::Prober::start_from(target.port(), target, crate::packets::PROBE_INTERVAL)
        .map_err(|e| LabError::transfer("latency prober", e))?;
    prober.phase("idle", None);
    tokio::time::sleep(crate::packets::IDLE_PROBING).await;
    Ok(prober)
}

/// The run's UDP trials, or its search, each trial a step with the server. The search is
/// crate `traffic`'s, which calls a blocking trial: each is driven on this runtime from a
/// thread allowed to block.
fn trials(
    plan: &RunPlan,
    hosts: Hosts,
    chan: &mut Channel<TcpStream>,
    prober: Option<&traffic::latency::ProberHandle>,
    progress: &dyn Progress,
    max_pps: f64,
    cancel: &CancellationToken,
) -> LabResult<crate::packets::UdpRun> {
    let runtime = tokio::runtime::Handle::current();
    let mut number = 0;
    let mut trial = |pps: Option<f64>, seconds| {
        // This task is blocked in the search, out of reach of `run`'s select: each trial
        // gives up on Ctrl-C itself, and the search with it.
        if cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        number += 1;
        // Never above the server's limit; "unlimited" is paced there by either sender.
        let request = TrialRequest {
            number,
            pps: pps.map(|p| p.min(max_pps)),
            seconds,
        };
        runtime.block_on(async {
            tokio::select! {
                r = udp_trial(plan, hosts, chan, request, max_pps, cancel) => r,
                _ = cancel.cancelled() => Err(LabError::interrupted()),
            }
        })
    };
    crate::packets::blocking(|| crate::packets::run(plan, prober, progress, &mut trial))
}

/// One UDP trial between the hosts: this host sends and the server counts, or (`--reverse`)
/// the other way; the client puts the two accounts together.
async fn udp_trial(
    plan: &RunPlan,
    hosts: Hosts,
    chan: &mut Channel<TcpStream>,
    trial: TrialRequest,
    max_pps: f64,
    cancel: &CancellationToken,
) -> LabResult<(UdpTrial, Transfer)> {
    let family = plan.link().family;
    let wait = std::time::Duration::from_secs_f64(trial.seconds) + STEP_TIMEOUT;
    let (sent, counts) = if plan.workload().reverse {
        let receiving = Receiving::start(plan, hosts, Side::A, &trial, max_pps)?;
        chan.send(&Message::SendDatagrams { trial })
            .await
            .map_err(LabError::from)?;
        let sent = match chan.recv(wait, "waiting for the server's trial").await {
            Ok(Message::DatagramsSent { sent }) if sent.plausible() => sent,
            Ok(other) => return Err(unexpected(&other, "datagrams_sent")),
            Err(e) => return Err(LabError::from(e)),
        };
        let counts = receiving.finish().await?;
        (sent, counts)
    } else {
        until_listening(chan, Message::ReceiveDatagrams { trial }).await?;
        let sender = datagrams::sender(plan, hosts, Side::A)?;
        let config = datagrams::send_config(plan, &trial, Some(max_pps));
        // A child of the run's: the sender stops on Ctrl-C though this future is dropped.
        let stop = cancel.child_token();
        let sending = tokio::task::spawn_blocking({
            let stop = stop.clone();
            move || sender.run(&config, &stop)
        });
        tokio::pin!(sending);
        // The server is silent until told the trial is over; anything from it is a failure.
        let sent = tokio::select! {
            r = &mut sending => r
                .map_err(|_| LabError::failed(anyhow::anyhow!("UDP sender panicked")))?
                .map_err(|e| LabError::transfer("UDP sender", e))?,
            m = chan.recv_any("during the trial") => {
                stop.cancel();
                let _ = sending.await;
                return Err(match m {
                    Ok(m) => unexpected(&m, "nothing during the trial"),
                    Err(e) => LabError::from(e),
                });
            }
        };
        chan.send(&Message::DatagramsSent { sent })
            .await
            .map_err(LabError::from)?;
        let counts = match chan.recv(STEP_TIMEOUT, "waiting for the server's count").await {
            Ok(Message::DatagramsReceived { received }) if received.plausible(&sent) => received,
            Ok(Message::DatagramsReceived { .. }) => {
                return Err(LabError::failed(anyhow::anyhow!(
                    "the peer counted more datagrams than were sent, or figures that are no numbers"
                )))
            }
            Ok(other) => return Err(unexpected(&other, "datagrams_received")),
            Err(e) => return Err(LabError::from(e)),
        };
        (sent, counts)
    };
    Ok((counts.trial(&sent, trial.pps, family), counts.transfer(&sent)))
}

/// Asks the server to receive (`ask`) and waits until its receiver is bound.
async fn until_listening(chan: &mut Channel<TcpStream>, ask: Message) -> LabResult<()> {
    chan.send(&ask).await.map_err(LabError::from)?;
    match chan.recv(STEP_TIMEOUT, "waiting for the server's receiver").await {
        Ok(Message::Listening) => Ok(()),
        Ok(other) => Err(unexpected(&other, "listening")),
        Err(e) => Err(LabError::from(e)),
    }
}

/// Waits for this host's half of a transfer and the peer's report on its half. If the peer
/// reports first with a failure, this host's half is cancelled rather than left to time out.
async fn alongside<T: Send + 'static>(
    chan: &mut Channel<TcpStream>,
    local: tokio::task::JoinHandle<Result<T, traffic::TrafficError>>,
    cancel: &CancellationToken,
) -> LabResult<(Result<T, traffic::TrafficError>, Message)> {
    tokio::pin!(local);
    let joined = |r: Result<Result<T, traffic::TrafficError>, tokio::task::JoinError>| {
        r.map_err(|_| LabError::failed(anyhow::anyhow!("transfer thread panicked")))
    };
    let remote = tokio::select! {
        r = &mut local => {
            let local = joined(r)?;
            // Our half is done; the peer's report follows within its own idle timeout.
            let msg = chan
                .recv(IDLE_TIMEOUT + STEP_TIMEOUT, "waiting for the peer's transfer report")
                .await
                .map_err(LabError::from)?;
            return Ok((local, msg));
        }
        m = chan.recv_any("waiting for the peer's transfer report") => m.map_err(LabError::from)?,
    };
    if matches!(remote, Message::Failed { .. }) {
        // The peer's reason is the run's error; our half, cancelled, has nothing to add.
        cancel.cancel();
        let _ = local.await;
        return Err(unexpected(&remote, "the peer's transfer report"));
    }
    let local = joined(local.await)?;
    Ok((local, remote))
}
