//! WAN conditions (`--netem "delay 20ms loss 0.1% rate 1gbit"`): what the netem qdisc on the
//! lab's link adds, in tc's words, parsed and then checked whole, so a bad spec is refused
//! (exit 2) before anything is created.
//!
//! Leaves out the qdisc itself (crate `netns`, over rtnetlink) and its kernel units.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// tc's default queue limit of a netem qdisc, in packets.
pub const DEFAULT_LIMIT: u32 = 1000;
/// Longest delay or jitter accepted: far beyond any WAN, well inside the kernel's 32-bit
/// tick field (274 s).
pub const MAX_DELAY_NS: u64 = 60_000_000_000;

/// The netem parameters of one link condition. Zero means "not asked for".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetemSpec {
    /// Added one-way delay per direction, nanoseconds.
    pub delay_ns: u64,
    /// Random variation of the delay (uniform ±), nanoseconds.
    #[serde(default)]
    pub jitter_ns: u64,
    /// Packets dropped at random, percent.
    #[serde(default)]
    pub loss_percent: f64,
    /// Packets sent twice, percent.
    #[serde(default)]
    pub duplicate_percent: f64,
    /// Packets sent at once (ahead of the delayed ones), percent; needs a delay.
    #[serde(default)]
    pub reorder_percent: f64,
    /// Rate limit in bytes per second (tc's `rate 1gbit` is 125 000 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_s: Option<u64>,
    /// Queue limit in packets.
    #[serde(default = "default_limit")]
    pub limit: u32,
}

fn default_limit() -> u32 {
    DEFAULT_LIMIT
}

impl Default for NetemSpec {
    fn default() -> Self {
        NetemSpec {
            delay_ns: 0,
            jitter_ns: 0,
            loss_percent: 0.0,
            duplicate_percent: 0.0,
            reorder_percent: 0.0,
            rate_bytes_per_s: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

/// Why a netem spec was refused; each says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetemError {
    #[error("--netem is empty: give e.g. \"delay 20ms loss 0.1% rate 1gbit\"")]
    Empty,
    #[error("--netem: unknown word {0:?}: use delay TIME [JITTER], loss PERCENT, duplicate PERCENT, reorder PERCENT, rate RATE, limit PACKETS")]
    Unknown(String),
    #[error("--netem: {0} is given twice")]
    Twice(&'static str),
    #[error("--netem: {0} needs a value, e.g. {1}")]
    Missing(&'static str, &'static str),
    #[error("--netem: {what} {value:?} is not a time: give a number with a unit, e.g. 20ms, 500us, 1.5s")]
    Time { what: &'static str, value: String },
    #[error("--netem: {what} {value:?} is not a percentage: give e.g. 0.1% (more than 0, at most 100)")]
    Percent { what: &'static str, value: String },
    #[error("--netem: rate {0:?} is not a rate: give e.g. 1gbit, 100mbit, 500kbit or 10mbps (bytes)")]
    Rate(String),
    #[error("--netem: limit {0:?} is not a packet count: give 1 to 1000000")]
    Limit(String),
    #[error("--netem: {what} {value} is longer than the 60 s the lab accepts")]
    TooLong { what: &'static str, value: String },
    #[error("--netem: reorder needs a delay (the reordered packets are the ones sent without it): add e.g. delay 10ms")]
    ReorderWithoutDelay,
    #[error("--netem: correlations (a second percentage) are not supported: give one percentage per word")]
    Correlation,
    #[error("--netem \"{0}\" changes nothing: give a delay, loss, duplicate, reorder or rate")]
    Nothing(String),
}

impl FromStr for NetemSpec {
    type Err = NetemError;

    /// tc's netem words: `delay TIME [JITTER]`, `loss [random] PERCENT`, `duplicate
    /// PERCENT`, `reorder PERCENT`, `rate RATE`, `limit PACKETS`, in any order, each once.
    fn from_str(s: &str) -> Result<NetemSpec, NetemError> {
        let words: Vec<&str> = s.split_whitespace().collect();
        if words.is_empty() {
            return Err(NetemError::Empty);
        }
        let mut spec = NetemSpec::default();
        let mut seen: Vec<&'static str> = Vec::new();
        let mut once = |what: &'static str| {
            if seen.contains(&what) {
                return Err(NetemError::Twice(what));
            }
            seen.push(what);
            Ok(())
        };
        let next = |i: &mut usize, what, example| -> Result<&str, NetemError> {
            *i += 1;
            words.get(*i).copied().ok_or(NetemError::Missing(what, example))
        };
        let mut i = 0;
        while i < words.len() {
            match words[i].to_ascii_lowercase().as_str() {
                "delay" | "latency" => {
                    once("delay")?;
                    spec.delay_ns = parse_time("delay", next(&mut i, "delay", "delay 20ms")?)?;
                    // An optional jitter: the next word when it is a time.
                    if let Some(j) = words.get(i + 1).filter(|w| starts_numeric(w)) {
                        spec.jitter_ns = parse_time("jitter", j)?;
                        i += 1;
                    }
                }
                "loss" | "drop" => {
                    once("loss")?;
                    let mut v = next(&mut i, "loss", "loss 0.1%")?;
                    if v.eq_ignore_ascii_case("random") {
                        v = next(&mut i, "loss", "loss 0.1%")?;
                    }
                    spec.loss_percent = parse_percent("loss", v)?;
                }
                "duplicate" => {
                    once("duplicate")?;
                    let v = next(&mut i, "duplicate", "duplicate 1%")?;
                    spec.duplicate_percent = parse_percent("duplicate", v)?;
                }
                "reorder" => {
                    once("reorder")?;
                    let v = next(&mut i, "reorder", "reorder 25%")?;
                    spec.reorder_percent = parse_percent("reorder", v)?;
                }
                "rate" => {
                    once("rate")?;
                    spec.rate_bytes_per_s = Some(parse_rate(next(&mut i, "rate", "rate 1gbit")?)?);
                }
                "limit" => {
                    once("limit")?;
                    let v = next(&mut i, "limit", "limit 1000")?;
                    spec.limit = v
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=1_000_000).contains(n))
                        .ok_or_else(|| NetemError::Limit(v.to_string()))?;
                }
                // A number where a word belongs: tc's correlation after a percentage.
                w if starts_numeric(w) && i > 0 => return Err(NetemError::Correlation),
                _ => return Err(NetemError::Unknown(words[i].to_string())),
            }
            i += 1;
        }
        spec.validate(s)?;
        Ok(spec)
    }
}

impl NetemSpec {
    /// The checks that need the whole spec.
    fn validate(&self, text: &str) -> Result<(), NetemError> {
        if self.reorder_percent > 0.0 && self.delay_ns == 0 {
            return Err(NetemError::ReorderWithoutDelay);
        }
        let changes = self.delay_ns > 0
            || self.loss_percent > 0.0
            || self.duplicate_percent > 0.0
            || self.reorder_percent > 0.0
            || self.rate_bytes_per_s.is_some();
        if !changes {
            return Err(NetemError::Nothing(text.trim().to_string()));
        }
        Ok(())
    }

    /// The round-trip time the delay adds: the lab shapes both directions of the link.
    pub fn added_rtt_ns(&self) -> u64 {
        2 * self.delay_ns
    }
}

/// tc's words for the spec, in a fixed order: what the report and the matrix labels show.
impl fmt::Display for NetemSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.delay_ns > 0 {
            let mut d = format!("delay {}", format_time(self.delay_ns));
            if self.jitter_ns > 0 {
                d.push_str(&format!(" {}", format_time(self.jitter_ns)));
            }
            parts.push(d);
        }
        for (word, p) in [
            ("loss", self.loss_percent),
            ("duplicate", self.duplicate_percent),
            ("reorder", self.reorder_percent),
        ] {
            if p > 0.0 {
                parts.push(format!("{word} {p}%"));
            }
        }
        if let Some(rate) = self.rate_bytes_per_s {
            parts.push(format!("rate {}", format_rate(rate)));
        }
        if self.limit != DEFAULT_LIMIT {
            parts.push(format!("limit {}", self.limit));
        }
        f.write_str(&parts.join(" "))
    }
}

fn starts_numeric(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// Splits `20ms` into 20.0 and "ms".
fn number_and_unit(s: &str) -> Option<(f64, String)> {
    let at = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(at);
    let n: f64 = n.parse().ok()?;
    (n.is_finite() && n >= 0.0).then(|| (n, unit.to_ascii_lowercase()))
}

/// `20ms`, `500us`, `1.5s`, `100ns` → nanoseconds. A bare number is refused: tc reads it
/// as microseconds, which surprises.
fn parse_time(what: &'static str, s: &str) -> Result<u64, NetemError> {
    let bad = || NetemError::Time {
        what,
        value: s.to_string(),
    };
    let (n, unit) = number_and_unit(s).ok_or_else(bad)?;
    let scale = match unit.as_str() {
        "s" | "sec" | "secs" => 1e9,
        "ms" | "msec" | "msecs" => 1e6,
        "us" | "usec" | "usecs" => 1e3,
        "ns" | "nsec" | "nsecs" => 1.0,
        _ => return Err(bad()),
    };
    let ns = (n * scale).round();
    if ns > MAX_DELAY_NS as f64 {
        return Err(NetemError::TooLong {
            what,
            value: s.to_string(),
        });
    }
    Ok(ns as u64)
}

/// `0.1%` → 0.1; the `%` is required (a bare 0.1 could mean 0.1 % or 10 %).
fn parse_percent(what: &'static str, s: &str) -> Result<f64, NetemError> {
    let bad = || NetemError::Percent {
        what,
        value: s.to_string(),
    };
    let n: f64 = s.strip_suffix('%').ok_or_else(bad)?.parse().map_err(|_| bad())?;
    if !(n > 0.0 && n <= 100.0) {
        return Err(bad());
    }
    Ok(n)
}

/// tc's rate units: `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of 1000, bits per
/// second), `kibit`, `mibit`, `gibit` (powers of 1024), `bps`, `kbps`, `mbps`, `gbps`
/// (bytes per second). Returns bytes per second.
fn parse_rate(s: &str) -> Result<u64, NetemError> {
    let bad = || NetemError::Rate(s.to_string());
    let (n, unit) = number_and_unit(s).ok_or_else(bad)?;
    let bits_per_s = match unit.as_str() {
        "bit" => n,
        "kbit" => n * 1e3,
        "mbit" => n * 1e6,
        "gbit" => n * 1e9,
        "tbit" => n * 1e12,
        "kibit" => n * 1024.0,
        "mibit" => n * 1024.0 * 1024.0,
        "gibit" => n * 1024.0 * 1024.0 * 1024.0,
        "bps" => n * 8.0,
        "kbps" => n * 8e3,
        "mbps" => n * 8e6,
        "gbps" => n * 8e9,
        _ => return Err(bad()),
    };
    let bytes = (bits_per_s / 8.0).round();
    if !(1.0..=1e15).contains(&bytes) {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Nanoseconds in the largest unit that shows them exactly (`20ms`).
pub fn format_time(ns: u64) -> String {
    match ns {
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

/// Bytes per second in tc's bit units (`1gbit`), in the largest unit that divides it.
pub fn format_rate(bytes_per_s: u64) -> String {
    let bits = u128::from(bytes_per_s) * 8;
    for (unit, scale) in [
        ("tbit", 1_000_000_000_000u128),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bits >= scale && bits % scale == 0 {
            return format!("{}{unit}", bits / scale);
        }
    }
    format!("{bits}bit")
}

/// `matrix --netem "SPEC;SPEC;…"`: the link conditions, a row dimension each, in the
/// order given, once each; `none` is the bare link.
pub fn parse_conditions(s: &str) -> Result<Vec<Option<NetemSpec>>, NetemError> {
    let mut out: Vec<Option<NetemSpec>> = Vec::new();
    for part in s.split(';') {
        let part = part.trim();
        let cond = if part.eq_ignore_ascii_case("none") {
            None
        } else {
            Some(part.parse()?)
        };
        if !out.contains(&cond) {
            out.push(cond);
        }
    }
    Ok(out)
}

/// What the report records of a run's link conditions: the spec asked for, what the kernel
/// reports installed on each link, and the round trip measured over the shaped link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkConditions {
    /// The spec as asked, in tc's words.
    pub netem: String,
    pub spec: NetemSpec,
    /// The qdisc read back over netlink, per link it was installed on.
    pub installed: Vec<InstalledNetem>,
    /// Round trips over the shaped link (TCP handshakes), milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<crate::stats::Summary>,
}

impl LinkConditions {
    /// One line for the run's notes.
    pub fn line(&self) -> String {
        let links: Vec<String> = self
            .installed
            .iter()
            .map(|i| {
                let same = if i.matches_request {
                    "as asked"
                } else {
                    "DIFFERS from the request"
                };
                format!("{} in {}: {} ({same})", i.link, i.namespace, i.netem)
            })
            .collect();
        let rtt = match &self.rtt_ms {
            Some(r) => format!(
                "; link RTT median {:.2} ms (min {:.2}, max {:.2}, expected at least {:.2})",
                r.median,
                r.min,
                r.max,
                self.spec.added_rtt_ns() as f64 / 1e6
            ),
            None => String::new(),
        };
        format!("netem {} on {}{rtt}", self.netem, links.join(", "))
    }
}

/// A netem qdisc as the kernel reported it back (RTM_GETQDISC).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstalledNetem {
    pub namespace: String,
    pub link: String,
    /// The kernel's parameters, in tc's words.
    pub netem: String,
    /// Every parameter equals the request's, compared in the kernel's own units.
    pub matches_request: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_parses_to_tc_units() {
        let s: NetemSpec = "delay 20ms loss 0.1% rate 1gbit".parse().unwrap();
        assert_eq!(s.delay_ns, 20_000_000);
        assert_eq!(s.loss_percent, 0.1);
        assert_eq!(s.rate_bytes_per_s, Some(125_000_000));
        assert_eq!(s.limit, DEFAULT_LIMIT);
        assert_eq!(s.to_string(), "delay 20ms loss 0.1% rate 1gbit");
    }

    #[test]
    fn every_word_and_its_round_trip_through_display() {
        let s: NetemSpec = "rate 40gbit reorder 25% delay 20ms 5ms duplicate 2% loss random 1% limit 5000"
            .parse()
            .unwrap();
        assert_eq!(s.jitter_ns, 5_000_000);
        assert_eq!(s.rate_bytes_per_s, Some(5_000_000_000));
        assert_eq!(
            s.to_string(),
            "delay 20ms 5ms loss 1% duplicate 2% reorder 25% rate 40gbit limit 5000"
        );
        assert_eq!(s.to_string().parse::<NetemSpec>().unwrap(), s);
        assert_eq!(
            "rate 10mbps".parse::<NetemSpec>().unwrap().rate_bytes_per_s,
            Some(10_000_000)
        );
        assert_eq!("delay 1.5s".parse::<NetemSpec>().unwrap().delay_ns, 1_500_000_000);
        assert_eq!(
            "delay 250us".parse::<NetemSpec>().unwrap().to_string(),
            "delay 250us"
        );
    }

    #[test]
    fn bad_specs_are_refused_with_what_to_write() {
        for (bad, hint) in [
            ("", "empty"),
            ("delay", "needs a value"),
            ("delay 20", "with a unit"),
            ("delay 20 ms", "with a unit"),
            ("delay 20ms delay 5ms", "twice"),
            ("loss 0.1", "0.1%"),
            ("loss 101%", "at most 100"),
            ("loss 0%", "more than 0"),
            ("loss 1% 25%", "correlations"),
            ("rate 1gigabit", "1gbit"),
            ("rate 0bit", "1gbit"),
            ("reorder 25%", "needs a delay"),
            ("delay 61s", "60 s"),
            ("jitter 5ms", "unknown word"),
            ("limit 0 delay 1ms", "packet count"),
            ("limit 10", "changes nothing"),
            ("corrupt 1%", "unknown word"),
        ] {
            let e = bad.parse::<NetemSpec>().unwrap_err().to_string();
            assert!(e.contains(hint), "{bad:?}: {e}");
        }
    }

    #[test]
    fn conditions_list_the_bare_link_as_none_once_each() {
        let c = parse_conditions("none; delay 20ms ;delay 20ms;loss 1%").unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0], None);
        assert_eq!(c[1].as_ref().unwrap().to_string(), "delay 20ms");
        assert!(parse_conditions("delay 20ms;;").is_err());
    }

    #[test]
    fn rates_print_in_the_largest_exact_unit() {
        assert_eq!(format_rate(125_000_000), "1gbit");
        assert_eq!(format_rate(12_500), "100kbit");
        assert_eq!(format_rate(1), "8bit");
    }
}
