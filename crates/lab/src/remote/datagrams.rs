//! UDP trials and latency probes between two hosts (`run --peer --udp`, `--latency`): each
//! host's half, and what of it crosses the control channel.
//!
//! A trial's datagrams flow between the two data addresses on the first data port, as
//! between namespaces; the receiving host counts them and the client puts the trial
//! together from both accounts (`model::packets::{SentDatagrams, ReceivedDatagrams}`), which
//! cross the control channel as they are.
//! The server's responder echoes only the client's probes (from its data address and the
//! probe port), at most [`ECHOES_PER_SECOND`].

use std::net::SocketAddr;
use std::thread::JoinHandle;

use control::TrialRequest;
use model::packets::ReceivedDatagrams;
use model::RunPlan;
use traffic::latency::Responder;
use traffic::udp::{self, Receiver, SendConfig, Sender, Tally};
use traffic::{CancellationToken, TrafficError};

use crate::backend::{data_addr, Hosts, Side};
use crate::error::{LabError, LabResult};

/// Most echoes a second a server's responder sends: twice the prober's rate of one probe a
/// millisecond, so a client probing as the lab does is never cut short.
pub const ECHOES_PER_SECOND: u32 = 2000;

/// The data address of `side` and of the other side, for `side`'s socket.
fn ends(plan: &RunPlan, hosts: Hosts, side: Side) -> (SocketAddr, SocketAddr) {
    (data_addr(plan, hosts, side), data_addr(plan, hosts, side.other()))
}

pub fn sender(plan: &RunPlan, hosts: Hosts, side: Side) -> LabResult<Sender> {
    let (local, peer) = ends(plan, hosts, side);
    Sender::bind(local, peer).map_err(|e| LabError::transfer("UDP sender", e))
}

/// What a sender sends in `trial`, at most at `max_pps` (the server's `--max-rate`: an
/// unlimited trial is paced there).
pub fn send_config(plan: &RunPlan, trial: &TrialRequest, max_pps: Option<f64>) -> SendConfig {
    let workload = plan.workload();
    SendConfig {
        seed: workload.seed,
        packet_size: workload.udp.expect("a UDP plan").packet_size,
        family: plan.link().family,
        pps: match (trial.pps, max_pps) {
            (Some(pps), Some(max)) => Some(pps.min(max)),
            (pps, max) => pps.or(max),
        },
        seconds: trial.seconds,
    }
}

/// A receiver at `side` counting `trial` on its own thread: bound (connected to the other
/// side's data address) before it returns, so the sender may start. Its record of sequence
/// numbers is bounded by `max_pps` (the server's `--max-rate`), whatever a sender claims.
pub struct Receiving {
    thread: Option<JoinHandle<Result<Tally, TrafficError>>>,
    sender_done: CancellationToken,
    stop: CancellationToken,
}

impl Receiving {
    pub fn start(
        plan: &RunPlan,
        hosts: Hosts,
        side: Side,
        trial: &TrialRequest,
        max_pps: f64,
    ) -> LabResult<Receiving> {
        let (local, peer) = ends(plan, hosts, side);
        let receiver = Receiver::bind(local, peer).map_err(|e| LabError::transfer("UDP receiver", e))?;
        let config = send_config(plan, trial, Some(max_pps));
        let tally = Tally::new(
            config.seed,
            config.packet_size,
            config.family,
            udp::sequence_limit(config.pps, trial.seconds),
        );
        let (sender_done, stop) = (CancellationToken::new(), CancellationToken::new());
        let thread = std::thread::Builder::new()
            .name("ipl-udp-receiver".into())
            .spawn({
                let (done, stop) = (sender_done.clone(), stop.clone());
                move || receiver.run(tally, &done, &stop)
            })
            .map_err(LabError::failed)?;
        Ok(Receiving {
            thread: Some(thread),
            sender_done,
            stop,
        })
    }

    /// The sender has finished: drain what is on its way (up to 2 s, off the runtime's
    /// threads), then the count.
    pub async fn finish(mut self) -> LabResult<ReceivedDatagrams> {
        self.sender_done.cancel();
        let thread = self.thread.take().expect("finished once");
        let tally = tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(LabError::failed)?
            .map_err(|_| LabError::failed(anyhow::anyhow!("the UDP receiver thread panicked")))?
            .map_err(|e| LabError::transfer("UDP receiver", e))?;
        Ok(tally.counts())
    }
}

impl Drop for Receiving {
    fn drop(&mut self) {
        // Not finished: the run failed, so the thread stops without draining.
        self.stop.cancel();
    }
}

/// The server's latency responder: echoes only the client's probes, at most
/// [`ECHOES_PER_SECOND`], until dropped.
pub struct Echo {
    thread: Option<JoinHandle<Result<u64, TrafficError>>>,
    stop: CancellationToken,
}

impl Echo {
    pub fn start(plan: &RunPlan, hosts: Hosts) -> LabResult<Echo> {
        let at = SocketAddr::new(data_addr(plan, hosts, Side::B).ip(), plan.workload().probe_port());
        let client = data_addr(plan, hosts, Side::A).ip();
        // The client probes from the same port on its data address (protocol 6): probes
        // forged with its address but from another port take nothing of the budget.
        let responder = Responder::bind(at)
            .map_err(|e| LabError::transfer("latency responder", e))?
            .only_from(client)
            .only_from_port(plan.workload().probe_port())
            .at_most(ECHOES_PER_SECOND);
        let stop = CancellationToken::new();
        let thread = std::thread::Builder::new()
            .name("ipl-echo".into())
            .spawn({
                let stop = stop.clone();
                move || responder.run(stop)
            })
            .map_err(LabError::failed)?;
        Ok(Echo {
            thread: Some(thread),
            stop,
        })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.cancel();
        // Stops within its receive timeout; its socket is closed before the end goes.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
