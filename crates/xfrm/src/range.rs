//! The identifiers the lab owns. Every SA the lab installs has its reqid and SPI in these
//! ranges and every policy it installs carries templates with a lab reqid, so that
//! `ipsec-lab clean` can remove leftovers of a crashed run and never touch anything else.

use std::fmt;

/// First reqid of the lab's range (0x1A5 reads "lab").
pub const REQID_FIRST: u32 = 0x001A_5000;
/// Last reqid of the lab's range.
pub const REQID_LAST: u32 = 0x001A_5FFF;
/// First SPI of the lab's range: the top twelve bits are 0x1A5.
pub const SPI_FIRST: u32 = 0x1A50_0000;
/// Last SPI of the lab's range.
pub const SPI_LAST: u32 = 0x1A5F_FFFF;
/// Priority of the lab's policies. XFRM picks the lowest number first, so a policy someone
/// else installed with the iproute2 default (0) wins over the lab's where both match.
pub const LAB_POLICY_PRIORITY: u32 = 1000;

/// Whether `priority` is one the lab gives its policies ([`LAB_POLICY_PRIORITY`], or one
/// more for the catch-all of a multi-pair run).
pub fn is_lab_policy_priority(priority: u32) -> bool {
    (LAB_POLICY_PRIORITY..=LAB_POLICY_PRIORITY + 1).contains(&priority)
}

/// The priority the lab gives the `cbc(aes)` driver it pins: far above any the kernel gives
/// its drivers (hundreds), and with the lab's mark (0x1A5) in it, so a driver holding it was
/// raised by the lab. `clean` puts back only a driver that still holds it.
pub const LAB_DRIVER_PRIORITY: u32 = 0x01A5_0000;

/// A reqid: binds a policy template to the SAs that may serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u32);

impl ReqId {
    pub fn is_lab(self) -> bool {
        (REQID_FIRST..=REQID_LAST).contains(&self.0)
    }
}

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A Security Parameter Index, in host byte order (the wire carries it big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Spi(pub u32);

impl Spi {
    pub fn is_lab(self) -> bool {
        (SPI_FIRST..=SPI_LAST).contains(&self.0)
    }
}

impl fmt::Display for Spi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The identifiers of one run: one reqid shared by both directions and one SPI per
/// direction. Runs pick a slot (0..4096) so two concurrent runs do not collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunIds {
    pub reqid: ReqId,
    /// SPI of the SA carrying traffic from end A to end B.
    pub spi_a_to_b: Spi,
    /// SPI of the SA carrying traffic from end B to end A.
    pub spi_b_to_a: Spi,
}

impl RunIds {
    /// Number of distinct run slots.
    pub const SLOTS: u16 = 0x1000;

    pub fn for_slot(slot: u16) -> RunIds {
        let slot = u32::from(slot % Self::SLOTS);
        RunIds {
            reqid: ReqId(REQID_FIRST | slot),
            spi_a_to_b: Spi(SPI_FIRST | slot << 8 | 0x01),
            spi_b_to_a: Spi(SPI_FIRST | slot << 8 | 0x02),
        }
    }

    /// Most SA pairs one run's identifiers stretch to ([`RunIds::pair`]).
    pub const MAX_PAIRS: u16 = 127;

    /// The identifiers of the run's SA pair `i` (0: these), for runs with several pairs:
    /// the same slot's SPIs `2i+1`/`2i+2` and the reqid `i` slots on (wrapping inside the
    /// lab's range), so every pair is told apart by its policies' templates.
    pub fn pair(&self, i: u16) -> RunIds {
        assert!(
            i < Self::MAX_PAIRS,
            "SA pair {i}: at most {} per run",
            Self::MAX_PAIRS
        );
        let slot = (self.reqid.0 - REQID_FIRST + u32::from(i)) % u32::from(Self::SLOTS);
        let spi = |n: u32| Spi(self.spi_a_to_b.0 & !0xFF | n);
        RunIds {
            reqid: ReqId(REQID_FIRST | slot),
            spi_a_to_b: spi(2 * u32::from(i) + 1),
            spi_b_to_a: spi(2 * u32::from(i) + 2),
        }
    }

    /// A slot from the OS RNG, so leftovers of a crashed run rarely block the next one.
    pub fn random() -> RunIds {
        let slot = getrandom::u32()
            .map(|v| v as u16)
            .unwrap_or_else(|_| std::process::id() as u16);
        RunIds::for_slot(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_stays_inside_the_lab_ranges() {
        for slot in [0, 1, 0x7FF, 0xFFF, 0x1000, u16::MAX] {
            let ids = RunIds::for_slot(slot);
            assert!(ids.reqid.is_lab(), "{ids:?}");
            assert!(ids.spi_a_to_b.is_lab() && ids.spi_b_to_a.is_lab(), "{ids:?}");
            assert_ne!(ids.spi_a_to_b, ids.spi_b_to_a);
        }
    }

    #[test]
    fn every_pair_of_a_run_has_its_own_reqid_and_spis_inside_the_lab_ranges() {
        for slot in [0, 0x7FF, 0xFFF] {
            let ids = RunIds::for_slot(slot);
            assert_eq!(ids.pair(0), ids);
            let pairs: Vec<RunIds> = (0..RunIds::MAX_PAIRS).map(|i| ids.pair(i)).collect();
            let mut reqids: Vec<ReqId> = pairs.iter().map(|p| p.reqid).collect();
            let mut spis: Vec<Spi> = pairs.iter().flat_map(|p| [p.spi_a_to_b, p.spi_b_to_a]).collect();
            assert!(reqids.iter().all(|r| r.is_lab()) && spis.iter().all(|s| s.is_lab()));
            reqids.sort();
            reqids.dedup();
            spis.sort();
            spis.dedup();
            assert_eq!(reqids.len(), pairs.len(), "slot {slot}");
            assert_eq!(spis.len(), 2 * pairs.len(), "slot {slot}");
        }
    }

    #[test]
    fn foreign_ids_are_not_the_labs() {
        assert!(!ReqId(0).is_lab());
        assert!(!ReqId(REQID_LAST + 1).is_lab());
        assert!(!Spi(0x101).is_lab());
        assert!(!Spi(SPI_LAST + 1).is_lab());
        assert!(!is_lab_policy_priority(0));
        assert!(is_lab_policy_priority(LAB_POLICY_PRIORITY + 1));
        assert!(!is_lab_policy_priority(LAB_POLICY_PRIORITY + 2));
    }
}
