//! Which inner packets a tunnel end carries: only those between the two ends' inner
//! addresses, the way WireGuard's cryptokey routing (allowed-ips) binds a peer's key to its
//! tunnel address. Holding the key lets a peer send whatever it likes inside the tunnel; an
//! end that wrote every decrypted packet to its TUN device would let that peer reach every
//! address of the host and, with forwarding on, the networks behind it.
//!
//! [`InnerAddresses::check_received`] passes a decrypted packet only when it is a
//! well-formed IPv4 or IPv6 packet from the peer's inner address to this end's;
//! [`InnerAddresses::check_sending`] passes a packet read from TUN only when it goes from
//! this end's inner address to the peer's (what the peer would drop is not sent). Both read
//! the IP header only: no I/O, no allocation.

use std::net::IpAddr;

use crate::packet::DropReason;

const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;

/// The two inner addresses of a tunnel, one family, as raw bytes for cheap comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerAddresses {
    V4 { local: [u8; 4], peer: [u8; 4] },
    V6 { local: [u8; 16], peer: [u8; 16] },
}

/// Why two addresses cannot be a tunnel's inner pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InnerAddressError {
    #[error("the inner addresses {local} (this end) and {peer} (the peer) are not of one family")]
    Families { local: IpAddr, peer: IpAddr },
    #[error("this end and the peer cannot both have the inner address {0}")]
    Same(IpAddr),
}

impl InnerAddresses {
    /// This end's inner address and the peer's, both IPv4 or both IPv6 (an IPv4-mapped IPv6
    /// address counts as IPv4: the TUN device carries it as IPv4).
    pub fn new(local: IpAddr, peer: IpAddr) -> Result<InnerAddresses, InnerAddressError> {
        let (local, peer) = (local.to_canonical(), peer.to_canonical());
        if local == peer {
            return Err(InnerAddressError::Same(local));
        }
        match (local, peer) {
            (IpAddr::V4(l), IpAddr::V4(p)) => Ok(InnerAddresses::V4 {
                local: l.octets(),
                peer: p.octets(),
            }),
            (IpAddr::V6(l), IpAddr::V6(p)) => Ok(InnerAddresses::V6 {
                local: l.octets(),
                peer: p.octets(),
            }),
            _ => Err(InnerAddressError::Families { local, peer }),
        }
    }

    /// A decrypted packet may go to TUN: a whole IPv4 or IPv6 packet (its length fields
    /// match what arrived), from the peer's inner address to this end's (so of this
    /// tunnel's family).
    pub fn check_received(&self, packet: &[u8]) -> Result<(), DropReason> {
        let (src, dst) = header(packet, true).ok_or(DropReason::BadInnerHeader)?;
        if self.matches(src, dst, false) {
            Ok(())
        } else {
            Err(DropReason::WrongInnerAddress)
        }
    }

    /// A packet read from TUN may be sent: from this end's inner address to the peer's.
    /// Lengths are not checked: the kernel wrote the packet (with offload a super-packet
    /// whose segments the tunnel cuts).
    pub fn check_sending(&self, packet: &[u8]) -> Result<(), DropReason> {
        let (src, dst) = header(packet, false).ok_or(DropReason::BadInnerHeader)?;
        if self.matches(src, dst, true) {
            Ok(())
        } else {
            Err(DropReason::WrongInnerAddress)
        }
    }

    /// Whether `src → dst` is peer → this end (or this end → peer when `outgoing`); false
    /// for another family.
    fn matches(&self, src: &[u8], dst: &[u8], outgoing: bool) -> bool {
        let (from, to): (&[u8], &[u8]) = match (self, outgoing) {
            (InnerAddresses::V4 { local, peer }, false) => (peer, local),
            (InnerAddresses::V4 { local, peer }, true) => (local, peer),
            (InnerAddresses::V6 { local, peer }, false) => (peer, local),
            (InnerAddresses::V6 { local, peer }, true) => (local, peer),
        };
        src == from && dst == to
    }
}

/// The source and destination address bytes of an IPv4 or IPv6 packet; None when it is
/// neither, or shorter than its fixed header, or (`exact`) its length fields disagree with
/// its length.
fn header(packet: &[u8], exact: bool) -> Option<(&[u8], &[u8])> {
    match packet.first()? >> 4 {
        4 if packet.len() >= IPV4_HEADER => {
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
            if ihl < IPV4_HEADER || (exact && (total != packet.len() || ihl > total)) {
                return None;
            }
            Some((&packet[12..16], &packet[16..20]))
        }
        6 if packet.len() >= IPV6_HEADER => {
            let payload = usize::from(u16::from_be_bytes([packet[4], packet[5]]));
            if exact && IPV6_HEADER + payload != packet.len() {
                return None;
            }
            Some((&packet[8..24], &packet[24..40]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(src: [u8; 4], dst: [u8; 4], len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    fn pair4() -> InnerAddresses {
        InnerAddresses::new([198, 19, 0, 1].into(), [198, 19, 0, 2].into()).unwrap()
    }

    #[test]
    fn mixed_families_and_one_address_twice_are_refused() {
        let v4: IpAddr = "198.19.0.1".parse().unwrap();
        let v6: IpAddr = "2001:2::1".parse().unwrap();
        assert!(matches!(
            InnerAddresses::new(v4, v6),
            Err(InnerAddressError::Families { .. })
        ));
        assert_eq!(InnerAddresses::new(v4, v4), Err(InnerAddressError::Same(v4)));
        // A mapped address is the IPv4 address the TUN device carries.
        let mapped: IpAddr = "::ffff:198.19.0.2".parse().unwrap();
        assert_eq!(InnerAddresses::new(v4, mapped).unwrap(), pair4());
    }

    #[test]
    fn header_length_fields_must_match_when_received() {
        let ends = pair4();
        let good = v4([198, 19, 0, 2], [198, 19, 0, 1], 60);
        assert_eq!(ends.check_received(&good), Ok(()));
        // One byte more or less than the header says.
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(ends.check_received(&longer), Err(DropReason::BadInnerHeader));
        assert_eq!(ends.check_received(&good[..59]), Err(DropReason::BadInnerHeader));
        // A header length below 20 bytes, or past the packet.
        let mut short_ihl = good.clone();
        short_ihl[0] = 0x44;
        assert_eq!(ends.check_received(&short_ihl), Err(DropReason::BadInnerHeader));
        let mut long_ihl = v4([198, 19, 0, 2], [198, 19, 0, 1], 24);
        long_ihl[0] = 0x47;
        assert_eq!(ends.check_received(&long_ihl), Err(DropReason::BadInnerHeader));
        // Sending reads the addresses only: a super-packet's length is the kernel's.
        let mut super_packet = good.clone();
        super_packet[2..4].copy_from_slice(&[0, 0]);
        let reversed = v4([198, 19, 0, 1], [198, 19, 0, 2], 60);
        let mut reversed_super = reversed.clone();
        reversed_super[2..4].copy_from_slice(&[0, 0]);
        assert_eq!(ends.check_sending(&reversed_super), Ok(()));
        assert_eq!(
            ends.check_sending(&super_packet),
            Err(DropReason::WrongInnerAddress)
        );
    }
}
