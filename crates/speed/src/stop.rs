//! Ctrl-C and SIGTERM during a run: [`on_signals`] makes either one a request, which the run
//! sees within a fraction of a second (between cells and inside a cell's timed window) and
//! answers by stopping with the cells done so far, marked as a partial report.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked the run to stop; 0: none.
static REQUESTED: AtomicI32 = AtomicI32::new(0);

/// From now on SIGINT and SIGTERM ask the run to stop instead of ending the process. Other
/// handlers of the same signals (tokio's, in a child runner) still run.
pub fn on_signals() -> std::io::Result<()> {
    for signal in [nix::libc::SIGINT, nix::libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            signal_hook_registry::register(signal, move || {
                REQUESTED.store(signal, Ordering::Relaxed);
            })?;
        }
    }
    Ok(())
}

/// The signal that asked the run to stop, if one did.
pub fn requested() -> Option<i32> {
    match REQUESTED.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// `SIGINT`, `SIGTERM`, or the signal's number.
pub fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
}
