//! The calling thread's CPU: pinning it to one core and reading its own CPU time.

use std::io;

use serde::{Deserialize, Serialize};

/// Pins the calling thread to `cpu` (`sched_setaffinity(0, ...)` acts on the caller only).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET checks nothing, so the range is checked first.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no CPU {cpu}"),
            ));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// CPU time of one thread, split the way `time(1)` splits it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadCpu {
    pub user_s: f64,
    /// Kernel time: system calls, and the network stack work done on their behalf.
    pub system_s: f64,
}

impl ThreadCpu {
    /// CPU time the calling thread has used so far (`getrusage(RUSAGE_THREAD)`).
    pub fn now() -> ThreadCpu {
        // SAFETY: rusage is plain data, filled by the kernel.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: ru is a valid rusage to write into. RUSAGE_THREAD cannot fail for the caller.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        ThreadCpu {
            user_s: secs(ru.ru_utime),
            system_s: secs(ru.ru_stime),
        }
    }

    pub fn since(self, start: ThreadCpu) -> ThreadCpu {
        ThreadCpu {
            user_s: self.user_s - start.user_s,
            system_s: self.system_s - start.system_s,
        }
    }

    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}
