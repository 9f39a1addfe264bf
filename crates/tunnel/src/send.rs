//! The send path, TUN → encrypt → UDP, and its buffers: packets read from the TUN device
//! (with offload, super-packets cut into wire-sized segments first), each into its own slot,
//! the batch encrypted in place and handed to the UDP socket at once (so the
//! thread's time splits into reading, segmenting, crypto and sending a batch at a time). Only packets from this
//! end's inner address to the peer's are sent: the peer would drop anything else.
//!
//! Leaves out: when it runs (`event_loop`), how a batch leaves the socket (`udp`), the
//! segmentation itself (`offload`) and the packet format (`tunnel-proto`).

use std::io;
use std::ops::Range;

use tunnel_proto::{EncapError, Endpoint, InnerAddresses, HEADROOM, TAILROOM};

use crate::config::BATCH;
use crate::offload::{self, Segmenter, VnetHdr, VNET_HDR_LEN};
use crate::stats::{Phase, TunnelStats};
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
                inner_lens: vec![0; BATCH],
                sealed: (0..BATCH).map(|_| Ok(0..0)).collect(),
                len: 0,
                bytes: 0,
                max_overhead: Endpoint::max_overhead(endpoint.suite()),
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
        stats.lap(Phase::Other);
        let reads = if self.tun_read.is_empty() {
            self.read_packets(tun, inner, stats)
        } else {
            self.read_super_packets(tun, udp, endpoint, inner, stats)
        };
        self.outbox.flush(endpoint, udp, stats);
        reads
    }

    /// Without offload: one packet per read, straight into the next slot, until the batch
    /// is full.
    fn read_packets(
        &mut self,
        tun: &Tun,
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
            self.outbox.push(len);
        }
        Ok(reads)
    }

    /// With offload: a few reads of up to 64 KiB each, cut into segments, each segment
    /// encrypted on its own at the flush (the datagrams are the same as without offload).
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
                outbox.make_room(max_datagram, endpoint, udp, stats);
                outbox.next_inner(mtu)[..pkt.len()].copy_from_slice(pkt);
                outbox.push(pkt.len());
                stats.lap(Phase::Segmenting);
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
                outbox.make_room(max_datagram, endpoint, udp, stats);
                let Some(seg_len) = segments.next_into(outbox.next_inner(mtu)) else {
                    break;
                };
                outbox.push(seg_len);
            }
            // Before the next read: its clock starts here.
            stats.lap(Phase::Segmenting);
        }
        Ok(reads)
    }
}

/// One read from TUN into `buf`, counted; None when nothing is waiting.
fn read_tun(tun: &Tun, buf: &mut [u8], stats: &mut TunnelStats) -> io::Result<Option<usize>> {
    let read = tun.read(buf);
    stats.lap(Phase::TunRead);
    match read {
        Ok(len) => {
            stats.tun_reads += 1;
            Ok(Some(len))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Inner packets waiting to be encrypted and sent: slot `i < len` holds one of
/// `inner_lens[i]` bytes after its headroom.
struct Outbox {
    slots: Vec<Vec<u8>>,
    inner_lens: Vec<usize>,
    /// Where each slot's datagram lies once sealed, or why it could not be; kept for its
    /// allocation.
    sealed: Vec<Result<Range<usize>, EncapError>>,
    len: usize,
    /// Bytes the batch's datagrams take at most, kept within what one GSO send carries.
    bytes: usize,
    max_overhead: usize,
}

impl Outbox {
    /// Whether one more datagram of up to `max_datagram` bytes fits this batch.
    fn has_room(&self, max_datagram: usize) -> bool {
        self.len < self.slots.len() && self.bytes + max_datagram <= udp::GSO_MAX_BYTES
    }

    /// Sends the batch first if the next datagram would not fit it.
    fn make_room(
        &mut self,
        max_datagram: usize,
        endpoint: &mut Endpoint,
        udp: &mut Udp,
        stats: &mut TunnelStats,
    ) {
        if !self.has_room(max_datagram) {
            self.flush(endpoint, udp, stats);
        }
    }

    /// Where the next inner packet goes: up to `inner_mtu` bytes after the headroom of the
    /// next free slot.
    fn next_inner(&mut self, inner_mtu: usize) -> &mut [u8] {
        &mut self.slots[self.len][HEADROOM..HEADROOM + inner_mtu]
    }

    /// The `len`-byte inner packet just written by [`Outbox::next_inner`] joins the batch.
    fn push(&mut self, len: usize) {
        self.inner_lens[self.len] = len;
        self.bytes += len + self.max_overhead;
        self.len += 1;
    }

    /// Encrypts every packet of the batch in its slot (CBC suites side by side), then sends
    /// what encrypted (a failure is counted and its slot skipped).
    fn flush(&mut self, endpoint: &mut Endpoint, udp: &mut Udp, stats: &mut TunnelStats) {
        if self.len == 0 {
            return;
        }
        stats.lap(Phase::Segmenting);
        let n = self.len;
        endpoint.encap_batch(&mut self.slots[..n], &self.inner_lens[..n], &mut self.sealed[..n]);
        for (sealed, &len) in self.sealed[..n].iter().zip(&self.inner_lens) {
            match sealed {
                Ok(_) => stats.sent.add(1, len),
                Err(_) => stats.errors.encap += 1,
            }
        }
        stats.lap(Phase::Crypto);
        let datagrams: Vec<&[u8]> = self.slots[..n]
            .iter()
            .zip(&self.sealed)
            .filter_map(|(slot, range)| Some(&slot[range.as_ref().ok()?.clone()]))
            .collect();
        let done = udp.send_batch(&datagrams);
        stats.send_calls += done.calls;
        stats.errors.send += done.refused;
        (self.len, self.bytes) = (0, 0);
        stats.lap(Phase::UdpSend);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::largest_batch;
    use model::{CipherSuite, CryptoChoice, Hmac, KeyBits};
    use tunnel_proto::{Implementation, KeyDirection, StaticKey};

    /// What a ceiling times CBC encryption in is what the outbox really gathers.
    #[test]
    fn the_largest_batch_is_what_the_outbox_holds() {
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        let key = StaticKey::generate().unwrap();
        for suite in [
            CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256),
            CipherSuite::AesGcm { key: KeyBits::Aes256 },
        ] {
            for mtu in [1407u32, 576, 68] {
                let endpoint = Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap();
                let mut path = SendPath::new(mtu, &endpoint, true);
                let mut held = 0;
                while path.outbox.has_room(path.max_datagram) {
                    path.outbox.push(mtu as usize);
                    held += 1;
                }
                assert_eq!(held, largest_batch(suite, mtu as usize), "{suite} at {mtu}");
            }
        }
    }
}
