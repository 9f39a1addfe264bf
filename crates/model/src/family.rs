//! The address family a run's outer and inner packets use (`-4`/`-6`, `--family 4|6`, as
//! iperf3 spells it), the lab's address plan for each, and which backends carry IPv6.
//!
//! IPv4 comes from 198.18.0.0/15 (RFC 2544), IPv6 from 2001:2::/48 (RFC 5180): both are the
//! benchmarking ranges, never routed on the Internet.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;

/// IPv4 or IPv6, for the outer (link) and the inner (tunnel) addresses alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    #[default]
    Ipv4,
    Ipv6,
}

/// Smallest link MTU an IPv6 run accepts: the tunnels' inner devices must keep IPv6's
/// minimum of 1280 bytes (RFC 8200) after the outer headers and the cipher's overhead.
pub const MIN_IPV6_MTU: u32 = 1400;

impl Family {
    pub const ALL: [Family; 2] = [Family::Ipv4, Family::Ipv6];

    pub fn name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }

    /// The digit of `--family` and `-4`/`-6`.
    pub fn digit(self) -> &'static str {
        match self {
            Family::Ipv4 => "4",
            Family::Ipv6 => "6",
        }
    }

    pub fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }

    /// Bytes of the IP header (IPv6 without extension headers).
    pub fn ip_header_len(self) -> usize {
        match self {
            Family::Ipv4 => 20,
            Family::Ipv6 => 40,
        }
    }

    /// The lab's address plan for this family.
    pub fn addressing(self) -> Addressing {
        match self {
            Family::Ipv4 => Addressing::default(),
            Family::Ipv6 => {
                let net =
                    |subnet: u16, host: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, subnet, 0, 0, 0, host));
                Addressing {
                    outer_a: net(0, 1),
                    outer_b: net(0, 2),
                    inner_a: net(1, 1),
                    inner_b: net(1, 2),
                    prefix_len: 64,
                }
            }
        }
    }

    /// The unspecified address a server listens on by default (`0.0.0.0`, `::`).
    pub fn unspecified(self) -> IpAddr {
        match self {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }

    /// Why `backend` cannot run over this family in the lab, where it cannot: the run is
    /// refused (exit 2), never carried over IPv4 instead. Its description says.
    pub fn refusal(self, backend: Backend) -> Option<&'static str> {
        match self {
            Family::Ipv4 => None,
            Family::Ipv6 => backend.describe().no_ipv6,
        }
    }
}

/// The lab's address plan. Defaults come from 198.18.0.0/15 (RFC 2544, benchmarking); the
/// IPv6 plan (2001:2::/48, RFC 5180) is [`Family::addressing`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addressing {
    /// Outer (link) addresses of the two ends, /24 (IPv6: /64) on the veth.
    pub outer_a: IpAddr,
    pub outer_b: IpAddr,
    /// Inner addresses carried through tunnels (tunnel-mode ESP, TUN devices).
    pub inner_a: IpAddr,
    pub inner_b: IpAddr,
    pub prefix_len: u8,
}

impl Addressing {
    /// The family of the outer addresses (the inner ones are the same family).
    pub fn family(&self) -> Family {
        Family::of(self.outer_a)
    }
}

impl Default for Addressing {
    fn default() -> Self {
        Addressing {
            outer_a: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            outer_b: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            inner_a: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
            inner_b: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
            prefix_len: 24,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "IPv4",
            Family::Ipv6 => "IPv6",
        })
    }
}

/// A family name that is neither IPv4's nor IPv6's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown address family {0:?}: use 4 or 6 (or -4/-6)")]
pub struct UnknownFamily(pub String);

impl FromStr for Family {
    type Err = UnknownFamily;
    /// `4`, `6`, `ipv4`, `ipv6`, `inet`, `inet6`.
    fn from_str(s: &str) -> Result<Family, UnknownFamily> {
        match s.trim().to_ascii_lowercase().as_str() {
            "4" | "ipv4" | "inet" => Ok(Family::Ipv4),
            "6" | "ipv6" | "inet6" => Ok(Family::Ipv6),
            _ => Err(UnknownFamily(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_as_iperf3_and_iproute2_spell_them() {
        for f in Family::ALL {
            assert_eq!(f.digit().parse::<Family>().unwrap(), f);
            assert_eq!(f.name().parse::<Family>().unwrap(), f);
            assert_eq!(serde_json::to_value(f).unwrap(), f.name());
        }
        assert_eq!("inet6".parse::<Family>().unwrap(), Family::Ipv6);
        assert!("5".parse::<Family>().unwrap_err().to_string().contains("4 or 6"));
    }

    #[test]
    fn ipv6_addresses_come_from_the_benchmarking_range_of_rfc_5180() {
        let ad = Family::Ipv6.addressing();
        let bench: Ipv6Addr = "2001:2::".parse().unwrap();
        for a in [ad.outer_a, ad.outer_b, ad.inner_a, ad.inner_b] {
            let IpAddr::V6(v6) = a else {
                panic!("{a} is not IPv6")
            };
            // 2001:2::/48: the first three 16-bit groups.
            assert_eq!(v6.segments()[..3], bench.segments()[..3], "{a}");
            assert_eq!(Family::of(a), Family::Ipv6);
        }
        assert_eq!(ad.outer_a.to_string(), "2001:2::1");
        assert_eq!(ad.inner_b.to_string(), "2001:2:0:1::2");
        assert_ne!(ad.outer_a, ad.inner_a);
        assert_eq!(Family::Ipv4.addressing(), Addressing::default());
    }

    #[test]
    fn every_backend_carries_both_families() {
        for b in Backend::ALL {
            assert_eq!(Family::Ipv4.refusal(b), None);
            assert_eq!(Family::Ipv6.refusal(b), None, "{b}");
        }
    }
}
