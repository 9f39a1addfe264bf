//! wireguard-go (`--backend wireguard-go`): Debian's userspace WireGuard, one process per end
//! started in the end's namespace in the foreground (`-f`), configured over its UAPI socket
//! (/var/run/wireguard/IFNAME.sock, text written here, crate `wgnl::uapi`), its TUN device
//! addressed and brought up over rtnetlink. The process is recorded for `clean` (and gets
//! SIGTERM if the lab dies); so is its socket, which a killed wireguard-go leaves behind.
//! Stopping it (SIGTERM) removes its TUN device and socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use model::RunPlan;
use netns::Topology;
use wgnl::PeerStats;

use super::{
    device_config, handshake_done, ifname, inner_addrs, inner_mtu, start_handshake, Keys, WireguardEnd, POLL,
};
use crate::backend::site::{Side, Site};
use crate::error::{LabError, LabResult};

const INSTALL: &str =
    "wireguard-go is not installed: install it with `apt-get install wireguard-go` (Debian/Ubuntu)";
const SOCKET_DIR: &str = "/var/run/wireguard";
const START_TIMEOUT: Duration = Duration::from_secs(10);
const UAPI_TIMEOUT: Duration = Duration::from_secs(5);

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Refuses, before anything is created, without wireguard-go or a TUN device.
pub async fn preflight(_plan: &RunPlan) -> LabResult<()> {
    if find_program("wireguard-go").is_none() {
        return Err(LabError::capability(anyhow::anyhow!(INSTALL)));
    }
    if !Path::new("/dev/net/tun").exists() {
        return Err(LabError::capability(anyhow::anyhow!(
            "no /dev/net/tun: load the tun module (`modprobe tun`) to use --backend wireguard-go"
        )));
    }
    Ok(())
}

/// `wireguard-go --version`'s first line, for the evidence.
pub fn implementation() -> String {
    crate::backend::daemon::version_line("wireguard-go")
        .unwrap_or_else(|| "wireguard-go (version unknown)".into())
}

/// One end: its wireguard-go process, until dropped.
pub struct GoEnd {
    child: Child,
    ifname: String,
    socket: PathBuf,
    side: Side,
    started: Instant,
    handshake: Option<Duration>,
    records: [owner::Record; 2],
}

impl GoEnd {
    pub async fn start(plan: &RunPlan, keys: &Keys, site: &Site<'_>) -> LabResult<GoEnd> {
        let name = ifname(site.side);
        let what = format!("wireguard-go end {} ({name})", site.side.name());
        let socket = socket_path(&name);
        if socket.exists() {
            return Err(LabError::failed(anyhow::anyhow!(
                "{what}: {} exists already (a killed run's? `ipsec-lab clean` removes what it recorded)",
                socket.display()
            )));
        }
        let child = site
            .namespace
            .command("wireguard-go")
            .args(["-f", &name])
            .env("LOG_LEVEL", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| LabError::failed(anyhow::anyhow!("{what}: start wireguard-go: {e}")))?;
        let records = [
            owner::Record::process(child.id(), "wireguard-go"),
            owner::Record::Path { path: socket.clone() },
        ];
        let recorded = records.iter().try_for_each(|r| owner::record(r.clone()));
        // Built either way, so a failure to record still stops it (on drop).
        let mut end = GoEnd {
            child,
            ifname: name,
            socket,
            side: site.side,
            started: Instant::now(),
            handshake: None,
            records,
        };
        recorded?;
        end.wait_for_socket(&what)?;
        let config = device_config(plan, keys, site, &end.ifname);
        uapi_set(&end.socket, &config, &what)?;
        end.handshake = bring_up(plan, site, &end.ifname, &end.socket, &what).await?;
        end.started = Instant::now();
        Ok(end)
    }

    fn wait_for_socket(&mut self, what: &str) -> LabResult<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.socket.exists() {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(LabError::failed(anyhow::anyhow!(
                    "{what}: wireguard-go exited ({status}) while starting: {}",
                    err.trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(LabError::failed(anyhow::anyhow!(
                    "{what}: no UAPI socket {} after {START_TIMEOUT:?}",
                    self.socket.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn peers(&self, what: &str) -> LabResult<Vec<PeerStats>> {
        uapi_peers(&self.socket, what)
    }

    /// User and system CPU seconds of the whole process so far (/proc/PID/stat 14 and 15).
    fn cpu(&self) -> Option<(f64, f64)> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Some((
            fields[11].parse::<f64>().ok()? / hz,
            fields[12].parse::<f64>().ok()? / hz,
        ))
    }

    /// The peer's counters and the process's CPU since the handshake.
    pub fn evidence(&mut self) -> LabResult<WireguardEnd> {
        let what = format!("wireguard-go end {}", self.side.name());
        let mut end = WireguardEnd::from_stats(self.side, &self.ifname, &self.peers(&what)?)?;
        let (user, system) = self.cpu().unwrap_or((0.0, 0.0));
        end.cpu = Some(model::CpuUsage::new(
            user,
            system,
            self.started.elapsed().as_secs_f64(),
        ));
        end.handshake_s = self.handshake.map(|d| d.as_secs_f64());
        Ok(end)
    }

    /// wireguard-go closes its TUN (which removes it) and its socket on SIGTERM; the
    /// socket goes here if it is still there after a SIGKILL.
    fn stop(&mut self) {
        crate::backend::daemon::stop(&mut self.child, Duration::from_secs(3));
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for GoEnd {
    fn drop(&mut self) {
        self.stop();
        for r in &self.records {
            owner::forget(r);
        }
    }
}

async fn set_mtu(site: &Site<'_>, device: &str, mtu: u32) -> LabResult<()> {
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
        .ok_or_else(|| LabError::failed(anyhow::anyhow!("wireguard-go made no device {device}")))?;
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

/// One UAPI exchange on `socket`: the request, then the reply up to its blank line.
pub(super) fn uapi_exchange(socket: &Path, request: &str, what: &str) -> LabResult<String> {
    let io = |e: std::io::Error| LabError::failed(anyhow::anyhow!("{what}: UAPI {}: {e}", socket.display()));
    let mut s = UnixStream::connect(socket).map_err(io)?;
    s.set_read_timeout(Some(UAPI_TIMEOUT)).map_err(io)?;
    s.write_all(request.as_bytes()).map_err(io)?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"\n\n") {
        let n = s.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(reply).map_err(|_| LabError::failed(anyhow::anyhow!("{what}: UAPI reply is not text")))
}

/// Configures the device behind `socket` with `set=1`; an errno other than 0 fails.
pub(super) fn uapi_set(socket: &Path, config: &wgnl::DeviceConfig, what: &str) -> LabResult<()> {
    let reply = uapi_exchange(socket, &wgnl::uapi::set_request(config), what)?;
    match wgnl::uapi::errno(&reply) {
        Some(Ok(0)) => Ok(()),
        other => Err(LabError::failed(anyhow::anyhow!(
            "{what}: the device refused the configuration: {other:?}"
        ))),
    }
}

/// The peers the device behind `socket` reports (`get=1`).
pub(super) fn uapi_peers(socket: &Path, what: &str) -> LabResult<Vec<PeerStats>> {
    let reply = uapi_exchange(socket, wgnl::uapi::GET_REQUEST, what)?;
    wgnl::uapi::peers(&reply).map_err(|e| LabError::failed(anyhow::anyhow!("{what}: UAPI get: {e}")))
}

/// The UAPI socket of device `ifname`: wireguard-go and boringtun both serve it there.
pub(super) fn socket_path(ifname: &str) -> PathBuf {
    Path::new(SOCKET_DIR).join(format!("{ifname}.sock"))
}

/// Sizes, addresses and raises the device; end b then starts the handshake and returns
/// how long it took (None for a).
pub(super) async fn bring_up(
    plan: &RunPlan,
    site: &Site<'_>,
    ifname: &str,
    socket: &Path,
    what: &str,
) -> LabResult<Option<Duration>> {
    let (inner, _) = inner_addrs(plan, site.side);
    set_mtu(site, ifname, inner_mtu(plan)).await?;
    Topology::add_address(site.namespace, ifname, inner, plan.addressing.prefix_len).await?;
    Topology::set_link_up(site.namespace, ifname).await?;
    if site.side != Side::B {
        return Ok(None);
    }
    let started = start_handshake(plan, site, what)?;
    loop {
        let peers = uapi_peers(socket, what)?;
        if let Some(took) = handshake_done(started, &peers, what)? {
            return Ok(Some(took));
        }
        tokio::time::sleep(POLL).await;
    }
}
