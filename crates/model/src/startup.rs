//! A tunnel's start: how long from "bring it up" to the first verified byte through it
//! (time to first packet, TTFP), and where that time went.
//!
//! Two parts, each timed where it happens: the **setup**, from the first end's first step
//! to both ends ready (devices, keys, SAs or peers, and the key exchange where the backend
//! has one: IKE, TLS, WireGuard's handshake); then the **first byte**, from the first
//! transfer's start to its receiver's first verified byte (the connection through the
//! tunnel, then the first data). Their sum is the time to first packet. What the lab does
//! in between (its own bookkeeping, no packet of the tunnel's) is in neither.

use serde::{Deserialize, Serialize};

/// Time to first packet, and its two parts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FirstPacket {
    pub setup_ms: f64,
    pub first_byte_ms: f64,
    /// `setup_ms + first_byte_ms`.
    pub ttfp_ms: f64,
}

impl FirstPacket {
    pub fn new(setup: std::time::Duration, first_byte: std::time::Duration) -> FirstPacket {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        FirstPacket {
            setup_ms: ms(setup),
            first_byte_ms: ms(first_byte),
            ttfp_ms: ms(setup + first_byte),
        }
    }

    /// A table cell's: `25.1 ms (setup 23.9 ms)`.
    pub fn cell_text(&self) -> String {
        format!("{} (setup {})", ms(self.ttfp_ms), ms(self.setup_ms))
    }

    /// `time to first packet 25.1 ms: setup 23.9 ms, then the first byte 1.2 ms after the
    /// transfer started`.
    pub fn line(&self) -> String {
        format!(
            "time to first packet {}: setup {} (both ends up, the key exchange included), then the first verified byte {} after the transfer started",
            ms(self.ttfp_ms),
            ms(self.setup_ms),
            ms(self.first_byte_ms)
        )
    }
}

/// Milliseconds as a report says them: two decimals below 10 ms, one below 1 s, then none.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        "—".into()
    } else if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 1000.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The sum is the two parts', and the line says each.
    #[test]
    fn ttfp_is_setup_then_first_byte() {
        let f = FirstPacket::new(Duration::from_micros(23_900), Duration::from_micros(1_250));
        assert!((f.ttfp_ms - 25.15).abs() < 1e-9, "{f:?}");
        let line = f.line();
        for says in [
            "time to first packet 25.1 ms",
            "setup 23.9 ms",
            "first verified byte 1.25 ms",
        ] {
            assert!(line.contains(says), "{line:?} should say {says:?}");
        }
        assert_eq!(ms(f64::NAN), "—");
        assert_eq!(ms(1234.4), "1234 ms");
    }
}
