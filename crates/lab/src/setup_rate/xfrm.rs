//! `ipsec-lab setup-rate --backend xfrm`: how fast the kernel's XFRM installs SAs and policies as its
//! tables grow (1k, 10k, 100k), batched and one by one; what one flow's packets cost with
//! them installed; how long their flush takes; and what an SA costs in kernel memory.
//!
//! The host's kernel has no ESP, so [`measure`] boots user-mode Linux (its memory sized for
//! the largest table, checked against the host's before the boot) and runs this binary
//! there with `--in-guest`, which is [`measure_here`]. That works in a network namespace of
//! its own, made by unsharing: every SA and policy lives there and goes when the process
//! does, whatever ends it; each step still flushes both tables and checks they are empty.
//!
//! The lookup flow is UDP over loopback (its `disable_xfrm` turned off) through one
//! transport-mode SA (its out policy selects it; the kernel's SA lookup by SPI decrypts
//! it on the way in), 64-byte
//! datagrams, each checked on arrival; the SA's packet counter shows the flow crossed ESP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use model::setup_rate::{
    per_second, InstallRate, LookupCost, SetupRatePlan, SetupRateReport, TableRates, TRIALS,
};
use model::IpsecMode;
use xfrm::range::{REQID_FIRST, SPI_FIRST};
use xfrm::{
    AuthTrunc, Batch, BatchOutcome, IpProto, PolicyDirection, PolicySpec, Protection, ReqId, SaSpec, Spi,
    Template, TrafficSelector, XfrmHandle, LAB_REPLAY_WINDOW,
};

use crate::error::{LabError, LabResult};
use crate::uml;

/// The flow's two ends, on the private namespace's loopback.
const FLOW_SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const FLOW_DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Each datagram of the flow, checked on arrival.
const PAYLOAD: [u8; 64] = *b"ipsec-lab setup-rate lookup flow: one SA among the N installed..";
/// The table's i-th SA and policy: from 198.18.128.0/22 to 198.19.0.0/16, never the flow's.
const TABLE_SRC: u32 = u32::from_be_bytes([198, 18, 128, 0]);
const TABLE_DST: u32 = u32::from_be_bytes([198, 19, 0, 0]);

/// Boots user-mode Linux (`release`: `--vm uml:RELEASE`, None: the one that runs here) with
/// memory for the plan's largest table and measures there.
pub fn measure(plan: &SetupRatePlan, release: Option<&str>) -> LabResult<SetupRateReport> {
    let kernel = uml::UmlKernel::require(release)?;
    let memory_mib = model::setup_rate::guest_memory_mib(&plan.sizes);
    let available_mib = procstat::meminfo("MemAvailable").unwrap_or(0) / 1024;
    if available_mib < memory_mib {
        return Err(LabError::capability(anyhow::anyhow!(
            "the largest table ({}) needs a guest of {memory_mib} MiB and this host has {available_mib} MiB \
             available: ask for smaller --sizes",
            plan.sizes
                .iter()
                .max_by_key(|s| s.0)
                .expect("validated: one size at least")
        )));
    }
    let outdir = owner::PrivateDir::new("ipsec-lab-uml-")?;
    let mut guest = uml::Guest::of_this_binary(kernel, outdir.path(), &guest_args(plan))?;
    guest.memory_mib = memory_mib;
    eprintln!(
        "ipsec-lab: setup rate in user-mode Linux {} ({memory_mib} MiB; native speed, 1 CPU)",
        guest.kernel.release
    );
    let (mut report, elapsed): (SetupRateReport, Duration) = uml::run_guest(
        guest,
        &outdir,
        "the setup-rate run in user-mode Linux",
        budget(plan),
    )?;
    report.notes.push(format!(
        "ran in user-mode Linux (a kernel running as a process at native speed, one CPU); boot, run and \
         halt took {:.1} s",
        elapsed.as_secs_f64()
    ));
    Ok(report)
}

/// The guest's command line: the same plan, measured where it runs.
fn guest_args(plan: &SetupRatePlan) -> Vec<String> {
    let sizes: Vec<String> = plan.sizes.iter().map(|s| s.0.to_string()).collect();
    vec![
        "setup-rate".into(),
        "--in-guest".into(),
        "--sizes".into(),
        sizes.join(","),
        "--cipher".into(),
        plan.xfrm_suite().to_string(),
        "--window".into(),
        plan.window.to_string(),
        "--flow-seconds".into(),
        plan.xfrm_flow_seconds().to_string(),
    ]
}

/// How long the guest may take before it is taken for hung: boot and halt, then per table
/// 5 ms per SA (its six installs, two of them one by one, and two flushes: a 100k table
/// took 2 ms per SA on this project's 2-vCPU host, 232 s boot included, where a budget of
/// 1 ms per SA had the default run stopped as hung) and its flows.
fn budget(plan: &SetupRatePlan) -> Duration {
    let per_table: f64 = plan
        .sizes
        .iter()
        .map(|s| f64::from(s.0) * 0.005 + 3.0 * TRIALS as f64 * plan.xfrm_flow_seconds() + 10.0)
        .sum();
    Duration::from_secs_f64(60.0 + per_table)
}

/// Measures in the running kernel (it must have ESP), in a network namespace this process
/// makes its own first. Stops between windows when SIGINT or SIGTERM arrived
/// ([`speed::stop`]), leaving both tables empty.
pub fn measure_here(plan: &SetupRatePlan) -> LabResult<SetupRateReport> {
    // On the calling thread, so /proc/self/ns/net (netns, rtnetlink) is the new namespace and
    // every thread made from here on is in it too.
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
        LabError::capability(anyhow::anyhow!("unshare a network namespace: {e} (needs root)"))
    })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    // Linux marks loopback "disable_xfrm" (no policy lookup on its routes); in this
    // namespace of its own the flow's loopback takes the policy like any other link.
    std::fs::write("/proc/sys/net/ipv4/conf/lo/disable_xfrm", "0")
        .map_err(|e| LabError::failed(anyhow::anyhow!("enable XFRM on loopback: {e}")))?;
    let ns = netns::Namespace::current()?;
    rt.block_on(async {
        netns::Topology::set_link_up(&ns, "lo").await?;
        for a in [FLOW_SRC, FLOW_DST] {
            netns::Topology::add_address(&ns, "lo", a.into(), 32).await?;
        }
        Ok::<(), netns::NetnsError>(())
    })?;
    let handle = rt.block_on(async { XfrmHandle::open() })?;
    let window = NonZeroUsize::new(plan.window as usize).expect("validated: 1 at least");
    let mut run = Tables {
        plan,
        batched: Batch::open(window)?,
        one_by_one: Batch::open(NonZeroUsize::MIN)?,
        handle,
        rt,
    };
    let tables = plan
        .sizes
        .iter()
        .map(|size| run.table(size.0 as usize))
        .collect::<LabResult<Vec<_>>>();
    // Whatever happened, both tables end empty (the namespace goes with the process anyway).
    let emptied = run.empty();
    let tables = tables?;
    emptied?;
    let mut environment = model::Environment::detect();
    if let Ok(virt) = std::env::var("IPSEC_LAB_VIRT") {
        environment.virtualization = virt;
    }
    Ok(SetupRateReport {
        environment,
        plan: plan.clone(),
        tables,
        ike: Vec::new(),
        peers: Vec::new(),
        implementation: None,
        notes: vec![format!(
            "lookup: {} trials of {} s each of a 64-byte UDP flow through one SA, alone before the N are \
             installed and after their flush, and with them",
            TRIALS,
            plan.xfrm_flow_seconds()
        )],
    })
}

/// The measuring state: two sockets (a window per write, one by one) and a handle for the
/// reads.
struct Tables<'a> {
    plan: &'a SetupRatePlan,
    batched: Batch,
    one_by_one: Batch,
    handle: XfrmHandle,
    rt: tokio::runtime::Runtime,
}

impl Tables<'_> {
    fn table(&mut self, n: usize) -> LabResult<TableRates> {
        let (sa_specs, policy_specs) = (table_sas(n, self.plan)?, table_policies(n));
        let sas = self.batched.sas(&sa_specs);
        let policies = self.batched.policies(&policy_specs);
        // A first install and flush, its time not counted: the guest's memory for N is then
        // touched once (user-mode Linux's first touch of a page costs a host page fault,
        // which neither way of installing should pay alone). What the N SAs took of the
        // kernel's free memory is read around it, before the slab caches hold freed ones.
        eprintln!(
            "ipsec-lab: installing {n} SAs and {n} policies, {} per write",
            self.plan.window
        );
        let free_before = free_memory();
        completed(self.batched.send(&sas, &stop)?, n)?;
        let free_after = free_memory();
        completed(self.batched.send(&policies, &stop)?, n)?;
        self.empty()?;
        settle();
        let flow = self.add_flow()?;
        let mut alone = self.flows(&flow)?;

        let sas_s = completed(self.batched.send(&sas, &stop)?, n)?;
        let policies_s = completed(self.batched.send(&policies, &stop)?, n)?;
        let loaded = self.flows(&flow)?;

        let started = Instant::now();
        self.batched.flush_sas()?;
        let flush_sas_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        self.batched.flush_policies()?;
        let flush_policies_s = started.elapsed().as_secs_f64();
        self.check_empty()?;
        settle();
        let flow = self.add_flow()?;
        alone.extend(self.flows(&flow)?);
        self.empty()?;
        settle();

        eprintln!("ipsec-lab: installing {n} SAs and {n} policies one by one");
        let sas = self.one_by_one.sas(&sa_specs);
        let policies = self.one_by_one.policies(&policy_specs);
        let one_sas_s = completed(self.one_by_one.send(&sas, &stop)?, n)?;
        let one_policies_s = completed(self.one_by_one.send(&policies, &stop)?, n)?;
        self.empty()?;

        let kernel_bytes_per_sa = match (free_before, free_after) {
            (Some(before), Some(after)) if before > after => Some((before - after) as f64 / n as f64),
            _ => None,
        };
        Ok(TableRates {
            size: model::setup_rate::TableSize(n as u32),
            batched: InstallRate {
                sas_per_s: per_second(n, sas_s),
                policies_per_s: per_second(n, policies_s),
            },
            one_by_one: InstallRate {
                sas_per_s: per_second(n, one_sas_s),
                policies_per_s: per_second(n, one_policies_s),
            },
            flush_sas_s,
            flush_policies_s,
            kernel_bytes_per_sa,
            lookup: LookupCost::new(alone, loaded),
        })
    }

    /// Installs the flow's SA and policy; its SA's id.
    fn add_flow(&mut self) -> LabResult<xfrm::SaId> {
        let (sa, policy) = flow_sa(self.plan)?;
        let sa_add = self.batched.sas(std::slice::from_ref(&sa));
        completed(self.batched.send(&sa_add, &stop)?, 1)?;
        let policy_add = self.batched.policies(std::slice::from_ref(&policy));
        completed(self.batched.send(&policy_add, &stop)?, 1)?;
        Ok(sa.id())
    }

    /// [`TRIALS`] flows through the flow's SA (`sa`), each one's packets per second; the
    /// SA's counter must have seen every packet that arrived.
    fn flows(&mut self, sa: &xfrm::SaId) -> LabResult<Vec<f64>> {
        let mut pps = Vec::with_capacity(TRIALS);
        let mut arrived = 0;
        for _ in 0..TRIALS {
            let (packets, seconds) = flow(Duration::from_secs_f64(self.plan.xfrm_flow_seconds()))?;
            arrived += packets;
            pps.push(per_second(packets, seconds));
        }
        let counted = self.rt.block_on(self.handle.sa_counters(sa))?.packets;
        if arrived == 0 || counted < arrived as u64 {
            return Err(LabError::failed(anyhow::anyhow!(
                "the lookup flow did not cross its SA: {arrived} datagrams arrived, the SA counted {counted} packets"
            )));
        }
        Ok(pps)
    }

    /// Both tables flushed and checked empty.
    fn empty(&mut self) -> LabResult<()> {
        self.batched.flush_sas()?;
        self.batched.flush_policies()?;
        self.check_empty()
    }

    fn check_empty(&self) -> LabResult<()> {
        let (sas, policies) = self.rt.block_on(async {
            Ok::<_, xfrm::XfrmError>((
                self.handle.list_sas().await?.len(),
                self.handle.list_policies().await?.len(),
            ))
        })?;
        match (sas, policies) {
            (0, 0) => Ok(()),
            _ => Err(LabError::failed(anyhow::anyhow!(
                "after the flush {sas} SAs and {policies} policies are still installed"
            ))),
        }
    }
}

/// Whether SIGINT or SIGTERM asked the run to stop.
fn stop() -> bool {
    crate::signal::any_requested()
}

/// The seconds the batch took, or an error unless every one of its `n` requests was
/// acked: stopped by a signal, or the kernel's refusals, each with its place in the batch.
fn completed(outcome: BatchOutcome, n: usize) -> LabResult<f64> {
    if outcome.stopped {
        return Err(LabError::interrupted());
    }
    if outcome.refused.is_empty() {
        return Ok(outcome.seconds);
    }
    let shown: Vec<String> = outcome
        .refused
        .iter()
        .take(3)
        .map(|r| format!("request {}: {}", r.index, r.error))
        .collect();
    Err(LabError::failed(anyhow::anyhow!(
        "the kernel refused {} of {n} requests ({})",
        outcome.refused.len(),
        shown.join("; ")
    )))
}

/// The flow's SA (FLOW_SRC → FLOW_DST, transport) and the out policy that selects it.
fn flow_sa(plan: &SetupRatePlan) -> LabResult<(SaSpec, PolicySpec)> {
    let (src, dst) = (IpAddr::V4(FLOW_SRC), IpAddr::V4(FLOW_DST));
    let reqid = ReqId(REQID_FIRST);
    let sa = SaSpec {
        src,
        dst,
        spi: Spi(SPI_FIRST | 1),
        reqid,
        mode: IpsecMode::Transport,
        replay_window: LAB_REPLAY_WINDOW,
        protection: Protection::generate(plan.xfrm_suite(), AuthTrunc::Bits128)
            .map_err(xfrm::XfrmError::from)?,
        selector: None,
        pcpu: None,
    };
    let template = Template {
        src,
        dst,
        reqid,
        mode: IpsecMode::Transport,
    };
    let selector = TrafficSelector {
        proto: Some(IpProto::Udp),
        ..TrafficSelector::hosts(src, dst)
    };
    Ok((sa, PolicySpec::new(selector, PolicyDirection::Out, template)))
}

/// The i-th table entry's outer addresses.
fn table_ends(i: usize) -> (IpAddr, IpAddr) {
    let i = i as u32;
    (
        IpAddr::V4((TABLE_SRC + (i >> 16)).into()),
        IpAddr::V4((TABLE_DST + (i & 0xffff)).into()),
    )
}

/// N tunnel SAs, each with its own addresses, SPI and keys.
fn table_sas(n: usize, plan: &SetupRatePlan) -> LabResult<Vec<SaSpec>> {
    (0..n)
        .map(|i| {
            let (src, dst) = table_ends(i);
            Ok(SaSpec {
                src,
                dst,
                spi: Spi(SPI_FIRST + 0x10 + i as u32),
                reqid: ReqId(REQID_FIRST + 1),
                mode: IpsecMode::Tunnel,
                replay_window: LAB_REPLAY_WINDOW,
                protection: Protection::generate(plan.xfrm_suite(), AuthTrunc::Bits128)
                    .map_err(xfrm::XfrmError::from)?,
                selector: None,
                pcpu: None,
            })
        })
        .collect()
}

/// N out policies, one per table SA, each selecting its own pair of hosts.
fn table_policies(n: usize) -> Vec<PolicySpec> {
    (0..n)
        .map(|i| {
            let (src, dst) = table_ends(i);
            let template = Template {
                src,
                dst,
                reqid: ReqId(REQID_FIRST + 1),
                mode: IpsecMode::Tunnel,
            };
            PolicySpec::new(TrafficSelector::hosts(src, dst), PolicyDirection::Out, template)
        })
        .collect()
}

/// Waits (at most 10 s) until the kernel has freed what a flush removed: it destroys
/// flushed SAs later, in a work queue, which on user-mode Linux's one CPU would otherwise
/// run inside the next flow and slow it. Done when MemFree grew by under 64 KiB in 50 ms.
fn settle() {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = free_memory();
    while Instant::now() < deadline && !stop() {
        std::thread::sleep(Duration::from_millis(50));
        let now = free_memory();
        if now.zip(last).is_none_or(|(now, last)| now < last + (64 << 10)) {
            return;
        }
        last = now;
    }
}

/// The kernel's free memory in bytes (`MemFree` of /proc/meminfo).
fn free_memory() -> Option<u64> {
    procstat::meminfo("MemFree").map(|kib| kib * 1024)
}

/// One flow: datagrams sent as fast as one socket goes for `length`, those that arrived
/// intact counted; the count and the seconds the sender sent for.
fn flow(length: Duration) -> LabResult<(usize, f64)> {
    let rx = UdpSocket::bind(SocketAddr::new(FLOW_DST.into(), 0)).map_err(LabError::failed)?;
    rx.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(LabError::failed)?;
    let tx = UdpSocket::bind(SocketAddr::new(FLOW_SRC.into(), 0)).map_err(LabError::failed)?;
    tx.connect(rx.local_addr().map_err(LabError::failed)?)
        .map_err(LabError::failed)?;
    let sending = AtomicBool::new(true);
    let started = Instant::now();
    let mut seconds = 0.0;
    let arrived = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let mut buf = [0u8; 128];
            let mut arrived = 0;
            // After the sender stops, what is still queued is read until 100 ms of quiet.
            loop {
                match rx.recv(&mut buf) {
                    Ok(n) if buf[..n] == PAYLOAD => arrived += 1,
                    Ok(_) => {}
                    Err(_) if !sending.load(Ordering::Relaxed) => return arrived,
                    Err(_) => {}
                }
            }
        });
        while started.elapsed() < length && !stop() {
            // A full queue drops a datagram (ENOBUFS): what counts is what arrives.
            let _ = tx.send(&PAYLOAD);
        }
        seconds = started.elapsed().as_secs_f64();
        sending.store(false, Ordering::Relaxed);
        receiver.join().unwrap_or(0)
    });
    if stop() {
        return Err(LabError::interrupted());
    }
    Ok((arrived, seconds))
}
