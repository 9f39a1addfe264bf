//! The userspace tunnel's event loop: ONE thread per end, pinned to one core, owning a TUN
//! device and a UDP socket, moving every packet through [`tunnel_proto::Endpoint`].
//!
//! The thread enters its network namespace first, so the TUN device and the socket are
//! created there. I/O is batched so that crypto, not system calls, is the limit. With
//! [`Batching::Offload`] (the default of the lab) the TUN device speaks virtio-net headers:
//! the kernel hands over TCP super-packets of up to 64 KiB, which the thread cuts into
//! wire-sized segments and encrypts one by one (`offload`), then sends with one `sendmsg`
//! using UDP GSO; on the way in `recvmmsg` with UDP GRO, per-datagram decryption, and
//! consecutive segments of a flow joined again so one TUN write delivers up to 64 KiB. The
//! datagrams on the wire are the same as without offload: one encrypted inner packet each.
//!
//! Leaves out: the packet format and crypto (`tunnel-proto`, `crypto`), the namespaces and
//! veth (`netns`), and the traffic that flows through (`traffic`).

mod cpu;
pub mod offload;
mod tun;
mod udp;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use model::CipherSuite;
use netns::{Namespace, NetnsError};
use offload::{Coalescer, Group, PacketRef, Segmenter, VnetHdr, VNET_HDR_LEN};
use serde::{Deserialize, Serialize};
use tunnel_proto::{DropCounters, Endpoint, HEADROOM, TAILROOM};

pub use cpu::{pin_current_thread, ThreadCpu};
pub use tun::Tun;

/// How datagrams leave and arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// `sendmmsg`/`recvmmsg`: one system call per batch, one trip through the stack per datagram.
    Mmsg,
    /// UDP GSO/GRO: one system call and one trip through the stack per batch of equal-sized
    /// datagrams. Falls back to [`Batching::Mmsg`] where the kernel refuses it.
    Gso,
    /// [`Batching::Gso`] plus TUN offload: TCP super-packets from the TUN device, segmented
    /// (and each segment encrypted) by the tunnel; decrypted segments joined before the TUN
    /// write. Falls back to [`Batching::Gso`] where the kernel refuses it.
    Offload,
}

/// Packets read from the TUN device per wake-up, at most.
pub const BATCH: usize = 64;
/// Datagrams (or GRO bundles) per `recvmmsg`.
const RX_MESSAGES: usize = 32;
/// TUN reads per wake-up with offload (each up to 64 KiB), before the socket gets a turn.
const OFFLOAD_READS: usize = 4;
/// A virtio-net header and the largest IP packet.
const TUN_RX_OFFLOAD: usize = VNET_HDR_LEN + 65_535;
const RX_BUFFER_GRO: usize = 65_536;
const RX_BUFFER_PLAIN: usize = 2048;
const SOCKET_BUFFER: usize = 8 << 20;
const TXQUEUELEN: u32 = 1000;

/// Largest inner (TUN) MTU whose datagrams fit a link of `link_mtu` without fragmenting:
/// link MTU less IPv4 (20) and UDP (8) headers less the suite's overhead. CBC rounds up to
/// whole blocks with at least one byte of padding, so its room is counted in blocks.
pub fn inner_mtu(link_mtu: u32, suite: CipherSuite) -> u32 {
    let room = link_mtu.saturating_sub(28);
    match suite {
        CipherSuite::AesCbc { hmac, .. } => {
            let mac = if hmac == model::Hmac::Sha256 { 32 } else { 0 };
            let ct = room.saturating_sub(8 + 16 + mac);
            (ct / 16 * 16).saturating_sub(1)
        }
        _ => room.saturating_sub(Endpoint::max_overhead(suite) as u32),
    }
}

/// Where one end of the tunnel sits.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// TUN device name (at most 15 bytes; the lab's start with `ipl`).
    pub tun_name: String,
    /// Outer address the UDP socket binds (on the veth).
    pub local: SocketAddrV4,
    /// The other end's outer address.
    pub peer: SocketAddrV4,
    /// Inner address of the TUN device, and its prefix (the kernel routes the prefix into it).
    pub inner: Ipv4Addr,
    pub prefix_len: u8,
    pub inner_mtu: u32,
    /// Core to pin the thread to; None leaves it to the scheduler (it is still one thread).
    pub cpu: Option<usize>,
    pub batching: Batching,
}

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error(transparent)]
    Namespace(#[from] NetnsError),
    #[error("{step} for tunnel {tun}: {source}")]
    Setup {
        step: String,
        tun: String,
        #[source]
        source: io::Error,
    },
    #[error("tunnel {tun}: {during}: {source}")]
    Io {
        during: &'static str,
        tun: String,
        #[source]
        source: io::Error,
    },
    #[error("tunnel thread {tun} panicked")]
    Panicked { tun: String },
}

/// Payload packets and bytes that went one way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    pub packets: u64,
    pub bytes: u64,
}

/// Per-packet failures that are not a [`tunnel_proto::DropReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoErrors {
    /// Packets read from TUN that could not be encrypted.
    pub encap: u64,
    /// Batches (or the rest of one) the socket refused.
    pub send: u64,
    /// Decrypted packets the TUN device refused.
    pub tun_write: u64,
    /// Packets from TUN (offload) that could not be segmented or checksummed.
    pub offload: u64,
}

/// What one end did, from its own thread.
#[derive(Debug, Clone)]
pub struct TunnelStats {
    pub tun_name: String,
    pub implementation: crypto::ImplementationInfo,
    /// What was actually used (GSO falls back to mmsg where refused).
    pub batching: Batching,
    pub inner_mtu: u32,
    /// The core the thread was pinned to, if it was.
    pub pinned_cpu: Option<usize>,
    /// Read from TUN, encrypted and sent.
    pub sent: Flow,
    /// Received, decrypted and written to TUN.
    pub delivered: Flow,
    /// Datagrams received (before decryption), GRO bundles counted per datagram.
    pub datagrams_in: u64,
    pub drops: DropCounters,
    pub errors: IoErrors,
    pub send_calls: u64,
    pub recv_calls: u64,
    /// TUN `read`s and `write`s (with offload, one carries up to 64 KiB of segments).
    pub tun_reads: u64,
    pub tun_writes: u64,
    /// The thread's CPU time from the end of set-up to stop.
    pub cpu: ThreadCpu,
    pub wall_s: f64,
}

impl TunnelStats {
    /// Packets through this end, both ways, per second of its life.
    pub fn packets_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            (self.sent.packets + self.delivered.packets) as f64 / self.wall_s
        } else {
            0.0
        }
    }
}

/// Stop request: a flag checked every loop, plus an eventfd that wakes a sleeping `poll`.
struct Stop {
    flag: AtomicBool,
    wake: OwnedFd,
}

impl Stop {
    fn new() -> io::Result<Stop> {
        // SAFETY: eventfd(2) returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Stop {
            flag: AtomicBool::new(false),
            // SAFETY: fresh fd.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn request(&self) {
        self.flag.store(true, Ordering::Release);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a u64 on the stack to an eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

/// A running tunnel end. [`Tunnel::stop`] ends it and returns its statistics; dropping it
/// stops it too. Either way the thread is joined and its TUN device is gone afterwards.
pub struct Tunnel {
    tun_name: String,
    stop: Arc<Stop>,
    thread: Option<JoinHandle<Result<TunnelStats, TunnelError>>>,
}

impl Tunnel {
    /// Starts an end in `ns`: returns once its TUN device is up and its socket bound, or with
    /// the reason it could not be set up.
    pub fn start(ns: &Namespace, config: TunnelConfig, endpoint: Endpoint) -> Result<Tunnel, TunnelError> {
        let stop = Arc::new(Stop::new().map_err(|source| TunnelError::Setup {
            step: "create eventfd".into(),
            tun: config.tun_name.clone(),
            source,
        })?);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), TunnelError>>();
        let tun_name = config.tun_name.clone();
        let thread_stop = stop.clone();
        let thread = ns.spawn(&config.tun_name.clone(), move || {
            let mut lp = match Loop::set_up(config, endpoint) {
                Ok(lp) => lp,
                Err(e) => {
                    let msg = TunnelError::Setup {
                        step: "set-up".into(),
                        tun: String::new(),
                        source: io::Error::other(e.to_string()),
                    };
                    let _ = ready_tx.send(Err(e));
                    return Err(msg);
                }
            };
            let _ = ready_tx.send(Ok(()));
            lp.run(&thread_stop)
        })?;
        let mut tunnel = Tunnel {
            tun_name: tun_name.clone(),
            stop,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(tunnel),
            Ok(Err(e)) => {
                let _ = tunnel.thread.take().map(JoinHandle::join);
                Err(e)
            }
            Err(_) => {
                let _ = tunnel.thread.take().map(JoinHandle::join);
                Err(TunnelError::Panicked { tun: tun_name })
            }
        }
    }

    pub fn tun_name(&self) -> &str {
        &self.tun_name
    }

    /// Stops the thread, waits for it, and returns what it did. Its TUN device is removed
    /// when the thread closes it.
    pub fn stop(mut self) -> Result<TunnelStats, TunnelError> {
        self.stop.request();
        let thread = self.thread.take().expect("a tunnel is stopped once");
        thread.join().unwrap_or_else(|_| {
            Err(TunnelError::Panicked {
                tun: self.tun_name.clone(),
            })
        })
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.request();
            let _ = thread.join();
        }
    }
}

/// The thread's state: its device, its socket, its endpoint and its buffers.
struct Loop {
    config: TunnelConfig,
    tun: Tun,
    udp: udp::Udp,
    endpoint: Endpoint,
    /// The TUN device speaks virtio-net headers with TSO (see `offload`).
    tun_offload: bool,
    tx_bufs: Vec<Vec<u8>>,
    tx_ranges: Vec<Range<usize>>,
    rx_bufs: Vec<Vec<u8>>,
    rx_meta: Vec<udp::Received>,
    /// Offload only: one super-packet read from TUN, and the decrypted packets of a receive
    /// batch waiting to be joined.
    tun_rx: Vec<u8>,
    decrypted: Vec<PacketRef>,
    stats: TunnelStats,
}

impl Loop {
    fn set_up(config: TunnelConfig, endpoint: Endpoint) -> Result<Loop, TunnelError> {
        let setup = |step: String, source| TunnelError::Setup {
            step,
            tun: config.tun_name.clone(),
            source,
        };
        if let Some(cpu) = config.cpu {
            pin_current_thread(cpu).map_err(|e| setup(format!("pin thread to CPU {cpu}"), e))?;
        }
        let mut udp = udp::Udp::bind(config.local, config.peer, SOCKET_BUFFER)
            .map_err(|e| setup(format!("UDP socket {}", config.local), e))?;
        let mut batching = match config.batching {
            Batching::Gso | Batching::Offload if udp.enable_offload() => config.batching,
            _ => Batching::Mmsg,
        };
        let create =
            |vnet| Tun::create(&config.tun_name, vnet).map_err(|e| setup("create TUN device".into(), e));
        let tun = if batching == Batching::Offload {
            let tun = create(true)?;
            match tun.enable_tso() {
                Ok(()) => tun,
                Err(_) => {
                    // The kernel refuses TUN offload: the same device without headers.
                    drop(tun);
                    batching = Batching::Gso;
                    create(false)?
                }
            }
        } else {
            create(false)?
        };
        tun.configure(config.inner, config.prefix_len, config.inner_mtu, TXQUEUELEN)
            .map_err(|e| setup(format!("configure {}/{}", config.inner, config.prefix_len), e))?;
        let rx_size = if batching == Batching::Mmsg {
            RX_BUFFER_PLAIN
        } else {
            RX_BUFFER_GRO
        };
        let tun_rx = if batching == Batching::Offload {
            vec![0u8; TUN_RX_OFFLOAD]
        } else {
            Vec::new()
        };
        let tx_size = HEADROOM + config.inner_mtu as usize + TAILROOM;
        let stats = TunnelStats {
            tun_name: config.tun_name.clone(),
            implementation: endpoint.implementation().info(),
            batching,
            inner_mtu: config.inner_mtu,
            pinned_cpu: config.cpu,
            sent: Flow::default(),
            delivered: Flow::default(),
            datagrams_in: 0,
            drops: DropCounters::default(),
            errors: IoErrors::default(),
            send_calls: 0,
            recv_calls: 0,
            tun_reads: 0,
            tun_writes: 0,
            cpu: ThreadCpu::default(),
            wall_s: 0.0,
        };
        Ok(Loop {
            tun,
            udp,
            endpoint,
            tun_offload: batching == Batching::Offload,
            tx_bufs: vec![vec![0u8; tx_size]; BATCH],
            tx_ranges: vec![0..0; BATCH],
            rx_bufs: vec![vec![0u8; rx_size]; RX_MESSAGES],
            rx_meta: vec![udp::Received::default(); RX_MESSAGES],
            tun_rx,
            decrypted: Vec::with_capacity(RX_MESSAGES * udp::GSO_MAX_SEGMENTS),
            stats,
            config,
        })
    }

    fn io_error(&self, during: &'static str, source: io::Error) -> TunnelError {
        TunnelError::Io {
            during,
            tun: self.config.tun_name.clone(),
            source,
        }
    }

    fn run(&mut self, stop: &Stop) -> Result<TunnelStats, TunnelError> {
        let cpu0 = ThreadCpu::now();
        let t0 = Instant::now();
        let mut fds = [
            libc::pollfd {
                fd: self.tun.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.udp.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        while !stop.requested() {
            // Work until both sides are empty, only then sleep: under load `poll` is skipped.
            let (from_tun, from_net) = if self.tun_offload {
                (self.pump_tun_offload()?, self.pump_net_offload()?)
            } else {
                (self.pump_tun()?, self.pump_net()?)
            };
            if from_tun == 0 && from_net == 0 {
                // SAFETY: fds is a valid array of 3 pollfd for the duration of the call.
                let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
                if rc < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(self.io_error("poll", e));
                    }
                }
            }
        }
        self.stats.cpu = ThreadCpu::now().since(cpu0);
        self.stats.wall_s = t0.elapsed().as_secs_f64();
        Ok(self.stats.clone())
    }

    /// Reads up to a batch of packets from TUN, encrypts them, sends them. Returns packets read.
    fn pump_tun(&mut self) -> Result<usize, TunnelError> {
        let mtu = self.config.inner_mtu as usize;
        let mut n = 0;
        let mut bytes = 0;
        let max_datagram = mtu + Endpoint::max_overhead(self.endpoint.suite());
        while n < BATCH && bytes + max_datagram <= udp::GSO_MAX_BYTES {
            let buf = &mut self.tx_bufs[n];
            let len = match self.tun.read(&mut buf[HEADROOM..HEADROOM + mtu]) {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(self.io_error("read TUN", e)),
            };
            self.stats.tun_reads += 1;
            match self.endpoint.encap(buf, len) {
                Ok(range) => {
                    bytes += range.len();
                    self.tx_ranges[n] = range;
                    self.stats.sent.packets += 1;
                    self.stats.sent.bytes += len as u64;
                    n += 1;
                }
                Err(_) => self.stats.errors.encap += 1,
            }
        }
        if n > 0 {
            self.send_batch(n);
        }
        Ok(n)
    }

    /// Encrypts the packet at `tx_bufs[n][HEADROOM..HEADROOM + len]` into slot `n`; true
    /// when it is ready to send.
    fn encap_slot(&mut self, n: usize, len: usize) -> bool {
        match self.endpoint.encap(&mut self.tx_bufs[n], len) {
            Ok(range) => {
                self.tx_ranges[n] = range;
                self.stats.sent.packets += 1;
                self.stats.sent.bytes += len as u64;
                true
            }
            Err(_) => {
                self.stats.errors.encap += 1;
                false
            }
        }
    }

    /// Offload: reads a few (super-)packets from TUN, cuts each into wire-sized segments,
    /// encrypts every segment on its own and sends them in GSO batches. Returns TUN reads.
    fn pump_tun_offload(&mut self) -> Result<usize, TunnelError> {
        let mtu = self.config.inner_mtu as usize;
        let max_datagram = mtu + Endpoint::max_overhead(self.endpoint.suite());
        // Moved out for the loop so segments can be written into the send slots beside it.
        let mut rx = std::mem::take(&mut self.tun_rx);
        let mut n = 0;
        let mut bytes = 0;
        let mut reads = 0;
        let mut result = Ok(());
        while reads < OFFLOAD_READS {
            let len = match self.tun.read(&mut rx) {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    result = Err(self.io_error("read TUN", e));
                    break;
                }
            };
            reads += 1;
            self.stats.tun_reads += 1;
            let Some(hdr) = VnetHdr::parse(&rx[..len]) else {
                self.stats.errors.offload += 1;
                continue;
            };
            let pkt = &mut rx[VNET_HDR_LEN..len];
            if !hdr.is_gso() {
                if hdr.needs_csum() && offload::complete_checksum(pkt, &hdr).is_err() {
                    self.stats.errors.offload += 1;
                    continue;
                }
                if pkt.len() > mtu {
                    self.stats.errors.offload += 1;
                    continue;
                }
                if n == BATCH || bytes + max_datagram > udp::GSO_MAX_BYTES {
                    self.send_batch(n);
                    (n, bytes) = (0, 0);
                }
                self.tx_bufs[n][HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
                if self.encap_slot(n, pkt.len()) {
                    bytes += self.tx_ranges[n].len();
                    n += 1;
                }
                continue;
            }
            let mut segments = match Segmenter::new(pkt, &hdr) {
                Ok(s) if s.max_segment_len() <= mtu => s,
                _ => {
                    self.stats.errors.offload += 1;
                    continue;
                }
            };
            loop {
                if n == BATCH || bytes + max_datagram > udp::GSO_MAX_BYTES {
                    self.send_batch(n);
                    (n, bytes) = (0, 0);
                }
                let Some(seg_len) = segments.next_into(&mut self.tx_bufs[n][HEADROOM..HEADROOM + mtu]) else {
                    break;
                };
                if self.encap_slot(n, seg_len) {
                    bytes += self.tx_ranges[n].len();
                    n += 1;
                }
            }
        }
        self.tun_rx = rx;
        if n > 0 {
            self.send_batch(n);
        }
        result.map(|()| reads)
    }

    /// Offload: receives a batch of datagrams, decrypts each, joins consecutive segments of a
    /// flow and writes each joined packet to TUN in one call. Returns datagrams received.
    fn pump_net_offload(&mut self) -> Result<usize, TunnelError> {
        let got = match self.recv_batch()? {
            Received::Datagrams(0) => return Ok(0),
            Received::Datagrams(got) => got,
            Received::IcmpError => return Ok(1),
        };
        self.decrypted.clear();
        for i in 0..got {
            for datagram in self.rx_meta[i].datagrams() {
                self.stats.datagrams_in += 1;
                match self.endpoint.decap(&mut self.rx_bufs[i][datagram.clone()]) {
                    Ok(p) => self.decrypted.push(PacketRef {
                        buf: i,
                        start: datagram.start + p.start,
                        end: datagram.start + p.end,
                    }),
                    Err(reason) => self.stats.drops.count(reason),
                }
            }
        }
        let decrypted = std::mem::take(&mut self.decrypted);
        // A joined packet reaches the kernel with its checksum trusted (CHECKSUM_PARTIAL):
        // the MAC vouches for an authenticated suite's segments; others join only once their
        // own checksums are verified, else they go alone and the kernel checks them.
        let trusted = self.endpoint.suite().authenticates();
        let mut group = Group::default();
        for &at in &decrypted {
            let pkt = &self.rx_bufs[at.buf][at.start..at.end];
            let may_join = trusted || offload::checksums_ok(pkt);
            let joined = may_join && {
                let first = group.first.map_or(pkt, |f| &self.rx_bufs[f.buf][f.start..f.end]);
                Coalescer::push(&mut group, pkt, at, first)
            };
            if joined {
                continue;
            }
            self.deliver(&group);
            group.clear();
            if !(may_join && Coalescer::push(&mut group, &self.rx_bufs[at.buf][at.start..at.end], at, &[])) {
                // Not a TCP data segment (an ACK, say): on its own, as it came.
                group.first = Some(at);
                self.deliver(&group);
                group.clear();
            }
        }
        if group.first.is_some() {
            self.deliver(&group);
        }
        self.decrypted = decrypted;
        Ok(got)
    }

    /// Writes one joined packet (or a single one) to TUN.
    fn deliver(&mut self, group: &Group) {
        let Some(first) = group.first else { return };
        let hdr = Coalescer::finish(group, &mut self.rx_bufs[first.buf][first.start..first.end]);
        let hdr = hdr.bytes();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + group.more.len());
        parts.push(&hdr);
        parts.push(&self.rx_bufs[first.buf][first.start..first.end]);
        for m in &group.more {
            parts.push(&self.rx_bufs[m.buf][m.start..m.end]);
        }
        match self.tun.write_parts(&parts) {
            Ok(_) => {
                self.stats.tun_writes += 1;
                self.stats.delivered.packets += group.segments() as u64;
                self.stats.delivered.bytes += group.packet_bytes() as u64;
            }
            Err(_) => self.stats.errors.tun_write += group.segments() as u64,
        }
    }

    fn send_batch(&mut self, n: usize) {
        let datagrams: Vec<&[u8]> = self.tx_bufs[..n]
            .iter()
            .zip(&self.tx_ranges[..n])
            .map(|(b, r)| &b[r.clone()])
            .collect();
        let done = self.udp.send_batch(&datagrams);
        self.stats.send_calls += done.calls;
        self.stats.errors.send += done.refused;
        if !self.udp.uses_gso() {
            // TUN offload, if on, stays: it does not depend on UDP GSO.
            self.stats.batching = Batching::Mmsg;
        }
    }

    /// Receives a batch of datagrams into `rx_bufs`/`rx_meta`.
    fn recv_batch(&mut self) -> Result<Received, TunnelError> {
        match self.udp.recv_batch(&mut self.rx_bufs, &mut self.rx_meta) {
            Ok(0) => Ok(Received::Datagrams(0)),
            Ok(got) => {
                self.stats.recv_calls += 1;
                Ok(Received::Datagrams(got))
            }
            // ICMP errors queued on the socket (e.g. the peer not yet listening) are not fatal.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Received::IcmpError),
            Err(e) => Err(self.io_error("receive UDP", e)),
        }
    }

    /// Receives a batch of datagrams, decrypts them and writes them to TUN. Returns datagrams
    /// received.
    fn pump_net(&mut self) -> Result<usize, TunnelError> {
        let got = match self.recv_batch()? {
            Received::Datagrams(0) => return Ok(0),
            Received::Datagrams(got) => got,
            Received::IcmpError => return Ok(1),
        };
        let mut datagrams = 0;
        for i in 0..got {
            for datagram in self.rx_meta[i].datagrams() {
                datagrams += 1;
                let buf = &mut self.rx_bufs[i][datagram];
                match self.endpoint.decap(buf) {
                    Ok(payload) => match self.tun.write(&buf[payload.clone()]) {
                        Ok(_) => {
                            self.stats.tun_writes += 1;
                            self.stats.delivered.packets += 1;
                            self.stats.delivered.bytes += payload.len() as u64;
                        }
                        Err(_) => self.stats.errors.tun_write += 1,
                    },
                    Err(reason) => self.stats.drops.count(reason),
                }
            }
        }
        self.stats.datagrams_in += datagrams;
        Ok(got)
    }
}

/// What one receive call on the UDP socket brought.
enum Received {
    Datagrams(usize),
    /// A queued ICMP error was consumed instead: nothing to decrypt, but try again.
    IcmpError,
}
