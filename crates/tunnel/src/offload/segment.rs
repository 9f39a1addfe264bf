//! Out (TUN → wire): cutting one TCP/IPv4 super-packet into the segments the kernel would
//! have sent, each a complete packet with its own headers and checksums.
//!
//! Leaves out: the vnet header and the checksum arithmetic (`offload`), encryption and I/O
//! (the send path).

use super::{
    fold, ipv4_header_checksum, pseudo_header_v4, sum, tcp_v4_header_lens, OffloadError, VnetHdr, GSO_ECN,
    GSO_TCPV4, IPPROTO_TCP, TCP_CWR, TCP_FIN, TCP_PSH,
};

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

#[cfg(test)]
mod tests {
    use super::super::tests::tcp_packet;
    use super::super::{checksums_ok, F_NEEDS_CSUM, TCP_ACK};
    use super::*;

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
            assert!(checksums_ok(s));
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
}
