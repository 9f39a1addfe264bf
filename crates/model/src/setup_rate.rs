//! `ipsec-lab setup-rate`: how fast a kernel installs XFRM SAs and policies as its tables
//! grow, what a data packet's lookup costs with them installed, how long a flush takes, and
//! what an SA costs in kernel memory. The request is checked here, before anything boots;
//! the report is what the guest measured.

use serde::{Deserialize, Serialize};

use crate::{CipherSuite, Environment, Summary};

/// The largest table a step may build: `mem` of [`guest_memory_mib`] grows with it, and
/// this keeps the guest within a few GiB of the host's memory.
pub const MAX_TABLE_SIZE: u32 = 200_000;
/// The most requests in one socket write (the socket's buffers grow with the window).
pub const MAX_WINDOW: u32 = 4096;
/// The longest flow per lookup trial.
pub const MAX_FLOW_SECONDS: f64 = 60.0;
/// The shortest: a trial must see enough packets to be worth a ratio.
pub const MIN_FLOW_SECONDS: f64 = 0.05;
/// Flows per phase of the lookup comparison (alone before, loaded, alone after).
pub const TRIALS: usize = 3;

/// Guest memory for the largest of `sizes`: 1 GiB for the system and the flow, and 16 KiB
/// per SA-and-policy (an SA took 7 KiB of kernel memory in user-mode Linux 6.1; the rest
/// is the policy, the userspace specs and room).
pub fn guest_memory_mib(sizes: &[TableSize]) -> u64 {
    let largest = sizes.iter().map(|s| u64::from(s.0)).max().unwrap_or(0);
    1024 + (largest * 16).div_ceil(1024)
}

/// How many SAs (and as many policies) one step installs: `1000`, `1k`, `10k`, `0.1m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSize(pub u32);

impl std::str::FromStr for TableSize {
    type Err = String;
    fn from_str(text: &str) -> Result<TableSize, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, suffix) = t.split_at(split);
        let scale = match suffix.to_ascii_lowercase().as_str() {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            _ => {
                return Err(format!(
                    "table size {text:?}: unknown suffix {suffix:?} (a count of SAs: 1000, 10k, 0.1m)"
                ))
            }
        };
        let count = number
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(|n| n * scale)
            .ok_or_else(|| format!("table size {text:?}: not a count of SAs (e.g. 1k, 10k, 100k)"))?;
        if count.fract() != 0.0 {
            return Err(format!("table size {text:?}: not a whole number of SAs"));
        }
        if count < 1.0 {
            return Err(format!("table size {text:?} must be at least 1 SA, e.g. 1k"));
        }
        if count > f64::from(MAX_TABLE_SIZE) {
            return Err(format!(
                "table size {text:?} is above {MAX_TABLE_SIZE} SAs, the most the guest's memory is sized for"
            ));
        }
        Ok(TableSize(count as u32))
    }
}

impl std::fmt::Display for TableSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            n if n >= 1000 && n % 1000 == 0 => write!(f, "{}k", n / 1000),
            n => write!(f, "{n}"),
        }
    }
}

/// What a setup-rate run measures, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRatePlan {
    pub sizes: Vec<TableSize>,
    pub suite: CipherSuite,
    /// Requests per socket write in the batched installs.
    pub window: u32,
    /// Each lookup trial's flow length.
    pub flow_seconds: f64,
}

impl SetupRatePlan {
    /// Every check on the values together; each value alone was parsed already.
    pub fn validate(
        sizes: Vec<TableSize>,
        suite: CipherSuite,
        window: u32,
        flow_seconds: f64,
    ) -> Result<SetupRatePlan, String> {
        if sizes.is_empty() {
            return Err("--sizes needs at least one table size, e.g. 1k,10k,100k".into());
        }
        if !matches!(suite, CipherSuite::AesCbc { .. } | CipherSuite::AesGcm { .. }) {
            return Err(format!(
                "--cipher {suite}: setup-rate installs ESP SAs the lab can key: aes-128-gcm, aes-256-gcm, \
                 aes-256-cbc-hmac-sha256, ..."
            ));
        }
        if !(1..=MAX_WINDOW).contains(&window) {
            return Err(format!(
                "--window {window}: requests per write must be 1 to {MAX_WINDOW} (1 is one by one)"
            ));
        }
        if !(MIN_FLOW_SECONDS..=MAX_FLOW_SECONDS).contains(&flow_seconds) {
            return Err(format!(
                "--flow-seconds {flow_seconds}: each lookup flow lasts {MIN_FLOW_SECONDS} to {MAX_FLOW_SECONDS} s"
            ));
        }
        Ok(SetupRatePlan {
            sizes,
            suite,
            window,
            flow_seconds,
        })
    }
}

/// Installs per second, of SAs and of policies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InstallRate {
    pub sas_per_s: f64,
    pub policies_per_s: f64,
}

/// A data packet's lookup cost with the table full: one UDP flow through one SA, its
/// packets per second alone (before the N are installed and after they are flushed) and
/// with the N installed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LookupCost {
    /// Packets per second of each trial without the N.
    pub alone_pps: Vec<f64>,
    /// Packets per second of each trial with the N installed.
    pub loaded_pps: Vec<f64>,
    /// Median alone over median loaded: how many times a packet costs more with the N
    /// (None where no packet got through alone).
    pub slowdown: Option<f64>,
    /// The alone trials' spread, (max - min) / median: a slowdown within 1 ± this is noise.
    pub noise: f64,
}

impl LookupCost {
    pub fn new(alone_pps: Vec<f64>, loaded_pps: Vec<f64>) -> LookupCost {
        let alone = Summary::of(&alone_pps);
        let loaded = Summary::of(&loaded_pps);
        let slowdown = match (alone, loaded) {
            (Some(a), Some(l)) if a.median > 0.0 && l.median > 0.0 => Some(a.median / l.median),
            _ => None,
        };
        LookupCost {
            alone_pps,
            loaded_pps,
            slowdown,
            noise: alone.map_or(0.0, |a| a.relative_spread()),
        }
    }

    /// Whether the slowdown is within the alone trials' own spread.
    pub fn within_noise(&self) -> bool {
        self.slowdown.is_none_or(|s| (s - 1.0).abs() <= self.noise)
    }
}

/// One table size's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRates {
    pub size: TableSize,
    /// A window of requests per write, the acks collected after each.
    pub batched: InstallRate,
    /// One request, its ack, the next.
    pub one_by_one: InstallRate,
    /// `ip xfrm state flush` of the N SAs, in seconds.
    pub flush_sas_s: f64,
    /// `ip xfrm policy flush` of the N policies, in seconds.
    pub flush_policies_s: f64,
    /// The drop in the kernel's free memory (MemFree) per SA installed; None where the
    /// guest's free memory did not drop (another allocation freed more meanwhile).
    pub kernel_bytes_per_sa: Option<f64>,
    pub lookup: LookupCost,
}

/// `ipsec-lab setup-rate --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRateReport {
    /// Where it was measured: the guest's kernel, CPU and virtualisation.
    pub environment: Environment,
    pub plan: SetupRatePlan,
    pub tables: Vec<TableRates>,
    pub notes: Vec<String>,
}

/// `count` per `seconds`, never infinite: a step too fast for the clock counts as 1 ns.
pub fn per_second(count: usize, seconds: f64) -> f64 {
    count as f64 / seconds.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_k_and_m_and_refuse_the_rest() {
        let ok = |t: &str| t.parse::<TableSize>().unwrap().0;
        assert_eq!(
            (ok("1k"), ok("10K"), ok("100k"), ok("2500"), ok("0.1m")),
            (1000, 10_000, 100_000, 2500, 100_000)
        );
        for (bad, says) in [
            ("1x", "unknown suffix \"x\""),
            ("0", "at least 1 SA"),
            ("0k", "at least 1 SA"),
            ("1.5", "whole number"),
            ("k", "not a count"),
            ("", "not a count"),
            ("300k", "above 200000 SAs"),
            ("1kb", "unknown suffix"),
        ] {
            let e = bad.parse::<TableSize>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(TableSize(10_000).to_string(), "10k");
        assert_eq!(TableSize(2500).to_string(), "2500");
    }

    #[test]
    fn the_plan_refuses_a_bad_window_and_flow() {
        let suite: CipherSuite = "aes-128-gcm".parse().unwrap();
        let sizes = vec![TableSize(1000)];
        assert!(SetupRatePlan::validate(sizes.clone(), suite, 0, 1.0)
            .unwrap_err()
            .contains("--window 0"));
        assert!(SetupRatePlan::validate(sizes.clone(), suite, 5000, 1.0).is_err());
        assert!(SetupRatePlan::validate(sizes.clone(), suite, 64, 0.0)
            .unwrap_err()
            .contains("--flow-seconds"));
        assert!(SetupRatePlan::validate(sizes.clone(), suite, 64, f64::NAN).is_err());
        assert!(SetupRatePlan::validate(vec![], suite, 64, 1.0).is_err());
        let none: CipherSuite = "none".parse().unwrap();
        assert!(SetupRatePlan::validate(sizes.clone(), none, 64, 1.0)
            .unwrap_err()
            .contains("--cipher none"));
        assert!(SetupRatePlan::validate(sizes, suite, 64, 1.0).is_ok());
    }

    #[test]
    fn the_guest_grows_with_the_largest_table() {
        assert_eq!(guest_memory_mib(&[TableSize(1000)]), 1040);
        assert_eq!(
            guest_memory_mib(&[TableSize(1000), TableSize(MAX_TABLE_SIZE)]),
            1024 + 3125
        );
    }

    #[test]
    fn the_slowdown_is_judged_against_the_alone_spread() {
        let c = LookupCost::new(vec![100.0, 110.0, 90.0], vec![50.0, 50.0, 50.0]);
        assert_eq!(c.slowdown, Some(2.0));
        assert!((c.noise - 0.2).abs() < 1e-9);
        assert!(!c.within_noise());
        let c = LookupCost::new(vec![100.0, 110.0, 90.0], vec![95.0, 95.0, 95.0]);
        assert!(c.within_noise());
        let none = LookupCost::new(vec![0.0; 3], vec![1.0; 3]);
        assert_eq!(none.slowdown, None);
        assert!(per_second(5, 0.0).is_finite());
    }
}
