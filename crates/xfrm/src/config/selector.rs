//! Which packets an SA or a policy covers: address prefixes, an optional protocol and
//! ports, and their `ip xfrm` arguments (shared by `state add ... sel` and `policy add`).

use std::fmt;
use std::net::IpAddr;

use super::error::SpecError;

/// Upper-layer protocol a selector may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProto {
    Tcp,
    Udp,
}

impl IpProto {
    pub(crate) fn raw(self) -> u8 {
        match self {
            IpProto::Tcp => netlink_packet_xfrm::IPPROTO_TCP,
            IpProto::Udp => netlink_packet_xfrm::IPPROTO_UDP,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IpProto::Tcp => "tcp",
            IpProto::Udp => "udp",
        }
    }
}

/// An address prefix such as 198.19.0.1/32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    pub fn host(addr: IpAddr) -> Prefix {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Prefix { addr, len }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Which packets an SA or policy covers. Ports only with a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelector {
    pub src: Prefix,
    pub dst: Prefix,
    pub proto: Option<IpProto>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
}

impl TrafficSelector {
    /// Everything between two hosts.
    pub fn hosts(src: IpAddr, dst: IpAddr) -> TrafficSelector {
        TrafficSelector {
            src: Prefix::host(src),
            dst: Prefix::host(dst),
            proto: None,
            src_port: None,
            dst_port: None,
        }
    }

    /// Only `proto` traffic to `dst_port` between two hosts: how the lab keeps its
    /// policies off other traffic between real machines (an SSH session stays clear).
    pub fn port(src: IpAddr, dst: IpAddr, proto: IpProto, dst_port: u16) -> TrafficSelector {
        TrafficSelector {
            proto: Some(proto),
            dst_port: Some(dst_port),
            ..TrafficSelector::hosts(src, dst)
        }
    }

    /// The same traffic seen from the other end (source and destination swapped).
    pub fn reversed(&self) -> TrafficSelector {
        TrafficSelector {
            src: self.dst,
            dst: self.src,
            proto: self.proto,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }

    pub(super) fn validate(&self) -> Result<(), SpecError> {
        if self.src.addr.is_ipv4() != self.dst.addr.is_ipv4() {
            return Err(SpecError::MixedFamilies);
        }
        for p in [self.src, self.dst] {
            let max = if p.addr.is_ipv4() { 32 } else { 128 };
            if p.len > max {
                return Err(SpecError::PrefixLength {
                    addr: p.addr,
                    len: p.len,
                });
            }
        }
        if self.proto.is_none() && (self.src_port.is_some() || self.dst_port.is_some()) {
            return Err(SpecError::PortWithoutProtocol);
        }
        Ok(())
    }
}

impl fmt::Display for TrafficSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}->{}", self.src, self.dst)?;
        if let Some(p) = self.proto {
            write!(f, " {}", p.name())?;
        }
        if let Some(p) = self.src_port {
            write!(f, " sport {p}")?;
        }
        if let Some(p) = self.dst_port {
            write!(f, " dport {p}")?;
        }
        Ok(())
    }
}

pub(super) fn selector_args(sel: &TrafficSelector) -> Vec<String> {
    let mut a = vec![
        "src".into(),
        sel.src.to_string(),
        "dst".into(),
        sel.dst.to_string(),
    ];
    if let Some(p) = sel.proto {
        a.extend(["proto".into(), p.name().into()]);
    }
    if let Some(p) = sel.src_port {
        a.extend(["sport".into(), p.to_string()]);
    }
    if let Some(p) = sel.dst_port {
        a.extend(["dport".into(), p.to_string()]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_without_protocol_is_refused() {
        let mut sel = TrafficSelector::hosts("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        sel.dst_port = Some(5201);
        assert_eq!(sel.validate(), Err(SpecError::PortWithoutProtocol));
    }
}
