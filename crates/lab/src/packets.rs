//! Packets and latency between two namespaces whose ends are up: UDP trials (`--udp`), the
//! zero-loss search over them (`--find-ndr`), and round-trip probes (`--latency`) idle and
//! under the run's load.
//!
//! The sending, counting, searching and probing are crate `traffic`'s (`udp`, `ndr`,
//! `latency`); this places each side in its namespace, reads the lab link's counters and
//! names the latency phases. Trials run on blocking threads: a caller on the async runtime
//! goes through [`blocking`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use model::packets::{LatencyReport, NdrReport, OutsideDrops, UdpReport, UdpTrial};
use model::{RunPlan, Transfer};
use netns::{Namespace, Topology};
use traffic::latency::{Prober, ProberHandle, Responder};
use traffic::udp::{self, Receiver, SendConfig, Sender, Tally};
use traffic::CancellationToken;

use crate::backend::{data_addr, End, Side};
use crate::error::{LabError, LabResult};
use crate::flow::{self, namespace, Bench};
use crate::progress::Progress;

/// One probe per this interval: fine enough for p99.9 from a couple of seconds of load.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(1);
/// How long the idle phase probes before any load.
pub const IDLE_PROBING: Duration = Duration::from_secs(1);
/// The shares of the highest PDR (or NDR) found at which latency is also measured.
pub const LOADED_SHARES: [f64; 2] = [0.5, 0.9];

/// Runs `f` where it may block: on a worker of a multi-threaded runtime the others keep
/// serving (Ctrl-C's task among them); elsewhere it simply runs.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn veth(topology: &Topology, side: Side) -> &str {
    match side {
        Side::A => &topology.veth_a,
        Side::B => &topology.veth_b,
    }
}

/// The sending end and the receiving end of the run's (first) way.
fn sides(plan: &RunPlan) -> (Side, Side) {
    flow::ends_of(flow::directions(plan)[0])
}

/// A device's counters, from /proc/net/dev.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LinkCounters {
    rx_bytes: u64,
    rx_dropped: u64,
    tx_dropped: u64,
}

/// Every device's counters in `ns` but the loopback's, from the namespace's own
/// /proc/net/dev (the thread's namespace: /proc/thread-self, not /proc/self, which is the
/// process's).
fn devices(ns: &Namespace) -> Option<BTreeMap<String, LinkCounters>> {
    ns.run(|| {
        Some(parse_net_dev(
            &std::fs::read_to_string("/proc/thread-self/net/dev").ok()?,
        ))
    })
    .ok()
    .flatten()
}

/// A /proc/net/dev's devices but `lo`: receive bytes, packets, errs, drop, … then transmit
/// bytes, packets, errs, drop, ….
fn parse_net_dev(text: &str) -> BTreeMap<String, LinkCounters> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim_start().split_once(':')?;
            let fields: Vec<u64> = rest
                .split_whitespace()
                .map(|f| f.parse().ok())
                .collect::<Option<_>>()?;
            let counters = LinkCounters {
                rx_bytes: *fields.first()?,
                rx_dropped: *fields.get(3)?,
                tx_dropped: *fields.get(11)?,
            };
            (name != "lo").then(|| (name.to_string(), counters))
        })
        .collect()
}

/// What the trial's datagrams lost outside the tunnel, from the sending and receiving
/// namespaces' devices before and after (`veth_from`, `veth_to`: the link's ends) and the
/// receiving socket's own count.
fn outside_drops(
    before: [&BTreeMap<String, LinkCounters>; 2],
    after: [&BTreeMap<String, LinkCounters>; 2],
    veths: [&str; 2],
    receiver_socket: u64,
) -> OutsideDrops {
    let mut drops = OutsideDrops {
        receiver_socket,
        ..OutsideDrops::default()
    };
    for (i, veth) in veths.iter().enumerate() {
        for (name, now) in after[i] {
            let was = before[i].get(name).copied().unwrap_or_default();
            let (rx, tx) = (
                now.rx_dropped.saturating_sub(was.rx_dropped),
                now.tx_dropped.saturating_sub(was.tx_dropped),
            );
            match (name == veth, i) {
                // The link: what the sending end did not send, the receiving end dropped.
                (true, 0) => drops.link += tx,
                (true, _) => drops.link += rx,
                (false, _) => drops.tunnel_devices += rx + tx,
            }
        }
    }
    drops
}

/// What the socket bound to port `local` and connected to port `remote` in `ns` has dropped
/// (its receive buffer full), from the namespace's /proc/net/udp and udp6.
fn socket_drops(ns: &Namespace, local: u16, remote: u16) -> Option<u64> {
    ns.run(move || {
        ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"]
            .iter()
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .find_map(|text| parse_udp_drops(&text, local, remote))
    })
    .ok()
    .flatten()
}

/// The `drops` (last) field of the line of /proc/net/udp{,6} whose local and remote ports
/// (hex, after the address's colon) are `local` and `remote`.
fn parse_udp_drops(text: &str, local: u16, remote: u16) -> Option<u64> {
    let port = |address: &str| u16::from_str_radix(address.rsplit(':').next()?, 16).ok();
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let matches = port(fields.get(1)?) == Some(local) && port(fields.get(2)?) == Some(remote);
        matches.then(|| fields.last()?.parse().ok()).flatten()
    })
}

/// One UDP trial of `plan`'s datagrams at `pps` (None: unlimited) for `seconds`, and the
/// transfer its delivered payload makes.
pub fn trial(
    bench: Bench<'_>,
    plan: &RunPlan,
    rekeys: &Rekeys<'_>,
    pps: Option<f64>,
    seconds: f64,
) -> LabResult<(UdpTrial, Transfer)> {
    let workload = plan.workload().udp.expect("a UDP plan");
    let topology = bench.topology;
    let hosts = bench.hosts();
    let (from, to) = sides(plan);
    let (src, dst): (SocketAddr, SocketAddr) = (data_addr(plan, hosts, from), data_addr(plan, hosts, to));
    let family = plan.link().family;
    let seed = plan.workload().seed;
    // Both bound (and connected to each other) before anything is sent.
    let receiver = namespace(topology, to)
        .run(move || Receiver::bind(dst, src))?
        .map_err(|e| LabError::transfer("UDP receiver", e))?;
    let sender = namespace(topology, from)
        .run(move || Sender::bind(src, dst))?
        .map_err(|e| LabError::transfer("UDP sender", e))?;
    let before = (
        devices(namespace(topology, from)),
        devices(namespace(topology, to)),
    );
    let stop = bench.cancel.child_token();
    let _stop_on_return = stop.clone().drop_guard();
    let sender_done = CancellationToken::new();
    // A rekey run's timeline starts here, on the clock the datagrams carry.
    let (epoch, origin_ns) = (std::time::Instant::now(), udp::monotonic_ns());
    let rekey = crate::backend::rekey(plan, rekeys.ends)?;
    let mut tally = Tally::new(
        seed,
        workload.packet_size,
        family,
        udp::sequence_limit(pps, seconds),
    );
    if rekey.is_some() {
        tally = tally.with_buckets(origin_ns);
    }
    let receiving = {
        let (done, stop) = (sender_done.clone(), stop.clone());
        namespace(topology, to).spawn("ipl-udp-receiver", move || receiver.run(tally, &done, &stop))?
    };
    let config = SendConfig {
        seed,
        packet_size: workload.packet_size,
        family,
        pps,
        seconds,
    };
    let sending = {
        let stop = stop.clone();
        let counted = rekey.is_some().then_some(origin_ns);
        namespace(topology, from).spawn("ipl-udp-sender", move || {
            sender.run_counted(&config, &stop, counted)
        })
    };
    let rekeyer = rekey.map(|r| crate::rekey::Rekeyer::start(r, epoch, seconds));
    let sent = match sending {
        Ok(thread) => joined(thread, "UDP sender"),
        Err(e) => Err(e.into()),
    };
    // Read while the receiving socket is open (it closes with its thread); once nothing
    // is sent any more it drops nothing more.
    let socket_dropped = socket_drops(namespace(topology, to), dst.port(), src.port());
    // The receiver drains what is still on its way, then stops; after a failed send it
    // stops at once.
    if sent.is_err() {
        stop.cancel();
    }
    sender_done.cancel();
    let received = joined(receiving, "UDP receiver");
    let switches = rekeyer.map(|r| r?.finish()).transpose();
    if bench.cancel.is_cancelled() {
        return Err(LabError::interrupted());
    }
    let ((sent, buckets), tally) = (sent?, received?);
    if let (Some(switches), Some(timeline)) = (switches?, tally.timeline(buckets)) {
        let mut runs = rekeys.runs.borrow_mut();
        let n = runs.len() as u32 + 1;
        runs.push(timeline.report(n, &switches));
    }
    let counts = tally.counts();
    let mut trial = counts.trial(&sent, pps, family);
    let after = (
        devices(namespace(topology, from)),
        devices(namespace(topology, to)),
    );
    let veths = [veth(topology, from), veth(topology, to)];
    if let ((Some(from0), Some(to0)), (Some(from1), Some(to1))) = (&before, &after) {
        trial.link_bytes = to0
            .get(veths[1])
            .zip(to1.get(veths[1]))
            .map(|(was, now)| now.rx_bytes.saturating_sub(was.rx_bytes));
        // Each trial binds a new socket: its drops are this trial's.
        trial.outside_drops = socket_dropped.map(|s| outside_drops([from0, to0], [from1, to1], veths, s));
    }
    Ok((trial, counts.transfer(&sent)))
}

fn joined<T>(thread: std::thread::JoinHandle<Result<T, traffic::TrafficError>>, side: &str) -> LabResult<T> {
    thread
        .join()
        .map_err(|_| LabError::failed(anyhow::anyhow!("the {side} thread panicked")))?
        .map_err(|e| LabError::transfer(side, e))
}

/// What a UDP run measured: its report part and the transfers its MB/s come from.
pub struct UdpRun {
    pub report: UdpReport,
    pub transfers: Vec<Transfer>,
}

/// One UDP trial of a plan's datagrams at `pps` (None: unlimited) for `seconds`: its figures
/// and the transfer its delivered payload makes. Between namespaces [`trial`]; between two
/// hosts the client's, over the control channel.
pub type TrialFn<'a> = dyn FnMut(Option<f64>, f64) -> LabResult<(UdpTrial, Transfer)> + 'a;

/// A rekey run's (`--rekey-every`) ends, whose keys each trial replaces, and each trial's
/// rekeys as they are read off its timeline.
#[derive(Default)]
pub struct Rekeys<'a> {
    pub ends: &'a [End],
    pub runs: std::cell::RefCell<Vec<model::rekey::RekeyRun>>,
}

/// [`trial`] between the bench's namespaces, refused once the run is cancelled.
pub fn local_trial<'a>(
    bench: Bench<'a>,
    plan: &'a RunPlan,
    rekeys: &'a Rekeys<'a>,
) -> impl FnMut(Option<f64>, f64) -> LabResult<(UdpTrial, Transfer)> + 'a {
    move |pps, seconds| {
        if bench.cancel.is_cancelled() {
            return Err(LabError::interrupted());
        }
        trial(bench, plan, rekeys, pps, seconds)
    }
}

/// `plan`'s UDP trials: `--repeat` at its rate, or the `--find-ndr` search; with a prober,
/// a latency phase under each load (and, after a search, at shares of the rate it found).
pub fn run(
    plan: &RunPlan,
    prober: Option<&ProberHandle>,
    progress: &dyn Progress,
    trial: &mut TrialFn<'_>,
) -> LabResult<UdpRun> {
    let workload = plan.workload().udp.expect("a UDP plan");
    let mut transfers = Vec::new();
    let Some(search) = &plan.workload().ndr else {
        let pps = workload.rate.map(|r| r.pps(workload.packet_size));
        if let Some(p) = prober {
            p.phase("under UDP load", pps);
        }
        let mut trials = Vec::new();
        for attempt in 1..=plan.workload().repeat {
            let (t, transfer) = trial(pps, workload.seconds)?;
            progress.udp_trial("trial", &t);
            progress.note(&format!(
                "UDP trial {attempt}/{}: {}",
                plan.workload().repeat,
                trial_line(&t)
            ));
            trials.push(t);
            transfers.push(transfer);
        }
        return Ok(UdpRun {
            report: UdpReport {
                packet_size: workload.packet_size,
                trials,
                ndr: None,
                baseline: None,
            },
            transfers,
        });
    };
    if let Some(p) = prober {
        p.phase("during the search", None);
    }
    let ndr = search_ndr(plan, search, progress, trial, &mut transfers)?;
    if let Some(p) = prober {
        let best = ndr.bounds.iter().rev().find(|b| b.pps > 0.0);
        if let Some(bound) = best {
            for share in LOADED_SHARES {
                let pps = bound.pps * share;
                p.phase(&format!("at {:.0} % of {}", share * 100.0, bound.name), Some(pps));
                // The load for the probes; its figures are the search's to give.
                let (t, _) = trial(Some(pps), workload.seconds)?;
                progress.udp_trial("load for latency", &t);
            }
        }
    }
    Ok(UdpRun {
        report: UdpReport {
            packet_size: workload.packet_size,
            trials: Vec::new(),
            ndr: Some(ndr),
            baseline: None,
        },
        transfers,
    })
}

/// The `--find-ndr` search over `plan`'s path. The transfers of a search are the final
/// trials at the rates it found, one per bound that found one (the unlimited trial where
/// none did).
pub fn search_ndr(
    plan: &RunPlan,
    search: &model::packets::NdrSearch,
    progress: &dyn Progress,
    trial: &mut TrialFn<'_>,
    transfers: &mut Vec<Transfer>,
) -> LabResult<NdrReport> {
    let workload = plan.workload().udp.expect("a UDP plan");
    let label = plan.backend().name();
    let stage = match plan.backend() {
        model::Backend::Plain => "bare link NDR search",
        _ => "NDR search",
    };
    let mut done = Vec::new();
    let report = traffic::ndr::find(search, workload.packet_size, workload.seconds, |pps, seconds| {
        let (t, transfer) = trial(pps, seconds)?;
        progress.udp_trial(stage, &t);
        progress.note(&format!("{label} NDR search: {}", trial_line(&t)));
        done.push((t.clone(), transfer));
        Ok::<_, LabError>(t)
    })?;
    let before = transfers.len();
    for bound in &report.bounds {
        let found = done.iter().find(|(t, _)| Some(t) == bound.lower.as_ref());
        if let Some((_, transfer)) = found {
            transfers.push(transfer.clone());
        }
    }
    // No rate passed: the report still has a transfer, the sender's highest rate's.
    if transfers.len() == before {
        transfers.extend(done.into_iter().next().map(|(_, transfer)| transfer));
    }
    Ok(report)
}

/// One trial in a line: offered and delivered rates, and what went wrong.
pub fn trial_line(t: &UdpTrial) -> String {
    let offered = t.offered_pps.map_or("unlimited".to_string(), |p| {
        format!("{} pps", model::packets::si(p))
    });
    // Loss the tunnel's own counters cannot show: where the kernel dropped it outside.
    let outside = match t.outside_drops {
        Some(d) if t.lost > 0 => format!(" (outside the tunnel: {})", d.line()),
        _ => String::new(),
    };
    format!(
        "offered {offered}, sent {} pps, received {} pps, {} of {} lost ({:.3} %){outside}, {:.1} s",
        model::packets::si(t.sent_pps),
        model::packets::si(t.received_pps()),
        t.lost,
        t.sent,
        t.loss_pct(),
        t.send_seconds
    )
}

/// A running latency measurement: the far end's responder and this end's prober.
pub struct Latency {
    prober: Option<ProberHandle>,
    responder: Option<std::thread::JoinHandle<Result<u64, traffic::TrafficError>>>,
    stop: CancellationToken,
}

impl Latency {
    /// Starts the responder at end B and the prober at end A (as between two hosts, where
    /// the server is B), over the same data path as the run's data, then probes the idle
    /// path for [`IDLE_PROBING`].
    pub fn start(bench: Bench<'_>, plan: &RunPlan) -> LabResult<Latency> {
        let topology = bench.topology;
        let hosts = bench.hosts();
        let (from, to) = (Side::A, Side::B);
        let target = SocketAddr::new(data_addr(plan, hosts, to).ip(), plan.workload().probe_port());
        let source = data_addr(plan, hosts, from).ip();
        let responder = namespace(topology, to)
            .run(move || Responder::bind(target).map(|r| r.only_from(source)))?
            .map_err(|e| LabError::transfer("latency responder", e))?;
        let stop = bench.cancel.child_token();
        let responding = {
            let stop = stop.clone();
            namespace(topology, to).spawn("ipl-echo", move || responder.run(stop))?
        };
        let prober = namespace(topology, from)
            .run(move || Prober::start(target, PROBE_INTERVAL))?
            .map_err(|e| LabError::transfer("latency prober", e))?;
        prober.phase("idle", None);
        std::thread::sleep(IDLE_PROBING);
        Ok(Latency {
            prober: Some(prober),
            responder: Some(responding),
            stop,
        })
    }

    pub fn prober(&self) -> &ProberHandle {
        self.prober.as_ref().expect("probing until finish")
    }

    /// Stops probing and the responder: each phase's round trips.
    pub fn finish(mut self) -> LabResult<LatencyReport> {
        let phases = self
            .prober
            .take()
            .expect("finished once")
            .finish()
            .map_err(|e| LabError::transfer("latency prober", e))?;
        self.stop.cancel();
        if let Some(r) = self.responder.take() {
            joined(r, "latency responder")?;
        }
        Ok(LatencyReport {
            probe_interval_ms: PROBE_INTERVAL.as_secs_f64() * 1e3,
            phases,
        })
    }
}

impl Drop for Latency {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(rx_dropped: u64, tx_dropped: u64) -> LinkCounters {
        LinkCounters {
            rx_bytes: 0,
            rx_dropped,
            tx_dropped,
        }
    }

    #[test]
    fn devices_are_read_from_net_dev_but_the_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
                    face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n\
                    ipl-va: 123456  1000    0   17    0     0          0         0   654321    2000    0    5    0     0       0          0\n";
        let devices = parse_net_dev(text);
        assert_eq!(devices.len(), 1, "{devices:?}");
        assert_eq!(
            devices["ipl-va"],
            LinkCounters {
                rx_bytes: 123456,
                rx_dropped: 17,
                tx_dropped: 5
            }
        );
    }

    /// The link's drops are the sending veth's transmit and the receiving veth's receive
    /// drops; every other device's (a TUN queue full before the tunnel read it) apart.
    #[test]
    fn drops_are_told_apart_by_device() {
        let from0 = BTreeMap::from([
            ("va".to_string(), counters(0, 0)),
            ("tun-a".to_string(), counters(0, 0)),
        ]);
        let to0 = BTreeMap::from([("vb".to_string(), counters(3, 0))]);
        let from1 = BTreeMap::from([
            ("va".to_string(), counters(100, 2)),
            ("tun-a".to_string(), counters(0, 1191)),
        ]);
        let to1 = BTreeMap::from([("vb".to_string(), counters(10, 50))]);
        assert_eq!(
            outside_drops([&from0, &to0], [&from1, &to1], ["va", "vb"], 4),
            OutsideDrops {
                receiver_socket: 4,
                link: 2 + 7,
                tunnel_devices: 1191,
            }
        );
    }

    #[test]
    fn a_sockets_drops_are_found_by_its_ports() {
        // Local 10.0.0.2:5201 (0x1451) connected to 10.0.0.1:40000 (0x9C40), 812 dropped.
        let text = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                    \x20 12: 0200000A:1451 0100000A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 812\n\
                    \x20 13: 0200000A:1452 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 3\n";
        assert_eq!(parse_udp_drops(text, 5201, 40000), Some(812));
        assert_eq!(parse_udp_drops(text, 5202, 0), Some(3));
        assert_eq!(parse_udp_drops(text, 5201, 1), None);
    }

    #[test]
    fn a_trial_line_says_where_loss_outside_the_tunnel_went() {
        let sent = model::packets::SentDatagrams {
            sent: 100_000,
            seconds: 1.0,
            ..Default::default()
        };
        let mut t = model::packets::ReceivedDatagrams {
            received: 90_000,
            ..Default::default()
        }
        .trial(&sent, Some(100_000.0), model::Family::Ipv4);
        t.lost = 10_000;
        t.outside_drops = Some(OutsideDrops {
            receiver_socket: 9_800,
            link: 0,
            tunnel_devices: 200,
        });
        let line = trial_line(&t);
        assert!(
            line.contains(
                "lost (10.000 %) (outside the tunnel: 9800 at the receiving socket (its buffer full), 0 on the link, \
                 200 in the tunnel devices' queues (before the tunnel read them))"
            ),
            "{line}"
        );
    }
}
