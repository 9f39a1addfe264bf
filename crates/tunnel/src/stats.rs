//! What one tunnel end counts: the public [`TunnelStats`] and its parts. The send and receive
//! paths add to it as they go; the event loop stamps CPU and wall time at stop.
//!
//! Leaves out: how the counts are taken (`send`, `receive`) and how they are reported (the
//! lab's backends).

use std::time::Instant;

use procstat::CpuTime;
use tunnel_proto::DropCounters;

use crate::config::Batching;
pub use model::evidence::{Flow, IoErrors, ThreadTime};

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
    /// Which queue of a multi-queue TUN device the thread served (None: a device of its own).
    pub queue: Option<u16>,
    /// Queue 0 of a multi-queue device: Ok when the port-steering program is attached, else
    /// why the kernel's flow hash spreads the flows instead. None for the other queues.
    pub steering: Option<Result<(), String>>,
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
    /// Receive buffers the socket filled (with GRO, several datagrams each).
    pub recv_buffers: u64,
    /// Times the thread switched sending to a new key epoch (one per rekey): it went through
    /// this many epochs after the run's first.
    pub key_switches: u64,
    /// Where the thread's wall time went, phase by phase.
    pub time: ThreadTime,
    /// When the phase now running began.
    phase_start: Instant,
    /// The thread's CPU time from the end of set-up to stop.
    pub cpu: CpuTime,
    pub wall_s: f64,
}

/// What a tunnel thread is doing, for [`ThreadTime`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Phase {
    TunRead,
    Segmenting,
    Crypto,
    UdpSend,
    UdpRecv,
    Joining,
    TunWrite,
    Idle,
    Other,
}

impl TunnelStats {
    /// All counters at zero, for an end set up with these choices.
    pub(crate) fn new(
        tun_name: String,
        implementation: crypto::ImplementationInfo,
        batching: Batching,
        inner_mtu: u32,
        pinned_cpu: Option<usize>,
        queue: Option<u16>,
        steering: Option<Result<(), String>>,
    ) -> TunnelStats {
        TunnelStats {
            tun_name,
            implementation,
            batching,
            inner_mtu,
            pinned_cpu,
            queue,
            steering,
            sent: Flow::default(),
            delivered: Flow::default(),
            datagrams_in: 0,
            drops: DropCounters::default(),
            errors: IoErrors::default(),
            send_calls: 0,
            recv_calls: 0,
            tun_reads: 0,
            tun_writes: 0,
            recv_buffers: 0,
            key_switches: 0,
            time: ThreadTime::default(),
            phase_start: Instant::now(),
            cpu: CpuTime::default(),
            wall_s: 0.0,
        }
    }

    /// Starts the clock of the first phase (set-up is not timed).
    pub(crate) fn start_timing(&mut self) {
        self.phase_start = Instant::now();
    }

    /// Ends the phase now running, as `phase`, and starts the next: one clock read (the
    /// vDSO's, tens of nanoseconds), so it is called per batch or per system call, never per
    /// packet of a batch.
    pub(crate) fn lap(&mut self, phase: Phase) {
        let now = Instant::now();
        let s = now.duration_since(self.phase_start).as_secs_f64();
        self.phase_start = now;
        let t = &mut self.time;
        *match phase {
            Phase::TunRead => &mut t.tun_read_s,
            Phase::Segmenting => &mut t.segmenting_s,
            Phase::Crypto => &mut t.crypto_s,
            Phase::UdpSend => &mut t.udp_send_s,
            Phase::UdpRecv => &mut t.udp_recv_s,
            Phase::Joining => &mut t.joining_s,
            Phase::TunWrite => &mut t.tun_write_s,
            Phase::Idle => &mut t.idle_s,
            Phase::Other => &mut t.other_s,
        } += s;
    }

    /// Packets through this end, both ways, per second of its life.
    pub fn packets_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            (self.sent.packets + self.delivered.packets) as f64 / self.wall_s
        } else {
            0.0
        }
    }
}

impl TunnelStats {
    /// One end's queues taken together: counters and CPU added, wall time the longest, the
    /// set-up of the first queue (the queue itself None).
    pub fn sum(queues: &[TunnelStats]) -> Option<TunnelStats> {
        let (first, rest) = queues.split_first()?;
        let mut total = first.clone();
        total.queue = None;
        for q in rest {
            total.sent.add(q.sent.packets as usize, q.sent.bytes as usize);
            total
                .delivered
                .add(q.delivered.packets as usize, q.delivered.bytes as usize);
            total.datagrams_in += q.datagrams_in;
            total.drops.add(&q.drops);
            total.errors.encap += q.errors.encap;
            total.errors.send += q.errors.send;
            total.errors.tun_write += q.errors.tun_write;
            total.errors.offload += q.errors.offload;
            total.errors.not_to_peer += q.errors.not_to_peer;
            total.send_calls += q.send_calls;
            total.recv_calls += q.recv_calls;
            total.tun_reads += q.tun_reads;
            total.tun_writes += q.tun_writes;
            total.recv_buffers += q.recv_buffers;
            total.time = total.time.plus(&q.time);
            // The queues switch together: an end went through what every queue went through.
            total.key_switches = total.key_switches.min(q.key_switches);
            total.cpu.user_s += q.cpu.user_s;
            total.cpu.system_s += q.cpu.system_s;
            total.wall_s = total.wall_s.max(q.wall_s);
            if q.batching != total.batching {
                // The weakest any queue ended with: mmsg < gso < offload.
                total.batching = total.batching.min(q.batching);
            }
        }
        Some(total)
    }
}
