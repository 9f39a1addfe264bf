//! The SAs and policies both ends of one run install, derived from one set of keys and
//! addresses, so the two halves always match.

use std::net::IpAddr;

use model::{IpsecMode, RunPlan};
use xfrm::{
    IpProto, PolicyDirection, PolicySpec, Protection, RunIds, SaSpec, Template, TrafficSelector, UdpEncap,
    LAB_REPLAY_WINDOW,
};

use crate::backend::site::Side;

/// Everything both ends of one run agree on: addresses, identifiers, keys and the data
/// flows. Each end installs its half from the same set, whether the two ends are two
/// namespaces of one process or two machines.
pub struct SaSet {
    pub mode: IpsecMode,
    pub ids: RunIds,
    pub protection: Protection,
    /// Outer addresses: ESP travels between them (in transport mode they carry the data).
    pub addr_a: IpAddr,
    pub addr_b: IpAddr,
    /// The data flows, each as seen from its sender (sender → receiver).
    pub flows: Vec<TrafficSelector>,
    /// Which side sends the data.
    pub sender: Side,
    /// ESP in UDP (`--encap udp`): both SAs wrap their packets in UDP on this port pair.
    pub encap: Option<UdpEncap>,
}

impl SaSet {
    /// The run's flows: in tunnel mode everything between the inner addresses; in transport
    /// mode only TCP to the receiver's data ports (one per stream), so nothing else between
    /// the two hosts is captured.
    pub fn flows(plan: &RunPlan, mode: IpsecMode, sender: IpAddr, receiver: IpAddr) -> Vec<TrafficSelector> {
        match mode {
            IpsecMode::Tunnel => vec![TrafficSelector::hosts(sender, receiver)],
            IpsecMode::Transport => (0..plan.parallel)
                .map(|i| TrafficSelector::port(sender, receiver, IpProto::Tcp, plan.port + i))
                .collect(),
        }
    }

    fn sa(&self, src: IpAddr, dst: IpAddr, spi: xfrm::Spi) -> SaSpec {
        // In transport mode the SA itself may carry only TCP between the two hosts.
        let selector = (self.mode == IpsecMode::Transport).then(|| TrafficSelector {
            proto: Some(IpProto::Tcp),
            ..TrafficSelector::hosts(src, dst)
        });
        SaSpec {
            src,
            dst,
            spi,
            reqid: self.ids.reqid,
            mode: self.mode,
            replay_window: LAB_REPLAY_WINDOW,
            protection: self.protection.clone(),
            selector,
        }
    }

    /// Both SAs (a→b, b→a): each end sends with one and receives with the other.
    pub fn sas(&self) -> [SaSpec; 2] {
        [
            self.sa(self.addr_a, self.addr_b, self.ids.spi_a_to_b),
            self.sa(self.addr_b, self.addr_a, self.ids.spi_b_to_a),
        ]
    }

    /// The policies of one end: out and in for every flow.
    pub fn policies(&self, side: Side) -> Vec<PolicySpec> {
        let tmpl = |src, dst| Template {
            src,
            dst,
            reqid: self.ids.reqid,
            mode: self.mode,
        };
        let (here, there) = match side {
            Side::A => (self.addr_a, self.addr_b),
            Side::B => (self.addr_b, self.addr_a),
        };
        let mut out = Vec::new();
        for flow in &self.flows {
            // A flow is written sender → receiver; each end's "out" is what it emits.
            let (outgoing, incoming) = if side == self.sender {
                (*flow, flow.reversed())
            } else {
                (flow.reversed(), *flow)
            };
            out.push(PolicySpec::new(outgoing, PolicyDirection::Out, tmpl(here, there)));
            out.push(PolicySpec::new(incoming, PolicyDirection::In, tmpl(there, here)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfrm::AuthTrunc;

    fn set(plan: &RunPlan, sender: Side) -> SaSet {
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let (from, to) = if sender == Side::A { (a, b) } else { (b, a) };
        SaSet {
            mode: IpsecMode::Transport,
            ids: RunIds::for_slot(1),
            protection: Protection::generate(plan.suite, AuthTrunc::Bits128).unwrap(),
            addr_a: a,
            addr_b: b,
            flows: SaSet::flows(plan, IpsecMode::Transport, from, to),
            sender,
            encap: None,
        }
    }

    /// Between real hosts nothing but the lab's data may be captured: every policy and SA
    /// selects TCP, and every policy one data port, in the direction the data flows.
    #[test]
    fn transport_sets_select_only_tcp_on_the_data_ports_either_way() {
        let plan = model::RunRequest {
            backend: model::Backend::Xfrm,
            parallel: 2,
            port: 6000,
            ..Default::default()
        }
        .validate()
        .unwrap();
        for sender in [Side::A, Side::B] {
            let set = set(&plan, sender);
            for sa in set.sas() {
                assert_eq!(sa.selector.unwrap().proto, Some(IpProto::Tcp));
            }
            for side in [Side::A, Side::B] {
                let policies = set.policies(side);
                assert_eq!(policies.len(), 4);
                for p in &policies {
                    let sel = p.selector;
                    assert_eq!(sel.proto, Some(IpProto::Tcp));
                    let port = sel.dst_port.or(sel.src_port).unwrap();
                    assert!((6000..6002).contains(&port), "{sel}");
                    // The receiver's port is the destination of what the sender emits.
                    let to_receiver = (p.direction == PolicyDirection::Out) == (side == sender);
                    assert_eq!(sel.dst_port.is_some(), to_receiver, "{side:?} {sel}");
                }
            }
        }
    }
}
