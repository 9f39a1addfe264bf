//! `ipsec-lab serve`: the server end (B) of two-host runs, for `ipsec-lab run --peer` (A).
//!
//! * Listens on `--listen ADDR[:PORT]` (default 0.0.0.0:5299); connections from outside the
//!   `--allow` networks are closed unread.
//! * Every connection must finish the Noise handshake with the pre-shared key within
//!   [`control::HANDSHAKE_TIMEOUT`]; a wrong key, garbage, an oversized frame or silence
//!   drop that connection (logged), and the server carries on.
//! * One run at a time: an authenticated client that comes while a run is on gets `busy`.
//! * Every step has a timeout; when the client disconnects, times out or anything fails,
//!   the run's end (SAs and policies, tunnel) is removed before the next run is taken.
//! * On start it removes the lab's SAs and policies left in this namespace by a server that
//!   was killed (only the lab's: reqid and SPI in its ranges); on SIGINT/SIGTERM it ends the
//!   run in progress, cleans up and exits 0.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use control::{Channel, Message, Psk, RefusalKind, TransferResult};
use model::{Backend, CryptoChoice, Environment, IpsecMode, RunPlan};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use traffic::{CancellationToken, Progress, Receiver};

use crate::backends::{self, Side};
use crate::cli::ServeArgs;
use crate::error::{require_net_admin, ExitKind, LabError, LabResult};
use crate::remote::{control_error, data_addr, transfer_config, HostEnd, Hosts, STEP_TIMEOUT};

/// How long a stopping server waits for the run in progress to unwind.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// A network in `--allow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub len: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad =
            || format!("--allow {s:?} is not an address or network such as 192.0.2.0/24 or 2001:db8::/32");
        let (addr, len) = match s.trim().split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Cidr { addr, len })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `ADDR`, `ADDR:PORT`, `:PORT`, `[V6]:PORT`; the port defaults to 5299.
pub fn parse_listen(s: Option<&str>) -> Result<SocketAddr, String> {
    let default = SocketAddr::from(([0, 0, 0, 0], control::DEFAULT_PORT));
    let Some(s) = s.map(str::trim) else {
        return Ok(default);
    };
    let bad = || format!("--listen {s:?} is not ADDR, ADDR:PORT or :PORT");
    if let Some(port) = s.strip_prefix(':') {
        let port = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(default.ip(), port));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip: IpAddr = s
        .trim_matches(|c| c == '[' || c == ']')
        .parse()
        .map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, control::DEFAULT_PORT))
}

pub fn run(args: ServeArgs) -> LabResult<()> {
    let psk = Psk::load(&args.psk_file).map_err(LabError::usage)?;
    let listen = parse_listen(args.listen.as_deref()).map_err(|e| LabError::usage(anyhow::anyhow!(e)))?;
    let allow = args
        .allow
        .iter()
        .map(|a| a.parse::<Cidr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LabError::usage(anyhow::anyhow!(e)))?;
    require_net_admin()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    runtime.block_on(serve(listen, allow, psk))
}

/// Removes the lab's SAs and policies in this namespace: leftovers of a killed server.
async fn clean_leftovers(when: &str) {
    // Only what dead runs recorded: another live server's or run's SAs stay.
    match crate::commands::clean::clean_dead_owners().await {
        Ok(summary) => {
            for line in summary.lines.iter().filter(|l| !l.starts_with("left alone")) {
                eprintln!("ipsec-lab serve: {when}: {line}");
            }
            for failure in &summary.failures {
                eprintln!("ipsec-lab serve: {when}: could not remove {failure}");
            }
        }
        Err(e) => eprintln!("ipsec-lab serve: {when}: could not check for what killed runs left: {e}"),
    }
}

async fn serve(listen: SocketAddr, allow: Vec<Cidr>, psk: Psk) -> LabResult<()> {
    clean_leftovers("start").await;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| LabError::failed(anyhow::anyhow!("listening on {listen}: {e}")))?;
    let shutdown = CancellationToken::new();
    let signals = crate::commands::run::cancel_on_signal(shutdown.clone())?;
    // Tests and scripts wait for this line before connecting.
    eprintln!(
        "ipsec-lab serve: listening on {} (protocol {}, {})",
        listener.local_addr().map_err(LabError::failed)?,
        control::VERSION,
        control::noise::PATTERN
    );
    let psk = Arc::new(psk);
    let one_run = Arc::new(Semaphore::new(1));
    let mut sessions = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        eprintln!("ipsec-lab serve: accept: {e}");
                        continue;
                    }
                };
                if !allow.is_empty() && !allow.iter().any(|c| c.contains(peer.ip())) {
                    eprintln!("ipsec-lab serve: {peer}: not in --allow; connection closed");
                    continue;
                }
                sessions.spawn(session(stream, peer, psk.clone(), one_run.clone(), shutdown.child_token()));
            }
            // Reap finished sessions so the set does not grow.
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
    eprintln!("ipsec-lab serve: stopping");
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        sessions.abort_all();
    }
    signals.abort();
    clean_leftovers("stop").await;
    Ok(())
}

async fn session(
    stream: TcpStream,
    peer: SocketAddr,
    psk: Arc<Psk>,
    one_run: Arc<Semaphore>,
    cancel: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(e) => return eprintln!("ipsec-lab serve: {peer}: {e}"),
    };
    let handshake = tokio::select! {
        h = Channel::respond(stream, &psk, control::HANDSHAKE_TIMEOUT) => h,
        _ = cancel.cancelled() => return,
    };
    let mut chan = match handshake {
        Ok(c) => c,
        Err(e) => return eprintln!("ipsec-lab serve: {peer}: {e}; connection dropped"),
    };
    let Ok(_permit) = one_run.try_acquire_owned() else {
        eprintln!("ipsec-lab serve: {peer}: busy with another run; told the client");
        let _ = chan.send(&Message::Busy).await;
        return;
    };
    eprintln!("ipsec-lab serve: {peer}: authenticated");
    let hosts = Hosts {
        a: peer.ip(),
        b: local.ip(),
    };
    match serve_run(&mut chan, hosts, &cancel).await {
        Ok(()) => eprintln!("ipsec-lab serve: {peer}: run finished; its end is removed"),
        Err(e) => {
            eprintln!("ipsec-lab serve: {peer}: run failed: {e:#}; its end is removed");
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

/// What a server refuses before setting anything up.
fn refuse(plan: &RunPlan) -> Option<(RefusalKind, String)> {
    if !matches!(plan.backend, Backend::Plain | Backend::Xfrm | Backend::Userspace) {
        return Some((
            RefusalKind::Usage,
            format!("the {} backend does not run between two hosts", plan.backend),
        ));
    }
    if plan.port < 1024 {
        return Some((
            RefusalKind::Usage,
            format!("data port {} is below 1024", plan.port),
        ));
    }
    if plan.backend == Backend::Xfrm && plan.mode != IpsecMode::Transport {
        return Some((
            RefusalKind::Usage,
            "only transport mode runs between two hosts".into(),
        ));
    }
    if plan.backend == Backend::Userspace && plan.crypto == CryptoChoice::Soft {
        // Soft AES needs the process restarted with hardware AES masked: not for a server.
        return Some((RefusalKind::Usage, "serve does not offer --crypto soft".into()));
    }
    None
}

fn refusal_kind(e: &LabError) -> RefusalKind {
    match e.kind {
        ExitKind::Usage => RefusalKind::Usage,
        ExitKind::Capability => RefusalKind::Capability,
        _ => RefusalKind::Failed,
    }
}

async fn serve_run(chan: &mut Channel<TcpStream>, hosts: Hosts, cancel: &CancellationToken) -> LabResult<()> {
    let (plan, keys) = match chan.recv(STEP_TIMEOUT, "waiting for the client's hello").await {
        Ok(Message::Hello { plan, keys }) => (*plan, keys),
        Ok(other) => {
            return Err(LabError::failed(anyhow::anyhow!(
                "expected hello, got {}",
                other.kind()
            )))
        }
        Err(e) => return Err(control_error(e)),
    };
    eprintln!(
        "ipsec-lab serve: run: {} {} {} x{}{}",
        plan.backend,
        plan.suite,
        plan.bytes,
        plan.repeat,
        if plan.reverse { ", reverse" } else { "" }
    );
    let refusal = match refuse(&plan) {
        Some(r) => Some(r),
        None => backends::preflight(&plan)
            .await
            .err()
            .map(|e| (refusal_kind(&e), format!("{e:#}"))),
    };
    let started = match refusal {
        Some(r) => Err(r),
        None => HostEnd::start(Side::B, &plan, &keys, hosts)
            .await
            .map_err(|e| (refusal_kind(&e), format!("{e:#}"))),
    };
    drop(keys);
    let mut end = match started {
        Ok(end) => end,
        Err((kind, reason)) => {
            eprintln!("ipsec-lab serve: refused: {reason}");
            let _ = chan.send(&Message::Refused { kind, reason }).await;
            return Ok(());
        }
    };
    chan.send(&Message::Ready {
        environment: Box::new(Environment::detect()),
    })
    .await
    .map_err(control_error)?;
    loop {
        let msg = tokio::select! {
            m = chan.recv(STEP_TIMEOUT, "waiting for the client's next step") => m.map_err(control_error)?,
            _ = cancel.cancelled() => return Err(LabError::interrupted()),
        };
        match msg {
            Message::Receive { .. } if !plan.reverse => {
                let receiver = Receiver::bind(data_addr(&plan, hosts, Side::B)).map_err(LabError::failed)?;
                chan.send(&Message::Listening).await.map_err(control_error)?;
                let (config, tx) = (transfer_config(&plan), CancellationToken::new());
                let rx = tx.clone();
                let work = tokio::task::spawn_blocking(move || {
                    receiver
                        .run(config, Progress::default(), rx)
                        .map(|r| TransferResult {
                            bytes: r.bytes,
                            seconds: r.seconds,
                            cpu: r.cpu,
                        })
                });
                let result = watch(chan, work, &tx, cancel).await?;
                reply(chan, result, |transfer| Message::Received { transfer }).await?;
            }
            Message::Send { .. } if plan.reverse => {
                let target = data_addr(&plan, hosts, Side::A);
                let (config, tx) = (transfer_config(&plan), CancellationToken::new());
                let rx = tx.clone();
                let work = tokio::task::spawn_blocking(move || {
                    traffic::send(target, config, rx).map(|r| TransferResult {
                        bytes: r.bytes,
                        seconds: r.seconds,
                        cpu: r.cpu,
                    })
                });
                let result = watch(chan, work, &tx, cancel).await?;
                reply(chan, result, |transfer| Message::Sent { transfer }).await?;
            }
            Message::Finish => {
                let details = end.details().await?;
                // Removed before the client hears "finished": a next run finds a clean host.
                drop(end);
                chan.send(&Message::Finished { details })
                    .await
                    .map_err(control_error)?;
                return Ok(());
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
async fn watch(
    chan: &mut Channel<TcpStream>,
    work: tokio::task::JoinHandle<Result<TransferResult, traffic::TrafficError>>,
    transfer_cancel: &CancellationToken,
    cancel: &CancellationToken,
) -> LabResult<Result<TransferResult, traffic::TrafficError>> {
    tokio::pin!(work);
    let why = tokio::select! {
        done = &mut work => {
            return done.map_err(|_| LabError::failed(anyhow::anyhow!("transfer thread panicked")));
        }
        m = chan.recv_any("during the transfer") => match m {
            Ok(m) => format!("the client sent {} during the transfer", m.kind()),
            Err(e) => format!("{}", control_error(e)),
        },
        _ = cancel.cancelled() => "stopping".to_string(),
    };
    transfer_cancel.cancel();
    let _ = work.await;
    Err(LabError::failed(anyhow::anyhow!(why)))
}

async fn reply(
    chan: &mut Channel<TcpStream>,
    result: Result<TransferResult, traffic::TrafficError>,
    ok: impl FnOnce(TransferResult) -> Message,
) -> LabResult<()> {
    match result {
        Ok(t) => chan.send(&ok(t)).await.map_err(control_error),
        Err(e) => Err(LabError::failed(anyhow::Error::new(e).context("transfer"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_match_networks() {
        let net: Cidr = "198.18.0.0/24".parse().unwrap();
        assert!(net.contains("198.18.0.9".parse().unwrap()));
        assert!(net.contains("::ffff:198.18.0.9".parse().unwrap()));
        assert!(!net.contains("198.18.1.9".parse().unwrap()));
        let host: Cidr = "198.18.0.1".parse().unwrap();
        assert!(
            host.contains("198.18.0.1".parse().unwrap()) && !host.contains("198.18.0.2".parse().unwrap())
        );
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8::1".parse().unwrap()) && !v6.contains("2001:db9::1".parse().unwrap()));
        for bad in ["x", "198.18.0.0/33", "::/129", "1.2.3.4/-1"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses_default_their_port() {
        assert_eq!(parse_listen(None).unwrap().to_string(), "0.0.0.0:5299");
        assert_eq!(
            parse_listen(Some("198.18.0.2")).unwrap().to_string(),
            "198.18.0.2:5299"
        );
        assert_eq!(
            parse_listen(Some("198.18.0.2:7000")).unwrap().to_string(),
            "198.18.0.2:7000"
        );
        assert_eq!(parse_listen(Some(":7000")).unwrap().to_string(), "0.0.0.0:7000");
        assert_eq!(parse_listen(Some("[::1]:7")).unwrap().to_string(), "[::1]:7");
        assert!(parse_listen(Some("nohost:x")).is_err());
    }
}
