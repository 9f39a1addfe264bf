//! Round trips (`--latency`): a prober sends a small UDP probe through the data path once per
//! interval and a responder at the far end echoes it. Each round trip goes into the HDR
//! histogram of the phase its probe was sent in ("idle", "under TCP load", ...), read out at
//! the end as percentiles and a CDF ([`LatencyPhase`]).
//!
//! Blocking sockets on plain threads: [`Prober::start`] spawns its threads from the calling
//! thread and [`Responder::run`] runs on the calling thread, so both land in their caller's
//! network namespace. The protocol itself ([`Probe`], [`echo_for`] and the prober's book) does
//! no IO and is tested without sockets.
//!
//! # Wire format
//!
//! A probe and its echo are one datagram of [`PROBE_LEN`] = 32 bytes, integers big-endian:
//!
//! | bytes  | field          |                                                                   |
//! |--------|----------------|-------------------------------------------------------------------|
//! | 0..4   | magic          | `IPLP`                                                            |
//! | 4      | version        | 1                                                                 |
//! | 5      | kind           | 1: probe, 2: echo                                                 |
//! | 6..8   | phase          | the prober's phase when it sent the probe, from 0                 |
//! | 8..16  | sequence       | one per probe, from 0, running on across phases                   |
//! | 16..24 | `sent_ns`      | the prober's send time: ns since it started, monotonic            |
//! | 24..32 | `responder_ns` | 0 in a probe; in an echo, the responder's receive time (below)    |
//!
//! The responder's receive time is in ns since it was bound, on its own monotonic clock.
//! The responder sends the 32 bytes back with the kind set to echo and `responder_ns` filled
//! in; it never answers an echo, so two responders cannot bounce one datagram forever. The
//! round trip is the prober's receive time less its own record of the send time: one clock.
//! `responder_ns` is carried for one-way figures, which mean something only where both ends
//! read the same clock (one host); nothing here uses it.
//!
//! The prober takes an echo only from the target's address, of a probe it sent and has not
//! yet had answered, with the phase and send time it recorded; anything else is discarded and
//! counted by [`Discard`] reason, never counted as received.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use model::packets::{LatencyPhase, CDF_QUANTILES};
use tokio_util::sync::CancellationToken;

use crate::TrafficError;

/// Bytes of every probe and echo.
pub const PROBE_LEN: usize = 32;
const MAGIC: [u8; 4] = *b"IPLP";
const VERSION: u8 = 1;

/// The longest round trip the histograms hold: an echo later than this counts as lost, and
/// the prober forgets probes older than this (its memory stays bounded on a lossy path).
const LONGEST_RTT: Duration = Duration::from_secs(60);
/// 0.1 % resolution across the range (1 ns to 60 s, recorded in ns).
const SIGNIFICANT_DIGITS: u8 = 3;
/// How long a blocked receive waits before looking at its stop signal again.
const POLL: Duration = Duration::from_millis(50);
/// Bounds of the wait for echoes still on their way when the prober finishes; within them,
/// three times the longest round trip seen.
const MIN_GRACE: Duration = Duration::from_millis(200);
const MAX_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// From the prober, to be echoed.
    Probe,
    /// From the responder, back to the prober.
    Echo,
}

impl ProbeKind {
    fn to_wire(self) -> u8 {
        match self {
            ProbeKind::Probe => 1,
            ProbeKind::Echo => 2,
        }
    }

    fn from_wire(byte: u8) -> Option<ProbeKind> {
        match byte {
            1 => Some(ProbeKind::Probe),
            2 => Some(ProbeKind::Echo),
            _ => None,
        }
    }
}

/// One probe or echo, decoded (see the module doc for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub kind: ProbeKind,
    pub phase: u16,
    pub seq: u64,
    /// The prober's send time, ns since it started.
    pub sent_ns: u64,
    /// The responder's receive time, ns since it was bound; 0 in a probe.
    pub responder_ns: u64,
}

impl Probe {
    pub fn encode(&self) -> [u8; PROBE_LEN] {
        let mut out = [0u8; PROBE_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind.to_wire();
        out[6..8].copy_from_slice(&self.phase.to_be_bytes());
        out[8..16].copy_from_slice(&self.seq.to_be_bytes());
        out[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
        out[24..32].copy_from_slice(&self.responder_ns.to_be_bytes());
        out
    }

    pub fn decode(datagram: &[u8]) -> Result<Probe, Discard> {
        let bytes: &[u8; PROBE_LEN] = datagram.try_into().map_err(|_| Discard::Size)?;
        if bytes[0..4] != MAGIC {
            return Err(Discard::Magic);
        }
        if bytes[4] != VERSION {
            return Err(Discard::Version);
        }
        let kind = ProbeKind::from_wire(bytes[5]).ok_or(Discard::Kind)?;
        let u64_at = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(Probe {
            kind,
            phase: u16::from_be_bytes([bytes[6], bytes[7]]),
            seq: u64_at(8),
            sent_ns: u64_at(16),
            responder_ns: u64_at(24),
        })
    }
}

/// Why a datagram was dropped. Counted by reason, never fatal: stray traffic must not end a
/// measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Discard {
    /// Not [`PROBE_LEN`] bytes.
    Size,
    Magic,
    /// The magic, but another version of the format: the ends run different releases.
    Version,
    /// A kind byte that is neither probe nor echo.
    Kind,
    /// An echo where a probe belongs, or a probe where an echo does.
    Direction,
    /// From an address other than the one the run talks to.
    Foreign,
    /// An echo of a sequence number the prober never sent.
    NeverSent,
    /// An echo of a probe sent more than 60 s ago, beyond the histograms' reach (it already
    /// counts as lost).
    Expired,
    /// A second echo of a probe already answered.
    Duplicate,
    /// An echo whose phase or send time is not what was sent under its sequence number.
    Altered,
    /// A probe beyond the responder's rate ([`Responder::at_most`]).
    OverRate,
}

/// The responder's whole protocol: the echo to send back for `datagram`, received at
/// `responder_ns` on the responder's clock.
pub fn echo_for(datagram: &[u8], responder_ns: u64) -> Result<[u8; PROBE_LEN], Discard> {
    let probe = Probe::decode(datagram)?;
    if probe.kind != ProbeKind::Probe {
        return Err(Discard::Direction);
    }
    Ok(Probe {
        kind: ProbeKind::Echo,
        responder_ns,
        ..probe
    }
    .encode())
}

/// Datagrams dropped, by reason.
type Discards = BTreeMap<Discard, u64>;

fn count(discards: &mut Discards, why: Discard) {
    *discards.entry(why).or_default() += 1;
}

/// The address without IPv4-mapped IPv6 disguise, for comparing peers.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        IpAddr::V4(_) => ip,
    }
}

/// Receive errors that say nothing about the socket: a timeout (time to look at the stop
/// signal), a signal, or an ICMP error about an earlier datagram.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
    )
}

fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The far end: echoes probes back to where they came from.
pub struct Responder {
    socket: UdpSocket,
    local: SocketAddr,
    only_from: Option<IpAddr>,
    /// With `only_from`: the one source port the peer probes from.
    only_port: Option<u16>,
    /// Echoes a second at most, and a second's worth in a burst.
    per_second: Option<f64>,
    /// Zero of the clock `responder_ns` is read on.
    epoch: Instant,
}

impl Responder {
    pub fn bind(addr: SocketAddr) -> Result<Responder, TrafficError> {
        let io_error = |source| TrafficError::Io {
            action: "binding the latency responder to",
            peer: addr,
            source,
        };
        let socket = UdpSocket::bind(addr).map_err(io_error)?;
        // A bounded wait, so that `run` sees its stop signal within POLL.
        socket.set_read_timeout(Some(POLL)).map_err(io_error)?;
        let local = socket.local_addr().map_err(io_error)?;
        Ok(Responder {
            socket,
            local,
            only_from: None,
            only_port: None,
            per_second: None,
            epoch: Instant::now(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Echoes only probes from `peer`: a tunnel's end must not reflect datagrams from
    /// anyone at anyone (the source address of UDP is easily forged).
    pub fn only_from(self, peer: IpAddr) -> Responder {
        Responder {
            only_from: Some(unmapped(peer)),
            ..self
        }
    }

    /// Echoes only probes from source port `port` (of the `only_from` address): the port
    /// the peer said it probes from ([`Prober::start_from`]). Probes forged with the peer's
    /// address but another port are counted apart ([`Discard::Foreign`]) and take nothing
    /// of the budget ([`Responder::at_most`]), so they cannot starve the peer's own.
    pub fn only_from_port(self, port: u16) -> Responder {
        Responder {
            only_port: Some(port),
            ..self
        }
    }

    /// Echoes at most `per_second` probes a second (a burst of a second's worth): a server's
    /// bound on what a key holder makes it send, whatever rate it probes at.
    pub fn at_most(self, per_second: u32) -> Responder {
        Responder {
            per_second: Some(f64::from(per_second)),
            ..self
        }
    }

    /// Echoes every well-formed probe until `stop` is cancelled (noticed within 50 ms);
    /// returns how many it echoed. Malformed datagrams and those from other addresses are
    /// dropped and counted (logged at debug level when it stops).
    pub fn run(self, stop: CancellationToken) -> Result<u64, TrafficError> {
        // One byte more than a probe: a longer datagram is cut there, and still reads as
        // the wrong size rather than as a probe.
        let mut buf = [0u8; PROBE_LEN + 1];
        let mut echoed = 0u64;
        let mut send_failures = 0u64;
        let mut discards = Discards::new();
        let mut budget = self.per_second.map(|rate| TokenBucket::new(rate, Instant::now()));
        while !stop.is_cancelled() {
            let (len, from) = match self.socket.recv_from(&mut buf) {
                Ok(received) => received,
                Err(e) if is_transient(&e) => continue,
                Err(source) => {
                    return Err(TrafficError::Io {
                        action: "receiving latency probes on",
                        peer: self.local,
                        source,
                    })
                }
            };
            let responder_ns = nanos_since(self.epoch);
            // Before the budget: only the expected peer's probes take from it.
            if self.only_from.is_some_and(|peer| unmapped(from.ip()) != peer)
                || self.only_port.is_some_and(|port| from.port() != port)
            {
                count(&mut discards, Discard::Foreign);
                continue;
            }
            if budget.as_mut().is_some_and(|b| !b.take(Instant::now())) {
                count(&mut discards, Discard::OverRate);
                continue;
            }
            match echo_for(&buf[..len], responder_ns) {
                // A failed echo is a lost round trip, which the prober counts; the path may
                // recover (ENOBUFS under load), so keep going.
                Ok(echo) => match self.socket.send_to(&echo, from) {
                    Ok(_) => echoed += 1,
                    Err(_) => send_failures += 1,
                },
                Err(why) => count(&mut discards, why),
            }
        }
        tracing::debug!(
            "latency responder {}: echoed {echoed}, failed to send {send_failures}, dropped {discards:?}",
            self.local
        );
        Ok(echoed)
    }
}

/// `rate` tokens a second, holding a second's worth at most.
struct TokenBucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    fn new(rate: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            rate,
            tokens: rate,
            at: now,
        }
    }

    /// Takes a token if one is there at `now`.
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Round trips of one phase.
struct PhaseTally {
    name: String,
    load_pps: Option<f64>,
    sent: u64,
    received: u64,
    rtt_ns: Histogram<u64>,
}

/// A probe sent within the last [`LONGEST_RTT`].
struct InFlight {
    phase: u16,
    sent_ns: u64,
    answered: bool,
}

/// The prober's book, without sockets or clocks: which probe was sent when and in which
/// phase, and the round trips of the echoes that match.
struct RoundTrips {
    phases: Vec<PhaseTally>,
    /// Sequence number of `window[0]`.
    window_start: u64,
    /// Probes sent in the last LONGEST_RTT, in sequence order.
    window: VecDeque<InFlight>,
    /// Probes in `window` not answered yet.
    unanswered: u64,
    largest_rtt_ns: u64,
    discards: Discards,
}

impl RoundTrips {
    fn new() -> RoundTrips {
        RoundTrips {
            phases: Vec::new(),
            window_start: 0,
            window: VecDeque::new(),
            unanswered: 0,
            largest_rtt_ns: 0,
            discards: Discards::new(),
        }
    }

    /// # Panics
    ///
    /// Past 65 536 phases (the phase number is 16 bits on the wire).
    fn begin_phase(&mut self, name: &str, load_pps: Option<f64>) {
        assert!(
            self.phases.len() <= usize::from(u16::MAX),
            "too many latency phases"
        );
        let rtt_ns = Histogram::new_with_bounds(1, LONGEST_RTT.as_nanos() as u64, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        self.phases.push(PhaseTally {
            name: name.to_string(),
            load_pps,
            sent: 0,
            received: 0,
            rtt_ns,
        });
    }

    /// The next probe, recorded as sent at `now_ns` in the current phase; None before the
    /// first phase.
    fn next_probe(&mut self, now_ns: u64) -> Option<Probe> {
        let phase = self.phases.len().checked_sub(1)?;
        self.forget_before(now_ns.saturating_sub(LONGEST_RTT.as_nanos() as u64));
        let seq = self.window_start + self.window.len() as u64;
        let phase = u16::try_from(phase).expect("begin_phase keeps the phase within u16");
        self.window.push_back(InFlight {
            phase,
            sent_ns: now_ns,
            answered: false,
        });
        self.unanswered += 1;
        self.phases[usize::from(phase)].sent += 1;
        Some(Probe {
            kind: ProbeKind::Probe,
            phase,
            seq,
            sent_ns: now_ns,
            responder_ns: 0,
        })
    }

    /// Forgets probes sent before `oldest_ns`: their echoes, if any come, are too late.
    fn forget_before(&mut self, oldest_ns: u64) {
        while let Some(front) = self.window.front() {
            if front.sent_ns >= oldest_ns {
                break;
            }
            if !front.answered {
                self.unanswered -= 1;
            }
            self.window.pop_front();
            self.window_start += 1;
        }
    }

    /// Takes `datagram`, received at `now_ns`, as an echo: its round trip in ns, or why it
    /// was discarded (and counted).
    fn take_echo(&mut self, datagram: &[u8], now_ns: u64) -> Result<u64, Discard> {
        let taken = self.match_echo(datagram, now_ns);
        if let Err(why) = taken {
            count(&mut self.discards, why);
        }
        taken
    }

    fn match_echo(&mut self, datagram: &[u8], now_ns: u64) -> Result<u64, Discard> {
        let echo = Probe::decode(datagram)?;
        if echo.kind != ProbeKind::Echo {
            return Err(Discard::Direction);
        }
        let index = echo.seq.checked_sub(self.window_start).ok_or(Discard::Expired)?;
        let probe = usize::try_from(index)
            .ok()
            .and_then(|i| self.window.get_mut(i))
            .ok_or(Discard::NeverSent)?;
        if probe.answered {
            return Err(Discard::Duplicate);
        }
        if (probe.phase, probe.sent_ns) != (echo.phase, echo.sent_ns) {
            return Err(Discard::Altered);
        }
        probe.answered = true;
        self.unanswered -= 1;
        // A round trip of 0 ns is below the histogram's range; no real one is that short.
        let rtt_ns = now_ns.saturating_sub(probe.sent_ns).max(1);
        let phase = &mut self.phases[usize::from(probe.phase)];
        phase.received += 1;
        phase.rtt_ns.saturating_record(rtt_ns);
        self.largest_rtt_ns = self.largest_rtt_ns.max(rtt_ns);
        Ok(rtt_ns)
    }

    /// How long to wait for the echoes still on their way once sending stopped.
    fn grace(&self) -> Duration {
        (Duration::from_nanos(self.largest_rtt_ns) * 3).clamp(MIN_GRACE, MAX_GRACE)
    }

    fn into_phases(self) -> Vec<LatencyPhase> {
        self.phases.into_iter().map(summarize).collect()
    }
}

/// One phase's figures in ms. A phase that received nothing has every figure (and every
/// CDF point) 0.0, not NaN or a histogram's sentinel: `probes_received == 0` says why.
fn summarize(tally: PhaseTally) -> LatencyPhase {
    let h = &tally.rtt_ns;
    let ms = |ns: u64| if h.is_empty() { 0.0 } else { ns as f64 / 1e6 };
    let at = |quantile: f64| ms(h.value_at_quantile(quantile));
    LatencyPhase {
        load_pps: tally.load_pps,
        probes_sent: tally.sent,
        probes_received: tally.received,
        min_ms: ms(h.min()),
        p50_ms: at(0.5),
        p90_ms: at(0.9),
        p99_ms: at(0.99),
        p999_ms: at(0.999),
        max_ms: ms(h.max()),
        mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1e6 },
        cdf: CDF_QUANTILES.iter().map(|&q| (q, at(q))).collect(),
        name: tally.name,
    }
}

/// State the prober's threads and its handle share.
struct Shared {
    /// Zero of the prober's clock (`sent_ns`, round trips).
    epoch: Instant,
    book: Mutex<RoundTrips>,
    /// Signalled on every echo taken, so that `finish` stops waiting once none is missing.
    echoed: Condvar,
    stop_receiving: AtomicBool,
}

enum Command {
    /// The first phase began: start the schedule.
    Begin,
    Stop,
}

/// What the sending thread did.
struct Sent {
    ok: u64,
    failed: u64,
    first_error: Option<io::Error>,
}

/// Starts probers; a running one is a [`ProberHandle`].
pub enum Prober {}

impl Prober {
    /// Binds a socket (any local address, of `target`'s family) and spawns the prober's
    /// sending and receiving threads from the calling thread, so they share its network
    /// namespace. Nothing is sent until the first [`ProberHandle::phase`]; from then on one
    /// probe per `interval` on a fixed schedule.
    ///
    /// # Panics
    ///
    /// If `interval` is zero (the plan refuses it before anything starts).
    pub fn start(target: SocketAddr, interval: Duration) -> Result<ProberHandle, TrafficError> {
        Prober::start_from(0, target, interval)
    }

    /// As [`Prober::start`], probing from local port `port` (0: any): a responder told the
    /// port ([`Responder::only_from_port`]) echoes only probes from it.
    pub fn start_from(
        port: u16,
        target: SocketAddr,
        interval: Duration,
    ) -> Result<ProberHandle, TrafficError> {
        assert!(!interval.is_zero(), "latency probe interval must be positive");
        let io_error = |action| {
            move |source| TrafficError::Io {
                action,
                peer: target,
                source,
            }
        };
        let any: IpAddr = match target {
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let socket =
            UdpSocket::bind((any, port)).map_err(io_error("binding a socket for latency probes to"))?;
        // A bounded wait, so that the receiving thread sees its stop signal within POLL.
        socket
            .set_read_timeout(Some(POLL))
            .map_err(io_error("setting up latency probes to"))?;
        let local = socket
            .local_addr()
            .map_err(io_error("setting up latency probes to"))?;
        let receiving = socket
            .try_clone()
            .map_err(io_error("setting up latency probes to"))?;

        let shared = Arc::new(Shared {
            epoch: Instant::now(),
            book: Mutex::new(RoundTrips::new()),
            echoed: Condvar::new(),
            stop_receiving: AtomicBool::new(false),
        });
        let (commands, schedule) = mpsc::channel();
        let spawn_error = io_error("starting the threads of latency probes to");
        let receiver = std::thread::Builder::new()
            .name("latency-recv".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || receive_echoes(&receiving, target, &shared)
            })
            .map_err(spawn_error)?;
        let mut handle = ProberHandle {
            target,
            local,
            shared: Arc::clone(&shared),
            commands,
            sender: None,
            receiver: Some(receiver),
        };
        // On failure here, dropping the handle stops the receiving thread.
        let sender = std::thread::Builder::new()
            .name("latency-send".into())
            .spawn(move || send_paced(&socket, target, interval, &shared, &schedule))
            .map_err(spawn_error)?;
        handle.sender = Some(sender);
        Ok(handle)
    }
}

/// Sends one probe per `interval` from the first phase on, on an absolute schedule (slot k
/// is due at start + k × interval), so that the time each send takes does not add up into
/// drift.
fn send_paced(
    socket: &UdpSocket,
    target: SocketAddr,
    interval: Duration,
    shared: &Shared,
    commands: &mpsc::Receiver<Command>,
) -> Sent {
    let mut sent = Sent {
        ok: 0,
        failed: 0,
        first_error: None,
    };
    match commands.recv() {
        Ok(Command::Begin) => {}
        Ok(Command::Stop) | Err(_) => return sent,
    }
    let start = Instant::now();
    let mut slot: u32 = 0;
    loop {
        let due = start + interval * slot;
        // The wait for the next slot is also the wait for Stop (or for the handle to go).
        let command = match due.checked_duration_since(Instant::now()) {
            Some(wait) => commands.recv_timeout(wait),
            None => commands.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => mpsc::RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => mpsc::RecvTimeoutError::Disconnected,
            }),
        };
        match command {
            Err(mpsc::RecvTimeoutError::Timeout) | Ok(Command::Begin) => {}
            Ok(Command::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return sent,
        }
        let probe = {
            let mut book = shared.book.lock().expect("latency book lock");
            book.next_probe(nanos_since(shared.epoch))
                .expect("the schedule begins with the first phase")
        };
        // A probe that cannot be sent (ENOBUFS under load, a policy that blocks) counts as
        // lost, like one dropped on the way.
        match socket.send_to(&probe.encode(), target) {
            Ok(_) => sent.ok += 1,
            Err(e) => {
                sent.failed += 1;
                sent.first_error.get_or_insert(e);
            }
        }
        slot = slot.saturating_add(1);
        // Far behind (the thread was descheduled or the host suspended): skip the slots
        // missed instead of sending them in a burst, which would measure our own queue.
        let behind = start.elapsed();
        if behind > interval * slot + interval {
            let caught_up = behind.as_nanos() / interval.as_nanos() + 1;
            slot = u32::try_from(caught_up).unwrap_or(u32::MAX);
        }
    }
}

/// Takes echoes from `target` until told to stop; returns only on a socket error that a
/// retry would not cure.
fn receive_echoes(socket: &UdpSocket, target: SocketAddr, shared: &Shared) -> io::Result<()> {
    let target = (unmapped(target.ip()), target.port());
    // One byte more than an echo, so that a longer datagram still reads as the wrong size.
    let mut buf = [0u8; PROBE_LEN + 1];
    while !shared.stop_receiving.load(Ordering::Relaxed) {
        let (len, from) = match socket.recv_from(&mut buf) {
            Ok(received) => received,
            Err(e) if is_transient(&e) => continue,
            Err(e) => return Err(e),
        };
        let now_ns = nanos_since(shared.epoch);
        let mut book = shared.book.lock().expect("latency book lock");
        if (unmapped(from.ip()), from.port()) != target {
            count(&mut book.discards, Discard::Foreign);
        } else if book.take_echo(&buf[..len], now_ns).is_ok() {
            shared.echoed.notify_all();
        }
    }
    Ok(())
}

/// A running prober. Dropping it stops its threads; [`ProberHandle::finish`] also collects
/// the figures.
pub struct ProberHandle {
    target: SocketAddr,
    local: SocketAddr,
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    sender: Option<JoinHandle<Sent>>,
    receiver: Option<JoinHandle<io::Result<()>>>,
}

impl ProberHandle {
    /// The prober's own address (echoes come back to it).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Begins a phase: probes sent from now on count towards it. A probe still on its way
    /// counts for the phase it was sent in. The first call starts the sending.
    ///
    /// # Panics
    ///
    /// Past 65 536 phases (the phase number is 16 bits on the wire).
    pub fn phase(&self, name: &str, load_pps: Option<f64>) {
        let first = {
            let mut book = self.shared.book.lock().expect("latency book lock");
            book.begin_phase(name, load_pps);
            book.phases.len() == 1
        };
        if first {
            // Fails only if the sending thread is gone, which `finish` reports.
            let _ = self.commands.send(Command::Begin);
        }
    }

    /// Stops sending, waits for the echoes still on their way (3 × the longest round trip
    /// seen, at least 200 ms, at most 2 s; less once none is missing), and returns one
    /// summary per phase, in the order begun. Probes not echoed by then count as lost.
    pub fn finish(mut self) -> Result<Vec<LatencyPhase>, TrafficError> {
        let _ = self.commands.send(Command::Stop);
        let sent = match self.sender.take().map(JoinHandle::join) {
            Some(Ok(sent)) => Some(sent),
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => None,
        };
        let book = {
            let book = self.shared.book.lock().expect("latency book lock");
            let grace = book.grace();
            let (mut book, _) = self
                .shared
                .echoed
                .wait_timeout_while(book, grace, |book| book.unanswered > 0)
                .expect("latency book lock");
            std::mem::replace(&mut *book, RoundTrips::new())
        };
        self.shared.stop_receiving.store(true, Ordering::Relaxed);
        match self.receiver.take().map(JoinHandle::join) {
            Some(Ok(Ok(()))) | None => {}
            Some(Ok(Err(source))) => {
                return Err(TrafficError::Io {
                    action: "receiving latency echoes from",
                    peer: self.target,
                    source,
                })
            }
            Some(Err(panic)) => std::panic::resume_unwind(panic),
        }
        if let Some(sent) = sent {
            if let Some(source) = sent.first_error {
                // Every send failing is a broken setup (no route, wrong family), not loss.
                if sent.ok == 0 {
                    return Err(TrafficError::Io {
                        action: "sending latency probes to",
                        peer: self.target,
                        source,
                    });
                }
                tracing::warn!(
                    "{} of {} latency probes to {} could not be sent (counted as lost): {source}",
                    sent.failed,
                    sent.ok + sent.failed,
                    self.target
                );
            }
        }
        tracing::debug!("latency prober {}: dropped {:?}", self.local, book.discards);
        Ok(book.into_phases())
    }
}

impl Drop for ProberHandle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        self.shared.stop_receiving.store(true, Ordering::Relaxed);
        // Both threads notice within POLL; `finish` has already taken them.
        if let Some(sender) = self.sender.take() {
            let _ = sender.join();
        }
        if let Some(receiver) = self.receiver.take() {
            let _ = receiver.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

    fn probe(seq: u64) -> Probe {
        Probe {
            kind: ProbeKind::Probe,
            phase: 7,
            seq,
            sent_ns: 123_456_789,
            responder_ns: 0,
        }
    }

    /// The responder's answer to `probe`, as the prober receives it.
    fn echo_of(probe: Probe) -> [u8; PROBE_LEN] {
        echo_for(&probe.encode(), 42).expect("a probe is answered")
    }

    /// Runs a responder on a thread of its own until the returned token is cancelled.
    fn spawn_responder(responder: Responder) -> (CancellationToken, JoinHandle<Result<u64, TrafficError>>) {
        let stop = CancellationToken::new();
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || responder.run(stop)
        });
        (stop, thread)
    }

    fn assert_sane(phase: &LatencyPhase) {
        let figures = [
            phase.min_ms,
            phase.p50_ms,
            phase.p90_ms,
            phase.p99_ms,
            phase.p999_ms,
            phase.max_ms,
            phase.mean_ms,
        ];
        assert!(figures.iter().all(|v| v.is_finite() && *v >= 0.0), "{phase:?}");
        assert!(phase.min_ms <= phase.p50_ms, "{phase:?}");
        assert!(
            phase.p50_ms <= phase.p90_ms && phase.p90_ms <= phase.p99_ms,
            "{phase:?}"
        );
        assert!(
            phase.p99_ms <= phase.p999_ms && phase.p999_ms <= phase.max_ms,
            "{phase:?}"
        );
        assert!(
            phase.min_ms <= phase.mean_ms && phase.mean_ms <= phase.max_ms,
            "{phase:?}"
        );
        assert_eq!(phase.cdf.len(), CDF_QUANTILES.len());
        assert!(phase.cdf.windows(2).all(|w| w[0].1 <= w[1].1), "{:?}", phase.cdf);
        assert!(phase.probes_received <= phase.probes_sent, "{phase:?}");
    }

    #[test]
    fn probe_round_trips_through_its_wire_form() {
        let p = Probe {
            kind: ProbeKind::Echo,
            phase: 0xBEEF,
            seq: u64::MAX - 1,
            sent_ns: 1,
            responder_ns: 0x0102_0304_0506_0708,
        };
        let wire = p.encode();
        assert_eq!(&wire[0..8], b"IPLP\x01\x02\xBE\xEF");
        assert_eq!(&wire[24..32], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Probe::decode(&wire), Ok(p));
    }

    #[test]
    fn malformed_probes_are_refused_by_reason() {
        let good = probe(1).encode();
        assert_eq!(Probe::decode(&good[..31]), Err(Discard::Size));
        assert_eq!(
            Probe::decode(&[good.as_slice(), &[0]].concat()),
            Err(Discard::Size)
        );
        assert_eq!(Probe::decode(&[]), Err(Discard::Size));
        let altered = |at: usize, byte: u8| {
            let mut bad = good;
            bad[at] = byte;
            Probe::decode(&bad)
        };
        assert_eq!(altered(0, b'X'), Err(Discard::Magic));
        assert_eq!(altered(4, 2), Err(Discard::Version));
        assert_eq!(altered(5, 0), Err(Discard::Kind));
        assert_eq!(altered(5, 3), Err(Discard::Kind));
    }

    #[test]
    fn echo_keeps_the_probe_and_adds_the_responder_time() {
        let sent = probe(9);
        let echo = Probe::decode(&echo_for(&sent.encode(), 555).unwrap()).unwrap();
        assert_eq!(
            echo,
            Probe {
                kind: ProbeKind::Echo,
                responder_ns: 555,
                ..sent
            }
        );
        // An echo is never echoed: two responders must not bounce it forever.
        assert_eq!(echo_for(&echo.encode(), 1), Err(Discard::Direction));
        assert_eq!(echo_for(b"hello", 1), Err(Discard::Size));
    }

    #[test]
    fn book_takes_each_sent_probe_once_and_in_its_own_phase() {
        let mut book = RoundTrips::new();
        assert_eq!(book.next_probe(0), None, "nothing is sent before the first phase");
        book.begin_phase("idle", None);
        let first = book.next_probe(1_000).unwrap();
        let second = book.next_probe(2_000).unwrap();
        book.begin_phase("under load", Some(1e5));
        let third = book.next_probe(3_000).unwrap();
        assert_eq!((first.seq, second.seq, third.seq), (0, 1, 2));
        assert_eq!((first.phase, second.phase, third.phase), (0, 0, 1));

        // In flight across the switch: still the first phase's.
        assert_eq!(book.take_echo(&echo_of(second), 3_500), Ok(1_500));
        assert_eq!(book.take_echo(&echo_of(third), 4_000), Ok(1_000));
        assert_eq!(book.take_echo(&echo_of(third), 4_100), Err(Discard::Duplicate));
        assert_eq!(book.take_echo(&echo_of(probe(3)), 4_200), Err(Discard::NeverSent));
        assert_eq!(book.take_echo(&second.encode(), 4_300), Err(Discard::Direction));
        let moved = Probe { phase: 1, ..first };
        assert_eq!(book.take_echo(&echo_of(moved), 4_400), Err(Discard::Altered));
        let retimed = Probe { sent_ns: 1, ..first };
        assert_eq!(book.take_echo(&echo_of(retimed), 4_500), Err(Discard::Altered));
        assert_eq!(book.unanswered, 1, "the first probe is still missing");
        assert_eq!(book.discards.values().sum::<u64>(), 5);

        let phases = book.into_phases();
        let names: Vec<_> = phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["idle", "under load"]);
        assert_eq!((phases[0].probes_sent, phases[0].probes_received), (2, 1));
        assert_eq!((phases[1].probes_sent, phases[1].probes_received), (1, 1));
        assert_eq!(phases[1].load_pps, Some(1e5));
        // 1.5 µs and 1 µs, within the histogram's 3 significant digits.
        assert!((phases[0].p50_ms - 0.0015).abs() < 0.0015e-3, "{:?}", phases[0]);
        assert!((phases[1].max_ms - 0.001).abs() < 0.001e-3, "{:?}", phases[1]);
        phases.iter().for_each(assert_sane);
    }

    #[test]
    fn book_forgets_probes_older_than_the_histograms_reach() {
        let mut book = RoundTrips::new();
        book.begin_phase("idle", None);
        let old = book.next_probe(0).unwrap();
        let later = LONGEST_RTT.as_nanos() as u64 + 1;
        let new = book.next_probe(later).unwrap();
        assert_eq!(book.take_echo(&echo_of(old), later), Err(Discard::Expired));
        assert_eq!(book.unanswered, 1);
        assert!(book.take_echo(&echo_of(new), later + 10).is_ok());
        assert_eq!(book.unanswered, 0);
        let phase = &book.into_phases()[0];
        assert_eq!((phase.probes_sent, phase.probes_received), (2, 1));
    }

    #[test]
    fn phase_without_echoes_reads_zero_not_nan() {
        let mut book = RoundTrips::new();
        book.begin_phase("idle", None);
        book.next_probe(5).unwrap();
        let phase = &book.into_phases()[0];
        assert_eq!((phase.probes_sent, phase.probes_received), (1, 0));
        assert_sane(phase);
        assert_eq!(phase.max_ms, 0.0);
        assert!(phase.cdf.iter().all(|&(_, ms)| ms == 0.0));
    }

    #[test]
    fn grace_scales_with_the_longest_round_trip_within_bounds() {
        let mut book = RoundTrips::new();
        assert_eq!(book.grace(), MIN_GRACE);
        book.largest_rtt_ns = 100_000_000;
        assert_eq!(book.grace(), Duration::from_millis(300));
        book.largest_rtt_ns = 5_000_000_000;
        assert_eq!(book.grace(), MAX_GRACE);
    }

    #[test]
    fn loopback_round_trips_are_measured() {
        let responder = Responder::bind(LOOPBACK).unwrap();
        let target = responder.local_addr();
        let (stop, responder) = spawn_responder(responder.only_from(Ipv4Addr::LOCALHOST.into()));

        let interval = Duration::from_millis(5);
        let prober = Prober::start(target, interval).unwrap();
        let began = Instant::now();
        prober.phase("idle", None);
        std::thread::sleep(Duration::from_millis(300));
        let phases = prober.finish().unwrap();
        let slots = (began.elapsed().as_nanos() / interval.as_nanos()) as u64 + 1;
        stop.cancel();
        let echoed = responder.join().unwrap().unwrap();

        assert_eq!(phases.len(), 1);
        let idle = &phases[0];
        assert!(idle.probes_received > 0, "{idle:?}");
        // One at 0 ms, then every 5 ms, never ahead of the schedule; a loaded machine may
        // skip a few slots.
        assert!(
            (20..=slots).contains(&idle.probes_sent),
            "{slots} slots: {idle:?}"
        );
        assert_eq!(echoed, idle.probes_received, "all echoes on loopback arrive");
        assert!(idle.p50_ms > 0.0 && idle.max_ms < 1000.0, "{idle:?}");
        assert_sane(idle);
    }

    #[test]
    fn phases_come_back_in_the_order_begun() {
        let responder = Responder::bind(LOOPBACK).unwrap();
        let target = responder.local_addr();
        let (stop, responder) = spawn_responder(responder);

        let prober = Prober::start(target, Duration::from_millis(5)).unwrap();
        prober.phase("idle", None);
        std::thread::sleep(Duration::from_millis(150));
        prober.phase("under load", Some(2500.0));
        std::thread::sleep(Duration::from_millis(150));
        let phases = prober.finish().unwrap();
        stop.cancel();
        responder.join().unwrap().unwrap();

        let names: Vec<_> = phases.iter().map(|p| (p.name.as_str(), p.load_pps)).collect();
        assert_eq!(names, [("idle", None), ("under load", Some(2500.0))]);
        for phase in &phases {
            assert!(phase.probes_received > 0, "{phase:?}");
            assert_sane(phase);
        }
    }

    #[test]
    fn responder_for_another_peer_echoes_nothing() {
        let responder = Responder::bind(LOOPBACK).unwrap();
        let target = responder.local_addr();
        let elsewhere = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let (stop, responder) = spawn_responder(responder.only_from(elsewhere));

        let prober = Prober::start(target, Duration::from_millis(10)).unwrap();
        prober.phase("idle", None);
        std::thread::sleep(Duration::from_millis(100));
        let phases = prober.finish().unwrap();
        stop.cancel();

        assert_eq!(responder.join().unwrap().unwrap(), 0);
        let idle = &phases[0];
        assert!(idle.probes_sent > 0, "{idle:?}");
        assert_eq!(idle.probes_received, 0);
        assert_sane(idle);
        assert_eq!((idle.p50_ms, idle.max_ms, idle.mean_ms), (0.0, 0.0, 0.0));
    }

    /// A peer that is not the target, and a target that answers twice: neither adds a
    /// round trip.
    #[test]
    fn prober_takes_one_echo_per_probe_and_only_from_its_target() {
        let target = UdpSocket::bind(LOOPBACK).unwrap();
        target.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let impostor = UdpSocket::bind(LOOPBACK).unwrap();

        // Slow enough that only the first slot's probe goes out before `finish`.
        let prober = Prober::start(target.local_addr().unwrap(), Duration::from_secs(10)).unwrap();
        prober.phase("idle", None);
        let mut buf = [0u8; 64];
        let (len, from) = target.recv_from(&mut buf).unwrap();
        assert_eq!(from.port(), prober.local_addr().port());
        let echo = echo_for(&buf[..len], 1).unwrap();
        impostor.send_to(&echo, from).unwrap();
        target.send_to(&echo, from).unwrap();
        target.send_to(&echo, from).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let discards = prober.shared.book.lock().unwrap().discards.clone();
        let expected = Discards::from([(Discard::Foreign, 1), (Discard::Duplicate, 1)]);
        assert_eq!(discards, expected);
        let phases = prober.finish().unwrap();

        assert_eq!((phases[0].probes_sent, phases[0].probes_received), (1, 1));
        assert_sane(&phases[0]);
    }

    /// A second's worth in a burst, then the rate: a client probing faster gets no more.
    #[test]
    fn the_token_bucket_keeps_the_rate_it_states() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(100.0, start);
        let taken = (0..1000).filter(|_| bucket.take(start)).count();
        assert_eq!(taken, 100);
        // 50 ms later, 5 more; never more than a second's worth, however long it waited.
        let later = start + Duration::from_millis(50);
        assert_eq!((0..1000).filter(|_| bucket.take(later)).count(), 5);
        let much_later = later + Duration::from_secs(60);
        assert_eq!((0..1000).filter(|_| bucket.take(much_later)).count(), 100);
    }

    #[test]
    fn a_rate_capped_responder_drops_the_probes_beyond_its_rate() {
        let capped = Responder::bind(LOOPBACK).unwrap().at_most(10);
        let target = capped.local_addr();
        let (stop, responder) = spawn_responder(capped);
        let client = UdpSocket::bind(LOOPBACK).unwrap();
        client.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        for seq in 0..50 {
            let probe = Probe {
                kind: ProbeKind::Probe,
                phase: 0,
                seq,
                sent_ns: seq,
                responder_ns: 0,
            };
            client.send_to(&probe.encode(), target).unwrap();
        }
        let mut buf = [0u8; 64];
        let mut echoes = 0;
        while client.recv_from(&mut buf).is_ok() {
            echoes += 1;
        }
        stop.cancel();
        assert_eq!(responder.join().unwrap().unwrap(), echoes);
        assert_eq!(echoes, 10);
    }

    /// Issue 42: the responder's budget was shared with probes forged with the peer's
    /// address, so a flood of them left the peer's own probes unanswered. Now only probes
    /// from the port the peer probes from take from it; the rest are counted apart.
    #[test]
    fn forged_probes_from_the_peers_address_cannot_starve_its_own() {
        let real = UdpSocket::bind(LOOPBACK).unwrap();
        let port = real.local_addr().unwrap().port();
        let responder = Responder::bind(LOOPBACK)
            .unwrap()
            .only_from(LOOPBACK.ip())
            .only_from_port(port)
            .at_most(10);
        let target = responder.local_addr();
        let (stop, responder) = spawn_responder(responder);
        let probe = |seq| {
            Probe {
                kind: ProbeKind::Probe,
                phase: 0,
                seq,
                sent_ns: seq,
                responder_ns: 0,
            }
            .encode()
        };
        // The forger: the peer's address, another port, far past the budget.
        let forger = UdpSocket::bind(LOOPBACK).unwrap();
        for seq in 0..200 {
            forger.send_to(&probe(seq), target).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        for seq in 0..10 {
            real.send_to(&probe(seq), target).unwrap();
        }
        real.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut buf = [0u8; 64];
        let mut echoes = 0;
        while real.recv_from(&mut buf).is_ok() {
            echoes += 1;
        }
        forger.set_nonblocking(true).unwrap();
        assert!(forger.recv_from(&mut buf).is_err(), "a forged probe was echoed");
        stop.cancel();
        assert_eq!(responder.join().unwrap().unwrap(), 10);
        assert_eq!(echoes, 10);

        // The prober probes from the port it is given, for such a responder to know it.
        let free = UdpSocket::bind(LOOPBACK).unwrap().local_addr().unwrap().port();
        let prober = Prober::start_from(free, target, Duration::from_secs(10)).unwrap();
        assert_eq!(prober.local_addr().port(), free);
    }

    #[test]
    fn responder_stops_promptly_when_cancelled() {
        let (stop, responder) = spawn_responder(Responder::bind(LOOPBACK).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        let cancelled = Instant::now();
        stop.cancel();
        assert_eq!(responder.join().unwrap().unwrap(), 0);
        assert!(
            cancelled.elapsed() < Duration::from_millis(300),
            "{:?}",
            cancelled.elapsed()
        );
    }

    #[test]
    fn dropped_prober_stops_its_threads() {
        let sink = UdpSocket::bind(LOOPBACK).unwrap();
        let prober = Prober::start(sink.local_addr().unwrap(), Duration::from_millis(1)).unwrap();
        prober.phase("idle", None);
        let dropped = Instant::now();
        drop(prober);
        assert!(
            dropped.elapsed() < Duration::from_millis(300),
            "{:?}",
            dropped.elapsed()
        );
    }
}
