//! TUN offload, the way virtio-net (and wireguard-go) does it: with `IFF_VNET_HDR` every
//! packet read from or written to the TUN device starts with a `virtio_net_hdr`, and with
//! `TUNSETOFFLOAD(TUN_F_CSUM | TUN_F_TSO4)` the kernel hands the tunnel TCP "super-packets"
//! of up to 64 KiB plus the segment size, with the TCP checksum left for the device to fill.
//!
//! * Out (TUN → wire): [`Segmenter`] cuts such a packet into the wire-sized TCP/IPv4 segments
//!   the kernel would have produced, each with its own IP length, id and checksum and its own
//!   TCP sequence number, flags and full checksum. Each segment is then encrypted on its own,
//!   exactly like a packet the kernel had segmented itself.
//! * In (wire → TUN): [`Coalescer`] joins consecutive decrypted segments of one TCP flow into
//!   one packet again (what GRO does on a NIC), so the kernel's TCP receive path, and the
//!   ACKs it sends, run once per 64 KiB instead of once per segment. Those packets are marked
//!   `NEEDS_CSUM` (CHECKSUM_PARTIAL), i.e. checksum already trusted: with an authenticated
//!   suite their payload just passed the tunnel's MAC; with an unauthenticated one (`none`,
//!   CBC without HMAC) each segment may join only after [`checksums_ok`] verified it, as a
//!   NIC's GRO does, so a forged or corrupted segment still meets the kernel's own check.
//!
//! Pure functions on byte slices; the I/O stays in `lib.rs`.

/// `struct virtio_net_hdr` (no `num_buffers`): what precedes each packet on the TUN fd.
pub const VNET_HDR_LEN: usize = 10;
const F_NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_ECN: u8 = 0x80;

const IPPROTO_TCP: u8 = 6;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const TCP_CWR: u8 = 0x80;
const IP_MAX: usize = 65_535;
/// Most segments joined into one packet (bounds the `writev` that delivers it).
pub const MAX_SEGMENTS: usize = 64;

/// The header the kernel puts in front of a packet read from TUN (little-endian fields: the
/// lab's TUN devices use the host's byte order, which is little-endian on every machine it
/// supports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        let b: &[u8; VNET_HDR_LEN] = b.get(..VNET_HDR_LEN)?.try_into().ok()?;
        let u16le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16le(2),
            gso_size: u16le(4),
            csum_start: u16le(6),
            csum_offset: u16le(8),
        })
    }

    /// A super-packet to be cut into segments.
    pub fn is_gso(&self) -> bool {
        self.gso_type != GSO_NONE
    }

    /// Its checksum is left for the device to fill in ([`complete_checksum`]).
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    pub fn bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }
}

/// Why a packet read from TUN could not be turned into wire packets. Counted, not fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadError {
    /// A GSO type other than TCP over IPv4 (the only one the tunnel asks for).
    UnsupportedGso,
    /// Headers shorter than they say, or offsets outside the packet.
    Malformed,
}

/// Ones'-complement sum of `data` (big-endian 16-bit words, an odd last byte padded with
/// zero) added to `initial`, not folded (RFC 1071). The sum does not depend on byte order
/// (RFC 1071 §2(B)), so it adds little-endian 32-bit words, a loop the compiler vectorises
/// (2.4x faster than big-endian 64-bit words here), and swaps the folded result.
fn sum(data: &[u8], initial: u64) -> u64 {
    let mut acc = 0u64;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        // At most 2^14 words of 2^32 in a 64 KiB packet: no overflow.
        acc += u64::from(u32::from_le_bytes(w.try_into().expect("4 bytes")));
    }
    let mut last = [0u8; 4];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    acc += u64::from(u32::from_le_bytes(last));
    initial + u64::from(fold(acc).swap_bytes())
}

fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum of `data` (what goes into a header: complemented).
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data, 0))
}

fn pseudo_header_v4(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u64 {
    sum(src, 0) + sum(dst, 0) + u64::from(proto) + len as u64
}

/// Fills in a checksum the kernel left to the device (`NEEDS_CSUM`): the field at
/// `csum_start + csum_offset` already holds the pseudo-header sum.
pub fn complete_checksum(pkt: &mut [u8], hdr: &VnetHdr) -> Result<(), OffloadError> {
    let start = usize::from(hdr.csum_start);
    let at = start + usize::from(hdr.csum_offset);
    if at + 2 > pkt.len() {
        return Err(OffloadError::Malformed);
    }
    let c = checksum(&pkt[start..]);
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Whether a TCP/IPv4 packet's IP header and TCP checksums (over the whole segment) hold.
pub fn checksums_ok(pkt: &[u8]) -> bool {
    let Some((ihl, _)) = tcp_v4_header_lens(pkt) else {
        return false;
    };
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    if total != pkt.len() || checksum(&pkt[..ihl]) != 0 {
        return false;
    }
    let pseudo = pseudo_header_v4(&pkt[12..16], &pkt[16..20], IPPROTO_TCP, total - ihl);
    !fold(sum(&pkt[ihl..], pseudo)) == 0
}

fn ipv4_header_checksum(pkt: &mut [u8], ihl: usize) {
    pkt[10..12].fill(0);
    let c = checksum(&pkt[..ihl]);
    pkt[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Cuts one TCP/IPv4 GSO packet (as read from TUN, after the vnet header) into segments of
/// at most `gso_size` payload bytes.
pub struct Segmenter<'a> {
    pkt: &'a [u8],
    ihl: usize,
    hdr_len: usize,
    gso_size: usize,
    /// Payload offset of the next segment.
    offset: usize,
    index: u16,
}

impl<'a> Segmenter<'a> {
    pub fn new(pkt: &'a [u8], hdr: &VnetHdr) -> Result<Segmenter<'a>, OffloadError> {
        if hdr.gso_type & !GSO_ECN != GSO_TCPV4 {
            return Err(OffloadError::UnsupportedGso);
        }
        let (ihl, tcp_len) = tcp_v4_header_lens(pkt).ok_or(OffloadError::Malformed)?;
        let gso_size = usize::from(hdr.gso_size);
        if gso_size == 0 {
            return Err(OffloadError::Malformed);
        }
        Ok(Segmenter {
            pkt,
            ihl,
            hdr_len: ihl + tcp_len,
            gso_size,
            offset: 0,
            index: 0,
        })
    }

    /// Largest segment (headers and payload), for sizing buffers.
    pub fn max_segment_len(&self) -> usize {
        self.hdr_len + self.gso_size
    }

    /// Writes the next segment into `out` (which must hold [`max_segment_len`] bytes);
    /// returns its length, or None when the payload is used up.
    ///
    /// [`max_segment_len`]: Segmenter::max_segment_len
    pub fn next_into(&mut self, out: &mut [u8]) -> Option<usize> {
        let payload = &self.pkt[self.hdr_len..];
        // A header-only packet still yields its one segment.
        if self.index > 0 && self.offset >= payload.len() {
            return None;
        }
        let chunk = &payload[self.offset..(self.offset + self.gso_size).min(payload.len())];
        let last = self.offset + chunk.len() >= payload.len();
        let (ihl, hdr_len) = (self.ihl, self.hdr_len);
        let len = hdr_len + chunk.len();
        out[..hdr_len].copy_from_slice(&self.pkt[..hdr_len]);
        out[hdr_len..len].copy_from_slice(chunk);
        // IP: length, id (+1 per segment, as the kernel's own segmentation does), checksum.
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        let id = u16::from_be_bytes([self.pkt[4], self.pkt[5]]).wrapping_add(self.index);
        out[4..6].copy_from_slice(&id.to_be_bytes());
        ipv4_header_checksum(out, ihl);
        // TCP: sequence number; FIN and PSH only on the last segment, CWR only on the first.
        let seq = u32::from_be_bytes(self.pkt[ihl + 4..ihl + 8].try_into().expect("4 bytes"))
            .wrapping_add(self.offset as u32);
        out[ihl + 4..ihl + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = self.pkt[ihl + 13];
        if !last {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        if self.index > 0 {
            flags &= !TCP_CWR;
        }
        out[ihl + 13] = flags;
        out[ihl + 16..ihl + 18].fill(0);
        let pseudo = pseudo_header_v4(&out[12..16], &out[16..20], IPPROTO_TCP, len - ihl);
        let c = !fold(sum(&out[ihl..len], pseudo));
        out[ihl + 16..ihl + 18].copy_from_slice(&c.to_be_bytes());
        self.offset += chunk.len();
        self.index = self.index.wrapping_add(1);
        Some(len)
    }
}

/// IPv4 header length and TCP header length of a TCP/IPv4 packet whose headers are all there
/// and whose IP length matches; None otherwise.
fn tcp_v4_header_lens(pkt: &[u8]) -> Option<(usize, usize)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 || pkt[9] != IPPROTO_TCP {
        return None;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    if ihl < 20 || pkt.len() < ihl + 20 {
        return None;
    }
    let tcp_len = usize::from(pkt[ihl + 12] >> 4) * 4;
    if tcp_len < 20 || pkt.len() < ihl + tcp_len {
        return None;
    }
    Some((ihl, tcp_len))
}

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
    use super::*;

    /// A TCP/IPv4 packet with a valid IP checksum and a valid (full) TCP checksum.
    fn tcp_packet(seq: u32, flags: u8, payload: &[u8], id: u16) -> Vec<u8> {
        let len = 20 + 32 + payload.len();
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = IPPROTO_TCP;
        p[12..16].copy_from_slice(&[198, 19, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 0, 2]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&5201u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&7u32.to_be_bytes());
        p[32] = 8 << 4;
        p[33] = flags;
        p[34..36].copy_from_slice(&512u16.to_be_bytes());
        // Timestamp option: NOP NOP TS(10).
        p[40..52].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3]);
        p[52..].copy_from_slice(payload);
        ipv4_header_checksum(&mut p, 20);
        let pseudo = pseudo_header_v4(&p[12..16], &p[16..20], IPPROTO_TCP, len - 20);
        let c = !fold(sum(&p[20..], pseudo));
        p[36..38].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn tcp_checksum_ok(p: &[u8]) -> bool {
        checksums_ok(p)
    }

    #[test]
    fn a_corrupted_segment_fails_the_checksum_check() {
        let good = tcp_packet(1, TCP_ACK, &[0x5a; 1000], 1);
        assert!(checksums_ok(&good));
        for at in [4, 12, 24, 60, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert!(!checksums_ok(&bad), "byte {at}");
        }
        assert!(
            !checksums_ok(&good[..good.len() - 1]),
            "shorter than its IP length"
        );
        assert!(!checksums_ok(&good[..30]));
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2 (before complementing).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
        // Odd lengths pad with a zero byte; every length agrees with the big-endian word sum.
        let long: Vec<u8> = (0..1001u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 2, 3, 4, 5, 7, 8, 9, 1000, 1001] {
            let bytewise = long[..len]
                .chunks(2)
                .map(|w| u64::from(w[0]) << 8 | u64::from(*w.get(1).unwrap_or(&0)))
                .sum::<u64>();
            assert_eq!(fold(sum(&long[..len], 5)), fold(bytewise + 5), "length {len}");
        }
    }

    #[test]
    fn vnet_header_round_trips() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: 1355,
            csum_start: 20,
            csum_offset: 16,
        };
        assert_eq!(VnetHdr::parse(&h.bytes()), Some(h));
        assert_eq!(VnetHdr::parse(&[0; 9]), None);
    }

    #[test]
    fn complete_checksum_turns_a_partial_checksum_into_the_full_one() {
        let p = tcp_packet(1, TCP_ACK | TCP_PSH, b"hello, partial checksum", 1);
        let mut partial = p.clone();
        let pseudo = fold(pseudo_header_v4(
            &p[12..16],
            &p[16..20],
            IPPROTO_TCP,
            p.len() - 20,
        ));
        partial[36..38].copy_from_slice(&pseudo.to_be_bytes());
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 20,
            csum_offset: 16,
            ..VnetHdr::default()
        };
        complete_checksum(&mut partial, &hdr).unwrap();
        assert_eq!(partial, p);
        let bad = VnetHdr {
            csum_start: p.len() as u16,
            ..hdr
        };
        assert_eq!(
            complete_checksum(&mut partial, &bad),
            Err(OffloadError::Malformed)
        );
    }

    #[test]
    fn segmenting_gives_what_separate_packets_would_be() {
        let payload: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
        let seq = 0xffff_f000; // wraps inside the packet
        let big = tcp_packet(seq, TCP_ACK | TCP_PSH | TCP_CWR, &payload, 0xfffe);
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: 1500,
            csum_start: 20,
            csum_offset: 16,
        };
        let mut seg = Segmenter::new(&big, &hdr).unwrap();
        let mut out = vec![0u8; seg.max_segment_len()];
        let mut got = Vec::new();
        while let Some(len) = seg.next_into(&mut out) {
            got.push(out[..len].to_vec());
        }
        assert_eq!(got.len(), 3);
        for (i, s) in got.iter().enumerate() {
            let from = i * 1500;
            let to = (from + 1500).min(payload.len());
            let flags = match i {
                0 => TCP_ACK | TCP_CWR,
                2 => TCP_ACK | TCP_PSH,
                _ => TCP_ACK,
            };
            let want = tcp_packet(
                seq.wrapping_add(from as u32),
                flags,
                &payload[from..to],
                0xfffeu16.wrapping_add(i as u16),
            );
            assert_eq!(s, &want, "segment {i}");
            assert!(tcp_checksum_ok(s));
        }
    }

    #[test]
    fn segmenter_refuses_what_it_does_not_know() {
        let p = tcp_packet(1, TCP_ACK, b"x", 1);
        let udp6 = VnetHdr {
            gso_type: 3,
            gso_size: 1000,
            ..VnetHdr::default()
        };
        assert!(matches!(
            Segmenter::new(&p, &udp6),
            Err(OffloadError::UnsupportedGso)
        ));
        let tcp = VnetHdr {
            gso_type: GSO_TCPV4,
            gso_size: 1000,
            ..VnetHdr::default()
        };
        assert!(matches!(
            Segmenter::new(&p[..30], &tcp),
            Err(OffloadError::Malformed)
        ));
    }

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
        assert!(tcp_checksum_ok(&full));
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
