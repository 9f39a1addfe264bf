//! `--netem`: WAN conditions on the lab's link. The netem qdisc goes on BOTH veth ends as
//! their root qdisc, so each direction of the link gets the spec, as on a real WAN path:
//! data and ACKs are delayed, lost and rate-limited alike, a `--reverse` or two-way run
//! sees the same link, and "delay 20ms" reads like a link's one-way delay (the round trip
//! grows by 40 ms, which the report's measured RTT shows).
//!
//! The qdiscs live on the veths inside the run's namespaces, so they go with the namespaces
//! (which `clean` finds recorded); a sweep that reuses one topology removes them after
//! each run itself.
//!
//! Leaves out the qdisc's netlink messages (crate `netns`) and the spec's words (`model`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use model::{LinkConditions, NetemSpec, Summary};
use netns::netem::{self, NetemQdisc};
use netns::Topology;

use crate::error::{LabError, LabResult};

/// TCP handshakes timed per RTT probe.
const RTT_PROBES: usize = 5;
/// Longest one probe may take (a lost SYN is retried after 1 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Refuses (exit 3) a `--netem` run on a kernel without the netem qdisc, before anything
/// is created.
pub fn preflight(spec: Option<&NetemSpec>) -> LabResult<()> {
    if spec.is_some() && !netem::kernel_has_netem() {
        return Err(netns::NetnsError::NoNetem.into());
    }
    Ok(())
}

/// Installs `spec` on both ends of the link, reads it back and measures the round trip
/// over it. On error what was installed stays on the veths, which the caller's topology
/// removes (or [`unshape`] does).
pub async fn shape(topology: &Topology, spec: &NetemSpec) -> LabResult<LinkConditions> {
    let ends = [(&topology.a, &topology.veth_a), (&topology.b, &topology.veth_b)];
    for (ns, link) in ends {
        netem::install(ns, link, spec).await?;
    }
    let wanted = NetemQdisc::from_spec(spec);
    let mut installed = Vec::new();
    for (ns, link) in ends {
        let got = netem::installed(ns, link).await?.ok_or_else(|| {
            LabError::failed(anyhow::anyhow!(
                "the netem qdisc added on {link} in {} is not there when read back",
                ns.name()
            ))
        })?;
        installed.push(model::netem::InstalledNetem {
            namespace: ns.name().to_string(),
            link: link.clone(),
            netem: got.to_spec().to_string(),
            matches_request: got == wanted,
        });
    }
    let rtt_ms = measure_rtt(topology)?;
    Ok(LinkConditions {
        netem: spec.to_string(),
        spec: spec.clone(),
        installed,
        rtt_ms: Some(rtt_ms),
    })
}

/// Takes the netem qdiscs off both ends again (the veths go back to their default).
pub async fn unshape(topology: &Topology) -> LabResult<()> {
    netem::remove(&topology.a, &topology.veth_a).await?;
    netem::remove(&topology.b, &topology.veth_b).await?;
    Ok(())
}

/// Round trips over the link, in milliseconds: TCP handshakes from `a` to a listener in
/// `b` on the outer addresses (the path the qdiscs shape, outside any tunnel): connect()
/// returns when the SYN-ACK is back, one round trip.
pub fn measure_rtt(topology: &Topology) -> LabResult<Summary> {
    let ad = topology.addressing;
    let listener = topology
        .b
        .run(move || TcpListener::bind(SocketAddr::from((ad.outer_b, 0))))?
        .map_err(LabError::failed)?;
    let target = listener.local_addr().map_err(LabError::failed)?;
    listener.set_nonblocking(true).map_err(LabError::failed)?;
    // The kernel completes handshakes on its own; accepting only empties the backlog, and
    // stops at a deadline so a failed probe never leaves the thread behind.
    let accepting = std::thread::spawn(move || {
        let deadline = Instant::now() + PROBE_TIMEOUT * RTT_PROBES as u32;
        let mut accepted = 0;
        while accepted < RTT_PROBES && Instant::now() < deadline {
            match listener.accept() {
                Ok(_) => accepted += 1,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    });
    let probed = topology.a.run(move || -> std::io::Result<Vec<f64>> {
        let mut ms = Vec::new();
        for _ in 0..RTT_PROBES {
            let start = Instant::now();
            let stream = TcpStream::connect_timeout(&target, PROBE_TIMEOUT)?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            drop(stream);
        }
        Ok(ms)
    });
    let _ = accepting.join();
    let ms = probed?.map_err(|e| LabError::failed(anyhow::anyhow!("RTT probe to {target}: {e}")))?;
    Summary::of(&ms).ok_or_else(|| LabError::failed(anyhow::anyhow!("no RTT probe finished")))
}
