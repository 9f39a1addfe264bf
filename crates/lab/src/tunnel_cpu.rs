//! The tunnel's own CPU interval by interval (`--interval`), for the backends whose tunnel
//! is a thread or process of its own: the lab's userspace tunnel threads (`ipl-tun-*`) and
//! boringtun's device threads (`ipl-boringtun-*`), both in this process, and the openvpn or
//! wireguard-go daemons (this process's children). Read from /proc (utime + stime, in clock
//! ticks: 10 ms resolution) whenever intervals close.

use std::collections::BTreeMap;
use std::time::Instant;

use model::backend::TunnelCpuSource;
use model::Backend;

/// CPU ticks per tunnel thread or process at the previous sample.
pub struct TunnelCpu {
    /// Whose CPU: the backend's description says.
    source: TunnelCpuSource,
    last: BTreeMap<String, u64>,
    at: Instant,
    ticks_per_s: f64,
}

impl TunnelCpu {
    /// Where the backend has a tunnel of its own to watch; None otherwise (plain, or
    /// kernel tunnels whose work is softirq time nobody is charged for).
    pub fn for_backend(backend: Backend) -> Option<TunnelCpu> {
        let source = backend.describe().cpu;
        if matches!(source, TunnelCpuSource::NoTunnel | TunnelCpuSource::Kernel) {
            return None;
        }
        Some(TunnelCpu {
            source,
            last: ticks_now(source),
            at: Instant::now(),
            ticks_per_s: procstat::ticks_per_s(),
        })
    }

    /// Percent of a core each tunnel thread or process used since the previous sample.
    pub fn sample(&mut self) -> BTreeMap<String, f64> {
        let now = ticks_now(self.source);
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

/// utime + stime of every tunnel thread (by name) or daemon (`name[pid]`) now. Threads
/// that share a name add up: boringtun's workers inherit their end's name.
fn ticks_now(source: TunnelCpuSource) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    match source {
        TunnelCpuSource::Threads(prefix) => {
            for (_, stat) in procstat::own_threads() {
                if stat.comm.starts_with(prefix) {
                    *out.entry(stat.comm.clone()).or_insert(0) += stat.cpu_ticks();
                }
            }
        }
        TunnelCpuSource::Daemon(name) => {
            let me = std::process::id();
            for (pid, stat) in procstat::processes() {
                if stat.ppid == me && stat.comm == name {
                    out.insert(format!("{}[{pid}]", stat.comm), stat.cpu_ticks());
                }
            }
        }
        TunnelCpuSource::NoTunnel | TunnelCpuSource::Kernel => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// boringtun's workers share their end's name: the sample is their sum. Two threads of
    /// that name each spin for 100 ms of their own CPU time.
    #[test]
    fn boringtun_threads_of_one_end_are_summed() {
        use std::sync::mpsc;
        let t0 = std::time::Instant::now();
        let mut cpu = TunnelCpu::for_backend(Backend::Boringtun).unwrap();
        let (burned_tx, burned_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (burned_tx, stop_rx) = (burned_tx.clone(), stop_rx.clone());
                std::thread::Builder::new()
                    .name("ipl-boringtun-t".into())
                    .spawn(move || {
                        let start = procstat::CpuTime::this_thread();
                        while procstat::CpuTime::this_thread().since(start).total_s() < 0.1 {
                            std::hint::spin_loop();
                        }
                        burned_tx.send(()).unwrap();
                        let _ = stop_rx.lock().unwrap().recv();
                    })
                    .unwrap()
            })
            .collect();
        burned_rx.recv().unwrap();
        burned_rx.recv().unwrap();
        let shares = cpu.sample();
        let wall = t0.elapsed().as_secs_f64();
        drop(stop_tx);
        for w in workers {
            w.join().unwrap();
        }
        // 200 ms burned, less a 10 ms clock tick of rounding per thread.
        let seen_s = shares["ipl-boringtun-t"] / 100.0 * wall;
        assert!(seen_s >= 0.16, "{shares:?} over {wall} s");
    }
}
