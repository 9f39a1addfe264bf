//! The SAs and policies both ends of one run install, derived from one set of keys and
//! addresses, so the two halves always match.
//!
//! With several SA pairs (`--sas N`) stream i travels on pair i mod N: each pair has its
//! own reqid, SPIs and keys, and each stream's policies select its data port and name its
//! pair's reqid in their template, so the kernel sends each stream's packets through its
//! pair. In tunnel mode a policy for everything else between the inner addresses (one
//! priority step below) keeps other traffic on pair 0, so nothing leaves in clear.
//!
//! Per-CPU SAs (`--per-cpu-sa`, RFC 9611): beside the one pair, a pair for each CPU with
//! pair 0's reqid, so the same policies select them all; the kernel (6.13+) sends a packet
//! on the SA of the CPU it leaves from, or on the pair without a CPU where that CPU has
//! none. An instance's SAs say their CPU and, as the kernel requires with one, their
//! direction at the end that installs them.

use std::net::IpAddr;

use model::{IpsecMode, RunPlan};
use xfrm::{
    IpProto, PerCpu, PolicyDirection, PolicySpec, Protection, RunIds, SaDirection, SaSpec, Template,
    TrafficSelector, UdpEncap, LAB_POLICY_PRIORITY, LAB_REPLAY_WINDOW,
};

use crate::backend::site::Side;

/// Everything both ends of one run agree on: addresses, identifiers, keys and the data
/// flows. Each end installs its half from the same set, whether the two ends are two
/// namespaces of one process or two machines.
pub struct SaSet {
    pub mode: IpsecMode,
    /// The SA pairs: one for every stream, or one per stream group with `--sas N`.
    pub pairs: Vec<SaPair>,
    /// `--per-cpu-sa`: pair 0's instance for each CPU (its reqid, SPIs and keys of its own).
    pub per_cpu: Vec<CpuPair>,
    /// Outer addresses: ESP travels between them (in transport mode they carry the data).
    pub addr_a: IpAddr,
    pub addr_b: IpAddr,
    /// The data flows, each as seen from its sender (sender → receiver), with its pair.
    pub flows: Vec<Flow>,
    /// Which side sends the data.
    pub sender: Side,
    /// ESP in UDP (`--encap udp`): both SAs wrap their packets in UDP on this port pair.
    pub encap: Option<UdpEncap>,
}

/// One SA pair: its identifiers (reqid, the two SPIs) and its keys.
#[derive(Clone)]
pub struct SaPair {
    pub ids: RunIds,
    pub protection: Protection,
}

/// A per-CPU SA pair: the CPU whose packets it carries, and the pair.
#[derive(Clone)]
pub struct CpuPair {
    pub cpu: u32,
    pub pair: SaPair,
}

/// Traffic one pair of policies (out and in at each end) sends through one SA pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flow {
    pub selector: TrafficSelector,
    /// Index into [`SaSet::pairs`].
    pub pair: usize,
    pub priority: u32,
}

impl SaSet {
    /// The run's flows over `pairs` SA pairs: in tunnel mode everything between the inner
    /// addresses; in transport mode only TCP to the receiver's data ports (one per stream),
    /// or UDP to its first (`--udp`), and the latency probes from end A to end B's probe
    /// port (`--latency`), so nothing else between the two hosts is captured. With several
    /// pairs each stream's port is a flow of its own, on pair i mod N.
    pub fn flows(
        plan: &RunPlan,
        mode: IpsecMode,
        sender: IpAddr,
        receiver: IpAddr,
        pairs: usize,
        a_sends: bool,
    ) -> Vec<Flow> {
        let flow = |selector, pair, priority| Flow {
            selector,
            pair,
            priority,
        };
        let per_stream = (0..plan.workload().parallel).map(|i| {
            let sel = TrafficSelector::port(sender, receiver, IpProto::Tcp, plan.workload().port + i);
            flow(sel, usize::from(i) % pairs.max(1), LAB_POLICY_PRIORITY)
        });
        match (mode, pairs) {
            (IpsecMode::Tunnel, 0 | 1) => {
                vec![flow(
                    TrafficSelector::hosts(sender, receiver),
                    0,
                    LAB_POLICY_PRIORITY,
                )]
            }
            // XFRM takes the lowest priority number first: the streams' own policies win,
            // the rest between the inner addresses falls to pair 0.
            (IpsecMode::Tunnel, _) => per_stream
                .chain([flow(
                    TrafficSelector::hosts(sender, receiver),
                    0,
                    LAB_POLICY_PRIORITY + 1,
                )])
                .collect(),
            (IpsecMode::Transport, _) => {
                let workload = plan.workload();
                let datagrams = workload
                    .udp
                    .map(|_| TrafficSelector::port(sender, receiver, IpProto::Udp, workload.port));
                // Written sender → receiver like every flow: from B, the probes are the echoes.
                let probes = workload.latency.then(|| {
                    let towards_b =
                        TrafficSelector::port(sender, receiver, IpProto::Udp, workload.probe_port());
                    if a_sends {
                        towards_b
                    } else {
                        TrafficSelector::port(receiver, sender, IpProto::Udp, workload.probe_port())
                            .reversed()
                    }
                });
                let udp = datagrams
                    .into_iter()
                    .chain(probes)
                    .map(|sel| flow(sel, 0, LAB_POLICY_PRIORITY));
                match workload.udp {
                    Some(_) => udp.collect(),
                    None => per_stream.chain(udp).collect(),
                }
            }
        }
    }

    /// The pair every stream shares, or pair 0 of several: the identifiers a report names.
    pub fn first(&self) -> &SaPair {
        &self.pairs[0]
    }

    fn sa(&self, pair: &SaPair, src: IpAddr, dst: IpAddr, spi: xfrm::Spi) -> SaSpec {
        // In transport mode the SA itself may carry only the flows' protocol between the
        // two hosts: TCP, or any where UDP datagrams or probes cross too.
        let carries_udp = self.flows.iter().any(|f| f.selector.proto == Some(IpProto::Udp));
        let selector = (self.mode == IpsecMode::Transport).then(|| TrafficSelector {
            proto: (!carries_udp).then_some(IpProto::Tcp),
            ..TrafficSelector::hosts(src, dst)
        });
        SaSpec {
            src,
            dst,
            spi,
            reqid: pair.ids.reqid,
            mode: self.mode,
            replay_window: LAB_REPLAY_WINDOW,
            protection: pair.protection.clone(),
            selector,
            pcpu: None,
        }
    }

    /// Every pair's two SAs (a→b, then b→a), then every CPU's pair, as `side` installs them:
    /// each end sends with one of a pair and receives with the other.
    pub fn sas(&self, side: Side) -> Vec<SaSpec> {
        let both = |p: &SaPair| {
            [
                self.sa(p, self.addr_a, self.addr_b, p.ids.spi_a_to_b),
                self.sa(p, self.addr_b, self.addr_a, p.ids.spi_b_to_a),
            ]
        };
        let a_sends = |i: usize| (i == 0) == (side == Side::A);
        let per_cpu = self.per_cpu.iter().flat_map(|c| {
            both(&c.pair).into_iter().enumerate().map(move |(i, sa)| {
                let direction = match a_sends(i) {
                    true => SaDirection::Out,
                    false => SaDirection::In,
                };
                SaSpec {
                    // An outbound SA checks no replay: the kernel refuses a window on one.
                    replay_window: match direction {
                        SaDirection::Out => 0,
                        SaDirection::In => sa.replay_window,
                    },
                    pcpu: Some(PerCpu {
                        cpu: c.cpu,
                        direction,
                    }),
                    ..sa
                }
            })
        });
        self.pairs.iter().flat_map(both).chain(per_cpu).collect()
    }

    /// The policies of one end: out and in for every flow.
    pub fn policies(&self, side: Side) -> Vec<PolicySpec> {
        let tmpl = |src, dst, flow: &Flow| Template {
            src,
            dst,
            reqid: self.pairs[flow.pair].ids.reqid,
            mode: self.mode,
        };
        let (here, there) = match side {
            Side::A => (self.addr_a, self.addr_b),
            Side::B => (self.addr_b, self.addr_a),
        };
        let mut out = Vec::new();
        for flow in &self.flows {
            // A flow is written sender → receiver; each end's "out" is what it emits.
            let sel = flow.selector;
            let (outgoing, incoming) = if side == self.sender {
                (sel, sel.reversed())
            } else {
                (sel.reversed(), sel)
            };
            for (selector, direction, t) in [
                (outgoing, PolicyDirection::Out, tmpl(here, there, flow)),
                (incoming, PolicyDirection::In, tmpl(there, here, flow)),
            ] {
                out.push(PolicySpec {
                    priority: flow.priority,
                    ..PolicySpec::new(selector, direction, t)
                });
            }
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
            pairs: vec![SaPair {
                ids: RunIds::for_slot(1),
                protection: Protection::generate(plan.suite(), AuthTrunc::Bits128).unwrap(),
            }],
            addr_a: a,
            addr_b: b,
            flows: SaSet::flows(plan, IpsecMode::Transport, from, to, 1, sender == Side::A),
            per_cpu: Vec::new(),
            sender,
            encap: None,
        }
    }

    /// `--sas 2 -P 3` in tunnel mode: streams 0 and 2 on pair 0, stream 1 on pair 1, each
    /// by its port at both ends; everything else between the inner addresses on pair 0 one
    /// priority step below; every pair's SAs with its own SPIs and reqid.
    #[test]
    fn several_pairs_select_each_stream_by_port_and_keep_the_rest_on_pair_0() {
        let plan = model::RunRequest {
            backend: model::Backend::Xfrm,
            parallel: 3,
            sas: 2,
            port: 6000,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let (a, b): (IpAddr, IpAddr) = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        let (ia, ib): (IpAddr, IpAddr) = ("198.19.0.1".parse().unwrap(), "198.19.0.2".parse().unwrap());
        let ids = RunIds::for_slot(7);
        let set = SaSet {
            mode: IpsecMode::Tunnel,
            pairs: (0..2)
                .map(|i| SaPair {
                    ids: ids.pair(i),
                    protection: Protection::generate(plan.suite(), AuthTrunc::Bits128).unwrap(),
                })
                .collect(),
            addr_a: a,
            addr_b: b,
            flows: SaSet::flows(&plan, IpsecMode::Tunnel, ia, ib, 2, true),
            per_cpu: Vec::new(),
            sender: Side::A,
            encap: None,
        };
        let spis: Vec<u32> = set.sas(Side::A).iter().map(|s| s.spi.0).collect();
        let pair1 = ids.pair(1);
        assert_eq!(
            spis,
            [
                ids.spi_a_to_b.0,
                ids.spi_b_to_a.0,
                pair1.spi_a_to_b.0,
                pair1.spi_b_to_a.0
            ]
        );
        assert_eq!(set.sas(Side::A)[2].reqid, pair1.reqid);
        let out_a: Vec<(Option<u16>, xfrm::ReqId, u32)> = set
            .policies(Side::A)
            .iter()
            .filter(|p| p.direction == PolicyDirection::Out)
            .map(|p| (p.selector.dst_port, p.template.reqid, p.priority))
            .collect();
        assert_eq!(
            out_a,
            [
                (Some(6000), ids.reqid, LAB_POLICY_PRIORITY),
                (Some(6001), pair1.reqid, LAB_POLICY_PRIORITY),
                (Some(6002), ids.reqid, LAB_POLICY_PRIORITY),
                (None, ids.reqid, LAB_POLICY_PRIORITY + 1),
            ]
        );
        // The receiver's "in" for stream 1 names the data port as destination, pair 1.
        let in_b: Vec<_> = set
            .policies(Side::B)
            .into_iter()
            .filter(|p| p.direction == PolicyDirection::In && p.selector.dst_port == Some(6001))
            .collect();
        assert_eq!(in_b.len(), 1);
        assert_eq!(in_b[0].template.reqid, pair1.reqid);
        assert_eq!((in_b[0].template.src, in_b[0].template.dst), (a, b));
        // One pair: the single hosts policy, as before.
        assert_eq!(SaSet::flows(&plan, IpsecMode::Tunnel, ia, ib, 1, true).len(), 1);
    }

    /// `--udp --latency` in transport mode: the datagrams to the data port, the probes from A
    /// to B's probe port and their echoes back, whichever end sends; the SAs carry UDP too.
    #[test]
    fn transport_sets_select_the_datagrams_and_the_probes() {
        let plan = model::RunRequest {
            backend: model::Backend::Xfrm,
            mode: Some(IpsecMode::Transport),
            port: 6000,
            packets: model::plan::PacketsRequest {
                udp: true,
                latency: true,
                ..Default::default()
            },
            modes: model::modes::ModesRequest {
                time_s: Some(1.0),
                ..Default::default()
            },
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(plan.workload().probe_port(), 6001);
        for sender in [Side::A, Side::B] {
            let set = set(&plan, sender);
            for sa in set.sas(Side::A) {
                assert_eq!(sa.selector.unwrap().proto, None);
            }
            let out = |side: Side| -> Vec<(Option<u16>, Option<u16>)> {
                set.policies(side)
                    .iter()
                    .filter(|p| p.direction == PolicyDirection::Out)
                    .inspect(|p| assert_eq!(p.selector.proto, Some(IpProto::Udp)))
                    .map(|p| (p.selector.src_port, p.selector.dst_port))
                    .collect()
            };
            let (to_data, from_data) = ((None, Some(6000)), (Some(6000), None));
            let (data_a, data_b) = if sender == Side::A {
                (to_data, from_data)
            } else {
                (from_data, to_data)
            };
            // A emits probes to 6001; B emits the echoes from 6001.
            assert_eq!(out(Side::A), [data_a, (None, Some(6001))], "{sender:?}");
            assert_eq!(out(Side::B), [data_b, (Some(6001), None)], "{sender:?}");
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
            for sa in set.sas(Side::A) {
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

    /// `--per-cpu-sa` on two CPUs: the pair without a CPU first, then each CPU's pair with
    /// pair 0's reqid and SPIs of its own; at each end an instance's SA says its CPU and
    /// its direction there (out: what that end sends, without a replay window), and the
    /// policies are the one pair's.
    #[test]
    fn per_cpu_pairs_share_the_reqid_and_say_cpu_and_direction_at_each_end() {
        let plan = model::RunRequest {
            backend: model::Backend::Xfrm,
            per_cpu_sa: true,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let ids = RunIds::for_slot(3);
        let pair = |ids: RunIds| SaPair {
            ids,
            protection: Protection::generate(plan.suite(), AuthTrunc::Bits128).unwrap(),
        };
        let (a, b): (IpAddr, IpAddr) = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        let (ia, ib): (IpAddr, IpAddr) = ("198.19.0.1".parse().unwrap(), "198.19.0.2".parse().unwrap());
        let set = SaSet {
            mode: IpsecMode::Tunnel,
            pairs: vec![pair(ids)],
            per_cpu: (0..2u16)
                .map(|c| CpuPair {
                    cpu: u32::from(c),
                    pair: pair(RunIds {
                        reqid: ids.reqid,
                        ..ids.pair(c + 1)
                    }),
                })
                .collect(),
            addr_a: a,
            addr_b: b,
            flows: SaSet::flows(&plan, IpsecMode::Tunnel, ia, ib, 1, true),
            sender: Side::A,
            encap: None,
        };
        for side in [Side::A, Side::B] {
            let sas = set.sas(side);
            assert_eq!(sas.len(), 6);
            assert!(sas.iter().all(|s| s.reqid == ids.reqid));
            let spis: std::collections::BTreeSet<u32> = sas.iter().map(|s| s.spi.0).collect();
            assert_eq!(spis.len(), 6);
            assert_eq!((sas[0].pcpu, sas[1].pcpu), (None, None));
            for sa in &sas[2..] {
                sa.validate().unwrap();
                let p = sa.pcpu.unwrap();
                let sends = (sa.src == a) == (side == Side::A);
                let want = if sends { SaDirection::Out } else { SaDirection::In };
                assert_eq!(p.direction, want, "{side:?} {sa:?}");
                assert_eq!(sa.replay_window, if sends { 0 } else { LAB_REPLAY_WINDOW });
            }
            let cpus: Vec<u32> = sas[2..].iter().map(|s| s.pcpu.unwrap().cpu).collect();
            assert_eq!(cpus, [0, 0, 1, 1]);
            assert_eq!(set.policies(side).len(), 2);
        }
    }
}
