//! Sender and receiver. Each stream has a thread of its own, so a multi-stream run is not
//! capped by one core of application work: a single-threaded tokio runtime there connects
//! or accepts and reads the header (waits with timeouts that Ctrl-C must cut short), and the
//! payload then moves with blocking calls ([`crate::bulk`] says why). The
//! stream threads are started by the calling thread, which may sit in a network namespace
//! (setns is per thread): a new thread starts in its creator's namespaces, so every socket
//! lands where the caller is. A side's CPU is its threads' CPU added up (the caller's
//! accepting and waiting included), so it is still exactly the side's cost.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use model::{CpuUsage, TransferSide};
use procstat::CpuTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::bulk::{BulkStream, Halt};
pub use crate::error::TrafficError;
use crate::error::MAX_FOREIGN_CONNECTIONS;
use crate::interval::{Tally, Timeline};
use crate::payload::{trailer, PayloadGenerator, TimedVerifier, Verifier, VerifyError};

/// Bytes handed to one write or read call: large enough to amortise system calls.
const CHUNK: usize = 256 * 1024;
const MAGIC: [u8; 4] = *b"IPLB";
/// Version of the stream header and of the payload after it: bumped when either changes,
/// so that ends of different releases refuse each other at the header instead of failing
/// verification at the first byte. Version 2: payload format 2; version 3: format 3 (see
/// [`crate::payload`]).
const VERSION: u16 = 3;
const HEADER_LEN: usize = 24;
/// The length a timed stream announces in its header: "until my trailer".
const TIMED_LEN: u64 = u64::MAX;

/// What both ends agree on before the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferConfig {
    pub seed: u64,
    pub total_bytes: u64,
    pub streams: u16,
    /// Longest silence tolerated (connect, accept, or between two reads) before giving up.
    pub idle_timeout: Duration,
    /// `--time`: every stream sends for this long from when it is connected, then closes
    /// with the count it sent; `total_bytes` is then not used.
    pub duration: Option<Duration>,
}

impl TransferConfig {
    /// Bytes stream `i` announces: an even split, the remainder on stream 0; a timed stream
    /// announces none (its trailer tells).
    pub fn stream_len(&self, i: u16) -> u64 {
        if self.duration.is_some() {
            return TIMED_LEN;
        }
        let n = u64::from(self.streams);
        self.total_bytes / n + if i == 0 { self.total_bytes % n } else { 0 }
    }
}

/// Bytes verified so far, shared with whoever draws a progress bar or reports intervals:
/// a total, and a tally per slice of a [`Timeline`] whose epoch is when this was made.
#[derive(Debug, Clone)]
pub struct Progress(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    bytes: AtomicU64,
    epoch: Instant,
    timeline: Timeline,
    book: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    tally: Tally,
    /// Per stream: when the oldest byte it has read but not yet filed arrived. Bytes are
    /// filed under their arrival time, so no slice from there on is final yet.
    held: std::collections::BTreeMap<u16, Duration>,
    /// A rekey run's 10 ms timeline (crate::fine).
    fine: Option<crate::fine::Arrivals>,
}

impl Default for Progress {
    fn default() -> Progress {
        Progress::new(Timeline::whole(), Instant::now())
    }
}

impl Progress {
    /// Counts on `timeline`, from `epoch` (the transfer's start, shared by both directions
    /// of a two-way run).
    pub fn new(timeline: Timeline, epoch: Instant) -> Progress {
        Progress(Arc::new(Shared {
            bytes: AtomicU64::new(0),
            epoch,
            timeline,
            book: Mutex::new(Book::default()),
        }))
    }

    /// Also keeps a 10 ms timeline of arrivals (a rekey run's; [`Progress::fine`]).
    pub fn with_fine(self) -> Progress {
        self.0.book.lock().expect("tally lock").fine = Some(crate::fine::Arrivals::default());
        self
    }

    /// The 10 ms timeline so far, where [`Progress::with_fine`] asked for one.
    pub fn fine(&self) -> Option<model::rekey::Timeline> {
        self.0
            .book
            .lock()
            .expect("tally lock")
            .fine
            .as_ref()
            .map(|f| f.timeline())
    }

    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    pub fn epoch(&self) -> Instant {
        self.0.epoch
    }

    pub fn timeline(&self) -> Timeline {
        self.0.timeline
    }

    /// The tally now, and when "now" was (since the epoch); `held_since` says from when on
    /// bytes that arrived may still be filed. Arrivals are stamped under the lock (see
    /// [`Progress::arrived`]), so the slices that ended before both are final.
    pub fn tally(&self) -> (Duration, Tally) {
        let book = self.0.book.lock().expect("tally lock");
        let mut tally = book.tally.clone();
        tally.held_since = book.held.values().min().copied();
        (self.0.epoch.elapsed(), tally)
    }

    /// Stamps bytes stream `stream` just read: their arrival time, taken under the lock and
    /// held until they are filed.
    fn arrived(&self, stream: u16) -> Instant {
        let mut book = self.0.book.lock().expect("tally lock");
        let now = Instant::now();
        let at = now.saturating_duration_since(self.0.epoch);
        book.held.entry(stream).or_insert(at);
        if let Some(fine) = &mut book.fine {
            fine.came(at);
        }
        now
    }

    /// Files `n` verified bytes of stream `stream` that arrived at `arrival`.
    fn file(&self, stream: u16, n: u64, arrival: Instant) {
        if n == 0 {
            return;
        }
        {
            let mut book = self.0.book.lock().expect("tally lock");
            let at = arrival.saturating_duration_since(self.0.epoch);
            let slice = self.0.timeline.slice_of(at);
            let tally = &mut book.tally;
            tally.add(stream, slice, n);
            tally.first_byte = Some(tally.first_byte.map_or(at, |f| f.min(at)));
            tally.last_byte = Some(tally.last_byte.map_or(at, |l| l.max(at)));
            if let Some(fine) = &mut book.fine {
                fine.delivered(at, n);
            }
        }
        self.0.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// What stream `stream` still holds unfiled now arrived at `oldest` (None: nothing).
    fn holding(&self, stream: u16, oldest: Option<Instant>) {
        let mut book = self.0.book.lock().expect("tally lock");
        match oldest {
            Some(t) => {
                book.held
                    .insert(stream, t.saturating_duration_since(self.0.epoch));
            }
            None => {
                book.held.remove(&stream);
            }
        }
    }

    fn stream_done(&self) {
        self.0.book.lock().expect("tally lock").tally.streams_done += 1;
    }
}

/// The receiving end, bound before the sender starts so that the sender never races it.
/// Stream i goes to port `base + i` (one listener each): flows that differ by their data
/// port are what policies (xfrm transport mode) and queue steering (a multi-queue tunnel)
/// tell apart.
pub struct Receiver {
    listeners: Vec<std::net::TcpListener>,
    /// Accept streams only from this address (a server takes data only from its client).
    only_from: Option<IpAddr>,
}

/// The address without IPv4-mapped IPv6 disguise, for comparing peers.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

impl Receiver {
    /// Listens on `addr` and the next `streams - 1` ports. With port 0 the kernel picks the
    /// first and the others follow it (tried again a few times where one is taken).
    pub fn bind(addr: SocketAddr, streams: u16) -> Result<Receiver, TrafficError> {
        let listen = |at: SocketAddr| {
            let io = |source| TrafficError::Io {
                action: "listen on",
                peer: at,
                source,
            };
            let l = std::net::TcpListener::bind(at).map_err(io)?;
            l.set_nonblocking(true).map_err(io)?;
            Ok::<_, TrafficError>(l)
        };
        let attempts = if addr.port() == 0 { 20 } else { 1 };
        let mut last = None;
        for _ in 0..attempts {
            let first = listen(addr)?;
            let base = first.local_addr().expect("bound socket has an address");
            let mut listeners = vec![first];
            for i in 1..streams {
                let Some(port) = base.port().checked_add(i) else {
                    break;
                };
                match listen(SocketAddr::new(base.ip(), port)) {
                    Ok(l) => listeners.push(l),
                    Err(e) => {
                        last = Some(e);
                        break;
                    }
                }
            }
            if listeners.len() == usize::from(streams.max(1)) {
                return Ok(Receiver {
                    listeners,
                    only_from: None,
                });
            }
        }
        Err(last.unwrap_or(TrafficError::Io {
            action: "listen on",
            peer: addr,
            source: std::io::Error::other("no room for a port per stream"),
        }))
    }

    /// Closes connections from any address but `peer` unread; they count for nothing.
    pub fn only_from(self, peer: IpAddr) -> Receiver {
        Receiver {
            only_from: Some(canonical(peer)),
            ..self
        }
    }

    /// Where stream 0 connects (stream i: this port + i).
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0]
            .local_addr()
            .expect("bound socket has an address")
    }

    /// Accepts `config.streams` connections and verifies each stream to its last byte.
    pub fn run(
        self,
        config: TransferConfig,
        progress: Progress,
        cancel: CancellationToken,
    ) -> Result<TransferSide, TrafficError> {
        let started_cpu = CpuTime::this_thread();
        let wall = Instant::now();
        // Cancelled by Ctrl-C, or by the first stream that fails, so the others stop too.
        let stop = cancel.child_token();
        let halt = Halt::default();
        let mut threads: Vec<StreamThread<StreamResult>> = Vec::new();
        let local = self.local_addr();
        let Receiver { listeners, only_from } = self;
        let accepted = block_on(stop.clone(), async {
            let listeners = listeners
                .into_iter()
                .map(TcpListener::from_std)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| TrafficError::Io {
                    action: "listen on",
                    peer: local,
                    source,
                })?;
            let accept_any = || async {
                let accepts = listeners.iter().map(|l| Box::pin(l.accept()));
                futures::future::select_all(accepts).await.0
            };
            let mut seen = vec![false; usize::from(config.streams)];
            let mut foreign = 0;
            while threads.len() < usize::from(config.streams) {
                let (mut stream, peer) =
                    with_timeout(config.idle_timeout, "accept on", local, accept_any()).await?;
                if only_from.is_some_and(|only| only != canonical(peer.ip())) {
                    foreign += 1;
                    tracing::debug!("receiver {local}: closed a connection from {peer}: not the run's peer");
                    if foreign > MAX_FOREIGN_CONNECTIONS {
                        return Err(TrafficError::Foreign { local, peer });
                    }
                    continue;
                }
                let header = read_header(&mut stream, peer, &config, &mut seen).await?;
                let io = move |source| TrafficError::Io {
                    action: "hand over the stream from",
                    peer,
                    source,
                };
                let stream = stream.into_std().map_err(io)?;
                let (own, halt, progress) = (stop.clone(), halt.clone(), progress.clone());
                let thread = spawn_stream(format!("ipl-recv-{}", header.index), &stop, move || {
                    let stream = BulkStream::new(stream, peer, config.idle_timeout, own, halt)?;
                    receive_stream(stream, config, header, progress)
                })
                .map_err(io)?;
                threads.push(thread);
            }
            Ok(())
        });
        let outcomes = join_streams(threads, &stop, &halt);
        let mut first: Option<Instant> = None;
        let mut last: Option<Instant> = None;
        let mut bytes = 0;
        let mut cpu = CpuTime::this_thread().since(started_cpu);
        let mut error = accepted.err();
        for outcome in outcomes {
            cpu = cpu.plus(outcome.cpu);
            match outcome.result {
                Ok(stream) => {
                    bytes += stream.bytes;
                    first = Some(first.map_or(stream.first_byte, |f| f.min(stream.first_byte)));
                    last = Some(last.map_or(stream.last_byte, |l| l.max(stream.last_byte)));
                }
                Err(e) => error = Some(first_cause(error, e)),
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        let seconds = match (first, last) {
            (Some(f), Some(l)) => l.duration_since(f).as_secs_f64(),
            _ => 0.0,
        };
        Ok(TransferSide {
            bytes,
            seconds,
            cpu: usage(cpu, wall.elapsed().as_secs_f64()),
            threads: config.streams,
        })
    }
}

/// What one stream's thread did, and the CPU it took.
struct StreamOutcome<T = StreamResult> {
    result: Result<T, TrafficError>,
    cpu: CpuTime,
}

/// A stream's thread, and a token cancelled when it ends (however it ends).
struct StreamThread<T> {
    handle: std::thread::JoinHandle<StreamOutcome<T>>,
    finished: CancellationToken,
}

/// Starts a thread named `name` for one stream's `work`; a failure stops the other streams.
fn spawn_stream<T: Send + 'static>(
    name: String,
    stop: &CancellationToken,
    work: impl FnOnce() -> Result<T, TrafficError> + Send + 'static,
) -> std::io::Result<StreamThread<T>> {
    let finished = CancellationToken::new();
    let on_exit = finished.clone().drop_guard();
    let stop = stop.clone();
    let handle = std::thread::Builder::new().name(name).spawn(move || {
        let _on_exit = on_exit;
        let cpu0 = CpuTime::this_thread();
        let result = work();
        if result.is_err() {
            stop.cancel();
        }
        StreamOutcome {
            result,
            cpu: CpuTime::this_thread().since(cpu0),
        }
    })?;
    Ok(StreamThread { handle, finished })
}

/// Joins every stream thread. Until they have all ended this thread watches `stop`
/// (Ctrl-C, or a stream that failed): then `halt` ends the others' calls at once, even
/// those blocked in a socket. A thread that panicked is a bug, passed on.
fn join_streams<T>(
    threads: Vec<StreamThread<T>>,
    stop: &CancellationToken,
    halt: &Halt,
) -> Vec<StreamOutcome<T>> {
    {
        let all_ended = futures::future::join_all(threads.iter().map(|t| t.finished.cancelled()));
        let stopped = stop.cancelled();
        futures::pin_mut!(all_ended, stopped);
        let first = futures::executor::block_on(futures::future::select(all_ended, stopped));
        if let futures::future::Either::Right(_) = first {
            halt.stop();
        }
    }
    threads
        .into_iter()
        .map(|t| {
            t.handle.join().unwrap_or_else(|panic| {
                halt.stop();
                std::panic::resume_unwind(panic)
            })
        })
        .collect()
}

/// The error to report of two: the one that is not a consequence of the other (a stream
/// stopped because another failed reports `Cancelled`).
fn first_cause(kept: Option<TrafficError>, new: TrafficError) -> TrafficError {
    match kept {
        Some(TrafficError::Cancelled) | None => new,
        Some(kept) => kept,
    }
}

/// Connects `config.streams` times, stream i to `peer`'s port + i, and sends each stream's
/// share of the payload.
pub fn send(
    peer: SocketAddr,
    config: TransferConfig,
    cancel: CancellationToken,
) -> Result<TransferSide, TrafficError> {
    let started_cpu = CpuTime::this_thread();
    let wall = Instant::now();
    let stop = cancel.child_token();
    let halt = Halt::default();
    let mut threads = Vec::with_capacity(usize::from(config.streams));
    let mut error = None;
    for i in 0..config.streams {
        let (own, halt) = (stop.clone(), halt.clone());
        let spawned = spawn_stream(format!("ipl-send-{i}"), &stop, move || {
            send_stream(peer, config, i, &own, halt)
        });
        match spawned {
            Ok(t) => threads.push(t),
            Err(source) => {
                stop.cancel();
                error = Some(TrafficError::Io {
                    action: "start a stream thread for",
                    peer,
                    source,
                });
                break;
            }
        }
    }
    let mut bytes = 0;
    let mut cpu = CpuTime::default();
    for outcome in join_streams(threads, &stop, &halt) {
        cpu = cpu.plus(outcome.cpu);
        match outcome.result {
            Ok(n) => bytes += n,
            Err(e) => error = Some(first_cause(error, e)),
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    let seconds = wall.elapsed().as_secs_f64();
    Ok(TransferSide {
        bytes,
        seconds,
        cpu: usage(cpu.plus(CpuTime::this_thread().since(started_cpu)), seconds),
        threads: config.streams,
    })
}

fn send_stream(
    base: SocketAddr,
    config: TransferConfig,
    index: u16,
    stop: &CancellationToken,
    halt: Halt,
) -> Result<u64, TrafficError> {
    let peer = SocketAddr::new(base.ip(), base.port().wrapping_add(index));
    let len = config.stream_len(index);
    let stream = block_on(stop.clone(), connect_and_greet(peer, config, index, len))?;
    let mut stream = BulkStream::new(stream, peer, config.idle_timeout, stop.clone(), halt)?;
    let mut generator = PayloadGenerator::new(config.seed, index);
    // A timed stream's clock starts once it is connected, as iperf3's: a slow connect (a
    // SYN retransmitted after a second) does not eat into the time asked for.
    if let Some(deadline) = config.duration.map(|d| Instant::now() + d) {
        let sent = send_until(&mut stream, &mut generator, deadline)?;
        stream.write(&trailer(sent), None)?;
        stream.close()?;
        return Ok(sent);
    }
    let mut left = len;
    while left > 0 {
        // Written from the generator's own buffer: the payload is never copied in user space.
        let chunk = generator.next_chunk(CHUNK.min(left as usize));
        stream.write(chunk, None)?;
        left -= chunk.len() as u64;
    }
    stream.close()?;
    Ok(len)
}

/// Connects stream `index` to `peer` and sends its header, announcing `len` bytes.
async fn connect_and_greet(
    peer: SocketAddr,
    config: TransferConfig,
    index: u16,
    len: u64,
) -> Result<std::net::TcpStream, TrafficError> {
    let io = |action| move |source| TrafficError::Io { action, peer, source };
    let mut stream = with_timeout(config.idle_timeout, "connect to", peer, TcpStream::connect(peer)).await?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&VERSION.to_be_bytes());
    header[6..8].copy_from_slice(&index.to_be_bytes());
    header[8..16].copy_from_slice(&config.seed.to_be_bytes());
    header[16..24].copy_from_slice(&len.to_be_bytes());
    with_timeout(
        config.idle_timeout,
        "send header to",
        peer,
        stream.write_all(&header),
    )
    .await?;
    stream.into_std().map_err(io("hand over the stream to"))
}

/// Sends the payload until `deadline`; returns how many bytes went. The write under way at
/// the deadline gives up then and reports what it wrote, so the count is exact.
fn send_until(
    stream: &mut BulkStream,
    generator: &mut PayloadGenerator,
    deadline: Instant,
) -> Result<u64, TrafficError> {
    let mut sent = 0u64;
    loop {
        let buf = generator.next_chunk(CHUNK);
        let n = stream.write(buf, Some(deadline))?;
        sent += n as u64;
        if n < buf.len() {
            return Ok(sent);
        }
    }
}

/// What a sender announces at the start of each connection.
struct StreamHeader {
    index: u16,
    len: u64,
}

/// Reads a stream header and checks it belongs to this run and is not a duplicate.
async fn read_header(
    stream: &mut TcpStream,
    peer: SocketAddr,
    config: &TransferConfig,
    seen: &mut [bool],
) -> Result<StreamHeader, TrafficError> {
    let mut header = [0u8; HEADER_LEN];
    with_timeout(
        config.idle_timeout,
        "read header from",
        peer,
        stream.read_exact(&mut header),
    )
    .await?;
    let bad = |reason: String| TrafficError::Header { peer, reason };
    if header[..4] != MAGIC {
        return Err(bad("not an ipsec-lab stream".into()));
    }
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(TrafficError::Version {
            peer,
            got: version,
            supported: VERSION,
        });
    }
    let index = u16::from_be_bytes([header[6], header[7]]);
    let seed = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));
    let len = u64::from_be_bytes(header[16..24].try_into().expect("8 bytes"));
    if index >= config.streams || std::mem::replace(&mut seen[usize::from(index)], true) {
        return Err(bad(format!("unexpected or repeated stream index {index}")));
    }
    if seed != config.seed || len != config.stream_len(index) {
        return Err(bad(format!(
            "stream {index} announces seed {seed:#x} and {len} bytes, not this run's"
        )));
    }
    Ok(StreamHeader { index, len })
}

struct StreamResult {
    bytes: u64,
    first_byte: Instant,
    last_byte: Instant,
}

fn receive_stream(
    mut stream: BulkStream,
    config: TransferConfig,
    header: StreamHeader,
    progress: Progress,
) -> Result<StreamResult, TrafficError> {
    let mut verifier = if header.len == TIMED_LEN {
        StreamVerifier::Timed(TimedVerifier::new(config.seed, header.index))
    } else {
        StreamVerifier::Sized(Verifier::new(config.seed, header.index, header.len))
    };
    let mut buf = vec![0u8; CHUNK];
    let mut first_byte = None;
    let mut last_byte = Instant::now();
    // Reads not yet filed in full: (arrival, the stream's length after it). A timed stream
    // holds its last TRAILER_LEN bytes back until the next read or its end; they count at
    // the time they arrived, not at the trailer's, which may come later.
    let mut unfiled: std::collections::VecDeque<(Instant, u64)> = Default::default();
    let (mut read, mut filed) = (0u64, 0u64);
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let arrival = progress.arrived(header.index);
        read += n as u64;
        unfiled.push_back((arrival, read));
        verifier.check(&buf[..n])?;
        let verified = verifier.verified();
        while filed < verified {
            let &(at, end) = unfiled.front().expect("verified bytes were read");
            let upto = end.min(verified);
            progress.file(header.index, upto - filed, at);
            first_byte.get_or_insert(at);
            last_byte = at;
            filed = upto;
            if end <= verified {
                unfiled.pop_front();
            }
        }
        progress.holding(header.index, unfiled.front().map(|&(at, _)| at));
    }
    let bytes = verifier.finish()?;
    progress.holding(header.index, None);
    progress.stream_done();
    // Our FIN must reach the sender while the tunnel still stands: a run tears its tunnel down
    // as soon as both ends report, and a FIN caught in a torn-down TUN queue leaves the
    // socket in LAST-ACK on the receiving host for minutes.
    stream.close()?;
    stream.wait_until_closed(FIN_ACK_WAIT);
    Ok(StreamResult {
        bytes,
        first_byte: first_byte.unwrap_or(last_byte),
        last_byte,
    })
}

/// A stream of announced length, or a timed one that ends with its trailer.
enum StreamVerifier {
    Sized(Verifier),
    Timed(TimedVerifier),
}

impl StreamVerifier {
    fn check(&mut self, chunk: &[u8]) -> Result<(), VerifyError> {
        match self {
            StreamVerifier::Sized(v) => v.check(chunk),
            StreamVerifier::Timed(v) => v.check(chunk),
        }
    }

    fn verified(&self) -> u64 {
        match self {
            StreamVerifier::Sized(v) => v.verified(),
            StreamVerifier::Timed(v) => v.verified(),
        }
    }

    fn finish(&self) -> Result<u64, VerifyError> {
        match self {
            StreamVerifier::Sized(v) => v.finish(),
            StreamVerifier::Timed(v) => v.finish(),
        }
    }
}

/// How long a receiver waits for its FIN to be acknowledged before it reports anyway.
const FIN_ACK_WAIT: Duration = Duration::from_secs(2);

async fn with_timeout<T>(
    limit: Duration,
    action: &'static str,
    peer: SocketAddr,
    work: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, TrafficError> {
    match tokio::time::timeout(limit, work).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(TrafficError::Io { action, peer, source }),
        Err(_) => Err(TrafficError::Timeout {
            action,
            peer,
            seconds: limit.as_secs(),
        }),
    }
}

/// Runs `work` on a fresh single-threaded runtime on this thread, giving up when `cancel`
/// fires (Ctrl-C): dropping the future closes the sockets, which ends the peer's side too.
fn block_on<T>(
    cancel: CancellationToken,
    work: impl std::future::Future<Output = Result<T, TrafficError>>,
) -> Result<T, TrafficError> {
    // Not infallible: it needs descriptors (epoll, an eventfd), and a server at its limit
    // has none to spare; that is a failed transfer, not a panic.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(TrafficError::Runtime)?;
    runtime.block_on(async {
        tokio::select! {
            result = work => result,
            _ = cancel.cancelled() => Err(TrafficError::Cancelled),
        }
    })
}

/// As the report carries it, over `wall_s` seconds.
fn usage(cpu: CpuTime, wall_s: f64) -> CpuUsage {
    CpuUsage::new(cpu.user_s, cpu.system_s, wall_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(total_bytes: u64, streams: u16) -> TransferConfig {
        TransferConfig {
            seed: 99,
            total_bytes,
            streams,
            idle_timeout: Duration::from_secs(10),
            duration: None,
        }
    }

    fn loopback_transfer(cfg: TransferConfig) -> (Result<TransferSide, TrafficError>, TransferSide) {
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let progress = Progress::default();
        let rx = std::thread::spawn(move || receiver.run(cfg, progress, CancellationToken::new()));
        let sent = send(addr, cfg, CancellationToken::new()).unwrap();
        (rx.join().unwrap(), sent)
    }

    #[test]
    fn streams_split_the_payload_exactly() {
        let cfg = config(1_000_003, 4);
        assert_eq!((0..4).map(|i| cfg.stream_len(i)).sum::<u64>(), 1_000_003);
    }

    #[test]
    fn verified_transfer_over_loopback() {
        for streams in [1, 3] {
            let (received, sent) = loopback_transfer(config(5_000_001, streams));
            let received = received.unwrap();
            assert_eq!(received.bytes, 5_000_001);
            assert_eq!(sent.bytes, 5_000_001);
            assert!(received.seconds > 0.0);
        }
    }

    /// Names of this process's threads that start with `prefix`.
    fn threads_named(prefix: &str) -> std::collections::BTreeSet<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|c| c.trim().to_string())
            .filter(|c| c.starts_with(prefix))
            .collect()
    }

    /// Four streams, four sending threads and four receiving threads, each seen running
    /// under its stream's name while the transfer is under way, and counted in the result.
    /// (Other tests of this binary run beside it with at most 3 streams: their names fall
    /// inside these; whether the threads are gone after is not asked for the same reason,
    /// and `send`/`run` join every one of them before they return.) The streams are timed,
    /// so each thread lives a whole second: a sized stream of a few MB ended in
    /// milliseconds and a watcher starved on a loaded machine missed it (CI, stop 30).
    #[test]
    fn each_stream_has_a_thread_of_its_own_on_both_sides() {
        let cfg = TransferConfig {
            duration: Some(Duration::from_secs(1)),
            ..config(0, 4)
        };
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let done = done.clone();
            std::thread::spawn(move || {
                let (mut send, mut recv) = (Default::default(), Default::default());
                while !done.load(Ordering::Relaxed) {
                    let union = |seen: &mut std::collections::BTreeSet<String>, prefix| {
                        seen.extend(threads_named(prefix));
                    };
                    union(&mut send, "ipl-send-");
                    union(&mut recv, "ipl-recv-");
                    std::thread::sleep(Duration::from_millis(1));
                }
                (send, recv)
            })
        };
        let (received, sent) = loopback_transfer(cfg);
        done.store(true, Ordering::Relaxed);
        let (send_names, recv_names) = watcher.join().unwrap();
        let received = received.unwrap();
        assert!(sent.bytes > 0);
        assert_eq!(received.bytes, sent.bytes);
        assert_eq!((received.threads, sent.threads), (4, 4));
        let want = |side| {
            (0..4)
                .map(|i| format!("ipl-{side}-{i}"))
                .collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(send_names, want("send"));
        assert_eq!(recv_names, want("recv"));
        assert!(received.cpu.total_s() > 0.0 && sent.cpu.total_s() > 0.0);
    }

    /// A stream that fails stops the others at once instead of leaving them to time out.
    #[test]
    fn one_failed_stream_ends_the_receiver_without_waiting_for_the_timeout() {
        let cfg = config(4_000_000, 3);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        // Stream 0 announces its share but is cut short; streams 1 and 2 never connect.
        let t0 = Instant::now();
        let s = std::net::TcpStream::connect(addr).unwrap();
        let mut header = Vec::new();
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION.to_be_bytes());
        header.extend_from_slice(&0u16.to_be_bytes());
        header.extend_from_slice(&99u64.to_be_bytes());
        header.extend_from_slice(&cfg.stream_len(0).to_be_bytes());
        std::io::Write::write_all(&mut &s, &header).unwrap();
        drop(s);
        let err = rx.join().unwrap().unwrap_err();
        assert!(matches!(err, TrafficError::Verify(_)), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_sender_with_another_seed_is_refused() {
        let cfg = config(100_000, 1);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        let _ = send(addr, TransferConfig { seed: 1, ..cfg }, CancellationToken::new());
        assert!(matches!(rx.join().unwrap(), Err(TrafficError::Header { .. })));
    }

    /// A sender of an older payload format (header version 2) is refused at its header, with
    /// an error that names both versions, not a corrupted payload.
    #[test]
    fn a_sender_of_an_older_version_is_refused_at_its_header() {
        let cfg = config(100_000, 1);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        let s = std::net::TcpStream::connect(addr).unwrap();
        send_by_hand_as(2, s, 100_000, 100_000);
        let err = rx.join().unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                TrafficError::Version {
                    got: 2,
                    supported: 3,
                    ..
                }
            ),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("version 2") && message.contains("speaks version 3"),
            "{message}"
        );
        assert!(message.contains("same release on both ends"), "{message}");
    }

    /// Stream 0 of seed 99 written by hand: a header announcing `len` bytes, then `sent`.
    fn send_by_hand(s: std::net::TcpStream, len: u64, sent: usize) {
        send_by_hand_as(VERSION, s, len, sent)
    }

    /// As [`send_by_hand`], with the header's version `version`.
    fn send_by_hand_as(version: u16, mut s: std::net::TcpStream, len: u64, sent: usize) {
        let mut header = Vec::new();
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&version.to_be_bytes());
        header.extend_from_slice(&0u16.to_be_bytes());
        header.extend_from_slice(&99u64.to_be_bytes());
        header.extend_from_slice(&len.to_be_bytes());
        let mut body = vec![0u8; sent];
        PayloadGenerator::new(99, 0).fill(&mut body);
        std::io::Write::write_all(&mut s, &[header, body].concat()).unwrap();
    }

    #[test]
    fn a_stream_cut_short_fails_verification() {
        let cfg = config(100_000, 1);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        // Announce 100 000 bytes, deliver 10: the receiver must call it truncated.
        let s = std::net::TcpStream::connect(addr).unwrap();
        send_by_hand(s, 100_000, 10);
        let err = rx.join().unwrap().unwrap_err();
        assert!(
            matches!(err, TrafficError::Verify(VerifyError::Short { got: 10, .. })),
            "{err}"
        );
    }

    /// A server's receiver takes data only from its client: a stream from another address
    /// is closed unread, and the client's own still arrives in full.
    #[test]
    fn a_receiver_for_one_peer_closes_connections_from_others() {
        let cfg = config(200_000, 1);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams)
            .unwrap()
            .only_from("127.0.0.2".parse().unwrap());
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        // From 127.0.0.1: closed before its header is read.
        let mut stranger = std::net::TcpStream::connect(addr).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut stranger, &mut byte).unwrap_or(0), 0);
        // From 127.0.0.2 (bound by hand): the run's peer.
        let socket = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.bind("127.0.0.2:0".parse().unwrap()).unwrap();
                s.connect(addr).await.unwrap().into_std().unwrap()
            });
        socket.set_nonblocking(false).unwrap();
        send_by_hand(socket, 200_000, 200_000);
        assert_eq!(rx.join().unwrap().unwrap().bytes, 200_000);
    }

    /// Stream i arrives on the receiver's port + i, one listener per stream.
    #[test]
    fn each_stream_connects_to_its_own_port() {
        let cfg = config(300_000, 3);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let base = receiver.local_addr().port();
        // Every port is taken by the receiver: binding any of them again fails.
        for i in 0..3 {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", base + i)).is_err(),
                "port {}",
                base + i
            );
        }
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        let sent = send(addr, cfg, CancellationToken::new()).unwrap();
        assert_eq!(
            (rx.join().unwrap().unwrap().bytes, sent.bytes),
            (300_000, 300_000)
        );
    }

    #[test]
    fn cancel_stops_a_waiting_receiver() {
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let rx = std::thread::spawn(move || receiver.run(config(1000, 1), Progress::default(), c));
        cancel.cancel();
        assert!(matches!(rx.join().unwrap(), Err(TrafficError::Cancelled)));
    }

    /// `--time`: each stream stops at the deadline, the receiver verifies every byte sent
    /// (the senders' counts and the receiver's agree) and times about the asked duration;
    /// the tally of a timeline adds up to the total.
    #[test]
    fn timed_transfer_stops_on_time_with_every_byte_verified() {
        let cfg = TransferConfig {
            duration: Some(Duration::from_millis(1500)),
            ..config(0, 2)
        };
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let timeline = Timeline {
            every: Some(Duration::from_millis(250)),
            omit: Duration::ZERO,
            until: cfg.duration,
        };
        let progress = Progress::new(timeline, Instant::now());
        let counter = progress.clone();
        let rx = std::thread::spawn(move || receiver.run(cfg, counter, CancellationToken::new()));
        let sent = send(addr, cfg, CancellationToken::new()).unwrap();
        let received = rx.join().unwrap().unwrap();
        assert!(sent.bytes > 0);
        assert_eq!(received.bytes, sent.bytes);
        // The sender stops at the deadline, not before, and soon after (a loaded machine
        // may be late: the run's few percent are checked end to end); the receiver's first
        // to last byte lies inside the sender's time, give or take the tail the kernel still
        // held when the sender's last write returned (0.7 ms once on a loaded machine).
        assert!((1.5..2.5).contains(&sent.seconds), "{} s", sent.seconds);
        assert!(received.seconds <= sent.seconds + 0.1, "{received:?} {sent:?}");
        let (_, tally) = progress.tally();
        assert_eq!(tally.bytes(), received.bytes);
        assert_eq!(progress.bytes(), received.bytes);
        assert_eq!(tally.streams_done, 2);
        // Six slices of 0.25 s up to the deadline; what arrived after it is in the sixth.
        assert_eq!(tally.slices.len(), 6, "{tally:?}");
        // Both streams filed, each stream's bytes adding up to the slices'.
        assert_eq!(tally.streams.len(), 2, "{tally:?}");
        for (k, &bytes) in tally.slices.iter().enumerate() {
            let per_stream: u64 = tally.streams.iter().map(|s| s.get(k).copied().unwrap_or(0)).sum();
            assert_eq!(per_stream, bytes, "slice {k}");
        }
    }

    /// A receiver waiting in a blocking read for a sender that went quiet mid-stream stops
    /// within a slice of Ctrl-C, not at the idle timeout.
    #[test]
    fn a_cancelled_receiver_stops_in_the_middle_of_a_stream() {
        let cfg = config(1_000_000, 1);
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), token));
        let s = std::net::TcpStream::connect(addr).unwrap();
        send_by_hand(s.try_clone().unwrap(), 1_000_000, 1000);
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        cancel.cancel();
        let err = rx.join().unwrap().unwrap_err();
        assert!(matches!(err, TrafficError::Cancelled), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(s);
    }

    /// A stream that stops mid-way is given up after the idle timeout, with an error that
    /// says so, while its socket is still open.
    #[test]
    fn a_stream_that_goes_quiet_times_out() {
        let cfg = TransferConfig {
            idle_timeout: Duration::from_secs(1),
            ..config(1_000_000, 1)
        };
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        let s = std::net::TcpStream::connect(addr).unwrap();
        send_by_hand(s.try_clone().unwrap(), 1_000_000, 1000);
        let t0 = Instant::now();
        let err = rx.join().unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                TrafficError::Timeout {
                    action: "receive from",
                    seconds: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            (0.9..3.0).contains(&t0.elapsed().as_secs_f64()),
            "{:?}",
            t0.elapsed()
        );
        drop(s);
    }

    /// A sender blocked on a peer that reads nothing (its socket buffers full) stops
    /// within a slice of Ctrl-C.
    #[test]
    fn a_cancelled_sender_stops_while_its_writes_are_blocked() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let tx = std::thread::spawn(move || send(addr, config(1_000_000_000, 1), token));
        let (_unread, _) = listener.accept().unwrap();
        // Long enough for the sender to fill both socket buffers and block.
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        cancel.cancel();
        let err = tx.join().unwrap().unwrap_err();
        assert!(matches!(err, TrafficError::Cancelled), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    /// Issue 43: both ends of a transfer that is moving data stop at once on Ctrl-C, a
    /// sized one of 100 GB and a timed one of a minute alike, with four streams each; no
    /// call waits for a slice of silence that never comes.
    #[test]
    fn a_transfer_moving_data_stops_at_once_when_cancelled() {
        let sized = config(100_000_000_000, 4);
        let timed = TransferConfig {
            duration: Some(Duration::from_secs(60)),
            ..sized
        };
        for cfg in [sized, timed] {
            let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
            let addr = receiver.local_addr();
            let cancel = CancellationToken::new();
            let progress = Progress::default();
            let (token, counter) = (cancel.clone(), progress.clone());
            let rx = std::thread::spawn(move || receiver.run(cfg, counter, token));
            let token = cancel.clone();
            let tx = std::thread::spawn(move || send(addr, cfg, token));
            let moving = Instant::now();
            while progress.bytes() < 50_000_000 {
                assert!(moving.elapsed() < Duration::from_secs(30), "no data moved");
                std::thread::sleep(Duration::from_millis(10));
            }
            let t0 = Instant::now();
            cancel.cancel();
            let (rx, tx) = (rx.join().unwrap(), tx.join().unwrap());
            let took = t0.elapsed();
            eprintln!("{:?}: stopped {took:?} after the cancel", cfg.duration);
            assert!(
                matches!(rx, Err(TrafficError::Cancelled)),
                "{:?}",
                rx.map(|s| s.bytes)
            );
            assert!(
                matches!(tx, Err(TrafficError::Cancelled)),
                "{:?}",
                tx.map(|s| s.bytes)
            );
            assert!(took < Duration::from_secs(1), "{took:?}");
        }
    }

    /// A timed stream whose sender stops without its trailer is not verified.
    #[test]
    fn a_timed_stream_without_its_trailer_fails() {
        let cfg = TransferConfig {
            duration: Some(Duration::from_secs(1)),
            ..config(0, 1)
        };
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let rx = std::thread::spawn(move || receiver.run(cfg, Progress::default(), CancellationToken::new()));
        let s = std::net::TcpStream::connect(addr).unwrap();
        send_by_hand(s, TIMED_LEN, 50_000);
        let err = rx.join().unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                TrafficError::Verify(VerifyError::NoTrailer { got: 50_000, .. })
            ),
            "{err}"
        );
    }

    /// The last payload bytes of a timed stream count when they arrived, not when the
    /// trailer that releases them did: a trailer late by 400 ms adds nothing to the time.
    #[test]
    fn a_late_trailer_does_not_stretch_the_time() {
        let cfg = TransferConfig {
            duration: Some(Duration::from_secs(1)),
            ..config(0, 1)
        };
        let receiver = Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg.streams).unwrap();
        let addr = receiver.local_addr();
        let progress = Progress::default();
        let counter = progress.clone();
        let rx = std::thread::spawn(move || receiver.run(cfg, counter, CancellationToken::new()));
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        send_by_hand(s.try_clone().unwrap(), TIMED_LEN, 100_000);
        std::thread::sleep(Duration::from_millis(400));
        std::io::Write::write_all(&mut s, &trailer(100_000)).unwrap();
        drop(s);
        let received = rx.join().unwrap().unwrap();
        assert_eq!(received.bytes, 100_000);
        assert!(received.seconds < 0.2, "{} s", received.seconds);
        let (now, tally) = progress.tally();
        assert_eq!(tally.bytes(), 100_000);
        assert!(
            now - tally.last_byte.unwrap() >= Duration::from_millis(350),
            "{tally:?}"
        );
    }
}
