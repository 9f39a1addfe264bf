//! Each tunnel row against its own ceiling: the same suite's crypto speed at the row's
//! packet size, timed in the same run and environment, and the row's MB/s as a share of it
//! and of the plain line rate ("reaches 67 % of what its crypto allows and 20 % of the
//! link"). Pure data: the timing is the lab's (`lab::ceiling`).
//!
//! A ceiling that could not be timed is an explicit `status: none` with its reason, and a
//! share that cannot be computed is `null`: never 0, inf or NaN.

use serde::{Deserialize, Serialize};

/// The crypto ceiling of one tunnel row: at which packet size, and what it came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// Payload bytes per packet the tunnel encrypted, as timed.
    pub packet_bytes: u32,
    /// Where that size comes from (the backend's own counters, or its inner MTU).
    pub packet_source: String,
    #[serde(flatten)]
    pub outcome: CeilingOutcome,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CeilingOutcome {
    Measured(CryptoSpeed),
    /// No ceiling for this row, and why (shown as "—").
    None {
        reason: String,
    },
}

/// Which end's work limits the tunnel: a tunnel encrypts at one end and decrypts (and
/// verifies) at the other, on different cores, so the slower of the two bounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Limiting {
    Encrypt,
    Decrypt,
}

impl Limiting {
    pub fn name(self) -> &'static str {
        match self {
            Limiting::Encrypt => "encrypt",
            Limiting::Decrypt => "decrypt",
        }
    }
}

/// The suite's speed at the row's packet size, both directions, with the implementation
/// the tunnel used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CryptoSpeed {
    /// What was timed, e.g. `aws-lc-rs (hardware AES)`, `kernel cbc-aes-aesni via AF_ALG`.
    pub implementation: String,
    /// The benchmark suite, e.g. `aes-256-cbc-hmac-sha256`.
    pub suite: String,
    /// MB/s (10^6 bytes of payload per second) sealing packets.
    pub encrypt_mb_per_s: f64,
    /// MB/s verifying and opening them.
    pub decrypt_mb_per_s: f64,
    /// The ceiling: the slower of the two.
    pub mb_per_s: f64,
    pub limiting: Limiting,
    /// Threads timed at once, one per tunnel thread (their MB/s summed).
    pub threads: u16,
    /// Seconds timed per direction.
    pub seconds: f64,
    /// The share of a core the timing threads had (mean of the two directions): the
    /// speeds above are per CPU-second where this is given, wall-clock where it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl CryptoSpeed {
    /// Both directions' speeds; the ceiling is the slower (None if either is not a
    /// positive, finite rate).
    pub fn new(implementation: String, suite: String, encrypt: f64, decrypt: f64) -> Option<CryptoSpeed> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(encrypt) && ok(decrypt)) {
            return None;
        }
        let limiting = if decrypt < encrypt {
            Limiting::Decrypt
        } else {
            Limiting::Encrypt
        };
        Some(CryptoSpeed {
            implementation,
            suite,
            encrypt_mb_per_s: encrypt,
            decrypt_mb_per_s: decrypt,
            mb_per_s: encrypt.min(decrypt),
            limiting,
            threads: 1,
            seconds: 0.0,
            cpu_share: None,
            notes: Vec::new(),
        })
    }
}

impl Ceiling {
    pub fn none(packet_bytes: u32, packet_source: impl Into<String>, reason: impl Into<String>) -> Ceiling {
        Ceiling {
            packet_bytes,
            packet_source: packet_source.into(),
            outcome: CeilingOutcome::None {
                reason: reason.into(),
            },
        }
    }

    /// The ceiling's MB/s, if it was timed.
    pub fn mb_per_s(&self) -> Option<f64> {
        match &self.outcome {
            CeilingOutcome::Measured(s) => Some(s.mb_per_s),
            CeilingOutcome::None { .. } => None,
        }
    }

    /// Why there is no ceiling, if there is none.
    pub fn reason(&self) -> Option<&str> {
        match &self.outcome {
            CeilingOutcome::None { reason } => Some(reason),
            CeilingOutcome::Measured(_) => None,
        }
    }

    /// One line for a human: what was timed and what it came to, or why there is none.
    pub fn describe(&self) -> String {
        match &self.outcome {
            CeilingOutcome::Measured(s) => format!(
                "{} {} at {}-byte packets ({}): encrypt {:.1} MB/s, decrypt {:.1} MB/s{}; ceiling {:.1} MB/s ({}, the slower)",
                s.implementation,
                s.suite,
                self.packet_bytes,
                self.packet_source,
                s.encrypt_mb_per_s,
                s.decrypt_mb_per_s,
                if s.threads > 1 {
                    format!(" on {} threads", s.threads)
                } else {
                    String::new()
                },
                s.mb_per_s,
                s.limiting.name()
            ),
            CeilingOutcome::None { reason } => format!("— no ceiling: {reason}"),
        }
    }
}

/// `part` as a percentage of `whole`: None unless both are finite, `part` is not negative
/// and `whole` is positive, so a share is never inf or NaN.
pub fn percent(part: f64, whole: f64) -> Option<f64> {
    (part.is_finite() && whole.is_finite() && part >= 0.0 && whole > 0.0).then(|| part / whole * 100.0)
}

/// `part` as a share of an upper bound, or None where `part` exceeds it: then the figure is
/// no bound (AF_ALG's system calls cost more than the kernel's own data path, in UML most of
/// all), and a share above 100 % would say something false.
pub fn share_of_bound(part: f64, bound: f64) -> Option<f64> {
    percent(part, bound).filter(|p| *p <= 100.0)
}

/// "67 %" or "—", as tables print a share.
pub fn fmt_percent(p: Option<f64>) -> String {
    match p {
        Some(p) if p.is_finite() => format!("{p:.0} %"),
        _ => "—".to_string(),
    }
}

/// The plain line rate a `run` measured on its own topology, after the tunnel came down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum LineRate {
    Measured {
        /// Median MB/s of plain TCP between the same two namespaces.
        mb_per_s: f64,
        transfers: u32,
    },
    None {
        reason: String,
    },
}

impl LineRate {
    pub fn mb_per_s(&self) -> Option<f64> {
        match self {
            LineRate::Measured { mb_per_s, .. } => Some(*mb_per_s),
            LineRate::None { .. } => None,
        }
    }
}

/// A `run`'s row against its ceiling and its line rate. The shares are `null` where their
/// denominator is missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCeiling {
    pub crypto: Ceiling,
    pub line_rate: LineRate,
    /// The run's median MB/s over the crypto ceiling, in percent.
    pub percent_of_ceiling: Option<f64>,
    /// The run's median MB/s over the line rate, in percent.
    pub percent_of_line_rate: Option<f64>,
    /// The run's median MB/s the shares are of (reports before it existed: 0).
    #[serde(default)]
    pub mb_per_s: f64,
}

impl RunCeiling {
    /// The shares of `mb_per_s` (the run's median) computed from the two denominators.
    pub fn new(mb_per_s: f64, crypto: Ceiling, line_rate: LineRate) -> RunCeiling {
        RunCeiling {
            percent_of_ceiling: crypto.mb_per_s().and_then(|c| share_of_bound(mb_per_s, c)),
            percent_of_line_rate: line_rate.mb_per_s().and_then(|l| share_of_bound(mb_per_s, l)),
            crypto,
            line_rate,
            mb_per_s,
        }
    }

    /// "reaches 67 % of what its crypto allows and 20 % of the link", with "—" and the
    /// reason where a denominator is missing.
    pub fn sentence(&self) -> String {
        let above = |bound: f64| {
            format!(
                "the run's {:.1} MB/s is above the {bound:.1} MB/s timed, so that is no upper bound here",
                self.mb_per_s
            )
        };
        let crypto = match (
            self.percent_of_ceiling,
            self.crypto.reason(),
            self.crypto.mb_per_s(),
        ) {
            (Some(p), _, _) => format!("{} of what its crypto allows", fmt_percent(Some(p))),
            // Why is said once, on the ceiling's own line above this one.
            (None, Some(_), _) => "— of its crypto (no ceiling)".to_string(),
            (None, None, Some(c)) if c > 0.0 && self.mb_per_s > c => {
                format!("— of its crypto ({})", above(c))
            }
            (None, None, _) => "— of its crypto (no share)".to_string(),
        };
        let link = match (self.percent_of_line_rate, &self.line_rate) {
            (Some(p), _) => format!("{} of the link", fmt_percent(Some(p))),
            (None, LineRate::None { reason }) => format!("— of the link ({reason})"),
            (None, LineRate::Measured { mb_per_s, .. }) if *mb_per_s > 0.0 && self.mb_per_s > *mb_per_s => {
                format!("— of the link ({})", above(*mb_per_s))
            }
            (None, LineRate::Measured { .. }) => "— of the link (no share)".to_string(),
        };
        format!("this tunnel reaches {crypto} and {link}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(enc: f64, dec: f64) -> Ceiling {
        Ceiling {
            packet_bytes: 1407,
            packet_source: "test".into(),
            outcome: CeilingOutcome::Measured(
                CryptoSpeed::new("aws-lc-rs".into(), "aes-256-gcm".into(), enc, dec).unwrap(),
            ),
        }
    }

    #[test]
    fn the_ceiling_is_the_slower_direction() {
        let c = CryptoSpeed::new("x".into(), "s".into(), 600.0, 900.0).unwrap();
        assert_eq!((c.mb_per_s, c.limiting), (600.0, Limiting::Encrypt));
        let c = CryptoSpeed::new("x".into(), "s".into(), 900.0, 450.0).unwrap();
        assert_eq!((c.mb_per_s, c.limiting), (450.0, Limiting::Decrypt));
        assert!(CryptoSpeed::new("x".into(), "s".into(), 0.0, 450.0).is_none());
        assert!(CryptoSpeed::new("x".into(), "s".into(), f64::INFINITY, 450.0).is_none());
        assert!(CryptoSpeed::new("x".into(), "s".into(), 500.0, f64::NAN).is_none());
    }

    #[test]
    fn a_ceiling_the_run_exceeds_gives_no_share_and_says_why() {
        let r = RunCeiling::new(39.4, measured(18.8, 16.1), LineRate::None { reason: "x".into() });
        assert_eq!(r.percent_of_ceiling, None);
        let s = r.sentence();
        assert!(
            s.contains("the run's 39.4 MB/s is above the 16.1 MB/s timed"),
            "{s}"
        );
        let fast = RunCeiling::new(
            700.0,
            measured(2000.0, 2000.0),
            LineRate::Measured {
                mb_per_s: 650.0,
                transfers: 1,
            },
        );
        assert_eq!(
            (fast.percent_of_ceiling, fast.percent_of_line_rate),
            (Some(35.0), None)
        );
        assert!(
            fast.sentence()
                .contains("— of the link (the run's 700.0 MB/s is above"),
            "{}",
            fast.sentence()
        );
    }

    #[test]
    fn shares_are_computed_and_never_inf_or_nan() {
        let r = RunCeiling::new(
            134.0,
            measured(200.0, 300.0),
            LineRate::Measured {
                mb_per_s: 670.0,
                transfers: 1,
            },
        );
        assert_eq!(r.percent_of_ceiling, Some(67.0));
        assert_eq!(r.percent_of_line_rate, Some(20.0));
        assert_eq!(
            r.sentence(),
            "this tunnel reaches 67 % of what its crypto allows and 20 % of the link"
        );
        let none = RunCeiling::new(
            134.0,
            Ceiling::none(1420, "inner MTU", "no AF_ALG"),
            LineRate::Measured {
                mb_per_s: 0.0,
                transfers: 1,
            },
        );
        assert_eq!((none.percent_of_ceiling, none.percent_of_line_rate), (None, None));
        assert_eq!(
            none.sentence(),
            "this tunnel reaches — of its crypto (no ceiling) and — of the link (no share)"
        );
        // The reason is said once: on the ceiling's line, not again in the sentence.
        let both = format!("{}\n{}", none.crypto.describe(), none.sentence());
        assert_eq!(both.matches("no AF_ALG").count(), 1, "{both}");
        assert_eq!(fmt_percent(None), "—");
        assert_eq!(fmt_percent(Some(f64::NAN)), "—");
        assert_eq!(percent(f64::NAN, 1.0), None);
        assert_eq!(percent(1.0, f64::INFINITY), None);
        assert_eq!(percent(-1.0, 2.0), None);
        assert_eq!(percent(1.0, 4.0), Some(25.0));
    }

    #[test]
    fn json_round_trips_and_a_missing_ceiling_says_why() {
        let r = RunCeiling::new(
            100.0,
            Ceiling::none(1420, "wireguard inner MTU", "wireguard-go's crypto is Go's"),
            LineRate::None {
                reason: "not measured".into(),
            },
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["crypto"]["status"], "none");
        assert_eq!(json["crypto"]["reason"], "wireguard-go's crypto is Go's");
        assert_eq!(json["crypto"]["packet_bytes"], 1420);
        assert!(json["percent_of_ceiling"].is_null(), "{json}");
        assert_eq!(serde_json::from_value::<RunCeiling>(json).unwrap(), r);
        let m = RunCeiling::new(
            150.0,
            measured(300.0, 250.0),
            LineRate::Measured {
                mb_per_s: 1000.0,
                transfers: 3,
            },
        );
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["crypto"]["status"], "measured");
        assert_eq!(json["crypto"]["limiting"], "decrypt");
        assert_eq!(json["crypto"]["mb_per_s"], 250.0);
        assert_eq!(json["percent_of_ceiling"], 60.0);
        assert_eq!(json["line_rate"]["status"], "measured");
        assert_eq!(serde_json::from_value::<RunCeiling>(json).unwrap(), m);
    }
}
