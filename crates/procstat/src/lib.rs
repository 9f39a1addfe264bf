//! What the kernel says about a process's or thread's CPU time and state, read one way for
//! the whole lab.
//!
//! Owns: parsing a `/proc/PID/stat` (or `/proc/self/task/TID/stat`) line into the fields
//! the lab uses ([`Stat`]), listing this process's threads and the system's processes with
//! their lines, and CPU time as user and system seconds ([`CpuTime`]), the calling thread's
//! read with `getrusage`, and the time it waited for a CPU (`schedstat`).
//!
//! Leaves out: the other stat fields, `/proc/stat` (the machine's CPU, read by the sweep),
//! `/proc/PID/exe`, `status` and `comm` files, signalling processes, and pinning threads to
//! CPUs. It depends on nothing but libc, so the lowest crates (traffic, owner) can use it.

mod cpu;
mod stat;

pub use cpu::{run_queue_wait_s, ticks_per_s, CpuTime};
pub use stat::{own_threads, processes, Stat};
