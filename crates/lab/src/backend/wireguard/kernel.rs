//! Kernel WireGuard (`--backend wireguard`): per end a `wireguard` link made over rtnetlink
//! in the end's namespace, keyed and given its peer over generic netlink (crate `wgnl`,
//! the requests `wg set` sends), addressed and up. The link lives in the lab's namespace
//! (it goes with it); the end deletes it itself when dropped, so a sweep's next cell finds
//! the namespace as it was.

use std::time::Duration;

use model::RunPlan;
use netns::{Namespace, Topology};
use rtnetlink::LinkWireguard;
use wgnl::WgHandle;

use super::{
    device_config, handshake_done, ifname, inner_addrs, inner_mtu, start_handshake, Keys, WireguardEnd, POLL,
};
use crate::backend::site::{Side, Site};
use crate::error::{LabError, LabResult};

const NO_WIREGUARD: &str = "this kernel has no WireGuard (no `wireguard` generic netlink family: \
                            CONFIG_WIREGUARD off or the module not loaded, `modprobe wireguard`); use --vm \
                            to run the kernel backend in a VM with a stock kernel, or --backend wireguard-go";

/// Whether this kernel serves WireGuard's generic netlink family (asked in this process's
/// namespace; nothing is created).
pub async fn has_wireguard() -> bool {
    let Ok((conn, mut handle)) = WgHandle::connect() else {
        return false;
    };
    let task = tokio::spawn(conn);
    let found = handle.family_present().await;
    task.abort();
    found
}

/// Whether the host kernel can run the backend (for `--vm auto`).
pub fn host_has_wireguard() -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    runtime.is_ok_and(|rt| rt.block_on(has_wireguard()))
}

/// Refuses, before anything is created, where the kernel has no WireGuard.
pub async fn preflight(_plan: &RunPlan) -> LabResult<()> {
    if !has_wireguard().await {
        return Err(LabError::capability(anyhow::anyhow!(NO_WIREGUARD)));
    }
    Ok(())
}

/// One end: its link, until dropped.
pub struct KernelEnd {
    /// By name only: an open handle would keep a deleted namespace alive.
    namespace: String,
    ifname: String,
    side: Side,
    handle: WgHandle,
    handshake: Option<Duration>,
}

impl KernelEnd {
    pub async fn start(plan: &RunPlan, keys: &Keys, site: &Site<'_>) -> LabResult<KernelEnd> {
        let name = ifname(site.side);
        let what = format!("kernel WireGuard end {} ({name})", site.side.name());
        let runtime = tokio::runtime::Handle::current();
        let (conn, handle) = site.namespace.run(move || {
            let _guard = runtime.enter();
            WgHandle::connect()
        })??;
        tokio::spawn(conn);
        let rt = site.namespace.rtnetlink().await?;
        rt.link()
            .add(LinkWireguard::new(&name).mtu(inner_mtu(plan)).build())
            .execute()
            .await
            .map_err(|e| match e {
                rtnetlink::Error::NetlinkError(ref m) if m.raw_code() == -libc::EOPNOTSUPP => {
                    LabError::capability(anyhow::anyhow!(NO_WIREGUARD))
                }
                e => LabError::failed(anyhow::anyhow!("{what}: create the link: {e}")),
            })?;
        // From here on the link is the end's: dropping it deletes the link.
        let mut end = KernelEnd {
            namespace: site.namespace.name().to_string(),
            ifname: name,
            side: site.side,
            handle,
            handshake: None,
        };
        let config = device_config(plan, keys, site, &end.ifname);
        end.handle.set(&config).await?;
        let (inner, _) = inner_addrs(plan, site.side);
        Topology::add_address(
            site.namespace,
            &end.ifname,
            inner,
            plan.link().addressing.prefix_len,
        )
        .await?;
        Topology::set_link_up(site.namespace, &end.ifname).await?;
        if site.side == Side::B {
            let started = start_handshake(plan, site, &what)?;
            end.handshake = Some(loop {
                let peers = end.handle.peers(&end.ifname).await?;
                if let Some(took) = handshake_done(started, &peers, &what)? {
                    break took;
                }
                tokio::time::sleep(POLL).await;
            });
        }
        Ok(end)
    }

    /// Its peer's last handshake, asked anew at each call (`--rekey-every`), over a netlink
    /// socket of its own in the end's namespace, driven by a runtime of its own: the caller
    /// is a thread outside the run's runtime.
    pub fn last_handshake(&self) -> LabResult<super::rekey::Ask> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(LabError::failed)?;
        let entered = runtime.handle().clone();
        let (conn, mut handle) = Namespace::open(&self.namespace)?.run(move || {
            let _guard = entered.enter();
            WgHandle::connect()
        })??;
        runtime.spawn(conn);
        let ifname = self.ifname.clone();
        Ok(Box::new(move || {
            let peers = runtime.block_on(handle.peers(&ifname))?;
            Ok(peers.first().and_then(|p| p.last_handshake))
        }))
    }

    /// The peer's counters as the kernel has them now.
    pub async fn evidence(&mut self) -> LabResult<WireguardEnd> {
        let peers = self.handle.peers(&self.ifname).await?;
        let mut end = super::end_from_stats(self.side, &self.ifname, &peers)?;
        end.handshake_s = self.handshake.map(|d| d.as_secs_f64());
        Ok(end)
    }
}

impl Drop for KernelEnd {
    fn drop(&mut self) {
        let name = self.ifname.clone();
        // Gone with its namespace already, or still there to delete.
        let Ok(ns) = Namespace::open(&self.namespace) else {
            return;
        };
        // Drop cannot await: a thread of its own with its own runtime deletes the link.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                if let Err(e) = rt.block_on(Topology::delete_link(&ns, &name)) {
                    tracing::warn!("cleanup: {e}");
                }
            }
        })
        .join();
    }
}

/// The kernel's name for itself, for the evidence.
pub fn implementation() -> String {
    format!("kernel WireGuard ({})", model::env::kernel_release())
}
