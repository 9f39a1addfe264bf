//! Where an end runs: which side it is, its namespace, the two ends' outer addresses, and
//! where the data flows between them.

use std::net::{IpAddr, SocketAddr};

use model::{IpsecMode, RunPlan};
use netns::Namespace;

/// Which end of a run something belongs to: `A` is namespace a of the local lab, or the
/// client of a two-host run (`run --peer`); `B` is namespace b, or the server (`serve`).
/// Unless the run is reversed, A sends and B receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }

    /// The end whose receiver takes the data.
    pub fn receiver(plan: &RunPlan) -> Side {
        if plan.workload().reverse {
            Side::A
        } else {
            Side::B
        }
    }
}

/// The two ends' outer addresses: ESP, the tunnel's UDP and plain TCP travel between them.
#[derive(Debug, Clone, Copy)]
pub struct Hosts {
    pub a: IpAddr,
    pub b: IpAddr,
}

impl Hosts {
    pub fn of(&self, side: Side) -> IpAddr {
        match side {
            Side::A => self.a,
            Side::B => self.b,
        }
    }
}

/// Where the receiver of `side` listens: its end of the tunnel where a tunnel carries the
/// data (inner addresses), else its outer address.
pub fn data_addr(plan: &RunPlan, hosts: Hosts, side: Side) -> SocketAddr {
    let tunnelled = plan.backend().describe().tunnelled && plan.mode() == IpsecMode::Tunnel;
    let ip = match (tunnelled, side) {
        (true, Side::A) => plan.link().addressing.inner_a,
        (true, Side::B) => plan.link().addressing.inner_b,
        (false, side) => hosts.of(side),
    };
    (ip, plan.workload().port).into()
}

/// Where one end runs.
pub struct Site<'a> {
    pub side: Side,
    pub namespace: &'a Namespace,
    pub hosts: Hosts,
    /// In the local lab: the veth this end's inner address goes on (xfrm tunnel mode), and
    /// the namespace is the lab's, whose record covers what is installed in it. Between two
    /// hosts: None, and each SA and policy is recorded on its own.
    pub lab_link: Option<&'a str>,
}
