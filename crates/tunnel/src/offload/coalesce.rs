//! In (wire → TUN): joining consecutive decrypted segments of one TCP flow into one packet
//! with a CHECKSUM_PARTIAL vnet header, the way a NIC's GRO does, and the rule for which
//! segments may join.
//!
//! Leaves out: decryption and the TUN write (the receive path), the vnet header and the
//! checksum arithmetic (`offload`).

use super::{
    checksums_ok, fold, ipv4_header_checksum, pseudo_header_v4, tcp_v4_header_lens, VnetHdr, F_NEEDS_CSUM,
    GSO_NONE, GSO_TCPV4, IPPROTO_TCP, IP_MAX, MAX_SEGMENTS, TCP_ACK, TCP_PSH,
};

/// Where a decrypted packet lies: `buf` indexes the caller's receive buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRef {
    pub buf: usize,
    pub start: usize,
    pub end: usize,
}

/// A run of segments that can become one packet: the first one whole, then payloads only.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub first: Option<PacketRef>,
    /// Payload ranges of the segments after the first.
    pub more: Vec<PacketRef>,
    hdr_len: usize,
    gso_size: usize,
    total: usize,
    next_seq: u32,
    /// The last segment has PSH set.
    psh: bool,
    /// No further segment may join (a PSH or a short segment ended it).
    closed: bool,
}

impl Group {
    pub fn segments(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    /// Bytes of the segments as they arrived, headers included.
    pub fn packet_bytes(&self) -> usize {
        let first = self.first.map_or(0, |f| f.end - f.start);
        first
            + self
                .more
                .iter()
                .map(|m| self.hdr_len + m.end - m.start)
                .sum::<usize>()
    }

    /// Empties it for the next run, keeping its allocation.
    pub fn clear(&mut self) {
        let mut more = std::mem::take(&mut self.more);
        more.clear();
        *self = Group {
            more,
            ..Group::default()
        };
    }
}

/// Joins consecutive in-order segments of one TCP/IPv4 flow, as Linux GRO would: same
/// addresses, ports, TOS, TTL, DF, ack number, window and options; only ACK (and PSH on the
/// last one) set; every segment but the last exactly as long as the first.
pub struct Coalescer;

impl Coalescer {
    /// Whether `pkt` may start a group (and its header and payload lengths).
    fn candidate(pkt: &[u8]) -> Option<(usize, usize)> {
        let (ihl, tcp_len) = tcp_v4_header_lens(pkt)?;
        if ihl != 20 || usize::from(u16::from_be_bytes([pkt[2], pkt[3]])) != pkt.len() {
            return None;
        }
        // No fragments (MF clear, offset 0).
        if u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0 {
            return None;
        }
        let flags = pkt[ihl + 13];
        if flags & !(TCP_ACK | TCP_PSH) != 0 || flags & TCP_ACK == 0 {
            return None;
        }
        let payload = pkt.len() - ihl - tcp_len;
        (payload > 0).then_some((ihl + tcp_len, payload))
    }

    /// Tries to add `pkt` (the bytes at `at`) to `group`; false when it must start a new one.
    pub fn push(group: &mut Group, pkt: &[u8], at: PacketRef, first: &[u8]) -> bool {
        let Some((hdr_len, payload)) = Self::candidate(pkt) else {
            return false;
        };
        let seq = u32::from_be_bytes(pkt[24..28].try_into().expect("4 bytes"));
        if group.first.is_none() {
            group.first = Some(at);
            group.hdr_len = hdr_len;
            group.gso_size = payload;
            group.total = pkt.len();
            group.next_seq = seq.wrapping_add(payload as u32);
            group.psh = pkt[33] & TCP_PSH != 0;
            group.closed = group.psh;
            return true;
        }
        if group.closed
            || hdr_len != group.hdr_len
            || payload > group.gso_size
            || seq != group.next_seq
            || group.total + payload > IP_MAX
            || group.more.len() + 1 >= MAX_SEGMENTS
        {
            return false;
        }
        // TOS (1), DF bit (6), TTL (8), protocol (9), addresses (12..20) as the first.
        if pkt[1] != first[1]
            || (pkt[6] ^ first[6]) & 0x40 != 0
            || pkt[8..10] != first[8..10]
            || pkt[12..20] != first[12..20]
        {
            return false;
        }
        // Ports (20..24), ack number (28..32), header length and window (32, 34..36), options.
        if pkt[20..24] != first[20..24]
            || pkt[28..33] != first[28..33]
            || pkt[34..36] != first[34..36]
            || pkt[40..hdr_len] != first[40..hdr_len]
        {
            return false;
        }
        group.more.push(PacketRef {
            buf: at.buf,
            start: at.start + hdr_len,
            end: at.end,
        });
        group.total += payload;
        group.next_seq = seq.wrapping_add(payload as u32);
        group.psh = pkt[33] & TCP_PSH != 0;
        group.closed = group.psh || payload < group.gso_size;
        true
    }

    /// Rewrites the group's first packet (`first`, in place) into the head of the joined
    /// packet and returns the vnet header to write before it; a single packet is left as it
    /// is, with an empty header (the kernel checks its checksum as usual).
    pub fn finish(group: &Group, first: &mut [u8]) -> VnetHdr {
        if group.more.is_empty() {
            return VnetHdr {
                gso_type: GSO_NONE,
                ..VnetHdr::default()
            };
        }
        let total = group.total;
        first[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ipv4_header_checksum(first, 20);
        if group.psh {
            first[33] |= TCP_PSH;
        }
        // CHECKSUM_PARTIAL: the field holds the pseudo-header sum; the payload was
        // authenticated by the tunnel, so the kernel need not check it again.
        let pseudo = fold(pseudo_header_v4(
            &first[12..16],
            &first[16..20],
            IPPROTO_TCP,
            total - 20,
        ));
        first[36..38].copy_from_slice(&pseudo.to_be_bytes());
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: group.hdr_len as u16,
            gso_size: group.gso_size as u16,
            csum_start: 20,
            csum_offset: 16,
        }
    }
}

/// Joins the decrypted packets at `packets` (in `bufs`, in order) into groups as far as
/// [`Coalescer`] allows, and hands each group to `deliver` (which may rewrite its first
/// packet in place with [`Coalescer::finish`]); a packet that joins nothing goes alone, as
/// it came. Unless the suite `authenticated` the packets, a segment joins only once
/// [`checksums_ok`] verified it: a joined packet reaches the kernel with its checksum
/// trusted (CHECKSUM_PARTIAL), a lone one meets the kernel's own check. `group` is scratch
/// space, kept for its allocation.
pub fn coalesce(
    bufs: &mut [Vec<u8>],
    packets: &[PacketRef],
    authenticated: bool,
    group: &mut Group,
    mut deliver: impl FnMut(&Group, &mut [Vec<u8>]),
) {
    group.clear();
    for &at in packets {
        let pkt = &bufs[at.buf][at.start..at.end];
        let may_join = authenticated || checksums_ok(pkt);
        if may_join {
            let first = group.first.map_or(&[][..], |f| &bufs[f.buf][f.start..f.end]);
            if Coalescer::push(group, pkt, at, first) {
                continue;
            }
        }
        if group.first.is_some() {
            deliver(group, bufs);
            group.clear();
        }
        if !(may_join && Coalescer::push(group, &bufs[at.buf][at.start..at.end], at, &[])) {
            // Not a TCP data segment (an ACK, say), or not verified: on its own.
            group.first = Some(at);
            deliver(group, bufs);
            group.clear();
        }
    }
    if group.first.is_some() {
        deliver(group, bufs);
        group.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::tcp_packet;
    use super::super::{checksum, checksums_ok, complete_checksum, Segmenter, TCP_FIN};
    use super::*;

    /// Joins `pkts` (all authenticated); returns each group's rebuilt packet (head with
    /// vnet header applied and payloads appended) so it can be compared with the original
    /// stream.
    fn join_all(pkts: &mut [Vec<u8>]) -> Vec<(VnetHdr, Vec<u8>)> {
        join_all_as(pkts, true)
    }

    fn join_all_as(pkts: &mut [Vec<u8>], authenticated: bool) -> Vec<(VnetHdr, Vec<u8>)> {
        let refs: Vec<PacketRef> = pkts
            .iter()
            .enumerate()
            .map(|(buf, p)| PacketRef {
                buf,
                start: 0,
                end: p.len(),
            })
            .collect();
        let mut joined = Vec::new();
        coalesce(pkts, &refs, authenticated, &mut Group::default(), |g, bufs| {
            let f = g.first.unwrap();
            let hdr = Coalescer::finish(g, &mut bufs[f.buf]);
            let mut whole = bufs[f.buf].clone();
            for m in &g.more {
                whole.extend_from_slice(&bufs[m.buf][m.start..m.end]);
            }
            joined.push((hdr, whole));
        });
        joined
    }

    #[test]
    fn coalescing_joins_a_run_and_splitting_it_again_gives_the_segments_back() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 13 % 256) as u8).collect();
        let mut pkts: Vec<Vec<u8>> = payload
            .chunks(1200)
            .enumerate()
            .map(|(i, c)| {
                let flags = if i == 4 { TCP_ACK | TCP_PSH } else { TCP_ACK };
                tcp_packet(100 + 1200 * i as u32, flags, c, 10 + i as u16)
            })
            .collect();
        let originals = pkts.clone();
        let groups = join_all(&mut pkts);
        assert_eq!(groups.len(), 1);
        let (hdr, whole) = &groups[0];
        assert_eq!(hdr.gso_type, GSO_TCPV4);
        assert_eq!(hdr.gso_size, 1200);
        assert_eq!(usize::from(u16::from_be_bytes([whole[2], whole[3]])), whole.len());
        assert_eq!(&whole[52..], &payload[..]);
        assert_eq!(checksum(&whole[..20]), 0);
        // Its partial checksum completes to a valid one, and segmenting restores the stream.
        let mut full = whole.clone();
        complete_checksum(&mut full, hdr).unwrap();
        assert!(checksums_ok(&full));
        let mut seg = Segmenter::new(whole, hdr).unwrap();
        let mut out = vec![0u8; seg.max_segment_len()];
        let mut i = 0;
        while let Some(len) = seg.next_into(&mut out) {
            assert_eq!(&out[..len], &originals[i][..], "segment {i}");
            i += 1;
        }
        assert_eq!(i, originals.len());
    }

    #[test]
    fn coalescing_stops_where_gro_would() {
        let seg = |seq: u32, flags: u8, len: usize| tcp_packet(seq, flags, &vec![1u8; len], 1);
        // A gap in sequence numbers.
        let mut gap = vec![seg(0, TCP_ACK, 100), seg(200, TCP_ACK, 100)];
        assert_eq!(join_all(&mut gap).len(), 2);
        // PSH ends a group; the next segment starts another.
        let mut psh = vec![seg(0, TCP_ACK | TCP_PSH, 100), seg(100, TCP_ACK, 100)];
        assert_eq!(join_all(&mut psh).len(), 2);
        // A shorter segment ends it too; a longer one cannot join.
        let mut short = vec![seg(0, TCP_ACK, 100), seg(100, TCP_ACK, 50), seg(150, TCP_ACK, 50)];
        assert_eq!(join_all(&mut short).len(), 2);
        let mut long = vec![seg(0, TCP_ACK, 100), seg(100, TCP_ACK, 200)];
        assert_eq!(join_all(&mut long).len(), 2);
        // SYN/FIN, pure ACKs and a different window are never joined.
        let mut fin = vec![seg(0, TCP_ACK, 100), seg(100, TCP_ACK | TCP_FIN, 100)];
        assert_eq!(join_all(&mut fin).len(), 2);
        let mut acks = vec![seg(0, TCP_ACK, 0), seg(0, TCP_ACK, 0)];
        assert_eq!(join_all(&mut acks).len(), 2);
        let mut window = vec![seg(0, TCP_ACK, 100), seg(100, TCP_ACK, 100)];
        window[1][34] = 9;
        assert_eq!(join_all(&mut window).len(), 2);
        // Nothing beyond an IP packet's 65535 bytes.
        let mut many: Vec<Vec<u8>> = (0..60u32).map(|i| seg(i * 1400, TCP_ACK, 1400)).collect();
        let groups = join_all(&mut many);
        assert_eq!(groups.len(), 2);
        assert!(groups.iter().all(|(_, p)| p.len() <= IP_MAX));
    }

    #[test]
    fn without_a_mac_a_segment_joins_only_once_its_checksums_hold() {
        let stream = |n: u32| -> Vec<Vec<u8>> {
            (0..n)
                .map(|i| tcp_packet(i * 100, TCP_ACK, &[7u8; 100], 1))
                .collect()
        };
        // Verified segments join as with a MAC.
        assert_eq!(join_all_as(&mut stream(4), false).len(), 1);
        // A corrupted one (its TCP checksum no longer holds) goes alone, unmarked, so the
        // kernel checks it; with a MAC the tunnel would have dropped it before this point.
        let mut pkts = stream(4);
        pkts[2][60] ^= 0x01;
        let groups = join_all_as(&mut pkts, false);
        assert_eq!(groups.len(), 3);
        assert_eq!(
            groups[1].0,
            VnetHdr::default(),
            "no CHECKSUM_PARTIAL on the lone one"
        );
        assert_eq!(groups[1].1, pkts[2]);
        let mut trusted = stream(4);
        trusted[2][60] ^= 0x01;
        assert_eq!(join_all_as(&mut trusted, true).len(), 1, "trusted: joined");
    }
}
