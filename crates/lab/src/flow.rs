//! The data of one local transfer: one way (a→b, or b→a with `--reverse`) or both at once
//! (`--bidir`), each way a verified transfer of its own (its receiver, its sender, its
//! seed), of a size or timed (`--time`), watched slice by slice: intervals reported as they
//! close (`--interval`) and the warm-up left out of the figure (`--omit`).
//!
//! The counting is crate `traffic`'s ([`traffic::Progress`], [`traffic::interval`]); this
//! starts the ways, turns their tallies into the report's records and hands each interval
//! to the run's watcher as it closes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use model::modes::{Bidir, IntervalRecord, Omitted};
use model::{CpuUsage, Direction, ModesReport, RunPlan, Summary, Transfer, TransferSide};
use netns::{Namespace, Topology};
use traffic::interval::{self, Interval};
use traffic::{CancellationToken, Receiver, Tally, Timeline, TrafficError};

use crate::backend::{data_addr, End, Hosts, Side};
use crate::error::{LabError, LabResult};
use crate::progress::Progress;
use crate::session;
use crate::tunnel_cpu::TunnelCpu;

/// The seed of the b→a way of a two-way run: not the a→b way's, so that a stream that
/// reached the wrong receiver would be refused by its header, not verified by chance.
const BIDIR_SEED: u64 = 0xb1d1_b1d1_b1d1_b1d1;

/// How often the watcher looks at the tallies: a closed interval is shown at most this late.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// What one transfer measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// For the report's `transfers`: the one way's, or in a two-way run both ways summed.
    pub transfer: Transfer,
    /// A two-way run's ways, a→b then b→a.
    pub ways: Option<[Transfer; 2]>,
    pub intervals: Vec<IntervalRecord>,
    pub omitted: Vec<Omitted>,
    /// `--rekey-every`: this transfer's rekeys, read off its 10 ms timeline.
    pub rekey: Option<model::rekey::RekeyRun>,
    /// When the first verified byte arrived, of either way, since the transfer started.
    pub first_byte: Option<Duration>,
}

/// The ways a plan's data takes.
pub fn directions(plan: &RunPlan) -> Vec<Direction> {
    if plan.workload().modes.bidir {
        vec![Direction::AToB, Direction::BToA]
    } else if plan.workload().reverse {
        vec![Direction::BToA]
    } else {
        vec![Direction::AToB]
    }
}

/// The timeline each way's bytes are tallied on.
pub fn timeline(plan: &RunPlan) -> Timeline {
    Timeline {
        every: plan.workload().modes.interval_s.map(Duration::from_secs_f64),
        omit: Duration::from_secs_f64(plan.workload().modes.omit_s),
        // What arrives after a timed sender's deadline joins the last interval.
        until: plan.workload().modes.time_s.map(Duration::from_secs_f64),
    }
}

/// One way under way, as the watcher sees it.
struct Way {
    direction: Direction,
    counter: traffic::Progress,
    /// Intervals already handed to the watcher.
    shown: usize,
}

/// One way's receiving and sending threads.
type Threads = (
    std::thread::JoinHandle<Result<TransferSide, TrafficError>>,
    std::thread::JoinHandle<Result<TransferSide, TrafficError>>,
);

/// The namespace of one end.
pub(crate) fn namespace(topology: &Topology, side: Side) -> &Namespace {
    match side {
        Side::A => &topology.a,
        Side::B => &topology.b,
    }
}

/// The sending end and the receiving end of one way.
pub(crate) fn ends_of(direction: Direction) -> (Side, Side) {
    match direction {
        Direction::AToB => (Side::A, Side::B),
        Direction::BToA => (Side::B, Side::A),
    }
}

/// Starts one way: the receiver bound before the sender starts, so the sender never races it.
fn start(
    plan: &RunPlan,
    topology: &Topology,
    hosts: Hosts,
    direction: Direction,
    counter: traffic::Progress,
    stop: &CancellationToken,
) -> LabResult<(Way, Threads)> {
    let (from, to) = ends_of(direction);
    let seed = match direction {
        Direction::BToA if plan.workload().modes.bidir => plan.workload().seed ^ BIDIR_SEED,
        _ => plan.workload().seed,
    };
    let config = traffic::TransferConfig {
        seed,
        ..session::transfer_config(plan)
    };
    let target: SocketAddr = data_addr(plan, hosts, to);
    let receiver = namespace(topology, to)
        .run(move || Receiver::bind(target, config.streams))?
        .map_err(LabError::failed)?;
    let (rx_counter, rx_stop, tx_stop) = (counter.clone(), stop.clone(), stop.clone());
    let receiving =
        namespace(topology, to).spawn("ipl-receiver", move || receiver.run(config, rx_counter, rx_stop))?;
    let sending =
        namespace(topology, from).spawn("ipl-sender", move || traffic::send(target, config, tx_stop))?;
    Ok((
        Way {
            direction,
            counter,
            shown: 0,
        },
        (receiving, sending),
    ))
}

/// Turns tallies' intervals into the report's records.
struct Recorder<'a> {
    plan: &'a RunPlan,
    attempt: u32,
    /// The ways' common epoch, as Unix time.
    unix_epoch: Duration,
    progress: &'a dyn Progress,
    records: Vec<IntervalRecord>,
    tunnel_cpu: Option<TunnelCpu>,
    /// xfrm: the SAs' byte counters when intervals were last reported.
    esp_bytes: Option<BTreeMap<String, u64>>,
}

impl Recorder<'_> {
    /// Whether any of `closed` is to be reported.
    fn wants(&self, closed: &[(Direction, Vec<Interval>)]) -> bool {
        self.plan.workload().modes.interval_s.is_some() && closed.iter().any(|(_, i)| !i.is_empty())
    }

    /// Records and shows the intervals that closed, each way's, with the tunnel's CPU and
    /// the SAs' bytes (`esp_now`) since the last ones.
    fn emit(&mut self, closed: Vec<(Direction, Vec<Interval>)>, esp_now: Option<BTreeMap<String, u64>>) {
        if !self.wants(&closed) {
            return;
        }
        let cpu = self
            .tunnel_cpu
            .as_mut()
            .map(TunnelCpu::sample)
            .unwrap_or_default();
        let esp = match (&self.esp_bytes, &esp_now) {
            (Some(before), Some(now)) => now
                .iter()
                .map(|(sa, n)| (sa.clone(), n.saturating_sub(before.get(sa).copied().unwrap_or(0))))
                .collect(),
            _ => BTreeMap::new(),
        };
        if esp_now.is_some() {
            self.esp_bytes = esp_now;
        }
        // Both ways' intervals in time order (a->b first where they start together), not
        // one way's and then the other's.
        let mut all: Vec<(Direction, Interval)> = closed
            .into_iter()
            .flat_map(|(direction, intervals)| intervals.into_iter().map(move |i| (direction, i)))
            .collect();
        all.sort_by_key(|(direction, i)| (i.start, i.end, *direction == Direction::BToA));
        for (direction, interval) in all {
            self.emit_one(direction, interval, &cpu, &esp);
        }
    }

    fn emit_one(
        &mut self,
        direction: Direction,
        i: Interval,
        cpu: &BTreeMap<String, f64>,
        esp: &BTreeMap<String, u64>,
    ) {
        let mb_per_s = i.mb_per_s();
        let mut streams = i.streams;
        // One stream has no breakdown; with several, every stream has a column, also one
        // that filed nothing yet.
        match self.plan.workload().parallel {
            0 | 1 => streams.clear(),
            n => streams.resize(usize::from(n), 0),
        }
        let record = IntervalRecord {
            transfer: self.attempt,
            direction: labelled(self.plan, direction),
            index: u32::try_from(i.index).unwrap_or(u32::MAX),
            start_s: i.start.as_secs_f64(),
            end_s: i.end.as_secs_f64(),
            bytes: i.bytes,
            mb_per_s,
            streams,
            omitted: i.omitted,
            timestamp: (self.unix_epoch + i.end).as_secs_f64(),
            tunnel_cpu: cpu.clone(),
            esp_bytes: esp.clone(),
        };
        self.progress.interval(&record);
        self.records.push(record);
    }
}

/// The direction as the report names it: a forward run's is left out.
fn labelled(plan: &RunPlan, direction: Direction) -> Option<Direction> {
    (plan.workload().modes.bidir || plan.workload().reverse).then_some(direction)
}

/// The ESP SAs' byte counters by way (`a->b`, `b->a`), from end a, where the run's ends are
/// xfrm's: a netlink request per SA, made only when intervals are reported.
async fn esp_bytes(ends: &[End]) -> Option<BTreeMap<String, u64>> {
    let Some(End::Xfrm(a)) = ends.first() else {
        return None;
    };
    let mut bytes = BTreeMap::new();
    // Several SAs go each way with --sas N or --per-cpu-sa: a way's bytes are all of theirs.
    for c in a.sa_counters().await.ok()? {
        let way = c.direction.split(' ').next().unwrap_or_default().to_string();
        *bytes.entry(way).or_default() += c.counters.bytes;
    }
    Some(bytes)
}

/// What every step of a local run works on: the two namespaces, the run's cancellation
/// (Ctrl-C) and whoever watches its progress.
#[derive(Clone, Copy)]
pub struct Bench<'a> {
    pub topology: &'a Topology,
    pub cancel: &'a CancellationToken,
    pub progress: &'a dyn Progress,
}

impl Bench<'_> {
    /// The two ends' outer (link) addresses.
    pub fn hosts(&self) -> Hosts {
        let ad = self.topology.addressing;
        Hosts {
            a: ad.outer_a,
            b: ad.outer_b,
        }
    }
}

/// One verified transfer of `plan`'s data, every way it takes, on a topology whose `ends`
/// are up. `label` names it on the progress bar.
pub async fn transfer(
    bench: Bench<'_>,
    plan: &RunPlan,
    ends: &[End],
    attempt: u32,
    label: String,
) -> LabResult<Measured> {
    let Bench {
        topology, progress, ..
    } = bench;
    let hosts = bench.hosts();
    // A way that failed to start stops the one already running (and a finished transfer's
    // token is cancelled harmlessly).
    let stop = bench.cancel.child_token();
    let _stop_on_return = stop.clone().drop_guard();
    let timeline = timeline(plan);
    let epoch = Instant::now();
    let unix_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut ways = Vec::new();
    let mut threads = Vec::new();
    let rekey = crate::backend::rekey(plan, ends)?;
    for direction in directions(plan) {
        let mut counter = traffic::Progress::new(timeline, epoch);
        if rekey.is_some() {
            counter = counter.with_fine();
        }
        let (way, started) = start(plan, topology, hosts, direction, counter, &stop)?;
        ways.push(way);
        threads.push(started);
    }
    let total = match plan.workload().modes.time_s {
        // A timed transfer's size is what gets through: the bar counts without a total.
        Some(_) => 0,
        None => plan.workload().bytes.0 * ways.len() as u64,
    };
    progress.transfer_started(&label, total);
    let seconds = plan.workload().modes.time_s.unwrap_or_default();
    let rekeyer = rekey
        .map(|r| crate::rekey::Rekeyer::start(r, epoch, seconds))
        .transpose()?;
    let mut recorder = Recorder {
        plan,
        attempt,
        unix_epoch,
        progress,
        records: Vec::new(),
        tunnel_cpu: plan
            .workload()
            .modes
            .interval_s
            .and_then(|_| TunnelCpu::for_backend(plan.backend())),
        esp_bytes: match plan.workload().modes.interval_s {
            Some(_) => esp_bytes(ends).await,
            None => None,
        },
    };
    let joined = tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|(rx, tx)| (rx.join(), tx.join()))
            .collect::<Vec<_>>()
    });
    tokio::pin!(joined);
    let results = loop {
        tokio::select! {
            done = &mut joined => break done.expect("join task"),
            // Why poll: the counters live in the transfer threads; a closed interval shows
            // at most WATCH_EVERY late, and the values are exact whenever they are read.
            _ = tokio::time::sleep(WATCH_EVERY) => {
                progress.transfer_bytes(ways.iter().map(|w| w.counter.bytes()).sum());
                let mut closed = Vec::new();
                for way in &mut ways {
                    let (now, tally) = way.counter.tally();
                    // Once every stream has its last byte the tally is final: the rest of
                    // this way goes now, the last interval cut at the last byte, in time
                    // order with the other way's, not after all of them.
                    let these = match tally.streams_done < plan.workload().parallel {
                        true => interval::closed(&timeline, &tally, now, way.shown),
                        false => interval::rest(&timeline, &tally, way.shown),
                    };
                    way.shown += these.len();
                    closed.push((way.direction, these));
                }
                let esp = if recorder.wants(&closed) { esp_bytes(ends).await } else { None };
                recorder.emit(closed, esp);
            }
        }
    };
    progress.transfer_finished();
    // Stopped before the results are read: an error below must not leave it switching keys.
    let switches = rekeyer.map(crate::rekey::Rekeyer::finish).transpose();
    let fine = ways_counters(&ways);
    let mut each = Vec::new();
    let mut omitted = Vec::new();
    let mut rests = Vec::new();
    for (way, (received, sent)) in ways.iter().zip(results) {
        let received = received.map_err(|_| LabError::failed(anyhow::anyhow!("receiver thread panicked")))?;
        let sent = sent.map_err(|_| LabError::failed(anyhow::anyhow!("sender thread panicked")))?;
        // The receiver's verdict comes first: it says *what* went wrong with the data; a
        // sender error is usually only the echo of the receiver closing.
        let received = received.map_err(|e| LabError::transfer("receiver", e))?;
        let sent = sent.map_err(|e| LabError::transfer("sender", e))?;
        let (_, tally) = way.counter.tally();
        rests.push((way.direction, interval::rest(&timeline, &tally, way.shown)));
        let mut transfer = session::record(plan, received, sent);
        if !timeline.omit.is_zero() {
            let (bytes, seconds) = leave_out_warm_up(plan, way.direction, &timeline, &tally, &mut transfer)?;
            omitted.push(Omitted {
                transfer: attempt,
                direction: labelled(plan, way.direction),
                bytes,
                seconds,
            });
        }
        each.push((transfer, tally));
    }
    let esp = if recorder.wants(&rests) {
        esp_bytes(ends).await
    } else {
        None
    };
    recorder.emit(rests, esp);
    let (transfer, ways) = match each.as_slice() {
        [(one, _)] => (one.clone(), None),
        [(ab, _), (ba, _)] => (both_ways(&timeline, &each), Some([ab.clone(), ba.clone()])),
        _ => unreachable!("a transfer goes one way or both"),
    };
    let rekey = match (switches?, fine) {
        (Some(switches), Some(timeline)) => Some(timeline.report(attempt, &switches)),
        _ => None,
    };
    let first_byte = each.iter().filter_map(|(_, t)| t.first_byte).min();
    Ok(Measured {
        transfer,
        ways,
        intervals: recorder.records,
        omitted,
        rekey,
        first_byte,
    })
}

/// The one way's 10 ms timeline (a rekey run has one way).
fn ways_counters(ways: &[Way]) -> Option<model::rekey::Timeline> {
    match ways {
        [one] => one.counter.fine(),
        _ => None,
    }
}

/// Takes the warm-up's bytes and time out of `transfer`'s figure; returns what was left out.
fn leave_out_warm_up(
    plan: &RunPlan,
    direction: Direction,
    timeline: &Timeline,
    tally: &Tally,
    transfer: &mut Transfer,
) -> LabResult<(u64, f64)> {
    let (bytes, length) = interval::warm_up(timeline, tally);
    let last = tally.last_byte.unwrap_or_default();
    if last <= timeline.omit {
        return Err(LabError::failed(anyhow::anyhow!(
            "the {direction} transfer ended {:.2} s in, inside --omit {}: nothing was left to measure; give a larger {} or a shorter --omit",
            last.as_secs_f64(),
            plan.workload().modes.omit_s,
            if plan.workload().modes.time_s.is_some() { "--time" } else { "--bytes" },
        )));
    }
    transfer.bytes -= bytes;
    transfer.seconds = (last - timeline.omit).as_secs_f64();
    Ok((bytes, length.as_secs_f64()))
}

/// Both ways of a two-way transfer as one: their bytes over the time from the first byte
/// either way (or the warm-up's end) to the last, and both sides' CPU added up.
fn both_ways(timeline: &Timeline, each: &[(Transfer, Tally)]) -> Transfer {
    let first = each
        .iter()
        .filter_map(|(_, t)| t.first_byte)
        .min()
        .unwrap_or_default();
    let last = each
        .iter()
        .filter_map(|(_, t)| t.last_byte)
        .max()
        .unwrap_or_default();
    let start = if timeline.omit.is_zero() {
        first
    } else {
        timeline.omit
    };
    let seconds = last.saturating_sub(start).as_secs_f64();
    let cpu = |pick: fn(&Transfer) -> CpuUsage| {
        let (user, system) = each.iter().fold((0.0, 0.0), |(u, s), (t, _)| {
            (u + pick(t).user_s, s + pick(t).system_s)
        });
        CpuUsage::new(user, system, seconds)
    };
    Transfer {
        bytes: each.iter().map(|(t, _)| t.bytes).sum(),
        seconds,
        streams: each.iter().map(|(t, _)| t.streams).sum(),
        verified: each.iter().all(|(t, _)| t.verified),
        sender_cpu: cpu(|t| t.sender_cpu),
        receiver_cpu: cpu(|t| t.receiver_cpu),
        sender_threads: each.iter().map(|(t, _)| t.sender_threads).sum(),
        receiver_threads: each.iter().map(|(t, _)| t.receiver_threads).sum(),
    }
}

/// The report's part of the modes, from every transfer's measurements; None for a forward
/// `--bytes` run, whose report stays as it was.
pub fn report(plan: &RunPlan, measured: &[Measured]) -> Option<ModesReport> {
    if plan.workload().modes.is_default() && !plan.workload().reverse {
        return None;
    }
    let bidir = plan.workload().modes.bidir.then(|| {
        let way = |i: usize| -> Vec<Transfer> {
            measured
                .iter()
                .filter_map(|m| m.ways.as_ref().map(|w| w[i].clone()))
                .collect()
        };
        let (ab, ba) = (way(0), way(1));
        let summary = |ts: &[Transfer]| {
            let rates: Vec<f64> = ts.iter().map(Transfer::mb_per_s).collect();
            Summary::of(&rates).unwrap_or_else(|| Summary::of(&[0.0]).expect("one value"))
        };
        Bidir {
            a_to_b_mb_per_s: summary(&ab),
            b_to_a_mb_per_s: summary(&ba),
            a_to_b: ab.into_iter().map(Into::into).collect(),
            b_to_a: ba.into_iter().map(Into::into).collect(),
        }
    });
    Some(ModesReport {
        direction: (plan.workload().reverse && !plan.workload().modes.bidir).then_some(Direction::BToA),
        intervals: measured.iter().flat_map(|m| m.intervals.clone()).collect(),
        omitted: measured.iter().flat_map(|m| m.omitted.clone()).collect(),
        bidir,
    })
}
