//! The result schema. Versioned: scripts parse it, so a field is added, never renamed or
//! re-typed without bumping [`SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};

use crate::env::Environment;
use crate::evidence::BackendDetails;
use crate::plan::RunPlan;
use crate::stats::Summary;
pub use crate::transfer::{CpuUsage, Rates, Transfer, TransferRecord, TransferSide, MIN_STABLE_SECONDS};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub plan: RunPlan,
    pub environment: Environment,
    /// One per `--repeat`.
    pub transfers: Vec<TransferRecord>,
    /// MB/s over the repeats.
    pub mb_per_s: Summary,
    /// Backend-specific evidence (SA counters, drivers, tunnel thread CPU, ...), keyed by
    /// backend; each backend's shape is its type in [`crate::evidence`].
    #[serde(default, skip_serializing_if = "BackendDetails::is_empty")]
    pub backend_details: BackendDetails,
    /// Reference tools measured over the same data path in the same run (e.g. "iperf3"),
    /// MB/s over the repeats.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub references: std::collections::BTreeMap<String, Summary>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The other host's conditions in a two-machine run (`--peer`); `environment` is this
    /// host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_environment: Option<Environment>,
    /// `--netem`: the link conditions asked for, read back from the kernel, and the round
    /// trip measured over them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<crate::netem::LinkConditions>,
    /// Intervals, the warm-up left out, each direction of a two-way run (`--interval`,
    /// `--omit`, `--reverse`, `--bidir`); absent for a forward `--bytes` run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<crate::modes::ModesReport>,
    /// The run against its own crypto ceiling and the plain line rate of its topology
    /// (absent with `--no-ceiling`, for `plain` and for two-host runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<crate::ceiling::RunCeiling>,
    /// `--udp`: each trial's packets, loss and jitter, or the `--find-ndr` search. The
    /// `transfers` of such a run are its trials' delivered payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<crate::packets::UdpReport>,
    /// `--latency`: round trips idle and under load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<crate::packets::LatencyReport>,
    /// `--rekey-every`: each rekey's time and what it cost the flow, with the 10 ms
    /// timeline it is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rekey: Option<crate::rekey::RekeyReport>,
    /// A local run's time to first packet: its setup, then its first transfer's first
    /// verified byte (absent for two-host and UDP runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_packet: Option<crate::startup::FirstPacket>,
    /// What the run's own TCP transfers cost every CPU of the machine, per GB moved (a local
    /// run; absent for UDP runs, two-host runs and where /proc/stat cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_cost: Option<crate::transfer::MachineCost>,
}

/// Why no report can be made of a run's transfers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error("no transfer was made")]
    NoTransfers,
    #[error(
        "a transfer of {bytes} bytes took {seconds} s by the receiver's clock: too short to time; give a larger --bytes"
    )]
    Untimed { bytes: u64, seconds: f64 },
}

impl RunReport {
    /// A report always carries at least one measurement, and only timed ones: a transfer
    /// that took no measurable time would make every rate infinite.
    pub fn new(
        plan: RunPlan,
        environment: Environment,
        transfers: Vec<Transfer>,
    ) -> Result<RunReport, ReportError> {
        if let Some(t) = transfers
            .iter()
            .find(|t| !(t.seconds > 0.0 && t.mb_per_s().is_finite()))
        {
            return Err(ReportError::Untimed {
                bytes: t.bytes,
                seconds: t.seconds,
            });
        }
        let rates: Vec<f64> = transfers.iter().map(Transfer::mb_per_s).collect();
        let mb_per_s = Summary::of(&rates).ok_or(ReportError::NoTransfers)?;
        let notes = short_transfer_note(&transfers).into_iter().collect();
        Ok(RunReport {
            schema_version: SCHEMA_VERSION,
            plan,
            environment,
            mb_per_s,
            transfers: transfers.into_iter().map(TransferRecord::from).collect(),
            backend_details: BackendDetails::default(),
            references: Default::default(),
            notes,
            peer_environment: None,
            conditions: None,
            modes: None,
            ceiling: None,
            udp: None,
            latency: None,
            rekey: None,
            first_packet: None,
            machine_cost: None,
        })
    }
}

/// A warning when the shortest transfer lasted under [`MIN_STABLE_SECONDS`], with a payload
/// that would take about two seconds at the measured rate.
pub fn short_transfer_note(transfers: &[Transfer]) -> Option<String> {
    let shortest = transfers.iter().min_by(|a, b| a.seconds.total_cmp(&b.seconds))?;
    if shortest.seconds >= MIN_STABLE_SECONDS {
        return None;
    }
    Some(format!(
        "a transfer lasted {:.3} s: too short to be a stable figure; use --bytes {} or more",
        shortest.seconds,
        suggested_payload(shortest.mb_per_s())
    ))
}

/// Decimal megabytes for about two seconds at `mb_per_s`, rounded up to 1, 2 or 5 × 10^n.
fn suggested_payload(mb_per_s: f64) -> String {
    let want = (mb_per_s * 2.0).max(1.0);
    let decade = 10f64.powf(want.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|v| *v >= want)
        .unwrap_or(10.0 * decade);
    if step >= 1000.0 {
        format!("{}GB", step / 1000.0)
    } else {
        format!("{step}MB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RunRequest;

    fn transfer(seconds: f64) -> Transfer {
        Transfer {
            bytes: 100_000_000,
            seconds,
            streams: 1,
            verified: true,
            sender_cpu: CpuUsage::new(0.05, 0.06, seconds),
            receiver_cpu: CpuUsage::new(0.02, 0.05, seconds),
            sender_threads: 1,
            receiver_threads: 1,
        }
    }

    #[test]
    fn report_round_trips_through_json() {
        let plan = RunRequest {
            backend: crate::Backend::Plain,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let env = Environment::detect();
        let report = RunReport::new(plan, env, vec![transfer(0.125), transfer(0.1), transfer(0.2)]).unwrap();
        assert!(report.notes[0].contains("too short"), "{:?}", report.notes);
        assert_eq!(report.mb_per_s.median, 800.0);
        let json = serde_json::to_string_pretty(&report).unwrap();
        let back: RunReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["transfers"][0]["rates"]["mbit_per_s"], 6400.0);
        assert_eq!(v["plan"]["suite"], "none");
    }

    #[test]
    fn no_transfers_no_report() {
        let plan = RunRequest::default().validate().unwrap();
        assert_eq!(
            RunReport::new(plan, Environment::detect(), vec![]),
            Err(ReportError::NoTransfers)
        );
    }

    #[test]
    fn bytes_1_untimed_transfer_is_refused_not_inf() {
        let plan = RunRequest::default().validate().unwrap();
        let e = RunReport::new(plan, Environment::detect(), vec![transfer(0.5), transfer(0.0)]).unwrap_err();
        assert!(matches!(e, ReportError::Untimed { .. }), "{e}");
        assert!(e.to_string().contains("give a larger --bytes"), "{e}");
    }

    #[test]
    fn short_transfer_warns_with_a_payload_to_use() {
        let plan = RunRequest::default().validate().unwrap();
        let report =
            RunReport::new(plan, Environment::detect(), vec![transfer(0.125), transfer(1.0)]).unwrap();
        // 100 MB in 0.125 s = 800 MB/s: two seconds is 1600 MB, rounded up to 2 GB.
        assert_eq!(
            report.notes,
            ["a transfer lasted 0.125 s: too short to be a stable figure; use --bytes 2GB or more"]
        );
        assert_eq!(short_transfer_note(&[transfer(0.5)]), None);
        assert_eq!(suggested_payload(3.0), "10MB");
        assert_eq!(suggested_payload(0.1), "1MB");
    }
}
