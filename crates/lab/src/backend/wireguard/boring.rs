//! boringtun (`--backend boringtun`): Cloudflare's userspace WireGuard, the `boringtun`
//! crate's device, running in this process: one device per end, made on a thread inside
//! the end's namespace so its TUN device, UDP sockets and worker threads (which inherit
//! the namespace and the thread's name) are that namespace's. Configured over its UAPI
//! socket like wireguard-go (/var/run/wireguard/IFNAME.sock, recorded for `clean`).
//! Its threads' CPU comes from /proc/self/task, found by the name they inherit.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use boringtun::device::{DeviceConfig, DeviceHandle};
use model::{CpuUsage, RunPlan};
use procstat::CpuTime;

use super::{ifname, uapi, Keys, WireguardEnd};
use crate::backend::site::{Side, Site};
use crate::error::{LabError, LabResult};

/// boringtun's own default (its command line's `--threads`).
pub const THREADS: usize = 4;
const STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// Refuses, before anything is created, without a TUN device.
pub async fn preflight(_plan: &RunPlan) -> LabResult<()> {
    if !Path::new("/dev/net/tun").exists() {
        return Err(LabError::capability(anyhow::anyhow!(
            "no /dev/net/tun: load the tun module (`modprobe tun`) to use --backend boringtun"
        )));
    }
    Ok(())
}

pub fn implementation() -> String {
    format!("boringtun 0.7 (the crate's device, in the lab's process, {THREADS} threads per end)")
}

/// One end: its device, until dropped.
pub struct BoringEnd {
    device: Option<DeviceHandle>,
    /// The name its threads inherit (15 characters at most).
    threads: String,
    ifname: String,
    socket: PathBuf,
    side: Side,
    started: Instant,
    handshake: Option<Duration>,
    record: owner::Record,
}

impl BoringEnd {
    pub async fn start(plan: &RunPlan, keys: &Keys, site: &Site<'_>) -> LabResult<BoringEnd> {
        let name = ifname(site.side);
        let what = format!("boringtun end {} ({name})", site.side.name());
        let socket = uapi::fresh_socket(&name, &what)?;
        let record = owner::Record::Path { path: socket.clone() };
        owner::record(record.clone())?;
        let threads = format!("ipl-boringtun-{}", site.side.name());
        let dev_name = name.clone();
        let config = DeviceConfig {
            n_threads: THREADS,
            ..Default::default()
        };
        let made = site
            .namespace
            .spawn(&threads, move || DeviceHandle::new(&dev_name, config))?
            .join()
            .map_err(|_| LabError::failed(anyhow::anyhow!("{what}: the thread making the device panicked")));
        let device = match made {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                owner::forget(&record);
                return Err(LabError::failed(anyhow::anyhow!(
                    "{what}: make the device: {e:?}"
                )));
            }
            Err(e) => {
                owner::forget(&record);
                return Err(e);
            }
        };
        let mut end = BoringEnd {
            device: Some(device),
            threads,
            ifname: name,
            socket,
            side: site.side,
            started: Instant::now(),
            handshake: None,
            record,
        };
        end.handshake = uapi::configure(plan, keys, site, &end.ifname, &end.socket, &what).await?;
        end.started = Instant::now();
        Ok(end)
    }

    /// The device's threads in this process (by the name they inherited), with their stat.
    fn device_threads(&self) -> Vec<procstat::Stat> {
        procstat::own_threads()
            .into_iter()
            .map(|(_, stat)| stat)
            .filter(|stat| stat.comm == self.threads)
            .collect()
    }

    /// How many device threads there are, and their user and system time so far.
    fn cpu(&self) -> (usize, CpuTime) {
        let threads = self.device_threads();
        let cpu = threads
            .iter()
            .fold(CpuTime::default(), |sum, t| sum.plus(t.cpu()));
        (threads.len(), cpu)
    }

    /// Its peer's last handshake, asked anew at each call (`--rekey-every`).
    pub fn last_handshake(&self) -> super::rekey::Ask {
        let what = format!("boringtun end {}", self.side.name());
        uapi::last_handshake(&self.socket, what, boringtun_times)
    }

    /// The peer's counters and the device threads' CPU since the handshake.
    pub fn evidence(&mut self) -> LabResult<WireguardEnd> {
        let what = format!("boringtun end {}", self.side.name());
        let peers = boringtun_times(uapi::peers(&self.socket, &what)?);
        let mut end = super::end_from_stats(self.side, &self.ifname, &peers)?;
        let (n, cpu) = self.cpu();
        if n == 0 {
            return Err(LabError::failed(anyhow::anyhow!(
                "{what}: no thread named {} in this process",
                self.threads
            )));
        }
        end.cpu = Some(CpuUsage::new(
            cpu.user_s,
            cpu.system_s,
            self.started.elapsed().as_secs_f64(),
        ));
        end.handshake_s = self.handshake.map(|d| d.as_secs_f64());
        Ok(end)
    }
}

impl Drop for BoringEnd {
    /// Dropping the handle tells the threads to exit and removes the socket; the TUN device
    /// goes when the last thread lets go of it, which is waited for here.
    fn drop(&mut self) {
        drop(self.device.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        while !self.device_threads().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&self.socket);
        owner::forget(&self.record);
    }
}

/// boringtun's UAPI gives `last_handshake_time_*` as the time SINCE the handshake, where the
/// protocol (and wireguard-go, the kernel) give the time OF it; turned into the latter.
fn boringtun_times(mut peers: Vec<wgnl::PeerStats>) -> Vec<wgnl::PeerStats> {
    let now = std::time::SystemTime::now();
    for p in &mut peers {
        p.last_handshake = p
            .last_handshake
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|since| now.checked_sub(since));
    }
    peers
}
