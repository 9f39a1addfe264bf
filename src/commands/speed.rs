//! `ipsec-lab speed`: the crypto microbenchmark of the `speed` crate, behind the binary's
//! exit codes (2 for bad input, 1 for a failed run).

use crate::error::{ExitKind, LabError, LabResult};

pub fn run(args: speed::SpeedArgs) -> LabResult<()> {
    speed::run(&args).map(|_report| ()).map_err(|e| {
        let kind = match e {
            speed::SpeedError::Usage(_) => ExitKind::Usage,
            _ => ExitKind::Failed,
        };
        LabError::new(kind, e)
    })
}
