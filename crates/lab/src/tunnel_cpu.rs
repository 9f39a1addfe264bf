//! The tunnel's own CPU interval by interval (`--interval`), for the backends whose tunnel
//! is a thread or process of its own: the lab's userspace tunnel threads (`ipl-tun-*`, in
//! this process) and the openvpn or wireguard-go daemons (this process's children). Read
//! from /proc (utime + stime, in clock ticks: 10 ms resolution) whenever intervals close.

use std::collections::BTreeMap;
use std::time::Instant;

use model::Backend;

/// Children of this process that carry a backend's tunnel.
const DAEMONS: [&str; 2] = ["openvpn", "wireguard-go"];

/// CPU ticks per tunnel thread or process at the previous sample.
pub struct TunnelCpu {
    last: BTreeMap<String, u64>,
    at: Instant,
    ticks_per_s: f64,
}

impl TunnelCpu {
    /// Where the backend has a tunnel of its own to watch; None otherwise (plain, or
    /// kernel tunnels whose work is softirq time nobody is charged for).
    pub fn for_backend(backend: Backend) -> Option<TunnelCpu> {
        if !matches!(
            backend,
            Backend::Userspace | Backend::Openvpn | Backend::WireguardGo
        ) {
            return None;
        }
        // SAFETY: sysconf only reads a configuration value.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Some(TunnelCpu {
            last: ticks_now(),
            at: Instant::now(),
            ticks_per_s: if ticks > 0 { ticks as f64 } else { 100.0 },
        })
    }

    /// Percent of a core each tunnel thread or process used since the previous sample.
    pub fn sample(&mut self) -> BTreeMap<String, f64> {
        let now = ticks_now();
        let wall = self.at.elapsed().as_secs_f64();
        self.at = Instant::now();
        let shares = now
            .iter()
            .map(|(name, ticks)| {
                let before = self.last.get(name).copied().unwrap_or(0);
                let cpu_s = ticks.saturating_sub(before) as f64 / self.ticks_per_s;
                let percent = if wall > 0.0 { cpu_s / wall * 100.0 } else { 0.0 };
                (name.clone(), (percent * 10.0).round() / 10.0)
            })
            .collect();
        self.last = now;
        shares
    }
}

/// utime + stime of every tunnel thread (by name) and daemon (`name[pid]`) now.
fn ticks_now() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let comm = comm.trim();
            if comm.starts_with("ipl-tun-") {
                if let Some((_, _, ticks)) = stat(&task.path().join("stat")) {
                    *out.entry(comm.to_string()).or_insert(0) += ticks;
                }
            }
        }
    }
    let me = std::process::id();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((comm, ppid, ticks)) = stat(&p.path().join("stat")) {
                if ppid == me && DAEMONS.contains(&comm.as_str()) {
                    out.insert(format!("{comm}[{pid}]"), ticks);
                }
            }
        }
    }
    out
}

/// (comm, ppid, utime + stime) from a /proc stat file.
fn stat(path: &std::path::Path) -> Option<(String, u32, u64)> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so the fields are
/// counted from its last `)`; utime and stime are fields 14 and 15.
fn parse_stat(text: &str) -> Option<(String, u32, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, ppid, utime + stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_names() {
        let line = "4242 (open vpn) x) S 17 4242 4242 0 -1 4194560 120 0 0 0 250 75 0 0 20 0 1 0 9 0 0";
        assert_eq!(parse_stat(line), Some(("open vpn) x".into(), 17, 325)));
        assert_eq!(parse_stat("garbage"), None);
    }

    /// The CPU a thread named like a tunnel thread burned is what the sample reports: it
    /// spins for 200 ms of its own CPU time (however long a shared machine takes to give
    /// it that), then waits; the sample's share times its wall time is those 200 ms.
    #[test]
    fn a_busy_tunnel_thread_is_measured() {
        use std::sync::mpsc;
        let thread_cpu_s = || {
            let mut t: libc::timespec = unsafe { std::mem::zeroed() };
            // SAFETY: clock_gettime only writes the timespec it is given.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
        };
        let t0 = std::time::Instant::now();
        let mut cpu = TunnelCpu::for_backend(Backend::Userspace).unwrap();
        let (burned_tx, burned_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let spinning = std::thread::Builder::new()
            .name("ipl-tun-test".into())
            .spawn(move || {
                let start = thread_cpu_s();
                while thread_cpu_s() - start < 0.2 {
                    std::hint::spin_loop();
                }
                burned_tx.send(()).unwrap();
                let _ = stop_rx.recv();
            })
            .unwrap();
        burned_rx.recv().unwrap();
        let shares = cpu.sample();
        let wall = t0.elapsed().as_secs_f64();
        stop_tx.send(()).unwrap();
        spinning.join().unwrap();
        // 200 ms burned, less one clock tick of rounding; the sample's wall is within ours.
        let seen_s = shares["ipl-tun-test"] / 100.0 * wall;
        assert!(seen_s >= 0.18, "{shares:?} over {wall} s");
        assert!(TunnelCpu::for_backend(Backend::Plain).is_none());
    }
}
