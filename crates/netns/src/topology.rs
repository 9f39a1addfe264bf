//! The two-namespace lab: `a` and `b` joined by a veth pair, addressed from the plan.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use model::Addressing;
use rtnetlink::packet_route::address::AddressHeaderFlags;
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::namespace::delete_by_name;
use crate::{Namespace, NetnsError, LAB_PREFIX};

/// What to build.
#[derive(Debug, Clone)]
pub struct TopologySpec {
    /// Distinguishes this run's objects from every other run's.
    pub run_id: String,
    pub mtu: u32,
    pub addressing: Addressing,
}

/// Two namespaces joined by a veth pair, each end addressed and up, loopback up. Dropping it
/// deletes both namespaces, which takes the veth pair and everything inside with them.
#[derive(Debug)]
pub struct Topology {
    pub a: Namespace,
    pub b: Namespace,
    /// Name of the veth end inside `a` (and inside `b`).
    pub veth_a: String,
    pub veth_b: String,
    pub addressing: Addressing,
    pub mtu: u32,
}

impl Topology {
    /// Builds the lab. On any failure, whatever was already made is removed before the
    /// error is returned.
    pub async fn create(spec: &TopologySpec) -> Result<Topology, NetnsError> {
        let a = Namespace::create(&format!("{LAB_PREFIX}{}-a", spec.run_id))?;
        let b = match Namespace::create(&format!("{LAB_PREFIX}{}-b", spec.run_id)) {
            Ok(b) => b,
            Err(e) => {
                let _ = a.delete();
                return Err(e);
            }
        };
        let topology = Topology {
            a,
            b,
            veth_a: "ipl-veth-a".into(),
            veth_b: "ipl-veth-b".into(),
            addressing: spec.addressing,
            mtu: spec.mtu,
        };
        // On error `topology` is dropped here, which deletes both namespaces.
        topology.wire().await?;
        Ok(topology)
    }

    async fn wire(&self) -> Result<(), NetnsError> {
        let ha = self.a.rtnetlink().await?;
        let hb = self.b.rtnetlink().await?;
        // Made inside `a` with both ends there, then one end moved: a veth never appears in
        // the host's namespace, so a crash cannot leave one there.
        let b_fd = self.b.raw_fd();
        let add = ha
            .link()
            .add(LinkVeth::new(&self.veth_a, &self.veth_b).mtu(self.mtu).build())
            .execute()
            .await;
        add.map_err(|e| netlink(&self.a, format!("add veth {}<->{}", self.veth_a, self.veth_b), e))?;
        let peer = link_index(&ha, &self.a, &self.veth_b).await?;
        ha.link()
            .set(LinkUnspec::new_with_index(peer).setns_by_fd(b_fd).build())
            .execute()
            .await
            .map_err(|e| netlink(&self.a, format!("move {} into {}", self.veth_b, self.b.name()), e))?;
        let ad = self.addressing;
        configure_end(&ha, &self.a, &self.veth_a, ad.outer_a, ad.prefix_len, self.mtu).await?;
        configure_end(&hb, &self.b, &self.veth_b, ad.outer_b, ad.prefix_len, self.mtu).await?;
        wait_up(&ha, &self.a, &self.veth_a).await?;
        wait_up(&hb, &self.b, &self.veth_b).await
    }

    /// Adds `address/prefix` on `device` inside `ns` (`ip -n NS addr add ... dev DEVICE`).
    pub async fn add_address(
        ns: &Namespace,
        device: &str,
        address: IpAddr,
        prefix_len: u8,
    ) -> Result<(), NetnsError> {
        let h = ns.rtnetlink().await?;
        let index = link_index(&h, ns, device).await?;
        add_address(&h, ns, index, address, prefix_len).await
    }

    /// Routes `destination/prefix` through `device` inside `ns`, optionally with a preferred
    /// source (`ip -n NS route add DEST dev DEVICE src SRC`).
    pub async fn add_route(
        ns: &Namespace,
        destination: IpAddr,
        prefix_len: u8,
        device: &str,
        source: Option<IpAddr>,
    ) -> Result<(), NetnsError> {
        let h = ns.rtnetlink().await?;
        let index = link_index(&h, ns, device).await?;
        let route = match (destination, source) {
            (IpAddr::V4(dst), None | Some(IpAddr::V4(_))) => {
                let mut r = RouteMessageBuilder::<Ipv4Addr>::new()
                    .destination_prefix(dst, prefix_len)
                    .output_interface(index);
                if let Some(IpAddr::V4(src)) = source {
                    r = r.pref_source(src);
                }
                r.build()
            }
            (IpAddr::V6(dst), None | Some(IpAddr::V6(_))) => {
                let mut r = RouteMessageBuilder::<Ipv6Addr>::new()
                    .destination_prefix(dst, prefix_len)
                    .output_interface(index);
                if let Some(IpAddr::V6(src)) = source {
                    r = r.pref_source(src);
                }
                r.build()
            }
            _ => {
                return Err(NetnsError::NotFound {
                    what: format!("a source of {destination}'s family (got {source:?})"),
                    namespace: ns.name().to_string(),
                })
            }
        };
        h.route().add(route).execute().await.map_err(|e| {
            netlink(
                ns,
                format!("add route {destination}/{prefix_len} dev {device}"),
                e,
            )
        })
    }

    /// Sets `device` up inside `ns` (`ip -n NS link set DEVICE up`).
    pub async fn set_link_up(ns: &Namespace, device: &str) -> Result<(), NetnsError> {
        let h = ns.rtnetlink().await?;
        let index = link_index(&h, ns, device).await?;
        set_up(&h, ns, index, device).await
    }

    /// Deletes `device` inside `ns` (`ip -n NS link del DEVICE`); a missing one is not an
    /// error (it went with its process or was never made).
    pub async fn delete_link(ns: &Namespace, device: &str) -> Result<(), NetnsError> {
        let h = ns.rtnetlink().await?;
        let Ok(index) = link_index(&h, ns, device).await else {
            return Ok(());
        };
        h.link()
            .del(index)
            .execute()
            .await
            .map_err(|e| netlink(ns, format!("delete link {device}"), e))
    }

    /// Deletes both namespaces now, reporting errors (drop does the same, silently).
    pub fn destroy(self) -> Result<(), NetnsError> {
        let ra = delete_by_name(self.a.name());
        let rb = delete_by_name(self.b.name());
        ra.and(rb)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            if let Err(e) = delete_by_name(ns.name()) {
                tracing::warn!("cleanup: {e}");
            }
        }
    }
}

async fn configure_end(
    h: &Handle,
    ns: &Namespace,
    device: &str,
    address: IpAddr,
    prefix_len: u8,
    mtu: u32,
) -> Result<(), NetnsError> {
    let lo = link_index(h, ns, "lo").await?;
    set_up(h, ns, lo, "lo").await?;
    let index = link_index(h, ns, device).await?;
    h.link()
        .set(LinkUnspec::new_with_index(index).mtu(mtu).build())
        .execute()
        .await
        .map_err(|e| netlink(ns, format!("set mtu {mtu} on {device}"), e))?;
    add_address(h, ns, index, address, prefix_len).await?;
    set_up(h, ns, index, device).await
}

/// How long a veth end may take to come up: the kernel's link watch runs at most once a
/// second, so a second and a margin.
const UP_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// Waits until `device` is operationally up. Why: a link set up is not yet carrying; its
/// qdisc stays the one that drops everything until the kernel's link watch activates it,
/// on a busy machine later than the run's first packet. A lost first SYN (or ARP reply)
/// costs a whole 1 s retransmission: a plain run's first byte was seen at 1028 ms instead
/// of 2 ms on a loaded machine.
async fn wait_up(h: &Handle, ns: &Namespace, device: &str) -> Result<(), NetnsError> {
    use rtnetlink::packet_route::link::{LinkAttribute, State};
    let began = std::time::Instant::now();
    loop {
        let mut links = h.link().get().match_name(device.to_string()).execute();
        let link = links
            .try_next()
            .await
            .map_err(|e| netlink(ns, format!("get {device}"), e))?
            .ok_or_else(|| NetnsError::NotFound {
                what: format!("link {device}"),
                namespace: ns.name().to_string(),
            })?;
        if link.attributes.contains(&LinkAttribute::OperState(State::Up)) {
            return Ok(());
        }
        if began.elapsed() > UP_WITHIN {
            return Err(NetnsError::NotUp {
                device: device.to_string(),
                namespace: ns.name().to_string(),
                waited: UP_WITHIN,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

async fn set_up(h: &Handle, ns: &Namespace, index: u32, device: &str) -> Result<(), NetnsError> {
    h.link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(|e| netlink(ns, format!("set {device} up"), e))
}

async fn add_address(
    h: &Handle,
    ns: &Namespace,
    index: u32,
    address: IpAddr,
    prefix_len: u8,
) -> Result<(), NetnsError> {
    let mut add = h.address().add(index, address, prefix_len);
    if address.is_ipv6() {
        // No duplicate address detection: the lab owns both ends of the link, and a
        // tentative address (about two seconds) would refuse the run's first bind.
        add.message_mut().header.flags |= AddressHeaderFlags::Nodad;
    }
    add.execute()
        .await
        .map_err(|e| netlink(ns, format!("add address {address}/{prefix_len}"), e))
}

/// Interface index of `name` inside the namespace the handle talks to.
pub(crate) async fn link_index(h: &Handle, ns: &Namespace, name: &str) -> Result<u32, NetnsError> {
    let mut links = h.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(link)) => Ok(link.header.index),
        Ok(None) | Err(_) => Err(NetnsError::NotFound {
            what: format!("link {name}"),
            namespace: ns.name().to_string(),
        }),
    }
}

pub(crate) fn netlink(ns: &Namespace, action: String, source: rtnetlink::Error) -> NetnsError {
    NetnsError::Netlink {
        action,
        namespace: ns.name().to_string(),
        source,
    }
}
