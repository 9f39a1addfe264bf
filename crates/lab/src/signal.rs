//! SIGINT and SIGTERM as the end of a run or a server: a run then unwinds through its guards
//! instead of dying with namespaces, SAs and processes in place.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use tokio_util::sync::CancellationToken;

use crate::error::{LabError, LabResult};

static REQUESTED: AtomicBool = AtomicBool::new(false);
/// The first stop signal's number (0: none yet), for the exit code: 128 + its number, as a
/// shell reports a process the signal ended (130 for SIGINT, 143 for SIGTERM).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The exit code of a run the stop signals ended: 143 after SIGTERM, else 130 (SIGINT, or a
/// child's interruption seen without a signal here).
pub fn interrupted_exit_code() -> u8 {
    match SIGNAL.load(Ordering::Relaxed) {
        libc::SIGTERM => 143,
        _ => 130,
    }
}

/// Whether SIGINT or SIGTERM has arrived: for a step that waits without a token to look
/// at (a daemon's start-up, polled on a thread of the runtime).
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Completes on the first SIGINT or SIGTERM after it was created (the handlers are
/// installed at once, so a signal between this call and the first poll still counts).
pub fn stop_requested() -> LabResult<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).map_err(LabError::failed)?;
    let mut term = signal(SignalKind::terminate()).map_err(LabError::failed)?;
    Ok(async move {
        let number = tokio::select! {
            _ = int.recv() => libc::SIGINT,
            _ = term.recv() => libc::SIGTERM,
        };
        let _ = SIGNAL.compare_exchange(0, number, Ordering::Relaxed, Ordering::Relaxed);
        REQUESTED.store(true, Ordering::Relaxed);
        crate::say!("\nipsec-lab: interrupted, cleaning up");
    })
}

/// Cancels `cancel` on the first SIGINT or SIGTERM; abort the returned task when done.
pub fn cancel_on_signal(cancel: CancellationToken) -> LabResult<tokio::task::JoinHandle<()>> {
    let stop = stop_requested()?;
    Ok(tokio::spawn(async move {
        stop.await;
        cancel.cancel();
    }))
}
