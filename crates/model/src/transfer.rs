//! One transfer's figures as both ends measured them, and the rates a report derives.
//! Leaves out what a run adds around them (the plan, the environment: `report`).

use serde::{Deserialize, Serialize};

/// Shortest transfer whose MB/s is taken as a stable figure: below it, connection setup, the
/// first congestion-window rounds and a single scheduling hiccup weigh on the result.
pub const MIN_STABLE_SECONDS: f64 = 0.5;
/// How long each plain transfer timing a line rate lasts (`run`'s after the tunnel,
/// `matrix`'s plain row): twice the shortest stable one.
pub const LINE_RATE_SECONDS: f64 = 2.0 * MIN_STABLE_SECONDS;

/// What one end measured of one transfer: the bytes it moved, its seconds (the receiver's:
/// first payload byte to last; the sender's: connect to close) and its threads' CPU (one
/// thread per stream, added up). The same whether measured in this process or reported by a
/// peer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TransferSide {
    pub bytes: u64,
    pub seconds: f64,
    pub cpu: CpuUsage,
    /// Threads that moved the streams (and whose CPU `cpu` adds up): one per stream.
    #[serde(default = "one_thread")]
    pub threads: u16,
}

fn one_thread() -> u16 {
    1
}

/// CPU time a process or thread spent during the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuUsage {
    pub user_s: f64,
    pub system_s: f64,
    /// (user + system) / wall time, in percent of one core.
    pub percent_of_core: f64,
}

impl CpuUsage {
    pub fn new(user_s: f64, system_s: f64, wall_s: f64) -> CpuUsage {
        let percent_of_core = if wall_s > 0.0 {
            (user_s + system_s) / wall_s * 100.0
        } else {
            0.0
        };
        CpuUsage {
            user_s,
            system_s,
            percent_of_core,
        }
    }

    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// What the run's own transfers cost the whole machine: the busy time of every CPU (from
/// /proc/stat, so the sender, the receiver, the tunnel and the kernel's network work on
/// their behalf, and anything else that ran meanwhile), by kind, and per gigabyte moved.
/// Setup and teardown are outside the transfers; each transfer's own connection set-up and
/// checks are inside, which the slope between two payload sizes cancels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MachineCost {
    /// Payload bytes of the transfers.
    pub bytes: u64,
    /// The transfers' wall-clock seconds, added up.
    pub seconds: f64,
    /// Busy CPU-seconds of all CPUs over the transfers: `user_s + system_s + irq_s`.
    pub cpu_s: f64,
    pub user_s: f64,
    pub system_s: f64,
    /// Interrupt and softirq time (much of the network stack's receive path).
    pub irq_s: f64,
    /// `cpu_s` per 10^9 payload bytes.
    pub cpu_s_per_gb: f64,
}

impl MachineCost {
    /// None without bytes (a cost per gigabyte of nothing is no figure).
    pub fn new(bytes: u64, seconds: f64, user_s: f64, system_s: f64, irq_s: f64) -> Option<MachineCost> {
        let cpu_s = user_s + system_s + irq_s;
        (bytes > 0).then(|| MachineCost {
            bytes,
            seconds,
            cpu_s,
            user_s,
            system_s,
            irq_s,
            cpu_s_per_gb: cpu_s / (bytes as f64 / 1e9),
        })
    }

    /// The text report's line.
    pub fn line(&self) -> String {
        format!(
            "machine CPU over the transfers: {:.2} CPU-s per GB (user {:.2}, system {:.2}, irq+softirq {:.2} CPU-s \
             for {:.2} GB in {:.2} s; every CPU, /proc/stat)",
            self.cpu_s_per_gb,
            self.user_s,
            self.system_s,
            self.irq_s,
            self.bytes as f64 / 1e9,
            self.seconds
        )
    }
}

/// One verified transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub bytes: u64,
    /// Receiver's clock, first byte to last byte.
    pub seconds: f64,
    pub streams: u16,
    pub verified: bool,
    pub sender_cpu: CpuUsage,
    pub receiver_cpu: CpuUsage,
    /// Threads per side, one per stream (reports from before had one per side).
    #[serde(default = "one_thread")]
    pub sender_threads: u16,
    #[serde(default = "one_thread")]
    pub receiver_threads: u16,
}

impl Transfer {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }
    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / (1024.0 * 1024.0)
    }
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds / 1e6
    }
}

/// Derived rates, written out so that readers of the JSON need not recompute them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub mb_per_s: f64,
    pub mib_per_s: f64,
    pub mbit_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferRecord {
    #[serde(flatten)]
    pub transfer: Transfer,
    pub rates: Rates,
}

impl From<Transfer> for TransferRecord {
    fn from(t: Transfer) -> Self {
        let rates = Rates {
            mb_per_s: t.mb_per_s(),
            mib_per_s: t.mib_per_s(),
            mbit_per_s: t.mbit_per_s(),
        };
        TransferRecord { transfer: t, rates }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_cost_is_per_gigabyte_and_none_without_bytes() {
        assert_eq!(MachineCost::new(0, 1.0, 1.0, 1.0, 1.0), None);
        let c = MachineCost::new(2_000_000_000, 4.0, 1.0, 1.5, 0.5).unwrap();
        assert_eq!((c.cpu_s, c.cpu_s_per_gb), (3.0, 1.5));
        assert!(
            c.line()
                .starts_with("machine CPU over the transfers: 1.50 CPU-s per GB (user 1.00"),
            "{}",
            c.line()
        );
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<MachineCost>(&json).unwrap(), c);
    }
}
