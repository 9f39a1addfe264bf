//! Byte counts as users type them: `100MB` (10^6), `1GiB` (2^30), `4096`, `1.5GB`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    #[error("invalid size {0:?}: use a number with an optional unit, e.g. 100MB, 1GiB, 512KiB or 4096")]
    Invalid(String),
    #[error("size {0:?} must be above zero, e.g. 100MB")]
    Zero(String),
}

impl FromStr for ByteSize {
    type Err = ByteSizeError;
    fn from_str(s: &str) -> Result<Self, ByteSizeError> {
        let bad = || ByteSizeError::Invalid(s.to_string());
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "m" | "mb" => 1_000_000,
            "g" | "gb" => 1_000_000_000,
            "t" | "tb" => 1_000_000_000_000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        if num.is_empty() || num.matches('.').count() > 1 {
            return Err(bad());
        }
        let value: f64 = num.parse().map_err(|_| bad())?;
        let bytes = value * multiplier as f64;
        if bytes == 0.0 {
            return Err(ByteSizeError::Zero(s.to_string()));
        }
        if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
            return Err(bad());
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl fmt::Display for ByteSize {
    /// Decimal megabytes, the unit the lab reports throughput in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if b >= 1e9 {
            write!(f, "{:.2} GB", b / 1e9)
        } else if b >= 1e6 {
            write!(f, "{:.1} MB", b / 1e6)
        } else if b >= 1e3 {
            write!(f, "{:.1} kB", b / 1e3)
        } else {
            write!(f, "{} B", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse() {
        let cases = [
            ("4096", 4096),
            ("100MB", 100_000_000),
            ("100mb", 100_000_000),
            ("1GiB", 1 << 30),
            ("512KiB", 512 * 1024),
            ("1.5GB", 1_500_000_000),
            ("20 MB", 20_000_000),
            ("3M", 3_000_000),
        ];
        for (text, bytes) in cases {
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)), "{text}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        for bad in ["abc", "", "MB", "10XB", "-5MB", "0", "0.5", "1.2.3MB", "1e9"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn zero_bytes_says_it_must_be_above_zero() {
        for zero in ["0", "0MB", "0.0GiB"] {
            let e = zero.parse::<ByteSize>().unwrap_err();
            assert_eq!(e, ByteSizeError::Zero(zero.into()));
            assert!(e.to_string().contains("must be above zero"), "{e}");
        }
    }

    #[test]
    fn displays_in_decimal_units() {
        assert_eq!(ByteSize(100_000_000).to_string(), "100.0 MB");
        assert_eq!(ByteSize(2_500_000_000).to_string(), "2.50 GB");
    }
}
