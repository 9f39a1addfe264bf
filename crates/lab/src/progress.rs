//! What a run tells its watcher while it works. The library only reports; the binary
//! draws (progress bars on a terminal, a line per cell for a parent sweep, or nothing).

/// Every method has a default that does nothing, so a watcher implements what it shows.
pub trait Progress: Send + Sync {
    /// A backend is coming up (OpenVPN takes seconds).
    fn backend_starting(&self, _what: &str) {}
    fn backend_started(&self) {}
    /// A transfer of `total` bytes begins (0: a timed one, `--time`, whose size is known
    /// only at its end); `bytes` then reports how far it got.
    fn transfer_started(&self, _label: &str, _total: u64) {}
    fn transfer_bytes(&self, _bytes: u64) {}
    /// An interval of the transfer closed (`--interval`).
    fn interval(&self, _record: &model::modes::IntervalRecord) {}
    fn transfer_finished(&self) {}
    /// A sweep of `cells` cells begins; each cell reports its start and end.
    fn sweep_started(&self, _cells: u64) {}
    fn cell_started(&self, _label: &str) {}
    fn cell_finished(&self) {}
    fn sweep_finished(&self) {}
    /// A line for the user, printed so it does not tear a progress bar.
    fn note(&self, line: &str) {
        crate::say!("ipsec-lab: {line}");
    }
}

/// Shows nothing but notes.
pub struct Quiet;

impl Progress for Quiet {}
