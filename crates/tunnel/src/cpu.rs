//! The calling thread's CPU: pinning it to one core. Its CPU time is `procstat::CpuTime`.

use std::io;

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
