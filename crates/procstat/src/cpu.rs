//! CPU time in seconds, and the clock tick /proc counts it in.

/// CPU time of a thread or process, split the way `time(1)` splits it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    pub user_s: f64,
    /// Kernel time: system calls, and the network stack work done on their behalf.
    pub system_s: f64,
}

impl CpuTime {
    /// CPU time the calling thread has used so far (`getrusage(RUSAGE_THREAD)`: microsecond
    /// resolution, finer than /proc's clock ticks).
    pub fn this_thread() -> CpuTime {
        // SAFETY: rusage is plain data, filled by the kernel.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: ru is a valid rusage to write into. RUSAGE_THREAD cannot fail for the caller.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        CpuTime {
            user_s: secs(ru.ru_utime),
            system_s: secs(ru.ru_stime),
        }
    }

    /// What was used between `start` and `self`.
    pub fn since(self, start: CpuTime) -> CpuTime {
        CpuTime {
            user_s: self.user_s - start.user_s,
            system_s: self.system_s - start.system_s,
        }
    }

    /// Both together (e.g. several threads' time).
    pub fn plus(self, other: CpuTime) -> CpuTime {
        CpuTime {
            user_s: self.user_s + other.user_s,
            system_s: self.system_s + other.system_s,
        }
    }

    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// Seconds the calling thread has so far spent runnable but waiting for a CPU (the second
/// field of `/proc/thread-self/schedstat`); None where the kernel does not keep it.
pub fn run_queue_wait_s() -> Option<f64> {
    let line = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_schedstat_wait(&line)
}

fn parse_schedstat_wait(line: &str) -> Option<f64> {
    let ns: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// Clock ticks per second, the unit of /proc's CPU times (`sysconf(_SC_CLK_TCK)`; 100, the
/// value Linux has everywhere, should the call ever fail).
pub fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_queue_wait_is_schedstats_second_field_in_nanoseconds() {
        assert_eq!(parse_schedstat_wait("1228175 2500000000 17\n"), Some(2.5));
        assert_eq!(parse_schedstat_wait("1228175\n"), None);
        assert_eq!(parse_schedstat_wait("1 x 2"), None);
        // This kernel keeps it (every kernel the lab runs on has CONFIG_SCHED_INFO).
        assert!(run_queue_wait_s().is_some());
    }

    #[test]
    fn differences_and_sums_go_field_by_field() {
        let a = CpuTime {
            user_s: 1.5,
            system_s: 0.25,
        };
        let b = CpuTime {
            user_s: 0.5,
            system_s: 0.125,
        };
        assert_eq!(
            a.since(b),
            CpuTime {
                user_s: 1.0,
                system_s: 0.125
            }
        );
        assert_eq!(a.since(b).plus(b), a);
        assert_eq!(a.total_s(), 1.75);
    }

    #[test]
    fn this_thread_counts_its_own_work() {
        let start = CpuTime::this_thread();
        let mut x = 0u64;
        while CpuTime::this_thread().since(start).total_s() < 0.02 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(CpuTime::this_thread().since(start).total_s() >= 0.02);
        assert!(ticks_per_s() > 0.0);
    }
}
