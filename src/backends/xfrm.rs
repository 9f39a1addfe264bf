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
use model::{IpsecMode, RunPlan};
use netns::Topology;
use serde_json::json;
use xfrm::{
    AuthTrunc, IpProto, PolicyDirection, PolicyId, PolicySpec, Protection, RunIds, SaId, SaSpec, Template,
    TrafficSelector, XfrmError, XfrmHandle, LAB_REPLAY_WINDOW,
};

use super::{ActiveBackend, DataPath, Side};
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

/// One end's kernel objects. Dropping it removes them.
pub struct XfrmEnd {
    side: Side,
    handle: Arc<XfrmHandle>,
    sas: Vec<SaId>,
    policies: Vec<PolicyId>,
    /// Whether each object is in this process's state file (objects in the current
    /// namespace are; those in a lab namespace go with the namespace's record).
    recorded: bool,
}

impl XfrmEnd {
    /// Installs this end's half of `set` through `handle`, a handle in the current namespace
    /// (a real host's: `serve`, `run --peer`). Each SA and policy is recorded in the state
    /// file before it is added, so `clean` removes it if this process is killed. On error
    /// what was installed is removed again (the partly filled end is dropped).
    pub async fn install(handle: XfrmHandle, side: Side, set: &SaSet) -> LabResult<XfrmEnd> {
        XfrmEnd::install_with(handle, side, set, true).await
    }

    /// [`XfrmEnd::install`] through a handle inside a lab namespace, whose record covers it.
    async fn install_in_lab_namespace(handle: XfrmHandle, side: Side, set: &SaSet) -> LabResult<XfrmEnd> {
        XfrmEnd::install_with(handle, side, set, false).await
    }

    async fn install_with(handle: XfrmHandle, side: Side, set: &SaSet, recorded: bool) -> LabResult<XfrmEnd> {
        let mut end = XfrmEnd {
            side,
            handle: Arc::new(handle),
            sas: Vec::new(),
            policies: Vec::new(),
            recorded,
        };
        // Each object is recorded before it is added (a kill in between leaves a record
        // `clean` finds already gone, never an unrecorded object); one the kernel refused
        // is forgotten again and never deleted (it may be someone else's).
        for sa in set.sas() {
            let record = recorded.then(|| sa_record(&sa.id()));
            record_now(&record)?;
            if let Err(e) = end.handle.add_sa(&sa).await {
                forget_now(&record);
                return Err(xfrm_error(e));
            }
            end.sas.push(sa.id());
        }
        for p in set.policies(side) {
            let record = policy_record(&p.id()).filter(|_| recorded);
            record_now(&record)?;
            if let Err(e) = end.handle.add_policy(&p).await {
                forget_now(&record);
                return Err(xfrm_error(e));
            }
            end.policies.push(p.id());
        }
        Ok(end)
    }

    /// The kernel's counters of this end's SAs.
    pub async fn counters(&self) -> LabResult<Vec<serde_json::Value>> {
        let me = match self.side {
            Side::A => "a",
            Side::B => "b",
        };
        let mut sas = Vec::new();
        for (id, direction) in self.sas.iter().zip(["a->b", "b->a"]) {
            let c = self.handle.sa_counters(id).await.map_err(xfrm_error)?;
            let role = if direction.starts_with(me) {
                "sent"
            } else {
                "received"
            };
            sas.push(json!({
                "spi": id.spi.to_string(),
                "direction": format!("{direction} ({role} by {me})"),
                "packets": c.packets,
                "bytes": c.bytes,
                "replay_drops": c.replay_drops,
                "integrity_failures": c.integrity_failures,
            }));
        }
        Ok(sas)
    }

    /// Deletes the objects; those that are gone are forgotten from the state file, those
    /// that could not be deleted stay recorded for `clean`.
    async fn remove(handle: Arc<XfrmHandle>, sas: Vec<SaId>, policies: Vec<PolicyId>, recorded: bool) {
        for p in &policies {
            match handle.delete_policy(p).await {
                Ok(()) | Err(XfrmError::NotFound { .. }) => {
                    forget_now(&policy_record(p).filter(|_| recorded))
                }
                Err(e) => tracing::warn!("cleanup: {e}"),
            }
        }
        for sa in &sas {
            match handle.delete_sa(sa).await {
                Ok(()) | Err(XfrmError::NotFound { .. }) => forget_now(&recorded.then(|| sa_record(sa))),
                Err(e) => tracing::warn!("cleanup: {e}"),
            }
        }
    }
}

fn record_now(record: &Option<owner::Record>) -> LabResult<()> {
    match record {
        Some(r) => owner::record(r.clone()).map_err(super::record_error),
        None => Ok(()),
    }
}

fn forget_now(record: &Option<owner::Record>) {
    if let Some(r) = record {
        owner::forget(r);
    }
}

/// The state-file record of an SA in this process's network namespace.
pub fn sa_record(id: &SaId) -> owner::Record {
    owner::Record::XfrmSa {
        namespace: owner::current_network_namespace(),
        src: id.src,
        dst: id.dst,
        spi: id.spi.0,
    }
}

/// The state-file record of a policy in the current namespace (policies named by kernel
/// index are never installed by the lab, so they have none).
pub fn policy_record(id: &PolicyId) -> Option<owner::Record> {
    let PolicyId::Selector { selector, direction } = id else {
        return None;
    };
    Some(owner::Record::XfrmPolicy(owner::PolicyRecord {
        namespace: owner::current_network_namespace(),
        src: selector.src.addr,
        src_len: selector.src.len,
        dst: selector.dst.addr,
        dst_len: selector.dst.len,
        proto: selector.proto.map(|p| match p {
            IpProto::Tcp => libc::IPPROTO_TCP as u8,
            IpProto::Udp => libc::IPPROTO_UDP as u8,
        }),
        src_port: selector.src_port,
        dst_port: selector.dst_port,
        direction: direction.name().into(),
    }))
}

/// The policy a record names, for `clean`.
pub fn policy_id(r: &owner::PolicyRecord) -> Option<PolicyId> {
    let proto = match r.proto.map(i32::from) {
        None => None,
        Some(libc::IPPROTO_TCP) => Some(IpProto::Tcp),
        Some(libc::IPPROTO_UDP) => Some(IpProto::Udp),
        Some(_) => return None,
    };
    let direction = [PolicyDirection::In, PolicyDirection::Out, PolicyDirection::Fwd]
        .into_iter()
        .find(|d| d.name() == r.direction)?;
    let selector = TrafficSelector {
        src: xfrm::Prefix {
            addr: r.src,
            len: r.src_len,
        },
        dst: xfrm::Prefix {
            addr: r.dst,
            len: r.dst_len,
        },
        proto,
        src_port: r.src_port,
        dst_port: r.dst_port,
    };
    Some(PolicyId::Selector { selector, direction })
}

impl Drop for XfrmEnd {
    fn drop(&mut self) {
        let (sas, policies) = (std::mem::take(&mut self.sas), std::mem::take(&mut self.policies));
        if sas.is_empty() && policies.is_empty() {
            return;
        }
        let (handle, recorded) = (self.handle.clone(), self.recorded);
        // Drop cannot await: block this worker on the removal where the runtime allows it.
        // Where it does not, a fresh thread with its own runtime does it (a server must
        // never leave SAs behind, namespace removal or not).
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| rt.block_on(XfrmEnd::remove(handle, sas, policies, recorded)));
            }
            _ => {
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        rt.block_on(XfrmEnd::remove(handle, sas, policies, recorded));
                    }
                })
                .join();
            }
        }
    }
}

/// The report's evidence for a set: what both local ends share, plus the SA counters.
pub fn details(
    set_mode: IpsecMode,
    protection: &Protection,
    ids: RunIds,
    sas: Vec<serde_json::Value>,
) -> serde_json::Value {
    let tunnel_header = if set_mode == IpsecMode::Tunnel {
        IPV4_HEADER_LEN
    } else {
        0
    };
    let crypto = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
    let mut names: Vec<&str> = protection.algorithms().iter().map(|a| a.name()).collect();
    // ESP runs CBC+HMAC as one authenc instance: that driver is the one that did the work.
    if matches!(
        protection.suite(),
        model::CipherSuite::AesCbc {
            hmac: model::Hmac::Sha256,
            ..
        }
    ) {
        names.push("authenc(hmac(sha256),cbc(aes))");
    }
    let drivers = model::env::preferred_drivers(&model::env::parse_proc_crypto(&crypto), &names);
    json!({
        "mode": set_mode.name(),
        "suite": protection.suite().name(),
        "reqid": ids.reqid.to_string(),
        "sas": sas,
        "esp_overhead_bytes_per_packet": protection.esp_overhead(OVERHEAD_REFERENCE_LEN) + tunnel_header,
        "kernel_drivers": drivers,
    })
}

/// Prints the SAs with keys where `--show-keys` asked for it.
pub fn show_keys(set: &SaSet) {
    if SHOW_KEYS.load(Ordering::Relaxed) {
        for sa in set.sas() {
            eprintln!(
                "key: ip xfrm state add {}",
                sa.iproute2_args_with_keys().join(" ")
            );
        }
    }
}

pub struct Xfrm {
    path: DataPath,
    mode: IpsecMode,
    ids: RunIds,
    protection: Protection,
    /// End a first, then b; dropping removes each end's SAs and policies.
    ends: Vec<XfrmEnd>,
    /// The evidence last read by `details`, kept for the human summary in `notes`.
    evidence: Option<serde_json::Value>,
}

impl Xfrm {
    pub async fn start(plan: &RunPlan, topology: &Topology) -> LabResult<Xfrm> {
        let ad = topology.addressing;
        let mode = plan.mode;
        let protection = Protection::generate(plan.suite, AuthTrunc::Bits128)
            .map_err(|e| LabError::usage(anyhow::Error::new(e)))?;
        let (outer_a, outer_b) = (IpAddr::V4(ad.outer_a), IpAddr::V4(ad.outer_b));
        let (data_a, data_b) = match mode {
            IpsecMode::Tunnel => (IpAddr::V4(ad.inner_a), IpAddr::V4(ad.inner_b)),
            IpsecMode::Transport => (outer_a, outer_b),
        };
        let set = SaSet {
            mode,
            ids: RunIds::random(),
            protection,
            addr_a: outer_a,
            addr_b: outer_b,
            flows: SaSet::flows(plan, mode, data_a, data_b),
            sender: Side::A,
        };
        let mut handles = Vec::new();
        for ns in [&topology.a, &topology.b] {
            handles.push(XfrmHandle::open_in(&ns.path()).map_err(xfrm_error)?);
        }
        if mode == IpsecMode::Tunnel {
            // Inner addresses live on the veth ends; the route's source makes the sender
            // use the inner address, so its packets match the policy.
            Topology::add_address(&topology.a, &topology.veth_a, ad.inner_a, 32).await?;
            Topology::add_address(&topology.b, &topology.veth_b, ad.inner_b, 32).await?;
            Topology::add_route(&topology.a, ad.inner_b, 32, &topology.veth_a, Some(ad.inner_a)).await?;
            Topology::add_route(&topology.b, ad.inner_a, 32, &topology.veth_b, Some(ad.inner_b)).await?;
        }
        show_keys(&set);
        let mut ends = Vec::new();
        for (handle, side) in handles.into_iter().zip([Side::A, Side::B]) {
            // An error drops `ends`, which removes what the other end already installed.
            ends.push(XfrmEnd::install_in_lab_namespace(handle, side, &set).await?);
        }
        Ok(Xfrm {
            path: DataPath {
                target: (data_b, plan.port).into(),
            },
            mode,
            ids: set.ids,
            protection: set.protection,
            ends,
            evidence: None,
        })
    }

    async fn counters(&self) -> LabResult<serde_json::Value> {
        let sas = self.ends[0].counters().await?;
        Ok(details(self.mode, &self.protection, self.ids, sas))
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
        self.evidence.as_ref().map(evidence_lines).unwrap_or_default()
    }
}

/// The evidence of [`details`] in sentences: what each SA carried, the ESP overhead and
/// the kernel drivers that served it.
pub fn evidence_lines(e: &serde_json::Value) -> Vec<String> {
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
    let drivers = if drivers.is_empty() {
        "none seen in /proc/crypto".to_string()
    } else {
        drivers.join(", ")
    };
    lines.push(format!(
        "{} mode, ESP overhead {} bytes per {OVERHEAD_REFERENCE_LEN}-byte packet, kernel drivers: {drivers}",
        e["mode"].as_str().unwrap_or("?"),
        e["esp_overhead_bytes_per_packet"],
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_reads_as_sentences() {
        let e = json!({
            "mode": "tunnel",
            "sas": [{"spi": "0x1a500101", "direction": "a->b (sent by a)", "packets": 2952, "bytes": 4232538,
                     "replay_drops": 0, "integrity_failures": 0}],
            "esp_overhead_bytes_per_packet": 68,
            "kernel_drivers": {"cbc(aes)": "cbc-aes-aesni"},
        });
        assert_eq!(
            evidence_lines(&e),
            [
                "ESP SA spi 0x1a500101 a->b (sent by a): 2952 packets, 4232538 bytes, 0 replay drops, 0 integrity failures",
                "tunnel mode, ESP overhead 68 bytes per 1400-byte packet, kernel drivers: cbc(aes)=cbc-aes-aesni",
            ]
        );
    }

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
