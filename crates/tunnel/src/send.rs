//! The send path, TUN → encrypt → UDP, and its buffers: packets read from the TUN device
//! (with offload, super-packets cut into wire-sized segments first), each encrypted in place
//! into its own slot, the slots handed to the UDP socket as one batch. Only packets from this
//! end's inner address to the peer's are sent: the peer would drop anything else.
//!
//! Leaves out: when it runs (`event_loop`), how a batch leaves the socket (`udp`), the
//! segmentation itself (`offload`) and the packet format (`tunnel-proto`).

use std::io;
use std::ops::Range;

use tunnel_proto::{Endpoint, InnerAddresses, HEADROOM, TAILROOM};

use crate::config::BATCH;
use crate::offload::{self, Segmenter, VnetHdr, VNET_HDR_LEN};
use crate::stats::TunnelStats;
use crate::tun::Tun;
use udpbatch::{self as udp, Udp};

/// TUN reads per wake-up with offload (each up to 64 KiB), before the socket gets a turn.
const OFFLOAD_READS: usize = 4;
/// A virtio-net header and the largest IP packet.
const TUN_READ_OFFLOAD: usize = VNET_HDR_LEN + 65_535;

pub(crate) struct SendPath {
    inner_mtu: usize,
    /// Largest datagram one inner packet becomes.
    max_datagram: usize,
    outbox: Outbox,
    /// With TUN offload: the buffer one super-packet is read into (empty without).
    tun_read: Vec<u8>,
}

impl SendPath {
    pub fn new(inner_mtu: u32, endpoint: &Endpoint, tun_offload: bool) -> SendPath {
        let inner_mtu = inner_mtu as usize;
        SendPath {
            inner_mtu,
            max_datagram: inner_mtu + Endpoint::max_overhead(endpoint.suite()),
            outbox: Outbox {
                slots: vec![vec![0u8; HEADROOM + inner_mtu + TAILROOM]; BATCH],
                sealed: vec![0..0; BATCH],
                len: 0,
                bytes: 0,
            },
            tun_read: if tun_offload {
                vec![0u8; TUN_READ_OFFLOAD]
            } else {
                Vec::new()
            },
        }
    }

    /// Reads what the TUN device has (a bounded amount), encrypts it and sends it. Returns
    /// the TUN reads made (0: nothing was waiting); an error is the TUN device's, and fatal.
    pub fn pump(
        &mut self,
        tun: &Tun,
        udp: &mut Udp,
        endpoint: &mut Endpoint,
        inner: &InnerAddresses,
        stats: &mut TunnelStats,
    ) -> io::Result<usize> {
        let reads = if self.tun_read.is_empty() {
            self.read_packets(tun, endpoint, inner, stats)
        } else {
            self.read_super_packets(tun, udp, endpoint, inner, stats)
        };
        self.outbox.flush(udp, stats);
        reads
    }

    /// Without offload: one packet per read, straight into the next slot, until the batch
    /// is full.
    fn read_packets(
        &mut self,
        tun: &Tun,
        endpoint: &mut Endpoint,
        inner: &InnerAddresses,
        stats: &mut TunnelStats,
    ) -> io::Result<usize> {
        let mut reads = 0;
        while self.outbox.has_room(self.max_datagram) {
            let slot = self.outbox.next_inner(self.inner_mtu);
            let Some(len) = read_tun(tun, slot, stats)? else {
                break;
            };
            reads += 1;
            // Refused: the slot stays free for the next read.
            if inner.check_sending(&slot[..len]).is_err() {
                stats.errors.not_to_peer += 1;
                continue;
            }
            self.outbox.seal(len, endpoint, stats);
        }
        Ok(reads)
    }

    /// With offload: a few reads of up to 64 KiB each, cut into segments, each segment
    /// encrypted on its own (the datagrams are the same as without offload).
    fn read_super_packets(
        &mut self,
        tun: &Tun,
        udp: &mut Udp,
        endpoint: &mut Endpoint,
        inner: &InnerAddresses,
        stats: &mut TunnelStats,
    ) -> io::Result<usize> {
        let SendPath {
            inner_mtu,
            max_datagram,
            outbox,
            tun_read,
        } = self;
        let (mtu, max_datagram) = (*inner_mtu, *max_datagram);
        let mut reads = 0;
        while reads < OFFLOAD_READS {
            let Some(len) = read_tun(tun, tun_read, stats)? else {
                break;
            };
            reads += 1;
            let Some(hdr) = VnetHdr::parse(&tun_read[..len]) else {
                stats.errors.offload += 1;
                continue;
            };
            let pkt = &mut tun_read[VNET_HDR_LEN..len];
            // A super-packet's segments share its addresses: one check for all of them.
            if inner.check_sending(pkt).is_err() {
                stats.errors.not_to_peer += 1;
                continue;
            }
            if !hdr.is_gso() {
                if (hdr.needs_csum() && offload::complete_checksum(pkt, &hdr).is_err()) || pkt.len() > mtu {
                    stats.errors.offload += 1;
                    continue;
                }
                outbox.make_room(max_datagram, udp, stats);
                outbox.next_inner(mtu)[..pkt.len()].copy_from_slice(pkt);
                outbox.seal(pkt.len(), endpoint, stats);
                continue;
            }
            let mut segments = match Segmenter::new(pkt, &hdr) {
                Ok(s) if s.max_segment_len() <= mtu => s,
                _ => {
                    stats.errors.offload += 1;
                    continue;
                }
            };
            loop {
                outbox.make_room(max_datagram, udp, stats);
                let Some(seg_len) = segments.next_into(outbox.next_inner(mtu)) else {
                    break;
                };
                outbox.seal(seg_len, endpoint, stats);
            }
        }
        Ok(reads)
    }
}

/// One read from TUN into `buf`, counted; None when nothing is waiting.
fn read_tun(tun: &Tun, buf: &mut [u8], stats: &mut TunnelStats) -> io::Result<Option<usize>> {
    match tun.read(buf) {
        Ok(len) => {
            stats.tun_reads += 1;
            Ok(Some(len))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Encrypted datagrams waiting to be sent: slot `i < len` holds one at `sealed[i]`.
struct Outbox {
    slots: Vec<Vec<u8>>,
    sealed: Vec<Range<usize>>,
    len: usize,
    /// Bytes of the sealed datagrams, kept within what one GSO send carries.
    bytes: usize,
}

impl Outbox {
    /// Whether one more datagram of up to `max_datagram` bytes fits this batch.
    fn has_room(&self, max_datagram: usize) -> bool {
        self.len < self.slots.len() && self.bytes + max_datagram <= udp::GSO_MAX_BYTES
    }

    /// Sends the batch first if the next datagram would not fit it.
    fn make_room(&mut self, max_datagram: usize, udp: &mut Udp, stats: &mut TunnelStats) {
        if !self.has_room(max_datagram) {
            self.flush(udp, stats);
        }
    }

    /// Where the next inner packet goes: up to `inner_mtu` bytes after the headroom of the
    /// next free slot.
    fn next_inner(&mut self, inner_mtu: usize) -> &mut [u8] {
        &mut self.slots[self.len][HEADROOM..HEADROOM + inner_mtu]
    }

    /// Encrypts the `len`-byte inner packet just written by [`Outbox::next_inner`]; it
    /// joins the batch unless encryption fails (counted).
    fn seal(&mut self, len: usize, endpoint: &mut Endpoint, stats: &mut TunnelStats) {
        match endpoint.encap(&mut self.slots[self.len], len) {
            Ok(range) => {
                self.bytes += range.len();
                self.sealed[self.len] = range;
                self.len += 1;
                stats.sent.add(1, len);
            }
            Err(_) => stats.errors.encap += 1,
        }
    }

    fn flush(&mut self, udp: &mut Udp, stats: &mut TunnelStats) {
        if self.len == 0 {
            return;
        }
        let datagrams: Vec<&[u8]> = self.slots[..self.len]
            .iter()
            .zip(&self.sealed[..self.len])
            .map(|(slot, range)| &slot[range.clone()])
            .collect();
        let done = udp.send_batch(&datagrams);
        stats.send_calls += done.calls;
        stats.errors.send += done.refused;
        (self.len, self.bytes) = (0, 0);
    }
}
