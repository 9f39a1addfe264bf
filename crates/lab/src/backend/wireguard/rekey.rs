//! WireGuard's own rekey, watched (`--rekey-every 120`).
//!
//! Nothing outside a WireGuard device can make it start a new handshake on an existing
//! session: setting the same private key again is ignored (kernel, wireguard-go), and a
//! new one, or removing and re-adding the peer, drops the session — a new identity or a
//! fresh start, not a rekey. What every implementation does on its own is the protocol's
//! REKEY_AFTER_TIME: the end that started the session starts a new handshake once its keys
//! are 120 s old and it has data to send, and switches to the new keys make-before-break
//! (the responder keeps the old ones until data arrives under the new). So a WireGuard rekey
//! run is long enough to cross that point, and the lab watches for it: a thread asks both
//! devices for their peer's last handshake every [`POLL`], and each handshake newer than
//! the session the run started with is a rekey, at the earlier end's handshake time.
//!
//! A device says when a handshake completed, not when it began: the switch's duration is
//! not known (`took_ms` none). boringtun stamps a handshake with its timer's last tick,
//! every 250 ms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use model::rekey::Switch;

use crate::error::{LabError, LabResult};
use crate::rekey::Rekey;

/// How often the watcher asks each device.
const POLL: Duration = Duration::from_millis(100);
/// Handshakes of both ends closer than this are one rekey (the initiator's completion, the
/// responder's confirmation); WireGuard's own are REKEY_AFTER_TIME apart, its retries
/// REKEY_TIMEOUT (5 s).
const SAME_REKEY: Duration = Duration::from_secs(5);

/// One end's device, asked for its peer's last handshake (None: none yet).
pub type Ask = Box<dyn FnMut() -> LabResult<Option<SystemTime>> + Send>;

/// Both ends' devices, watched from a thread of its own until [`Rekey::observed`].
pub struct Handshakes {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<LabResult<Vec<SystemTime>>>>,
}

impl Handshakes {
    /// Starts watching: the handshakes the ends report now are the session the run starts
    /// with, not rekeys.
    pub fn watch(mut ends: [Ask; 2]) -> LabResult<Handshakes> {
        let first = [ends[0]()?, ends[1]()?];
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ipl-wg-watch".into())
            .spawn(move || {
                let mut seen = Seen::new(first);
                while !stopped.load(Ordering::Relaxed) {
                    for (side, ask) in ends.iter_mut().enumerate() {
                        seen.reading(side, ask()?);
                    }
                    std::thread::sleep(POLL);
                }
                Ok(seen.rekeys())
            })
            .map_err(|e| LabError::failed(anyhow::anyhow!("starting the WireGuard watcher: {e}")))?;
        Ok(Handshakes {
            stop,
            thread: Some(thread),
        })
    }

    fn finish(&mut self) -> LabResult<Vec<SystemTime>> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| LabError::failed(anyhow::anyhow!("the WireGuard watcher panicked")))?,
            None => Ok(Vec::new()),
        }
    }
}

impl Rekey for Handshakes {
    /// WireGuard rekeys on its own timer: nothing to do on the schedule.
    fn switch(&mut self) -> LabResult<()> {
        Ok(())
    }

    fn observed(&mut self, epoch: SystemTime, _seconds: f64) -> LabResult<Option<Vec<Switch>>> {
        let at_s = |t: SystemTime| match t.duration_since(epoch) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        Ok(Some(
            self.finish()?
                .into_iter()
                .map(|t| Switch {
                    at_s: at_s(t),
                    took_ms: None,
                })
                .collect(),
        ))
    }
}

impl Drop for Handshakes {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The handshakes seen so far (sans IO): per end the latest, and every new one.
struct Seen {
    latest: [Option<SystemTime>; 2],
    new: Vec<SystemTime>,
}

impl Seen {
    fn new(first: [Option<SystemTime>; 2]) -> Seen {
        Seen {
            latest: first,
            new: Vec::new(),
        }
    }

    /// One end's reading. A time within [`SAME_REKEY`] of that end's latest is the same
    /// handshake (boringtun's time is worked out anew at each reading, so it wobbles).
    fn reading(&mut self, side: usize, at: Option<SystemTime>) {
        let Some(at) = at else { return };
        let newer = match self.latest[side] {
            None => true,
            Some(latest) => at.duration_since(latest).is_ok_and(|d| d > SAME_REKEY),
        };
        if newer {
            self.latest[side] = Some(at);
            self.new.push(at);
        }
    }

    /// The rekeys: the new handshakes in time order, both ends' within [`SAME_REKEY`] of
    /// each other as one, at the earlier.
    fn rekeys(mut self) -> Vec<SystemTime> {
        self.new.sort();
        let mut rekeys: Vec<SystemTime> = Vec::new();
        for t in self.new {
            let same = rekeys
                .last()
                .is_some_and(|last| t.duration_since(*last).is_ok_and(|d| d <= SAME_REKEY));
            if !same {
                rekeys.push(t);
            }
        }
        rekeys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn at(s: f64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(1_800_000_000.0 + s)
    }

    /// The session the run started with is no rekey; the initiator's completion and the
    /// responder's confirmation are one rekey at the earlier; a reading that wobbles by a
    /// few ms (boringtun's) is the same handshake; the next natural one is another.
    #[test]
    fn new_handshakes_of_both_ends_are_one_rekey_each() {
        let mut seen = Seen::new([Some(at(0.0)), Some(at(0.002))]);
        seen.reading(0, Some(at(0.0)));
        seen.reading(1, Some(at(0.004)));
        seen.reading(0, Some(at(120.01)));
        seen.reading(1, Some(at(120.013)));
        seen.reading(1, Some(at(120.011)));
        seen.reading(0, None);
        seen.reading(1, Some(at(240.05)));
        seen.reading(0, Some(at(240.04)));
        assert_eq!(seen.rekeys(), [at(120.01), at(240.04)]);
    }

    /// An end with no handshake before the run (none should: b waited for one) counts its
    /// first as new.
    #[test]
    fn an_end_without_a_handshake_counts_its_first() {
        let mut seen = Seen::new([None, None]);
        seen.reading(1, Some(at(3.0)));
        assert_eq!(seen.rekeys(), [at(3.0)]);
    }

    /// The watcher asks both devices until it is done, and its rekeys are timed from the
    /// transfer's start on the wall clock; the switch's duration is not known.
    #[test]
    fn the_watcher_reports_new_handshakes_from_the_epoch() {
        let epoch = SystemTime::now();
        let times = Arc::new(Mutex::new([epoch - Duration::from_secs(5); 2]));
        let asks: [Ask; 2] = [0, 1].map(|side| {
            let times = times.clone();
            Box::new(move || Ok(Some(times.lock().unwrap()[side]))) as Ask
        });
        let mut watch = Handshakes::watch(asks).unwrap();
        std::thread::sleep(POLL * 2);
        times.lock().unwrap()[1] = epoch + Duration::from_millis(1500);
        std::thread::sleep(POLL * 3);
        let switches = watch.observed(epoch, 10.0).unwrap().unwrap();
        assert_eq!(switches.len(), 1, "{switches:?}");
        assert!((switches[0].at_s - 1.5).abs() < 1e-6, "{switches:?}");
        assert_eq!(switches[0].took_ms, None);
    }

    /// A device that cannot be asked stops the watch with its error.
    #[test]
    fn a_failing_device_fails_the_watch() {
        let calls = Arc::new(Mutex::new(0));
        let counted = calls.clone();
        let failing: Ask = Box::new(move || {
            let mut n = counted.lock().unwrap();
            *n += 1;
            match *n {
                1 => Ok(None),
                _ => Err(LabError::failed(anyhow::anyhow!("gone"))),
            }
        });
        let mut watch = Handshakes::watch([failing, Box::new(|| Ok(None))]).unwrap();
        std::thread::sleep(POLL * 2);
        let err = watch.observed(SystemTime::now(), 1.0).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }
}
