//! The lab's one error type: every failure carries the exit code a script can act on, and
//! each lower crate's error is mapped to one here, once.

use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};

/// The first stop signal's number (0: none yet), for the exit code: 128 + its number, as a
/// shell reports a process the signal ended (130 for SIGINT, 143 for SIGTERM).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Called by `signal` on the first SIGINT or SIGTERM.
pub(crate) fn note_stop_signal(number: i32) {
    let _ = STOP_SIGNAL.compare_exchange(0, number, Ordering::Relaxed, Ordering::Relaxed);
}

/// 0 ok, 1 a run that failed, 2 bad usage or input, 3 a missing capability, 130 interrupted
/// (143 where SIGTERM interrupted it: [`LabError::exit_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Failed = 1,
    Usage = 2,
    Capability = 3,
    Interrupted = 130,
}

#[derive(Debug)]
pub struct LabError {
    pub kind: ExitKind,
    pub error: anyhow::Error,
}

impl LabError {
    pub fn new(kind: ExitKind, error: impl Into<anyhow::Error>) -> LabError {
        LabError {
            kind,
            error: error.into(),
        }
    }
    pub fn usage(error: impl Into<anyhow::Error>) -> LabError {
        LabError::new(ExitKind::Usage, error)
    }
    pub fn capability(error: impl Into<anyhow::Error>) -> LabError {
        LabError::new(ExitKind::Capability, error)
    }
    pub fn failed(error: impl Into<anyhow::Error>) -> LabError {
        LabError::new(ExitKind::Failed, error)
    }
    pub fn interrupted() -> LabError {
        LabError::new(
            ExitKind::Interrupted,
            anyhow::anyhow!("interrupted; everything the run created was removed"),
        )
    }
    /// Whether a signal stopped the run (as opposed to a failure).
    pub fn is_interrupted(&self) -> bool {
        matches!(self.kind, ExitKind::Interrupted)
    }

    pub fn exit_code(&self) -> u8 {
        match self.kind {
            // 143 after SIGTERM, else 130 (SIGINT, or a child's interruption seen here
            // without a signal).
            ExitKind::Interrupted if STOP_SIGNAL.load(Ordering::Relaxed) == libc::SIGTERM => 143,
            kind => kind as u8,
        }
    }

    /// A transfer's failure on `side` ("sender", "receiver"): a cancelled transfer is an
    /// interrupted run, anything else a failed one.
    pub fn transfer(side: &str, e: traffic::TrafficError) -> LabError {
        match e {
            traffic::TrafficError::Cancelled => LabError::interrupted(),
            other => LabError::failed(anyhow::Error::new(other).context(format!("{side} failed"))),
        }
    }
}

/// A server's refusal as this host's exit code, and back.
impl From<control::RefusalKind> for ExitKind {
    fn from(kind: control::RefusalKind) -> ExitKind {
        match kind {
            control::RefusalKind::Usage => ExitKind::Usage,
            control::RefusalKind::Capability => ExitKind::Capability,
            control::RefusalKind::Failed => ExitKind::Failed,
        }
    }
}

impl From<ExitKind> for control::RefusalKind {
    fn from(kind: ExitKind) -> control::RefusalKind {
        match kind {
            ExitKind::Usage => control::RefusalKind::Usage,
            ExitKind::Capability => control::RefusalKind::Capability,
            ExitKind::Failed | ExitKind::Interrupted => control::RefusalKind::Failed,
        }
    }
}

impl ExitKind {
    /// The kind a child ipsec-lab's exit code stands for (anything unknown: failed).
    pub fn from_code(code: u8) -> ExitKind {
        match code {
            2 => ExitKind::Usage,
            3 => ExitKind::Capability,
            130 | 143 => ExitKind::Interrupted,
            _ => ExitKind::Failed,
        }
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.error)
        } else {
            write!(f, "{}", self.error)
        }
    }
}

impl From<netns::NetnsError> for LabError {
    fn from(e: netns::NetnsError) -> LabError {
        let kind = if e.is_capability() {
            ExitKind::Capability
        } else {
            ExitKind::Failed
        };
        LabError::new(kind, e)
    }
}

impl From<xfrm::XfrmError> for LabError {
    fn from(e: xfrm::XfrmError) -> LabError {
        use xfrm::XfrmError::*;
        let kind = match e {
            NoEsp { .. } | MissingAlgorithm { .. } | NotPermitted { .. } | NoXfrmNetlink { .. } => {
                ExitKind::Capability
            }
            _ => ExitKind::Failed,
        };
        LabError::new(kind, e)
    }
}

/// A failure to record an object in the state file: missing privilege, or a failed run.
impl From<wgnl::WgError> for LabError {
    fn from(e: wgnl::WgError) -> LabError {
        let kind = match e {
            wgnl::WgError::NoFamily(_) => ExitKind::Capability,
            _ => ExitKind::Failed,
        };
        LabError::new(kind, e)
    }
}

impl From<owner::OwnerError> for LabError {
    fn from(e: owner::OwnerError) -> LabError {
        let kind = if e.is_permission() {
            ExitKind::Capability
        } else {
            ExitKind::Failed
        };
        LabError::new(kind, e)
    }
}

impl From<control::ControlError> for LabError {
    fn from(e: control::ControlError) -> LabError {
        LabError::failed(e)
    }
}

impl From<speed::SpeedError> for LabError {
    fn from(e: speed::SpeedError) -> LabError {
        let kind = match e {
            speed::SpeedError::Usage(_) => ExitKind::Usage,
            speed::SpeedError::Missing(_) => ExitKind::Capability,
            _ => ExitKind::Failed,
        };
        LabError::new(kind, e)
    }
}

impl From<model::PlanError> for LabError {
    fn from(e: model::PlanError) -> LabError {
        LabError::usage(e)
    }
}

pub type LabResult<T> = Result<T, LabError>;

/// Linux capability numbers (linux/capability.h) the lab checks before it starts.
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_SYS_ADMIN: u32 = 21;

/// Refuses early, before anything is created, when the process cannot manage namespaces.
pub fn require_net_admin() -> LabResult<()> {
    require_capabilities(
        &[CAP_NET_ADMIN, CAP_SYS_ADMIN],
        "this command needs CAP_NET_ADMIN to create network namespaces: run it as root",
    )
}

/// Refuses, with [`ExitKind::Capability`]'s code and `message`, unless the process holds
/// every one of `caps` in its effective set.
pub fn require_capabilities(caps: &[u32], message: &'static str) -> LabResult<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = effective_capabilities(&status);
    if caps.iter().all(|cap| effective & (1 << cap) != 0) {
        Ok(())
    } else {
        Err(LabError::capability(anyhow::anyhow!(message)))
    }
}

/// The effective set from `/proc/PID/status` text; none where it cannot be read.
fn effective_capabilities(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_set_is_read_from_its_own_line_only() {
        let status = "Name:\tx\nCapInh:\t0000000000001000\nCapPrm:\t0000000000001000\n\
                      CapEff:\t0000000000201000\nCapBnd:\t000001ffffffffff\n";
        let eff = effective_capabilities(status);
        assert_ne!(eff & (1 << CAP_NET_ADMIN), 0);
        assert_ne!(eff & (1 << CAP_SYS_ADMIN), 0);
        assert_eq!(eff & (1 << 0), 0);
        assert_eq!(effective_capabilities("CapEff:\tzz\n"), 0);
        assert_eq!(effective_capabilities(""), 0);
    }
}
