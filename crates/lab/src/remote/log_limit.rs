//! Rate-limited log lines for the server: a flood of bad connections must not flood the
//! log too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Log lines of one kind printed per second at most; the rest are counted.
const LOG_BURST: u32 = 5;

/// Rate-limited log lines: per kind at most [`LOG_BURST`] a second; the first line printed
/// after a quiet spell says how many of its kind were left out.
#[derive(Default)]
pub struct LogLimiter {
    kinds: Mutex<HashMap<&'static str, LogWindow>>,
}

#[derive(Debug, Clone, Copy)]
struct LogWindow {
    start: Instant,
    printed: u32,
    suppressed: u64,
}

impl LogWindow {
    fn new(now: Instant) -> LogWindow {
        LogWindow {
            start: now,
            printed: 0,
            suppressed: 0,
        }
    }

    /// Whether a line at `now` is printed: `Some(lines suppressed before it)`, or `None`.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if now.duration_since(self.start) >= Duration::from_secs(1) {
            let suppressed = self.suppressed;
            *self = LogWindow {
                printed: 1,
                ..LogWindow::new(now)
            };
            return Some(suppressed);
        }
        if self.printed < LOG_BURST {
            self.printed += 1;
            return Some(0);
        }
        self.suppressed += 1;
        None
    }
}

impl LogLimiter {
    pub fn line(&self, kind: &'static str, text: impl FnOnce() -> String) {
        let now = Instant::now();
        let print = self
            .kinds
            .lock()
            .expect("log lock")
            .entry(kind)
            .or_insert_with(|| LogWindow::new(now))
            .admit(now);
        match print {
            Some(0) => crate::say!("ipsec-lab serve: {}", text()),
            Some(n) => crate::say!("ipsec-lab serve: {} ({n} similar lines suppressed)", text()),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_log_lines_are_limited_and_counted() {
        let t0 = Instant::now();
        let mut window = LogWindow::new(t0);
        let printed: Vec<u64> = (0..100u64)
            .filter_map(|i| window.admit(t0 + Duration::from_millis(i * 5)))
            .collect();
        assert_eq!(printed, vec![0; LOG_BURST as usize]);
        assert_eq!(
            window.admit(t0 + Duration::from_secs(2)),
            Some(100 - u64::from(LOG_BURST))
        );
        assert_eq!(window.admit(t0 + Duration::from_secs(2)), Some(0));
    }
}
