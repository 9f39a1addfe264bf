//! `ipsec-lab serve`: the server end (B) of two-host runs, for `ipsec-lab run --peer` (A).
//!
//! * Listens on `--listen ADDR[:PORT]` (default 0.0.0.0:5299); connections from outside the
//!   `--allow` networks are closed unread.
//! * Until a client proves it holds the key, a connection costs little and is bounded: at
//!   most [`MAX_UNAUTHENTICATED`] such connections in all and [`MAX_UNAUTHENTICATED_PER_SOURCE`]
//!   per source network, each with [`control::HANDSHAKE_TIMEOUT`] for the Noise handshake
//!   and as long again for its first encrypted message, the hello. When all places are
//!   taken, a newcomer replaces the oldest connection of the most crowded network
//!   ([`super::admission`]), so a flood from many addresses cannot keep a key holder out;
//!   one turned away is told why in a [`control::TURNED_AWAY`] frame.
//!   Noise NNpsk0's first message can be replayed, so only the hello proves a live key
//!   holder: the server logs "authenticated", takes its single run slot (or answers `busy`)
//!   and creates anything only after the hello decrypts. A handshake without a hello (a
//!   replay) leaves a rate-limited log line, nothing else.
//! * A run does what its request named and no more: transfers 1 to its `repeat`, in order,
//!   within `--max-run-time` of its hello; then it is stopped and its end removed.
//! * The hello carries a request, never a plan: it is checked against this server's limits
//!   (`--max-bytes`, `--max-streams`, `--max-repeat`, `--data-ports`,
//!   `--allow-unauthenticated-suites`) and refused as usage, naming the flag, before anything
//!   is created. The server derives its end itself (`remote::server_plan`).
//! * Everything from the wire that reaches the log is escaped ([`control::text::untrusted`]),
//!   and a log that goes away (a closed pipe) does not stop the server ([`crate::say!`]).
//! * `accept` errors (EMFILE under a descriptor limit) back off from 10 ms to 1 s; repeated
//!   log lines are rate-limited per kind, saying how many were suppressed.
//! * Every step has a timeout; when the client disconnects, times out or anything fails,
//!   the run's end (SAs and policies, tunnel) is removed before the next run is taken.
//! * On start it removes the lab's SAs and policies left in this namespace by a server that
//!   was killed (only the lab's: reqid and SPI in its ranges); on SIGINT/SIGTERM it ends the
//!   run in progress, cleans up and exits 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use control::{
    Channel, Cidr, ControlError, Message, PeerRequest, Psk, RefusalKind, RunKeys, ServerEnd, ServerLimits,
};
use model::{Environment, TransferSide};
use netns::Namespace;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use traffic::{CancellationToken, Progress};

use super::admission::{Admission, Admitted};
use super::datagrams::{self, Echo, Receiving};
use super::log_limit::LogLimiter;
use super::STEP_TIMEOUT;
use crate::backend::xfrm::ShowKeys;
use crate::backend::{self, data_addr, End, Hosts, RunSecrets, Side, Site};
use crate::error::{LabError, LabResult};
use crate::{say, session};

/// How long a stopping server waits for the run in progress to unwind.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Back-off after a failed `accept` (e.g. EMFILE): doubles from the first to the last.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));
/// Connections being told why they were turned away, at most; past that they just close.
const MAX_NOTICES: usize = 16;
/// How long telling one takes at most.
const NOTICE_TIME: Duration = Duration::from_secs(1);

/// Removes the lab's SAs and policies in this namespace: leftovers of a killed server.
async fn clean_leftovers(when: &str) {
    // Only what dead runs recorded: another live server's or run's SAs stay.
    match crate::clean::clean_dead_owners().await {
        Ok(summary) => {
            for line in summary.lines.iter().filter(|l| !l.starts_with("left alone")) {
                say!("ipsec-lab serve: {when}: {line}");
            }
            for failure in &summary.failures {
                say!("ipsec-lab serve: {when}: could not remove {failure}");
            }
        }
        Err(e) => say!("ipsec-lab serve: {when}: could not check for what killed runs left: {e}"),
    }
}

/// What every session of a server shares.
struct Shared {
    psk: Psk,
    limits: ServerLimits,
    one_run: Arc<Semaphore>,
    admission: Arc<Mutex<Admission>>,
    /// Places for connections being told they were turned away.
    notices: Arc<Semaphore>,
    logs: LogLimiter,
}

/// What a server is started with: where it listens, whom it lets in, its key and limits.
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Networks control connections may come from; empty: anywhere (the key still counts).
    pub allow: Vec<Cidr>,
    pub psk: Psk,
    pub limits: ServerLimits,
}

/// Serves runs, one at a time, until `shutdown` completes (the binary hands in SIGINT or
/// SIGTERM); then ends the run in progress, cleans up and returns.
pub async fn serve(config: ServerConfig, shutdown: impl Future<Output = ()>) -> LabResult<()> {
    let ServerConfig {
        listen,
        allow,
        psk,
        limits,
    } = config;
    clean_leftovers("start").await;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| LabError::failed(anyhow::anyhow!("listening on {listen}: {e}")))?;
    // Sessions watch a token; the future handed in cancels it.
    let stopping = CancellationToken::new();
    let shutdown = {
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            stopping.cancel();
        }
    };
    tokio::pin!(shutdown);
    // Tests and scripts wait for this line before connecting.
    say!(
        "ipsec-lab serve: listening on {} (protocol {}, {}; limits: {} a transfer, {} streams, {} repeats, \
         {} tunnel threads, {} s a run, data ports {}, UDP trials: {} pps, {} s, {} a run{})",
        listener.local_addr().map_err(LabError::failed)?,
        control::VERSION,
        control::noise::PATTERN,
        model::ByteSize(limits.max_bytes),
        limits.max_streams,
        limits.max_repeat,
        limits.max_tunnel_threads,
        limits.max_run_time.as_secs(),
        limits.data_ports,
        model::packets::si(limits.max_pps),
        limits.max_trial_time.as_secs(),
        limits.max_trials,
        if limits.allow_unauthenticated {
            ", unauthenticated suites allowed"
        } else {
            ""
        }
    );
    let shared = Arc::new(Shared {
        psk,
        limits,
        one_run: Arc::new(Semaphore::new(1)),
        admission: Arc::new(Mutex::new(Admission::default())),
        notices: Arc::new(Semaphore::new(MAX_NOTICES)),
        logs: LogLimiter::default(),
    });
    let mut sessions = tokio::task::JoinSet::new();
    let mut backoff = Duration::ZERO;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors (EMFILE) the pending connection stays queued and
                        // accept fails again at once: wait instead of spinning.
                        backoff = (backoff * 2).clamp(ACCEPT_BACKOFF.0, ACCEPT_BACKOFF.1);
                        shared.logs.line("accept", || {
                            format!("accept: {e}; trying again in {} ms", backoff.as_millis())
                        });
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = &mut shutdown => break,
                        }
                        continue;
                    }
                };
                backoff = Duration::ZERO;
                if !allow.is_empty() && !allow.iter().any(|c| c.contains(peer.ip())) {
                    shared.logs.line("allow", || format!("{peer}: not in --allow; connection closed"));
                    continue;
                }
                let admitted = match Admission::admit(&shared.admission, peer.ip()) {
                    Ok(a) => a,
                    Err(why) => {
                        shared.logs.line("admission", || format!("{peer}: {why}; turned away"));
                        turn_away(stream, why, &shared.notices);
                        continue;
                    }
                };
                sessions.spawn(session(stream, peer, shared.clone(), admitted, stopping.child_token()));
            }
            // Reap finished sessions so the set does not grow.
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
    say!("ipsec-lab serve: stopping");
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        sessions.abort_all();
    }
    clean_leftovers("stop").await;
    Ok(())
}

async fn session(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    admitted: Admitted,
    cancel: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let (local, link_mtu) = match stream
        .local_addr()
        .map_err(LabError::failed)
        .and_then(|local| super::link_mtu(&stream).map(|mtu| (local, mtu)))
    {
        Ok(a) => a,
        Err(e) => return shared.logs.line("socket", || format!("{peer}: {e:#}")),
    };
    // Until the hello decrypts, a newcomer may take this connection's place (`evicted`).
    let handshake = tokio::select! {
        h = Channel::respond(stream, &shared.psk, control::HANDSHAKE_TIMEOUT) => h,
        _ = admitted.evicted.cancelled() => return,
        _ = cancel.cancelled() => return,
    };
    let mut chan = match handshake {
        Ok(c) => c,
        Err(e) => {
            return shared
                .logs
                .line("handshake", || format!("{peer}: {e}; connection dropped"))
        }
    };
    // Anyone can replay a key holder's first handshake message: only the hello, the first
    // message of the session, proves one is here now. Until it decrypts nothing is taken.
    admitted.handshaken();
    let hello = tokio::select! {
        m = chan.recv(control::HANDSHAKE_TIMEOUT, "waiting for the client's hello") => m,
        _ = admitted.evicted.cancelled() => return,
        _ = cancel.cancelled() => return,
    };
    let refusal = |reason: String| Message::Refused {
        kind: RefusalKind::Usage,
        reason,
    };
    let (request, keys) = match hello {
        Ok(Message::Hello { request, keys }) => (request, keys),
        Err(e @ (ControlError::Malformed { .. } | ControlError::Version { .. })) => {
            // It decrypted: a key holder sent something this server does not run.
            shared
                .logs
                .line("hello", || format!("{peer}: authenticated; refused: {e}"));
            let _ = chan.send(&refusal(format!("a malformed request: {e}"))).await;
            return;
        }
        Ok(other) => {
            shared.logs.line("hello", || {
                format!(
                    "{peer}: authenticated; refused: {} instead of hello",
                    other.kind()
                )
            });
            let _ = chan
                .send(&refusal(format!("expected hello, got {}", other.kind())))
                .await;
            return;
        }
        Err(e) => {
            return shared.logs.line("replay", || {
                format!("{peer}: a first handshake message but no hello ({e}): not a live key holder (a replay?); connection dropped")
            });
        }
    };
    drop(admitted);
    // A dual-stack listener ([::]) sees an IPv4 client as ::ffff:a.b.c.d: that is IPv4.
    let hosts = Hosts {
        a: peer.ip().to_canonical(),
        b: local.ip().to_canonical(),
    };
    // Checked before the run slot is taken: a refused request holds nothing, creates
    // nothing, and leaves one rate-limited line.
    let checked = match check_request(&request, hosts, &shared.limits) {
        Ok(checked) => checked,
        Err(reason) => {
            shared.logs.line("refused", || {
                format!("{peer}: authenticated; refused: {reason}; nothing created")
            });
            let _ = chan.send(&refusal(reason)).await;
            return;
        }
    };
    let Ok(_permit) = shared.one_run.clone().try_acquire_owned() else {
        shared.logs.line("busy", || {
            format!("{peer}: authenticated; turned away: busy with another run (told the client)")
        });
        let _ = chan.send(&Message::Busy).await;
        return;
    };
    shared.logs.line("run", || {
        format!("{peer}: authenticated; run: {}", describe(&request))
    });
    // The run's deadline cancels it like a stop signal does, so it unwinds the same way;
    // no send or receive on the channel waits past it either, so a client that stops
    // reading (its window shut, the server's sends pending) cannot hold the run past it.
    let until = tokio::time::Instant::now() + shared.limits.max_run_time;
    chan.set_deadline(Some(until));
    let run_cancel = cancel.child_token();
    let deadline = {
        let run_cancel = run_cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            run_cancel.cancel();
        })
    };
    let result = serve_run(
        &mut chan,
        &request,
        &checked,
        keys,
        hosts,
        link_mtu,
        &shared.limits,
        &run_cancel,
    )
    .await;
    deadline.abort();
    // The last word below is best effort, on its own short limit.
    chan.set_deadline(None);
    let late = tokio::time::Instant::now() >= until;
    let result = match result {
        Err(_) if late && !cancel.is_cancelled() => Err(LabError::failed(anyhow::anyhow!(
            "the run passed this server's time limit of {} s and was stopped (`ipsec-lab serve \
             --max-run-time` raises it)",
            shared.limits.max_run_time.as_secs()
        ))),
        other => other,
    };
    match result {
        Ok(Outcome::Finished) => shared
            .logs
            .line("run end", || format!("{peer}: run finished; its end is removed")),
        Ok(Outcome::NotStarted(reason)) => shared.logs.line("run end", || {
            format!("{peer}: run not started, nothing left: {reason}")
        }),
        Err(e) => {
            shared.logs.line("run end", || {
                format!("{peer}: run failed: {e:#}; its end is removed")
            });
            // Best effort: the client may be gone already.
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                chan.send(&Message::Failed {
                    reason: format!("{e:#}"),
                }),
            )
            .await;
        }
    }
}

/// Tells a connection turned away before its handshake why, then closes it. What the client
/// sent meanwhile is read first, so the close is a FIN, not a reset that could overtake the
/// notice. At most [`MAX_NOTICES`] at once, each for [`NOTICE_TIME`]; past that, the
/// connection just closes.
fn turn_away(mut stream: TcpStream, why: String, notices: &Arc<Semaphore>) {
    let Ok(place) = notices.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _place = place;
        let _ = tokio::time::timeout(NOTICE_TIME, async {
            stream.write_all(&control::turned_away_frame(&why)).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 256];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        })
        .await;
    });
}

/// Checks `request` against this server's limits (naming the flag that raises each) and
/// the control connection's family, then with the client's own validation; the reason is
/// the refusal the client is sent.
fn check_request(
    request: &PeerRequest,
    hosts: Hosts,
    limits: &ServerLimits,
) -> Result<model::RunPlan, String> {
    limits
        .check(request)
        .and_then(|()| ServerLimits::check_family(request, hosts.b))
        .map_err(|e| e.to_string())?;
    super::checked_request(request, hosts.a)
}

/// A request, in one line of the log.
fn describe(request: &PeerRequest) -> String {
    let mut line = format!(
        "{} {} {} x{}, {} streams from port {}",
        request.backend,
        request.suite,
        model::ByteSize(request.bytes),
        request.repeat,
        request.streams,
        request.data_port,
    );
    if request.reverse {
        line.push_str(", reverse");
    }
    if request.tunnel_threads > 1 {
        line.push_str(&format!(", {} tunnel threads", request.tunnel_threads));
    }
    if let Some(size) = request.udp {
        line.push_str(&format!(", UDP trials of {size} datagrams instead of transfers"));
    }
    if request.latency {
        line.push_str(", echoing the client's latency probes");
    }
    line
}

/// How a run that did not fail ended.
enum Outcome {
    Finished,
    /// Its end could not be made; the client was told why.
    NotStarted(String),
}

/// Decides this end (tunnel addresses, MTU) of a checked request and brings it up; or says
/// why not, having created nothing.
async fn start_end(
    request: &PeerRequest,
    checked: &model::RunPlan,
    keys: &RunKeys,
    hosts: Hosts,
    link_mtu: u32,
    limits: &ServerLimits,
) -> Result<(End, model::RunPlan, ServerEnd), (RefusalKind, String)> {
    let lab = |e: LabError| (RefusalKind::from(e.kind), format!("{e:#}"));
    let tunnel = if request.backend.describe().server_chooses_inner_addresses() {
        let in_use = super::prefixes_in_use().await.map_err(lab)?;
        let chosen = control::request::choose_tunnel_net_for(request.family, &in_use).ok_or((
            RefusalKind::Failed,
            format!(
                "every tunnel network of the lab's {} range overlaps a route or address on the server: \
                 no room for the tunnel's inner addresses",
                request.family
            ),
        ))?;
        Some(chosen)
    } else {
        None
    };
    let end = ServerEnd {
        tunnel,
        link_mtu: link_mtu.min(request.link_mtu),
        max_pps: request.udp.map(|_| limits.max_pps),
    };
    if !control::request::MTU_RANGE.contains(&end.link_mtu) {
        return Err((
            RefusalKind::Failed,
            format!("this host's path MTU toward the client is {link_mtu}, below 576"),
        ));
    }
    let plan = super::server_plan(checked, hosts, end);
    backend::preflight(&plan).await.map_err(lab)?;
    let namespace = Namespace::current().map_err(|e| lab(e.into()))?;
    let site = Site {
        side: Side::B,
        namespace: &namespace,
        hosts,
        lab_link: None,
    };
    let secrets = RunSecrets::received(&plan, keys.clone()).map_err(lab)?;
    let host_end = End::start(&plan, &secrets, &site, ShowKeys(false))
        .await
        .map_err(lab)?;
    Ok((host_end, plan, end))
}

// The request as asked and as checked travel side by side: the checks need the first, the
// end the second.
#[allow(clippy::too_many_arguments)]
async fn serve_run(
    chan: &mut Channel<TcpStream>,
    request: &PeerRequest,
    checked: &model::RunPlan,
    keys: RunKeys,
    hosts: Hosts,
    link_mtu: u32,
    limits: &ServerLimits,
    cancel: &CancellationToken,
) -> LabResult<Outcome> {
    let started = start_end(request, checked, &keys, hosts, link_mtu, limits).await;
    drop(keys);
    let (mut end, plan, server_end) = match started {
        Ok(s) => s,
        Err((kind, reason)) => {
            let _ = chan
                .send(&Message::Refused {
                    kind,
                    reason: reason.clone(),
                })
                .await;
            return Ok(Outcome::NotStarted(reason));
        }
    };
    chan.send(&Message::Ready {
        environment: Box::new(Environment::detect()),
        end: server_end,
    })
    .await
    .map_err(LabError::from)?;
    // Until the run ends; stopped before the end goes.
    let echo = match request.latency {
        true => Some(Echo::start(&plan, hosts)?),
        false => None,
    };
    let (mut transfers, mut trials) = (0, 0);
    loop {
        let msg = tokio::select! {
            m = chan.recv(STEP_TIMEOUT, "waiting for the client's next step") => m.map_err(LabError::from)?,
            _ = cancel.cancelled() => return Err(LabError::interrupted()),
        };
        if let Message::Receive { attempt } | Message::Send { attempt } = msg {
            // A key holder may ask for the transfers its request named, in order; no more.
            if attempt != transfers + 1 || attempt > request.repeat || request.udp.is_some() {
                return Err(LabError::failed(anyhow::anyhow!(
                    "the client asked for transfer {attempt} of a run of {} after {transfers} (a run \
                     makes the transfers its request named, at most this server's --max-repeat)",
                    request.repeat
                )));
            }
            transfers = attempt;
        }
        if let Message::ReceiveDatagrams { trial } | Message::SendDatagrams { trial } = msg {
            // Each trial in order, within this server's rate, time and count.
            limits
                .check_trial(request, &trial, trials)
                .map_err(|e| LabError::usage(anyhow::Error::new(e)))?;
            trials = trial.number;
        }
        match msg {
            Message::Receive { .. } if !plan.workload().reverse => {
                let receiver = super::receiver(&plan, hosts, Side::B)?;
                chan.send(&Message::Listening).await.map_err(LabError::from)?;
                let (config, tx) = (session::transfer_config(&plan), CancellationToken::new());
                let rx = tx.clone();
                let work = tokio::task::spawn_blocking(move || receiver.run(config, Progress::default(), rx));
                let result = watch(chan, work, &tx, cancel).await?;
                reply(chan, result, |transfer| Message::Received { transfer }).await?;
            }
            Message::Send { .. } if plan.workload().reverse => {
                // Only to the client that asked: its host address, or its end of the tunnel.
                let target = data_addr(&plan, hosts, Side::A);
                let (config, tx) = (session::transfer_config(&plan), CancellationToken::new());
                let rx = tx.clone();
                let work = tokio::task::spawn_blocking(move || traffic::send(target, config, rx));
                let result = watch(chan, work, &tx, cancel).await?;
                reply(chan, result, |transfer| Message::Sent { transfer }).await?;
            }
            Message::ReceiveDatagrams { trial } if !plan.workload().reverse => {
                let receiving = Receiving::start(&plan, hosts, Side::B, &trial, limits.max_pps)?;
                chan.send(&Message::Listening).await.map_err(LabError::from)?;
                // The client says when its sender is done; a silent one is bounded by the
                // trial's own length.
                let wait = Duration::from_secs_f64(trial.seconds) + STEP_TIMEOUT;
                let msg = tokio::select! {
                    m = chan.recv(wait, "waiting for the client's trial to end") => m.map_err(LabError::from)?,
                    _ = cancel.cancelled() => return Err(LabError::interrupted()),
                };
                match msg {
                    Message::DatagramsSent { sent } if sent.plausible() => {}
                    other => {
                        return Err(LabError::failed(anyhow::anyhow!(
                            "the client sent {} instead of its trial's account",
                            other.kind()
                        )))
                    }
                }
                let counts = receiving.finish().await?;
                chan.send(&Message::DatagramsReceived { received: counts })
                    .await
                    .map_err(LabError::from)?;
            }
            Message::SendDatagrams { trial } if plan.workload().reverse => {
                // Only to the client's data address, at most at this server's --max-rate.
                let sender = datagrams::sender(&plan, hosts, Side::B)?;
                let config = datagrams::send_config(&plan, &trial, Some(limits.max_pps));
                let stop = CancellationToken::new();
                let work = tokio::task::spawn_blocking({
                    let stop = stop.clone();
                    move || sender.run(&config, &stop)
                });
                let sent = watch(chan, work, &stop, cancel)
                    .await?
                    .map_err(|e| LabError::transfer("UDP sender", e))?;
                chan.send(&Message::DatagramsSent { sent })
                    .await
                    .map_err(LabError::from)?;
            }
            Message::Finish => {
                drop(echo);
                let details = end.finish().await?;
                // Removed before the client hears "finished": a next run finds a clean host.
                drop(end);
                chan.send(&Message::Finished { details })
                    .await
                    .map_err(LabError::from)?;
                return Ok(Outcome::Finished);
            }
            other => {
                return Err(LabError::failed(anyhow::anyhow!(
                    "unexpected {} from the client",
                    other.kind()
                )))
            }
        }
    }
}

/// Runs this host's half of a transfer while watching the control connection: the client
/// has nothing to say during a transfer, so anything it sends, or its hanging up, or a stop
/// signal, ends the run at once instead of after the data path's idle timeout.
async fn watch<T>(
    chan: &mut Channel<TcpStream>,
    work: tokio::task::JoinHandle<Result<T, traffic::TrafficError>>,
    transfer_cancel: &CancellationToken,
    cancel: &CancellationToken,
) -> LabResult<Result<T, traffic::TrafficError>> {
    tokio::pin!(work);
    let why = tokio::select! {
        done = &mut work => {
            return done.map_err(|_| LabError::failed(anyhow::anyhow!("transfer thread panicked")));
        }
        m = chan.recv_any("during the transfer") => match m {
            Ok(m) => format!("the client sent {} during the transfer", m.kind()),
            Err(e) => format!("{}", LabError::from(e)),
        },
        _ = cancel.cancelled() => "stopping".to_string(),
    };
    transfer_cancel.cancel();
    let _ = work.await;
    Err(LabError::failed(anyhow::anyhow!(why)))
}

async fn reply(
    chan: &mut Channel<TcpStream>,
    result: Result<TransferSide, traffic::TrafficError>,
    ok: impl FnOnce(TransferSide) -> Message,
) -> LabResult<()> {
    match result {
        Ok(t) => chan.send(&ok(t)).await.map_err(LabError::from),
        Err(e) => Err(LabError::failed(anyhow::Error::new(e).context("transfer"))),
    }
}
