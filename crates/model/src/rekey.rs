//! Rekeying under load (`run --rekey-every SECONDS`): the schedule a run asks for, and what
//! each rekey cost the flow, read off a timeline of 10 ms buckets.
//!
//! Per rekey: when it happened, how long the backend's own switch took, the longest gap with
//! no byte delivered from the rekey to [`WINDOW_S`] after it (or the next rekey), the dip
//! (the lowest bucket in that window against the run's median bucket) and, for UDP, the
//! datagrams sent in that window that were lost, reordered or duplicated. The same gap
//! measured away from every rekey is the run's own baseline: a gap around a rekey means
//! something only where it stands out from it.
//!
//! Pure: the buckets come from crate `traffic`, the rekeys from the backend.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Width of a timeline bucket: fine enough to see a switch that stalls a flow.
pub const BUCKET_MS: u32 = 10;
/// How long after a rekey its effects are looked for.
pub const WINDOW_S: f64 = 1.0;
/// The most often a run rekeys: every 100 ms still leaves buckets between two rekeys.
pub const MIN_EVERY_S: f64 = 0.1;
/// WireGuard's REKEY_AFTER_TIME: the only period its rekeys come at (the protocol's
/// constant; nothing outside a device starts a handshake on a live session).
pub const WIREGUARD_EVERY_S: f64 = 120.0;
/// The longest a rekey run records its timeline (an hour is 360,000 buckets).
pub const MAX_REKEY_RUN_S: f64 = 3600.0;

/// The order in which new keys replace old ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RekeyOrder {
    /// RFC 7296 §2.8: the new inbound SA first, then the outbound switch, the old inbound
    /// after a grace time: nothing in flight finds its SA gone.
    #[default]
    MakeBeforeBreak,
    /// The old SAs deleted first, the new ones added after: what doing it wrong costs.
    Naive,
}

impl RekeyOrder {
    pub const ALL: [RekeyOrder; 2] = [RekeyOrder::MakeBeforeBreak, RekeyOrder::Naive];

    pub fn name(self) -> &'static str {
        match self {
            RekeyOrder::MakeBeforeBreak => "make-before-break",
            RekeyOrder::Naive => "naive",
        }
    }
}

impl fmt::Display for RekeyOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown rekey order {0:?}: use make-before-break (mbb) or naive")]
pub struct UnknownRekeyOrder(String);

impl FromStr for RekeyOrder {
    type Err = UnknownRekeyOrder;
    fn from_str(s: &str) -> Result<Self, UnknownRekeyOrder> {
        let t = s.trim().to_ascii_lowercase();
        RekeyOrder::ALL
            .into_iter()
            .find(|o| o.name() == t || (t == "mbb" && *o == RekeyOrder::MakeBeforeBreak))
            .ok_or_else(|| UnknownRekeyOrder(s.to_string()))
    }
}

/// Which SA a rekey replaces (`--rekey-sa`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RekeyTarget {
    /// The SA pair that carries the data (an IKE daemon's CHILD_SA).
    #[default]
    Child,
    /// The IKE_SA itself (strongswan only): the CHILD_SAs move to the new one, their keys stay.
    Ike,
}

impl RekeyTarget {
    pub const ALL: [RekeyTarget; 2] = [RekeyTarget::Child, RekeyTarget::Ike];

    pub fn name(self) -> &'static str {
        match self {
            RekeyTarget::Child => "child",
            RekeyTarget::Ike => "ike",
        }
    }

    /// IKEv2's name for the SA, as a report says it.
    pub fn sa_name(self) -> &'static str {
        match self {
            RekeyTarget::Child => "CHILD_SA",
            RekeyTarget::Ike => "IKE_SA",
        }
    }
}

impl fmt::Display for RekeyTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown SA to rekey {0:?}: use child or ike")]
pub struct UnknownRekeyTarget(String);

impl FromStr for RekeyTarget {
    type Err = UnknownRekeyTarget;
    fn from_str(s: &str) -> Result<Self, UnknownRekeyTarget> {
        let t = s.trim().to_ascii_lowercase();
        RekeyTarget::ALL
            .into_iter()
            .find(|o| o.name() == t || o.sa_name().eq_ignore_ascii_case(&t))
            .ok_or_else(|| UnknownRekeyTarget(s.to_string()))
    }
}

/// What a run asks for: a rekey of `sa` every `every_s` seconds of each transfer, in
/// `order` (the lab's own order, xfrm's; an IKE daemon rekeys in its own).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RekeySchedule {
    pub every_s: f64,
    pub order: RekeyOrder,
    /// Absent from plans written before there was a choice: the CHILD_SA.
    #[serde(default)]
    pub sa: RekeyTarget,
}

impl RekeySchedule {
    /// What a report calls `backend`'s rekeys: the order of the lab's own xfrm rekey, the
    /// SA charon rekeyed, or the backend's own way.
    pub fn label(&self, backend: crate::Backend) -> &'static str {
        use crate::Backend::*;
        match (backend, self.sa) {
            (Strongswan, RekeyTarget::Ike) => "charon's IKE_SA rekey",
            (Strongswan, RekeyTarget::Child) => "charon's CHILD_SA rekey",
            (Openvpn | OpenvpnDco, _) => "OpenVPN's renegotiation",
            (Userspace, _) => "new key epoch, make-before-break",
            (Wireguard | WireguardGo | Boringtun, _) => "WireGuard's own rekey (REKEY_AFTER_TIME)",
            (Xfrm | Plain, _) => self.order.name(),
        }
    }

    /// The rekeys of a transfer of `seconds`: at every multiple of the period before its end.
    pub fn count_in(&self, seconds: f64) -> u32 {
        let n = (seconds / self.every_s).ceil() as u32;
        n.saturating_sub(1)
    }
}

/// What one rekey cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RekeyMark {
    /// Since the transfer started.
    pub at_s: f64,
    /// How long the backend's switch took (the netlink calls, the daemon's command); None
    /// where the backend does not say (WireGuard's devices tell when a handshake completed,
    /// not when it began).
    #[serde(default)]
    pub took_ms: Option<f64>,
    /// The longest stretch with no byte delivered that ended within the window.
    pub gap_ms: f64,
    /// The window's lowest full bucket against the run's median bucket (0: a bucket with
    /// nothing delivered); None: no full bucket in the window.
    pub dip: Option<f64>,
    /// UDP: the datagrams sent from one bucket before the rekey to the window's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams: Option<RekeyDatagrams>,
}

/// Datagrams sent around a rekey, and what became of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RekeyDatagrams {
    pub sent: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
}

/// One transfer's rekeys and the timeline they are read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RekeyRun {
    /// Which transfer (1-based, as `--repeat` counts).
    pub transfer: u32,
    pub bucket_ms: u32,
    /// Bytes delivered (verified) in each bucket since the transfer started.
    pub delivered: Vec<u64>,
    /// The median full bucket's bytes.
    pub median_bucket_bytes: f64,
    /// The longest gap that ended away from every rekey's window: the run's own stalls.
    pub baseline_gap_ms: f64,
    /// The lowest full bucket away from every rekey's window against the median: the
    /// run's own dips.
    pub baseline_dip: Option<f64>,
    pub rekeys: Vec<RekeyMark>,
}

/// A run's rekeying: what was asked, how the backend does it, and each transfer's marks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RekeyReport {
    pub schedule: RekeySchedule,
    /// What the rekeys are, in a few words ([`RekeySchedule::label`]).
    pub label: String,
    /// What one rekey does on this backend, in a line.
    pub how: String,
    pub runs: Vec<RekeyRun>,
}

impl RekeyReport {
    pub fn marks(&self) -> impl Iterator<Item = &RekeyMark> {
        self.runs.iter().flat_map(|r| r.rekeys.iter())
    }

    /// What a reader must know before trusting the figures.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .runs
            .iter()
            .filter(|r| r.rekeys.is_empty())
            .map(|r| {
                format!(
                    "transfer {} was too short to see a rekey: it ended before the first (--rekey-every {}); give a longer --time",
                    r.transfer, self.schedule.every_s
                )
            })
            .collect();
        if let Some(w) = self.worst() {
            if w.gap_ms <= w.baseline_gap_ms {
                notes.push(format!(
                    "no rekey stalled the flow longer than its own longest gap away from the rekeys ({:.0} ms): \
                     what a rekey costs here is below what this run resolves",
                    w.baseline_gap_ms
                ));
            }
        }
        notes
    }

    /// The worst of every rekey: the longest gap, the deepest dip, the datagrams lost; None
    /// where no rekey was made.
    pub fn worst(&self) -> Option<RekeyCell> {
        let mut marks = self.marks().peekable();
        marks.peek()?;
        let mut worst = RekeyCell {
            schedule: self.schedule,
            rekeys: 0,
            gap_ms: 0.0,
            baseline_gap_ms: 0.0,
            took_ms: None,
            dip: None,
            lost: None,
        };
        for m in marks {
            worst.rekeys += 1;
            worst.gap_ms = worst.gap_ms.max(m.gap_ms);
            if let Some(t) = m.took_ms {
                worst.took_ms = Some(worst.took_ms.map_or(t, |w: f64| w.max(t)));
            }
            if let Some(d) = m.dip {
                worst.dip = Some(worst.dip.map_or(d, |w: f64| w.min(d)));
            }
            if let Some(d) = m.datagrams {
                let lost = worst.lost.get_or_insert(0);
                *lost += d.lost;
            }
        }
        worst.baseline_gap_ms = self.runs.iter().map(|r| r.baseline_gap_ms).fold(0.0, f64::max);
        Some(worst)
    }
}

/// A run's rekeys in a few figures (a matrix cell's, `matrix --rekey-every`): the worst of
/// every rekey of its transfers and the flow's own worst away from them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RekeyCell {
    pub schedule: RekeySchedule,
    pub rekeys: u32,
    /// The longest gap around any rekey, and the longest away from all of them.
    pub gap_ms: f64,
    pub baseline_gap_ms: f64,
    /// The slowest switch, where the backend says how long its switches take.
    #[serde(default)]
    pub took_ms: Option<f64>,
    /// The lowest 10 ms bucket around any rekey against the median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dip: Option<f64>,
    /// UDP: datagrams lost around the rekeys, all together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
}

impl RekeyCell {
    /// `gap 36 ms (22 away), 3 rekeys`, and the datagrams lost where counted.
    pub fn text(&self) -> String {
        let lost = self.lost.map_or(String::new(), |l| format!(", {l} lost"));
        format!(
            "gap {:.0} ms ({:.0} away), {} rekeys{lost}",
            self.gap_ms, self.baseline_gap_ms, self.rekeys
        )
    }
}

/// A transfer's timeline as the receiver saw it: per bucket, the bytes delivered and the
/// longest gap (in µs) that ended in it; for UDP, per bucket of *send* time, the datagrams
/// sent, received, reordered and duplicated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    pub bucket_ms: u32,
    pub delivered: Vec<u64>,
    pub longest_gap_us: Vec<u32>,
    pub datagrams: Option<DatagramBuckets>,
}

/// UDP datagrams per bucket of the time they were sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DatagramBuckets {
    pub sent: Vec<u64>,
    pub received: Vec<u64>,
    pub reordered: Vec<u64>,
    pub duplicates: Vec<u64>,
}

/// When a backend switched keys, and how long its switch took (None: not known).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Switch {
    /// Since the transfer started.
    pub at_s: f64,
    pub took_ms: Option<f64>,
}

impl Timeline {
    fn bucket_s(&self) -> f64 {
        f64::from(self.bucket_ms) / 1e3
    }

    /// The bucket holding `t` seconds.
    fn bucket_of(&self, t: f64) -> usize {
        (t.max(0.0) / self.bucket_s()) as usize
    }

    /// The full buckets: every one but the first and the last (the transfer starts and
    /// ends inside those).
    fn full(&self) -> std::ops::Range<usize> {
        1..self.delivered.len().saturating_sub(1)
    }

    fn median_bucket(&self) -> f64 {
        let mut full: Vec<u64> = self.delivered[self.full()].to_vec();
        if full.is_empty() {
            return 0.0;
        }
        full.sort_unstable();
        let n = full.len();
        if n % 2 == 1 {
            full[n / 2] as f64
        } else {
            (full[n / 2 - 1] + full[n / 2]) as f64 / 2.0
        }
    }

    /// Each switch's window: from its bucket to [`WINDOW_S`] after it, or to the next
    /// switch's bucket (windows never overlap: nothing is counted for two rekeys).
    fn windows(&self, switches: &[Switch]) -> Vec<std::ops::Range<usize>> {
        switches
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let end = self.bucket_of(s.at_s + WINDOW_S) + 1;
                let end = switches
                    .get(i + 1)
                    .map_or(end, |next| end.min(self.bucket_of(next.at_s)));
                self.bucket_of(s.at_s)..end
            })
            .collect()
    }

    /// The report of one transfer with these switches.
    pub fn report(&self, transfer: u32, switches: &[Switch]) -> RekeyRun {
        let median = self.median_bucket();
        let gap_ms = |r: std::ops::Range<usize>| {
            let end = r.end.min(self.longest_gap_us.len());
            self.longest_gap_us[r.start.min(end)..end]
                .iter()
                .copied()
                .max()
                .map_or(0.0, |us| f64::from(us) / 1e3)
        };
        let windows = self.windows(switches);
        let rekeys = switches
            .iter()
            .zip(&windows)
            .enumerate()
            .map(|(i, (s, w))| {
                let full = self.full();
                let lowest = (w.start.max(full.start)..w.end.min(full.end))
                    .map(|b| self.delivered[b])
                    .min();
                RekeyMark {
                    at_s: s.at_s,
                    took_ms: s.took_ms,
                    gap_ms: gap_ms(w.clone()),
                    dip: lowest.filter(|_| median > 0.0).map(|l| l as f64 / median),
                    // From the bucket before (in flight when it came), up to the bucket
                    // before the next rekey's, which is that one's.
                    datagrams: self.datagrams.as_ref().map(|d| {
                        let end = windows
                            .get(i + 1)
                            .map_or(w.end, |next| w.end.min(next.start.saturating_sub(1)));
                        d.around(w.start.saturating_sub(1)..end)
                    }),
                }
            })
            .collect();
        let baseline_gap_ms = (0..self.longest_gap_us.len())
            .filter(|b| !windows.iter().any(|w| w.contains(b)))
            .map(|b| f64::from(self.longest_gap_us[b]) / 1e3)
            .fold(0.0, f64::max);
        let baseline_dip = self
            .full()
            .filter(|b| !windows.iter().any(|w| w.contains(b)))
            .map(|b| self.delivered[b])
            .min()
            .filter(|_| median > 0.0)
            .map(|l| l as f64 / median);
        RekeyRun {
            transfer,
            bucket_ms: self.bucket_ms,
            delivered: self.delivered.clone(),
            median_bucket_bytes: median,
            baseline_gap_ms,
            baseline_dip,
            rekeys,
        }
    }
}

impl DatagramBuckets {
    fn around(&self, r: std::ops::Range<usize>) -> RekeyDatagrams {
        let sum = |v: &[u64]| -> u64 {
            v.get(r.start.min(v.len())..r.end.min(v.len()))
                .map_or(0, |s| s.iter().sum())
        };
        let (sent, received) = (sum(&self.sent), sum(&self.received));
        RekeyDatagrams {
            sent,
            lost: sent.saturating_sub(received),
            reordered: sum(&self.reordered),
            duplicates: sum(&self.duplicates),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steady(n: usize, bytes: u64) -> Timeline {
        Timeline {
            bucket_ms: BUCKET_MS,
            delivered: vec![bytes; n],
            longest_gap_us: vec![1_000; n],
            datagrams: None,
        }
    }

    #[test]
    fn orders_parse_by_name_and_say_how_to_spell_them() {
        for o in RekeyOrder::ALL {
            assert_eq!(o.name().parse::<RekeyOrder>().unwrap(), o);
            assert_eq!(serde_json::to_value(o).unwrap(), o.name());
        }
        assert_eq!("MBB".parse::<RekeyOrder>().unwrap(), RekeyOrder::MakeBeforeBreak);
        let e = "break-before-make".parse::<RekeyOrder>().unwrap_err().to_string();
        assert!(e.contains("make-before-break (mbb) or naive"), "{e}");
    }

    #[test]
    fn rekey_targets_parse_by_name_and_a_plan_without_one_rekeys_the_child_sa() {
        for t in RekeyTarget::ALL {
            assert_eq!(t.name().parse::<RekeyTarget>().unwrap(), t);
            assert_eq!(t.sa_name().parse::<RekeyTarget>().unwrap(), t);
            assert_eq!(serde_json::to_value(t).unwrap(), t.name());
        }
        let e = "esp".parse::<RekeyTarget>().unwrap_err().to_string();
        assert!(e.contains("use child or ike"), "{e}");
        let old: RekeySchedule = serde_json::from_str(r#"{"every_s":1.0,"order":"naive"}"#).unwrap();
        assert_eq!(old.sa, RekeyTarget::Child);
    }

    #[test]
    fn a_schedule_rekeys_at_each_period_before_the_end() {
        let s = |every_s| RekeySchedule {
            every_s,
            order: RekeyOrder::Naive,
            sa: RekeyTarget::Child,
        };
        assert_eq!(s(1.0).count_in(3.5), 3);
        assert_eq!(s(1.0).count_in(3.0), 2);
        assert_eq!(s(5.0).count_in(3.0), 0);
    }

    /// 3 s of 1,000 bytes per bucket; a rekey at 1.0 s stalls the flow for 40 ms (four empty
    /// buckets, the gap ending at 1.05 s is 45 ms); one at 2.0 s costs nothing.
    #[test]
    fn each_rekey_gets_its_window_gap_and_dip_against_the_median() {
        let mut t = steady(300, 1_000);
        for b in 101..105 {
            t.delivered[b] = 0;
        }
        t.delivered[105] = 4_000;
        t.longest_gap_us[105] = 45_000;
        // A stall far from both rekeys: the baseline.
        t.longest_gap_us[50] = 12_000;
        let run = t.report(
            1,
            &[
                Switch {
                    at_s: 1.0,
                    took_ms: Some(3.0),
                },
                Switch {
                    at_s: 2.0,
                    took_ms: Some(2.0),
                },
            ],
        );
        assert_eq!(run.median_bucket_bytes, 1_000.0);
        assert_eq!(run.rekeys[0].gap_ms, 45.0);
        assert_eq!(run.rekeys[0].dip, Some(0.0));
        assert_eq!(run.rekeys[1].gap_ms, 1.0);
        assert_eq!(run.rekeys[1].dip, Some(1.0));
        assert_eq!(run.baseline_gap_ms, 12.0);
        assert_eq!(run.baseline_dip, Some(1.0));
        assert!(run.rekeys[0].datagrams.is_none());
        let report = RekeyReport {
            schedule: RekeySchedule {
                every_s: 1.0,
                order: RekeyOrder::MakeBeforeBreak,
                sa: RekeyTarget::Child,
            },
            label: "make-before-break".into(),
            how: String::new(),
            runs: vec![run],
        };
        let worst = report.worst().unwrap();
        assert_eq!(
            (worst.rekeys, worst.gap_ms, worst.took_ms, worst.dip),
            (2, 45.0, Some(3.0), Some(0.0))
        );
        assert_eq!(worst.lost, None);
    }

    /// The window of a rekey ends at the next one: a gap is blamed on the rekey before it.
    #[test]
    fn windows_end_at_the_next_rekey() {
        let mut t = steady(100, 10);
        t.longest_gap_us[35] = 30_000;
        let run = t.report(
            1,
            &[
                Switch {
                    at_s: 0.2,
                    took_ms: Some(1.0),
                },
                Switch {
                    at_s: 0.3,
                    took_ms: Some(1.0),
                },
            ],
        );
        assert_eq!(run.rekeys[0].gap_ms, 1.0);
        assert_eq!(run.rekeys[1].gap_ms, 30.0);
    }

    /// Datagrams are counted by when they were sent, from the bucket before the rekey.
    #[test]
    fn datagrams_around_a_rekey_are_those_sent_in_its_window() {
        let mut t = steady(200, 1_000);
        let n = 200;
        let mut d = DatagramBuckets {
            sent: vec![10; n],
            received: vec![10; n],
            reordered: vec![0; n],
            duplicates: vec![0; n],
        };
        d.received[99] = 7; // the bucket before the rekey: in flight when it came
        d.received[100] = 0;
        d.reordered[101] = 2;
        d.received[5] = 0; // far away: not the rekey's
        t.datagrams = Some(d);
        let run = t.report(
            1,
            &[Switch {
                at_s: 1.0,
                took_ms: Some(1.0),
            }],
        );
        let got = run.rekeys[0].datagrams.unwrap();
        assert_eq!(got.sent, 10 * 101, "{got:?}");
        assert_eq!((got.lost, got.reordered, got.duplicates), (13, 2, 0));
    }

    #[test]
    fn a_report_without_rekeys_has_no_worst_and_a_short_run_no_dip() {
        let report = RekeyReport {
            schedule: RekeySchedule {
                every_s: 1.0,
                order: RekeyOrder::Naive,
                sa: RekeyTarget::Child,
            },
            label: "make-before-break".into(),
            how: String::new(),
            runs: vec![steady(2, 5).report(1, &[])],
        };
        assert!(report.worst().is_none());
        let short = steady(2, 5).report(
            1,
            &[Switch {
                at_s: 0.0,
                took_ms: Some(1.0),
            }],
        );
        assert_eq!(short.rekeys[0].dip, None);
    }
}
