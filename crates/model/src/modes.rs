//! iperf3-grade run modes: a transfer timed by duration instead of size (`--time`), the
//! transfer cut into intervals (`--interval`, `--json-stream`), a warm-up left out of the
//! figure (`--omit`), and the direction of the data (`--reverse`, `--bidir`). Here: the
//! plan's part (checked with the rest of the plan) and the report's part. The counting is
//! crate `traffic`'s, the running crate `lab`'s, the printing the binary's.

use serde::{Deserialize, Serialize};

use crate::stats::Summary;
use crate::transfer::TransferRecord;

/// Longest `--time` and `--omit` (a day), and the shortest `--time` a figure is taken of.
pub const MAX_SECONDS: f64 = 86_400.0;
pub const MIN_TIME: f64 = crate::transfer::MIN_STABLE_SECONDS;
/// Shortest and longest `--interval` (iperf3's shortest is 0.1 s too).
pub const MIN_INTERVAL: f64 = 0.1;
pub const MAX_INTERVAL: f64 = 3600.0;

/// The modes of a validated run. The default is a forward transfer of `--bytes`, one figure.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Modes {
    /// `--time`: each transfer sends for this many seconds (its size is what got through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_s: Option<f64>,
    /// `--interval`: the transfer's bytes reported per period of this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    /// `--omit`: the first seconds of each transfer, left out of its figure.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omit_s: f64,
    /// `--bidir`: both directions at once, each verified, reported apart and summed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bidir: bool,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Modes {
    pub fn is_default(&self) -> bool {
        *self == Modes::default()
    }
}

/// The modes as typed, checked with the rest of the run by [`ModesRequest::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ModesRequest {
    pub time_s: Option<f64>,
    pub interval_s: Option<f64>,
    pub omit_s: Option<f64>,
    pub bidir: bool,
}

/// What else of the run the modes are checked against.
#[derive(Debug, Clone, Copy)]
pub struct RunContext {
    pub peer: bool,
    /// UDP trials (`--udp`, `--find-ndr`): timed by `--time`, with a peer too.
    pub udp: bool,
    pub reverse: bool,
    pub with_iperf3: bool,
    /// The xfrm backend in transport mode: its policies select one direction's data ports.
    pub one_way_policies: bool,
}

impl ModesRequest {
    pub fn is_default(&self) -> bool {
        *self == ModesRequest::default()
    }

    pub fn validate(self, run: RunContext) -> Result<Modes, ModesError> {
        let seconds = |flag, v: f64, min: f64, max: f64| {
            if v.is_finite() && v >= min && v <= max {
                Ok(v)
            } else {
                Err(ModesError::Range {
                    flag,
                    value: v.to_string(),
                    range: format!("{min} to {max}"),
                })
            }
        };
        let time_s = self
            .time_s
            .map(|t| seconds("--time", t, MIN_TIME, MAX_SECONDS))
            .transpose()?;
        let interval_s = match self.interval_s {
            Some(0.0) => return Err(ModesError::IntervalZero),
            Some(i) => Some(seconds("--interval", i, MIN_INTERVAL, MAX_INTERVAL)?),
            None => None,
        };
        let omit_s = seconds("--omit", self.omit_s.unwrap_or(0.0), 0.0, MAX_SECONDS)?;
        if let Some(time) = time_s {
            if omit_s >= time {
                return Err(ModesError::OmitBeyondTime {
                    omit: omit_s.to_string(),
                    time: time.to_string(),
                });
            }
        }
        if self.bidir && run.reverse {
            return Err(ModesError::BidirReverse);
        }
        let given = [
            (time_s.is_some(), "--time"),
            (interval_s.is_some(), "--interval"),
            (omit_s > 0.0, "--omit"),
            (self.bidir, "--bidir"),
        ];
        if run.peer {
            // A UDP trial's length is its --time; the rest are TCP's.
            let given = if run.udp { &given[1..] } else { &given[..] };
            if let Some((_, flag)) = given.iter().find(|(on, _)| *on) {
                return Err(ModesError::Peer(flag));
            }
        }
        if run.with_iperf3 {
            let one_way = [(time_s.is_some(), "--time"), (self.bidir, "--bidir")];
            if let Some((_, flag)) = one_way.iter().find(|(on, _)| *on) {
                return Err(ModesError::Iperf3(flag));
            }
            if run.reverse && !run.peer {
                return Err(ModesError::Iperf3("--reverse"));
            }
        }
        if self.bidir && run.one_way_policies {
            return Err(ModesError::BidirTransport);
        }
        Ok(Modes {
            time_s,
            interval_s,
            omit_s,
            bidir: self.bidir,
        })
    }
}

/// A number of seconds as typed: `10`, `2.5` or `10s`.
pub fn parse_seconds(s: &str) -> Result<f64, ModesError> {
    let t = s.trim();
    let t = t.strip_suffix('s').unwrap_or(t);
    t.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| ModesError::Seconds(s.to_string()))
}

/// Numbers are kept as text (as they are shown), so errors compare equal, NaN included.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModesError {
    #[error("{0:?} is not a number of seconds: give e.g. 10, 2.5 or 10s")]
    Seconds(String),
    #[error("{flag} {value} is out of range: give {range} seconds")]
    Range {
        flag: &'static str,
        value: String,
        range: String,
    },
    #[error("--interval 0 reports no intervals: leave --interval out, or give {MIN_INTERVAL} to {MAX_INTERVAL} seconds")]
    IntervalZero,
    #[error("--omit {omit} leaves nothing of --time {time} to measure: give an --omit shorter than --time")]
    OmitBeyondTime { omit: String, time: String },
    #[error("--bidir already runs both directions: leave out --reverse")]
    BidirReverse,
    #[error("{0} does not run between two hosts yet: leave it out with --peer")]
    Peer(&'static str),
    #[error("--with-iperf3 measures one forward transfer of --bytes: leave out {0}")]
    Iperf3(&'static str),
    #[error("--bidir with xfrm --mode transport is not offered: transport-mode policies select one direction's data ports; use --mode tunnel (the default)")]
    BidirTransport,
}

/// Which way the data went: a sends to b unless reversed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    #[serde(rename = "a->b")]
    AToB,
    #[serde(rename = "b->a")]
    BToA,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::AToB => "a->b",
            Direction::BToA => "b->a",
        }
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One interval of one transfer (`--interval`). Times are seconds since the transfer
/// started; the last interval ends at the transfer's last byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalRecord {
    /// Which transfer of `--repeat` (from 1).
    pub transfer: u32,
    /// Which way, in a reversed or two-way run; absent for a forward one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// From 0, per transfer and direction.
    pub index: u32,
    pub start_s: f64,
    pub end_s: f64,
    /// Verified bytes received in the interval.
    pub bytes: u64,
    pub mb_per_s: f64,
    /// With `-P N` (N of 2 or more): each stream's verified bytes, stream i's at index i,
    /// adding up to `bytes` (iperf3's per-stream lines beside the sum); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<u64>,
    /// Inside the warm-up (`--omit`): not in the transfer's figure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub omitted: bool,
    /// When the interval ended: seconds since the Unix epoch.
    pub timestamp: f64,
    /// The tunnel's own threads or processes (userspace, openvpn, wireguard-go), percent of
    /// a core each, sampled when the interval was reported; absent for other backends.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tunnel_cpu: std::collections::BTreeMap<String, f64>,
    /// xfrm: the bytes each ESP SA (`a->b`, `b->a`) carried since the previous intervals
    /// were reported, ESP overhead included; absent for other backends.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub esp_bytes: std::collections::BTreeMap<String, u64>,
}

/// The warm-up left out of one transfer's figure (`--omit`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Omitted {
    pub transfer: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Verified, but not counted in the transfer's `bytes`.
    pub bytes: u64,
    pub seconds: f64,
}

/// `--bidir`: each direction's transfers; the report's `transfers` are their sums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bidir {
    pub a_to_b: Vec<TransferRecord>,
    pub b_to_a: Vec<TransferRecord>,
    pub a_to_b_mb_per_s: Summary,
    pub b_to_a_mb_per_s: Summary,
}

/// The report's part of the modes; absent from the report of a plain `--bytes` run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModesReport {
    /// Which way the data of `transfers` went (absent: a->b; `--bidir`: see `bidir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<Omitted>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidir: Option<Bidir>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> RunContext {
        RunContext {
            peer: false,
            udp: false,
            reverse: false,
            with_iperf3: false,
            one_way_policies: false,
        }
    }

    #[test]
    fn defaults_are_a_plain_bytes_run() {
        let m = ModesRequest::default().validate(local()).unwrap();
        assert!(m.is_default());
        assert_eq!(serde_json::to_value(m).unwrap(), serde_json::json!({}));
    }

    #[test]
    fn good_modes_pass_through() {
        let m = ModesRequest {
            time_s: Some(10.0),
            interval_s: Some(0.5),
            omit_s: Some(2.0),
            bidir: true,
        }
        .validate(local())
        .unwrap();
        assert_eq!(
            (m.time_s, m.interval_s, m.omit_s, m.bidir),
            (Some(10.0), Some(0.5), 2.0, true)
        );
        let back: Modes = serde_json::from_value(serde_json::to_value(m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn bad_modes_are_refused_with_the_fix() {
        let req = |time_s, interval_s, omit_s| ModesRequest {
            time_s,
            interval_s,
            omit_s,
            bidir: false,
        };
        for (bad, hint) in [
            (req(Some(0.0), None, None), "0.5 to 86400"),
            (req(Some(f64::NAN), None, None), "out of range"),
            (req(None, Some(0.0), None), "leave --interval out"),
            (req(None, Some(0.01), None), "0.1 to 3600"),
            (req(Some(5.0), None, Some(5.0)), "shorter than --time"),
            (req(None, None, Some(-1.0)), "--omit -1"),
        ] {
            let e = bad.validate(local()).unwrap_err();
            assert!(e.to_string().contains(hint), "{bad:?}: {e}");
        }
        let bidir = ModesRequest {
            bidir: true,
            ..Default::default()
        };
        let ctx = |peer, reverse, with_iperf3, one_way_policies| RunContext {
            peer,
            udp: false,
            reverse,
            with_iperf3,
            one_way_policies,
        };
        assert_eq!(
            bidir.validate(ctx(false, true, false, false)),
            Err(ModesError::BidirReverse)
        );
        assert_eq!(
            bidir.validate(ctx(true, false, false, false)),
            Err(ModesError::Peer("--bidir"))
        );
        assert_eq!(
            bidir.validate(ctx(false, false, true, false)),
            Err(ModesError::Iperf3("--bidir"))
        );
        assert_eq!(
            bidir.validate(ctx(false, false, false, true)),
            Err(ModesError::BidirTransport)
        );
        assert_eq!(
            req(Some(3.0), None, None).validate(ctx(true, false, false, false)),
            Err(ModesError::Peer("--time"))
        );
        // iperf3 runs forward: a local reverse run has no reference; a peer's has its own.
        assert_eq!(
            ModesRequest::default().validate(ctx(false, true, true, false)),
            Err(ModesError::Iperf3("--reverse"))
        );
        assert!(ModesRequest::default()
            .validate(ctx(true, true, true, false))
            .is_ok());
    }

    #[test]
    fn seconds_parse_with_or_without_the_unit() {
        assert_eq!(parse_seconds("10"), Ok(10.0));
        assert_eq!(parse_seconds("2.5s"), Ok(2.5));
        assert!(parse_seconds("ten").is_err());
        assert!(parse_seconds("inf").is_err());
    }

    #[test]
    fn directions_are_written_as_arrows() {
        assert_eq!(serde_json::to_value(Direction::BToA).unwrap(), "b->a");
        assert_eq!(Direction::AToB.to_string(), "a->b");
    }
}
