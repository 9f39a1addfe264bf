//! Kernel IPsec: ESP SAs and policies programmed over netlink XFRM in both namespaces.
//!
//! Tunnel mode (default): the payload flows between the inner addresses (198.19.0.x), which
//! the policies send through ESP between the outer (veth) addresses. Transport mode: the
//! payload flows between the outer addresses and the policies select only TCP on the data
//! ports, so nothing else between the two ends is captured.
//!
//! Details in the report (`backend_details.xfrm`): `mode`, `suite`, `reqid`, per-SA `spi`,
//! `direction`, `packets`, `bytes` (the kernel's counters, read over netlink after the
//! transfers), `esp_overhead_bytes_per_packet` (computed for a 1400-byte inner packet, outer
//! IPv4 header included in tunnel mode) and `kernel_drivers` (/proc/crypto after use).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use model::RunPlan;
use netns::Topology;
use serde_json::json;
use xfrm::{
    AuthTrunc, Direction, IpProto, Mode, PolicyId, PolicySpec, Protection, RunIds, SaId, SaSpec, Template,
    TrafficSelector, XfrmError, XfrmHandle, LAB_REPLAY_WINDOW,
};

use super::{ActiveBackend, DataPath};
use crate::error::{LabError, LabResult};

/// Whether `--show-keys` was given; set once by `run` before the backend starts.
static SHOW_KEYS: AtomicBool = AtomicBool::new(false);

pub fn set_show_keys(show: bool) {
    SHOW_KEYS.store(show, Ordering::Relaxed);
}

/// Inner packet size the reported ESP overhead is computed for.
const OVERHEAD_REFERENCE_LEN: usize = 1400;
const IPV4_HEADER_LEN: usize = 20;

const NO_ESP: &str =
    "this kernel has no ESP support (CONFIG_INET_ESP); use --vm to run the kernel backend in a VM \
                      with a stock kernel, or --backend userspace";

/// Refuses, before anything is created, when the kernel cannot do what the plan asks.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    let caps = xfrm::probe().await.map_err(xfrm_error)?;
    if !caps.esp {
        return Err(LabError::capability(anyhow::anyhow!(NO_ESP)));
    }
    if !caps.supports(plan.suite) {
        return Err(LabError::capability(anyhow::anyhow!(
            "this kernel cannot run {} in ESP: {:?}; load the crypto modules (e.g. `modprobe aesni_intel`) or \
             use --vm",
            plan.suite,
            caps.algorithms
        )));
    }
    Ok(())
}

pub fn xfrm_error(e: XfrmError) -> LabError {
    let capability = matches!(
        e,
        XfrmError::NoEsp { .. }
            | XfrmError::MissingAlgorithm { .. }
            | XfrmError::NotPermitted { .. }
            | XfrmError::NoXfrmNetlink { .. }
    );
    if capability {
        LabError::capability(e)
    } else {
        LabError::failed(e)
    }
}

/// One end's kernel objects.
struct End {
    handle: Arc<XfrmHandle>,
    sas: Vec<SaId>,
    policies: Vec<PolicyId>,
}

pub struct Xfrm {
    path: DataPath,
    mode: Mode,
    ids: RunIds,
    protection: Protection,
    ends: Vec<End>,
    /// The evidence last read by `details`, kept for the human summary in `notes`.
    evidence: Option<serde_json::Value>,
}

impl Xfrm {
    pub async fn start(plan: &RunPlan, topology: &Topology) -> LabResult<Xfrm> {
        let ad = topology.addressing;
        let mode = Mode::from(plan.mode);
        let protection = Protection::generate(plan.suite, AuthTrunc::Bits128)
            .map_err(|e| LabError::usage(anyhow::Error::new(e)))?;
        let (outer_a, outer_b) = (IpAddr::V4(ad.outer_a), IpAddr::V4(ad.outer_b));
        let target_ip = match mode {
            Mode::Tunnel => ad.inner_b,
            Mode::Transport => ad.outer_b,
        };
        let mut xfrm = Xfrm {
            path: DataPath {
                target: (target_ip, plan.port).into(),
            },
            mode,
            ids: RunIds::random(),
            protection,
            ends: Vec::new(),
            evidence: None,
        };
        for ns in [&topology.a, &topology.b] {
            let handle = XfrmHandle::open_in(&ns.path()).map_err(xfrm_error)?;
            xfrm.ends.push(End {
                handle: Arc::new(handle),
                sas: Vec::new(),
                policies: Vec::new(),
            });
        }
        if mode == Mode::Tunnel {
            // Inner addresses live on the veth ends; the route's source makes the sender
            // use the inner address, so its packets match the policy.
            Topology::add_address(&topology.a, &topology.veth_a, ad.inner_a, 32).await?;
            Topology::add_address(&topology.b, &topology.veth_b, ad.inner_b, 32).await?;
            Topology::add_route(&topology.a, ad.inner_b, 32, &topology.veth_a, Some(ad.inner_a)).await?;
            Topology::add_route(&topology.b, ad.inner_a, 32, &topology.veth_b, Some(ad.inner_b)).await?;
        }
        // `xfrm` owns what is installed from here on: an error drops it, which removes it.
        xfrm.install(
            plan,
            outer_a,
            outer_b,
            IpAddr::V4(ad.inner_a),
            IpAddr::V4(ad.inner_b),
        )
        .await?;
        Ok(xfrm)
    }

    fn sa(&self, src: IpAddr, dst: IpAddr, spi: xfrm::Spi, selector: Option<TrafficSelector>) -> SaSpec {
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

    async fn install(
        &mut self,
        plan: &RunPlan,
        outer_a: IpAddr,
        outer_b: IpAddr,
        inner_a: IpAddr,
        inner_b: IpAddr,
    ) -> LabResult<()> {
        let (sel_ab, sel_ba) = match self.mode {
            Mode::Tunnel => (None, None),
            Mode::Transport => (
                Some(TrafficSelector {
                    proto: Some(IpProto::Tcp),
                    ..TrafficSelector::hosts(outer_a, outer_b)
                }),
                Some(TrafficSelector {
                    proto: Some(IpProto::Tcp),
                    ..TrafficSelector::hosts(outer_b, outer_a)
                }),
            ),
        };
        let sa_ab = self.sa(outer_a, outer_b, self.ids.spi_a_to_b, sel_ab);
        let sa_ba = self.sa(outer_b, outer_a, self.ids.spi_b_to_a, sel_ba);
        if SHOW_KEYS.load(Ordering::Relaxed) {
            for sa in [&sa_ab, &sa_ba] {
                eprintln!(
                    "key: ip xfrm state add {}",
                    sa.iproute2_args_with_keys().join(" ")
                );
            }
        }
        // Traffic a→b as seen at a: (selector, template src, template dst).
        let flows: Vec<TrafficSelector> = match self.mode {
            Mode::Tunnel => vec![TrafficSelector::hosts(inner_a, inner_b)],
            Mode::Transport => (0..plan.parallel)
                .map(|i| TrafficSelector::port(outer_a, outer_b, IpProto::Tcp, plan.port + i))
                .collect(),
        };
        let tmpl = |src, dst| Template {
            src,
            dst,
            reqid: self.ids.reqid,
            mode: self.mode,
        };
        let mut policies_a = Vec::new();
        let mut policies_b = Vec::new();
        for ab in &flows {
            let ba = ab.reversed();
            policies_a.push(PolicySpec::new(*ab, Direction::Out, tmpl(outer_a, outer_b)));
            policies_a.push(PolicySpec::new(ba, Direction::In, tmpl(outer_b, outer_a)));
            policies_b.push(PolicySpec::new(ba, Direction::Out, tmpl(outer_b, outer_a)));
            policies_b.push(PolicySpec::new(*ab, Direction::In, tmpl(outer_a, outer_b)));
        }
        for (end, policies) in [(0, policies_a), (1, policies_b)] {
            // Both SAs in both namespaces: each end sends with one and receives with the other.
            for sa in [&sa_ab, &sa_ba] {
                self.ends[end].handle.add_sa(sa).await.map_err(xfrm_error)?;
                self.ends[end].sas.push(sa.id());
            }
            for p in policies {
                self.ends[end].handle.add_policy(&p).await.map_err(xfrm_error)?;
                self.ends[end].policies.push(p.id());
            }
        }
        Ok(())
    }

    async fn counters(&self) -> LabResult<serde_json::Value> {
        let end_a = &self.ends[0];
        let mut sas = Vec::new();
        for (id, direction) in end_a.sas.iter().zip(["a->b (sent by a)", "b->a (received by a)"]) {
            let c = end_a.handle.sa_counters(id).await.map_err(xfrm_error)?;
            sas.push(json!({
                "spi": id.spi.to_string(),
                "direction": direction,
                "packets": c.packets,
                "bytes": c.bytes,
                "replay_drops": c.replay_drops,
                "integrity_failures": c.integrity_failures,
            }));
        }
        let tunnel_header = if self.mode == Mode::Tunnel {
            IPV4_HEADER_LEN
        } else {
            0
        };
        let crypto = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
        let mut names: Vec<&str> = self.protection.algorithms().iter().map(|a| a.name()).collect();
        names.push("authenc(hmac(sha256),cbc(aes))");
        let drivers = model::env::preferred_drivers(&model::env::parse_proc_crypto(&crypto), &names);
        Ok(json!({
            "mode": self.mode.name(),
            "suite": self.protection.suite().name(),
            "reqid": self.ids.reqid.to_string(),
            "sas": sas,
            "esp_overhead_bytes_per_packet": self.protection.esp_overhead(OVERHEAD_REFERENCE_LEN) + tunnel_header,
            "kernel_drivers": drivers,
        }))
    }

    /// Removes every SA and policy this run installed, in both namespaces.
    async fn remove(ends: Vec<End>) {
        for end in ends {
            for p in &end.policies {
                if let Err(e) = end.handle.delete_policy(p).await {
                    tracing::warn!("cleanup: {e}");
                }
            }
            for sa in &end.sas {
                if let Err(e) = end.handle.delete_sa(sa).await {
                    tracing::warn!("cleanup: {e}");
                }
            }
        }
    }
}

impl ActiveBackend for Xfrm {
    fn data_path(&self) -> DataPath {
        self.path
    }

    fn details(&mut self) -> BoxFuture<'_, LabResult<serde_json::Value>> {
        Box::pin(async {
            let evidence = self.counters().await?;
            self.evidence = Some(evidence.clone());
            Ok(evidence)
        })
    }

    fn notes(&self) -> Vec<String> {
        let Some(e) = &self.evidence else {
            return Vec::new();
        };
        let mut lines: Vec<String> = e["sas"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|sa| {
                format!(
                    "ESP SA spi {} {}: {} packets, {} bytes, {} replay drops, {} integrity failures",
                    sa["spi"].as_str().unwrap_or("?"),
                    sa["direction"].as_str().unwrap_or("?"),
                    sa["packets"],
                    sa["bytes"],
                    sa["replay_drops"],
                    sa["integrity_failures"],
                )
            })
            .collect();
        let drivers: Vec<String> = e["kernel_drivers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(alg, driver)| format!("{alg}={}", driver.as_str().unwrap_or("?")))
            .collect();
        lines.push(format!(
            "{} mode, ESP overhead {} bytes per 1400-byte packet, kernel drivers: {}",
            e["mode"].as_str().unwrap_or("?"),
            e["esp_overhead_bytes_per_packet"],
            if drivers.is_empty() {
                "none seen in /proc/crypto".to_string()
            } else {
                drivers.join(", ")
            }
        ));
        lines
    }
}

impl Drop for Xfrm {
    fn drop(&mut self) {
        let ends = std::mem::take(&mut self.ends);
        // Drop cannot await: block this worker on the removal where the runtime allows it.
        // Where it does not, the namespaces' removal right after flushes their SAs anyway.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
                tokio::task::block_in_place(|| rt.block_on(Xfrm::remove(ends)));
            }
        }
    }
}

/// `ipsec-lab clean`: removes the lab's SAs and policies from the current namespace
/// (the lab's own namespaces are deleted whole by netns::clean).
pub fn clean_current_namespace() -> LabResult<xfrm::CleanCounts> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    runtime.block_on(async {
        let handle = XfrmHandle::open().map_err(xfrm_error)?;
        handle.clean_lab().await.map_err(xfrm_error)
    })
}
