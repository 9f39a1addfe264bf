//! What a matrix cell of a UDP row carries (`matrix --packet-sizes`): packets per second
//! delivered, loss, and with `--find-ndr` the rates found, summarised from the run's
//! [`UdpReport`], which the cell keeps whole.

use serde::{Deserialize, Serialize};

use crate::packets::{NdrReport, PacketSize, UdpReport, UdpTrial};
use crate::stats::Summary;

/// A UDP cell's packet figures. The summaries are over the cell's trials (one per
/// `--repeat`); with `--find-ndr` over the search's unlimited trial, the most the path
/// delivered while the sender went as fast as it could.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketRates {
    pub packet_size: PacketSize,
    /// Distinct verified datagrams delivered per second of sending.
    pub received_pps: Summary,
    /// Datagrams the sender's socket took per second.
    pub sent_pps: Summary,
    /// Lost as a share of sent, in percent.
    pub loss_pct: Summary,
    /// Totals over those trials.
    pub sent: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub corrupted: u64,
    /// `--find-ndr`: each tolerance's rate, NDR first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rates_found: Vec<RateFound>,
    /// The run's UDP report whole: every trial, the search and the bare link's search.
    pub udp: UdpReport,
}

/// One rate `--find-ndr` found, in a line of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateFound {
    /// "NDR" or "PDR".
    pub name: String,
    pub tolerance_pct: f64,
    /// Packets/s the path carried within the tolerance; 0 where no rate passed.
    pub pps: f64,
    pub mbit_per_s: f64,
    /// True where even the sender's highest rate passed: the generator, not the path, set it.
    pub generator_bound: bool,
}

impl PacketRates {
    /// The figures of `udp`; None where it holds no trial to summarise.
    pub fn of(udp: &UdpReport) -> Option<PacketRates> {
        let trials: Vec<&UdpTrial> = match &udp.ndr {
            _ if !udp.trials.is_empty() => udp.trials.iter().collect(),
            Some(ndr) => vec![&ndr.max_rate],
            None => return None,
        };
        let summary = |f: &dyn Fn(&UdpTrial) -> f64| {
            let values: Vec<f64> = trials.iter().map(|t| f(t)).filter(|v| v.is_finite()).collect();
            Summary::of(&values)
        };
        let total = |f: &dyn Fn(&UdpTrial) -> u64| trials.iter().map(|t| f(t)).sum();
        Some(PacketRates {
            packet_size: udp.packet_size,
            received_pps: summary(&UdpTrial::received_pps)?,
            sent_pps: summary(&|t| t.sent_pps)?,
            loss_pct: summary(&UdpTrial::loss_pct)?,
            sent: total(&|t| t.sent),
            lost: total(&|t| t.lost),
            reordered: total(&|t| t.reordered),
            duplicates: total(&|t| t.duplicates),
            corrupted: total(&|t| t.corrupted),
            rates_found: udp.ndr.as_ref().map(rates_found).unwrap_or_default(),
            udp: udp.clone(),
        })
    }

    /// The rate found at `tolerance_pct` (0: the NDR), where the search ran.
    pub fn rate_at(&self, tolerance_pct: f64) -> Option<&RateFound> {
        self.rates_found.iter().find(|r| r.tolerance_pct == tolerance_pct)
    }
}

fn rates_found(ndr: &NdrReport) -> Vec<RateFound> {
    ndr.bounds
        .iter()
        .map(|b| RateFound {
            name: b.name.clone(),
            tolerance_pct: b.tolerance_pct,
            pps: b.pps,
            mbit_per_s: b.mbit_per_s,
            generator_bound: b.upper.is_none() && b.pps > 0.0,
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::packets::NdrBound;

    pub(crate) fn trial(offered: Option<f64>, sent: u64, lost: u64) -> UdpTrial {
        UdpTrial {
            offered_pps: offered,
            send_seconds: 2.0,
            sent,
            sent_pps: sent as f64 / 2.0,
            kept_rate: offered.map(|_| true),
            received: sent - lost,
            lost,
            reordered: 1,
            duplicates: 0,
            corrupted: 0,
            jitter_ms: 0.01,
            receive_seconds: 2.0,
            payload_bytes: (sent - lost) * 36,
            packet_bytes: (sent - lost) * 64,
            link_bytes: None,
            outside_drops: None,
        }
    }

    #[test]
    fn trials_are_summarised_with_their_loss_and_totals() {
        let udp = UdpReport {
            packet_size: PacketSize::Fixed(64),
            trials: vec![
                trial(None, 200_000, 0),
                trial(None, 300_000, 3_000),
                trial(None, 100_000, 0),
            ],
            ndr: None,
            baseline: None,
        };
        let p = PacketRates::of(&udp).unwrap();
        // Delivered per second of sending: 100k, 148.5k, 50k.
        assert_eq!(p.received_pps.n, 3);
        assert_eq!(p.received_pps.median, 100_000.0);
        assert_eq!(p.received_pps.max, 148_500.0);
        assert_eq!(p.loss_pct.max, 1.0);
        assert_eq!((p.sent, p.lost, p.reordered), (600_000, 3_000, 3));
        assert!(p.rates_found.is_empty());
        let json = serde_json::to_value(&p).unwrap();
        assert!(json.get("rates_found").is_none(), "{json}");
        assert_eq!(json["udp"]["packet_size"]["fixed"], 64);
        assert_eq!(serde_json::from_value::<PacketRates>(json).unwrap(), p);
    }

    #[test]
    fn a_search_gives_its_rates_and_its_unlimited_trial_as_the_delivered_rate() {
        let max_rate = trial(None, 400_000, 40_000);
        let bound = |name: &str, tolerance_pct, pps, upper: Option<UdpTrial>| NdrBound {
            name: name.into(),
            tolerance_pct,
            pps,
            mbit_per_s: pps * 64.0 * 8.0 / 1e6,
            lower: Some(trial(Some(pps), 2 * pps as u64, 0)),
            upper,
        };
        let udp = UdpReport {
            packet_size: PacketSize::Fixed(64),
            trials: vec![],
            ndr: Some(NdrReport {
                packet_size: PacketSize::Fixed(64),
                max_rate: max_rate.clone(),
                bounds: vec![
                    bound("NDR", 0.0, 150_000.0, Some(trial(Some(160_000.0), 320_000, 5))),
                    bound("PDR", 0.5, 200_000.0, None),
                ],
                trials: vec![max_rate],
            }),
            baseline: None,
        };
        let p = PacketRates::of(&udp).unwrap();
        assert_eq!(p.received_pps.median, 180_000.0);
        assert_eq!(p.loss_pct.median, 10.0);
        let ndr = p.rate_at(0.0).unwrap();
        assert_eq!(
            (ndr.name.as_str(), ndr.pps, ndr.generator_bound),
            ("NDR", 150_000.0, false)
        );
        assert!(p.rate_at(0.5).unwrap().generator_bound);
        assert_eq!(p.rate_at(1.0), None);
        let empty = UdpReport {
            trials: vec![],
            ndr: None,
            ..udp
        };
        assert_eq!(PacketRates::of(&empty), None);
    }
}
