//! One verified transfer's shape, the same for every kind of run: the traffic crate's
//! configuration from a plan, one idle timeout, and the report's record of the two halves.

use std::time::Duration;

use model::{RunPlan, Transfer, TransferSide};
use traffic::TransferConfig;

/// Longest silence tolerated on the data path before a transfer is declared failed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

pub fn transfer_config(plan: &RunPlan) -> TransferConfig {
    TransferConfig {
        seed: plan.workload().seed,
        total_bytes: plan.workload().bytes.0,
        streams: plan.workload().parallel,
        idle_timeout: IDLE_TIMEOUT,
        duration: plan.workload().modes.time_s.map(Duration::from_secs_f64),
    }
}

/// The report's record of a verified transfer: the receiver's clock times it (first byte
/// to last), each side's CPU is its own.
pub fn record(plan: &RunPlan, received: TransferSide, sent: TransferSide) -> Transfer {
    Transfer {
        bytes: received.bytes,
        seconds: received.seconds,
        streams: plan.workload().parallel,
        verified: true,
        sender_cpu: sent.cpu,
        receiver_cpu: received.cpu,
        sender_threads: sent.threads,
        receiver_threads: received.threads,
    }
}
