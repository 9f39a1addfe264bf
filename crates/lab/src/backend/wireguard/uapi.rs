//! The UAPI end both userspace WireGuards share: wireguard-go and boringtun each serve the
//! text protocol on /var/run/wireguard/IFNAME.sock (`wgnl::uapi` writes and reads it), and
//! each end is claimed, configured and brought up the same way once its device exists.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use model::RunPlan;
use netns::Topology;
use wgnl::PeerStats;

use super::{device_config, handshake_done, inner_addrs, inner_mtu, start_handshake, Keys, POLL};
use crate::backend::site::{Side, Site};
use crate::error::{LabError, LabResult};

const SOCKET_DIR: &str = "/var/run/wireguard";
const UAPI_TIMEOUT: Duration = Duration::from_secs(5);

/// The UAPI socket of device `ifname`, refused where one is there already (a killed run's
/// is left behind: the new device would not be the one it answers for).
pub(super) fn fresh_socket(ifname: &str, what: &str) -> LabResult<PathBuf> {
    let socket = Path::new(SOCKET_DIR).join(format!("{ifname}.sock"));
    if socket.exists() {
        return Err(LabError::failed(anyhow::anyhow!(
            "{what}: {} exists already (a killed run's? `ipsec-lab clean` removes what it recorded)",
            socket.display()
        )));
    }
    Ok(socket)
}

/// Configures the end's device over `socket`, then sizes, addresses and raises it; end b
/// starts the handshake and returns how long it took (None for a).
pub(super) async fn configure(
    plan: &RunPlan,
    keys: &Keys,
    site: &Site<'_>,
    ifname: &str,
    socket: &Path,
    what: &str,
) -> LabResult<Option<Duration>> {
    uapi_set(socket, &device_config(plan, keys, site, ifname), what)?;
    bring_up(plan, site, ifname, socket, what).await
}

/// One UAPI exchange on `socket`: the request, then the reply up to its blank line.
fn uapi_exchange(socket: &Path, request: &str, what: &str) -> LabResult<String> {
    exchange(socket, request, what, UAPI_TIMEOUT)
}

/// [`uapi_exchange`] within `timeout` in all (a set of many peers takes seconds). Written
/// and read in slices of at most 200 ms, so SIGINT or SIGTERM stops it within a second
/// whatever the device does.
pub(super) fn exchange(socket: &Path, request: &str, what: &str, timeout: Duration) -> LabResult<String> {
    const SLICE: Duration = Duration::from_millis(200);
    let io = |e: std::io::Error| LabError::failed(anyhow::anyhow!("{what}: UAPI {}: {e}", socket.display()));
    let deadline = Instant::now() + timeout;
    // Between slices: a signal ends it, and so does the deadline.
    let stopped = || -> LabResult<()> {
        match crate::signal::any_requested() {
            true => Err(LabError::interrupted()),
            false => Ok(()),
        }
    };
    let waited = |e: &std::io::Error| -> LabResult<()> {
        if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            return Err(LabError::failed(anyhow::anyhow!(
                "{what}: UAPI {}: {e}",
                socket.display()
            )));
        }
        if Instant::now() > deadline {
            return Err(LabError::failed(anyhow::anyhow!(
                "{what}: UAPI {}: no answer within {timeout:?}",
                socket.display()
            )));
        }
        Ok(())
    };
    let mut s = UnixStream::connect(socket).map_err(io)?;
    s.set_read_timeout(Some(SLICE)).map_err(io)?;
    s.set_write_timeout(Some(SLICE)).map_err(io)?;
    let mut sent = 0;
    while sent < request.len() {
        match s.write(&request.as_bytes()[sent..]) {
            Ok(n) => sent += n,
            Err(e) => waited(&e)?,
        }
        stopped()?;
    }
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"\n\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) => waited(&e)?,
        }
        stopped()?;
    }
    String::from_utf8(reply).map_err(|_| LabError::failed(anyhow::anyhow!("{what}: UAPI reply is not text")))
}

/// Configures the device behind `socket` with `set=1`; an errno other than 0 fails.
fn uapi_set(socket: &Path, config: &wgnl::DeviceConfig, what: &str) -> LabResult<()> {
    set(socket, &wgnl::uapi::set_request(config), what, UAPI_TIMEOUT)
}

/// Sends the `set=1` request `request` to the device behind `socket`, waiting at most
/// `timeout` for each read of the answer; an errno other than 0 fails.
pub(super) fn set(socket: &Path, request: &str, what: &str, timeout: Duration) -> LabResult<()> {
    let reply = exchange(socket, request, what, timeout)?;
    match wgnl::uapi::errno(&reply) {
        Some(Ok(0)) => Ok(()),
        other => Err(LabError::failed(anyhow::anyhow!(
            "{what}: the device refused the configuration: {other:?}"
        ))),
    }
}

/// The peers the device behind `socket` reports (`get=1`).
pub(super) fn peers(socket: &Path, what: &str) -> LabResult<Vec<PeerStats>> {
    let reply = uapi_exchange(socket, wgnl::uapi::GET_REQUEST, what)?;
    wgnl::uapi::peers(&reply).map_err(|e| LabError::failed(anyhow::anyhow!("{what}: UAPI get: {e}")))
}

/// The peer's last handshake, as the device behind `socket` reports it, asked anew at each
/// call; `times` turns a reply's times into times of the handshake (boringtun's are ages).
pub(super) fn last_handshake(
    socket: &Path,
    what: String,
    times: fn(Vec<PeerStats>) -> Vec<PeerStats>,
) -> super::rekey::Ask {
    let socket = socket.to_path_buf();
    Box::new(move || {
        Ok(times(peers(&socket, &what)?)
            .first()
            .and_then(|p| p.last_handshake))
    })
}

/// Sizes, addresses and raises the device; end b then starts the handshake and returns
/// how long it took (None for a).
async fn bring_up(
    plan: &RunPlan,
    site: &Site<'_>,
    ifname: &str,
    socket: &Path,
    what: &str,
) -> LabResult<Option<Duration>> {
    let (inner, _) = inner_addrs(plan, site.side);
    set_mtu(site, ifname, inner_mtu(plan), what).await?;
    Topology::add_address(site.namespace, ifname, inner, plan.link().addressing.prefix_len).await?;
    Topology::set_link_up(site.namespace, ifname).await?;
    if site.side != Side::B {
        return Ok(None);
    }
    let started = start_handshake(plan, site, what)?;
    loop {
        let peers = peers(socket, what)?;
        if let Some(took) = handshake_done(started, &peers, what)? {
            return Ok(Some(took));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn set_mtu(site: &Site<'_>, device: &str, mtu: u32, what: &str) -> LabResult<()> {
    use futures::TryStreamExt;
    let h = site.namespace.rtnetlink().await?;
    let link = h
        .link()
        .get()
        .match_name(device.to_string())
        .execute()
        .try_next()
        .await
        .map_err(|e| LabError::failed(anyhow::anyhow!("find {device}: {e}")))?
        .ok_or_else(|| LabError::failed(anyhow::anyhow!("{what}: made no device {device}")))?;
    h.link()
        .set(
            rtnetlink::LinkUnspec::new_with_index(link.header.index)
                .mtu(mtu)
                .build(),
        )
        .execute()
        .await
        .map_err(|e| LabError::failed(anyhow::anyhow!("set mtu {mtu} on {device}: {e}")))
}
