//! What the kernel says about a process's or thread's CPU time and state, read one way for
//! the whole lab.
//!
//! Owns: parsing a `/proc/PID/stat` (or `/proc/self/task/TID/stat`) line into the fields
//! the lab uses ([`Stat`]), listing this process's threads and the system's processes with
//! their lines, and CPU time as user and system seconds ([`CpuTime`]), the calling thread's
//! read with `getrusage`, the time it waited for a CPU (`schedstat`), the machine's CPU
//! time from `/proc/stat` ([`MachineTimes`]: what a run cost all CPUs, and steal), and its
//! memory figures from `/proc/meminfo` ([`meminfo`]), and a process's resident memory
//! (`VmRSS` of `/proc/PID/status`, [`resident_bytes`]).
//!
//! Leaves out: the other stat and status fields, /proc/stat's per-CPU lines,
//! `/proc/PID/exe` and `comm` files, signalling processes, and pinning threads to
//! CPUs. It depends on nothing but libc, so the lowest crates (traffic, owner) can use it.

mod cpu;
mod machine;
mod stat;

/// One `/proc/meminfo` field (`MemFree`, `MemAvailable`, …) in KiB.
pub fn meminfo(field: &str) -> Option<u64> {
    meminfo_field(&std::fs::read_to_string("/proc/meminfo").ok()?, field)
}

/// A process's resident memory in bytes (`VmRSS` of `/proc/PID/status`).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    meminfo_field(&status, "VmRSS").map(|kib| kib * 1024)
}

fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim().trim_end_matches("kB").trim().parse().ok())?
    })
}

pub use cpu::{run_queue_wait_s, ticks_per_s, CpuTime};
pub use machine::{MachineCpu, MachineTimes};
pub use stat::{own_threads, processes, Stat};

#[cfg(test)]
mod tests {
    #[test]
    fn a_meminfo_field_is_read_in_kib() {
        let text = "MemTotal:       24563392 kB\nMemFree:        22020096 kB\nHugePages_Total:       0\n";
        assert_eq!(super::meminfo_field(text, "MemFree"), Some(22_020_096));
        assert_eq!(
            super::meminfo_field("Name:\tx\nVmRSS:\t    4096 kB\n", "VmRSS"),
            Some(4096)
        );
        assert!(super::resident_bytes(std::process::id()).is_some_and(|b| b > 0));
        assert_eq!(super::meminfo_field(text, "HugePages_Total"), Some(0));
        assert_eq!(super::meminfo_field(text, "Mem"), None);
        assert!(super::meminfo("MemAvailable").is_some_and(|kib| kib > 0));
    }
}
