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
//! This file: the vnet header and the checksum arithmetic both directions share; `segment`
//! (out) and `coalesce` (in) hold the rest. Leaves out: all I/O (the send and receive paths)
//! and encryption; these are pure functions on byte slices.

mod coalesce;
mod segment;

pub use coalesce::{coalesce, Coalescer, Group, PacketRef};
pub use segment::Segmenter;

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
/// (RFC 1071 §2(B)), so it adds little-endian 32-bit words, a loop the compiler vectorises,
/// and swaps the folded result.
fn sum(data: &[u8], initial: u64) -> u64 {
    initial + u64::from(fold(words_sum(data)).swap_bytes())
}

/// The sum of `data` as little-endian 32-bit words (the last zero-padded), with AVX2 where
/// the CPU has it: the build targets baseline x86-64 (SSE2), and the send path checksums
/// every byte it sends, so 2x on the checksum is worth a run-time check (measured on this
/// machine's EPYC: 42 ns per 1500 bytes against 80–150 ns).
fn words_sum(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just now.
        return unsafe { words_sum_avx2(data) };
    }
    words_sum_portable(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn words_sum_avx2(data: &[u8]) -> u64 {
    words_sum_portable(data)
}

#[inline(always)]
fn words_sum_portable(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        // At most 2^14 words of 2^32 in a 64 KiB packet: no overflow.
        acc += u64::from(u32::from_le_bytes(w.try_into().expect("4 bytes")));
    }
    let mut last = [0u8; 4];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    acc + u64::from(u32::from_le_bytes(last))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 packet with a valid IP checksum and a valid (full) TCP checksum.
    pub(super) fn tcp_packet(seq: u32, flags: u8, payload: &[u8], id: u16) -> Vec<u8> {
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

    /// Whichever loop runs (AVX2 here, the portable one elsewhere), the sum is RFC 1071's:
    /// big-endian 16-bit words, an odd last byte padded, at every length and alignment.
    #[test]
    fn the_fast_sum_is_the_plain_16_bit_sum_at_every_length() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let reference = |d: &[u8]| -> u16 {
            let mut acc: u64 = d
                .chunks(2)
                .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
                .sum();
            while acc >> 16 != 0 {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            acc as u16
        };
        let mut lens: Vec<usize> = (0..300).collect();
        lens.extend([1447, 1448, 1449, 9000, 65_535]);
        for offset in [0, 1, 3] {
            for &len in &lens {
                let d = &data[offset..offset + len];
                assert_eq!(fold(sum(d, 0)), reference(d), "{len} bytes at offset {offset}");
                assert_eq!(fold(words_sum_portable(d)).swap_bytes(), reference(d), "{len}");
            }
        }
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2 (before complementing).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
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
}
