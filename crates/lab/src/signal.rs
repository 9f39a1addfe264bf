//! SIGINT and SIGTERM as the end of a run or a server: a run then unwinds through its guards
//! instead of dying with namespaces, SAs and processes in place.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

use crate::error::{LabError, LabResult};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM has arrived: for a step that waits without a token to look
/// at (a daemon's start-up, polled on a thread of the runtime).
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Whether SIGINT or SIGTERM arrived, seen by the lab's handler ([`requested`]: a run, a
/// sweep) or by `speed::stop`'s (which `setup-rate` and the guest runs install): for the
/// steps both kinds of command take (a daemon's stop, a setup-rate exchange).
pub fn any_requested() -> bool {
    requested() || speed::stop::requested().is_some()
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
        crate::error::note_stop_signal(number);
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
