//! Rekeying under load (`--rekey-every`): a thread that replaces a backend's keys on the
//! run's schedule while the transfer moves data, and records when each switch happened and
//! how long it took. What a rekey *does* is the backend's ([`Rekey`]); what it cost the flow
//! is read afterwards off the transfer's 10 ms timeline (model::rekey).
//!
//! A backend that rekeys on its own timer (OpenVPN's `--reneg-sec`: nothing outside it can
//! start a renegotiation) does nothing on the schedule and says afterwards when it switched
//! ([`Rekey::observed`], read from its log): its true times replace the scheduled ones.
//!
//! A thread of its own, not a task: the switch must happen on time while the runtime's
//! workers are busy with the transfer, and a backend's switch may block (netlink, a
//! daemon's command).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use model::rekey::{RekeySchedule, Switch};

use crate::error::{LabError, LabResult};

/// How long old keys are still accepted after a make-before-break switch (xfrm's old
/// inbound SAs, the userspace tunnel's old epoch): far longer than anything is in flight
/// between two namespaces or in a VM.
pub const GRACE: Duration = Duration::from_millis(200);

/// One backend's way to replace its keys.
pub trait Rekey: Send {
    /// Puts new keys in use: when it returns, data travels under them.
    fn switch(&mut self) -> LabResult<()>;
    /// Removes what the last switch kept for packets still in flight under the old keys; a
    /// backend whose daemon retires them itself (charon, OpenVPN) keeps nothing to remove.
    fn retire(&mut self) -> LabResult<()> {
        Ok(())
    }
    /// How long after a switch [`Rekey::retire`] is due.
    fn grace(&self) -> Duration {
        Duration::ZERO
    }
    /// A backend that rekeys on its own timer (its switch and retire do nothing): the
    /// switches it made, once the transfer of `seconds` is over, timed since `epoch` (its
    /// start on the wall clock, which the backend's own record uses); those outside the
    /// transfer are left out by the caller. None: the scheduled switches are the switches.
    fn observed(&mut self, epoch: SystemTime, seconds: f64) -> LabResult<Option<Vec<Switch>>> {
        let _ = (epoch, seconds);
        Ok(None)
    }
}

/// The rekey thread of one transfer. Dropping it stops the thread (Ctrl-C, an error).
pub struct Rekeyer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<LabResult<Vec<Switch>>>>,
}

impl Rekeyer {
    /// Rekeys every `schedule.every_s` from `epoch` (the transfer's start) until
    /// [`Rekeyer::finish`], at most as often as fits in a transfer of `seconds` (none at or
    /// after its end: the sender has stopped by then).
    pub fn start(
        (schedule, mut rekey): (RekeySchedule, Box<dyn Rekey>),
        epoch: Instant,
        seconds: f64,
    ) -> LabResult<Rekeyer> {
        let count = schedule.count_in(seconds) as usize;
        // The wall clock's reading at the epoch, for a backend that times its own switches.
        let wall_epoch = SystemTime::now()
            .checked_sub(epoch.elapsed())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopped = stop.clone();
        let every = Duration::from_secs_f64(schedule.every_s);
        let thread = std::thread::Builder::new()
            .name("ipl-rekey".into())
            .spawn(move || {
                let (lock, wake) = &*stopped;
                let mut switches = Vec::new();
                let mut retire_at: Option<Instant> = None;
                loop {
                    // The next switch (none once the transfer's share is done), or the
                    // last one's retire, whichever is first; nothing due: wait to be stopped.
                    let next = (switches.len() < count).then(|| epoch + every * (switches.len() as u32 + 1));
                    let due = [next, retire_at].into_iter().flatten().min();
                    let mut done = lock.lock().expect("rekey lock");
                    while !*done && due.is_none_or(|d| Instant::now() < d) {
                        done = match due {
                            Some(d) => {
                                wake.wait_timeout(done, d.saturating_duration_since(Instant::now()))
                                    .expect("rekey lock")
                                    .0
                            }
                            None => wake.wait(done).expect("rekey lock"),
                        };
                    }
                    if *done {
                        break;
                    }
                    drop(done);
                    // A retire goes first, also one not yet due: at most one old generation lives.
                    if retire_at.take().is_some() {
                        rekey.retire()?;
                        if next.is_none_or(|n| Instant::now() < n) {
                            continue;
                        }
                    }
                    let started = Instant::now();
                    rekey.switch()?;
                    switches.push(Switch {
                        at_s: started.saturating_duration_since(epoch).as_secs_f64(),
                        took_ms: Some(started.elapsed().as_secs_f64() * 1e3),
                    });
                    retire_at = Some(Instant::now() + rekey.grace());
                }
                if retire_at.is_some() {
                    rekey.retire()?;
                }
                // Its own switches, as far as they fall in the transfer (not those while
                // the tunnel waited for it, or after it).
                if let Some(mut observed) = rekey.observed(wall_epoch, seconds)? {
                    observed.retain(|s| (0.0..seconds).contains(&s.at_s));
                    observed.sort_by(|x, y| x.at_s.total_cmp(&y.at_s));
                    return Ok(observed);
                }
                Ok(switches)
            })
            .map_err(|e| LabError::failed(anyhow::anyhow!("starting the rekey thread: {e}")))?;
        Ok(Rekeyer {
            stop,
            thread: Some(thread),
        })
    }

    fn signal(&self) {
        *self.stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop.1.notify_all();
    }

    /// Stops rekeying (a retire still due is done now) and hands back every switch.
    pub fn finish(mut self) -> LabResult<Vec<Switch>> {
        self.signal();
        let thread = self.thread.take().expect("joined once");
        thread
            .join()
            .map_err(|_| LabError::failed(anyhow::anyhow!("the rekey thread panicked")))?
    }
}

impl Drop for Rekeyer {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.signal();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(every_s: f64, order: model::rekey::RekeyOrder) -> RekeySchedule {
        RekeySchedule {
            every_s,
            order,
            sa: model::rekey::RekeyTarget::Child,
        }
    }

    #[derive(Default)]
    struct Log(Arc<Mutex<Vec<&'static str>>>);

    impl Rekey for Log {
        fn switch(&mut self) -> LabResult<()> {
            self.0.lock().unwrap().push("switch");
            Ok(())
        }
        fn retire(&mut self) -> LabResult<()> {
            self.0.lock().unwrap().push("retire");
            Ok(())
        }
        fn grace(&self) -> Duration {
            Duration::from_millis(20)
        }
    }

    /// Every switch is followed by its retire, the last one's at finish at the latest; the
    /// switches are stamped on the schedule (this asserts order and count, not timing).
    #[test]
    fn each_switch_is_retired_and_recorded_on_the_schedule() {
        let log = Log::default();
        let events = log.0.clone();
        let schedule = schedule(0.1, model::rekey::RekeyOrder::MakeBeforeBreak);
        let epoch = Instant::now();
        let rekeyer = Rekeyer::start((schedule, Box::new(log)), epoch, 60.0).unwrap();
        while events.lock().unwrap().iter().filter(|e| **e == "switch").count() < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let switches = rekeyer.finish().unwrap();
        let events = events.lock().unwrap().clone();
        assert!(switches.len() >= 3, "{switches:?}");
        assert_eq!(events.iter().filter(|e| **e == "switch").count(), switches.len());
        for pair in events.chunks(2) {
            assert_eq!(pair, ["switch", "retire"], "{events:?}");
        }
        for (k, s) in switches.iter().enumerate() {
            assert!(s.at_s >= 0.1 * (k + 1) as f64, "{switches:?}");
        }
    }

    /// No rekey at or after the transfer's end: 0.35 s at every 0.1 s is three.
    #[test]
    fn rekeys_stop_before_the_transfer_ends() {
        let log = Log::default();
        let events = log.0.clone();
        let schedule = schedule(0.1, model::rekey::RekeyOrder::MakeBeforeBreak);
        let rekeyer = Rekeyer::start((schedule, Box::new(log)), Instant::now(), 0.35).unwrap();
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(rekeyer.finish().unwrap().len(), 3);
        assert_eq!(events.lock().unwrap().len(), 6);
    }

    /// A backend on its own timer: four switches it saw, one before the transfer and one
    /// after it.
    struct OwnTimer(Arc<Mutex<Option<SystemTime>>>);

    impl Rekey for OwnTimer {
        fn switch(&mut self) -> LabResult<()> {
            Ok(())
        }
        fn observed(&mut self, epoch: SystemTime, _seconds: f64) -> LabResult<Option<Vec<Switch>>> {
            *self.0.lock().unwrap() = Some(epoch);
            let at = |at_s| Switch {
                at_s,
                took_ms: Some(4.0),
            };
            Ok(Some(vec![at(0.3), at(-0.5), at(0.12), at(10.0)]))
        }
    }

    /// What a backend on its own timer saw replaces the schedule, as far as it falls in the
    /// transfer, in time order; its epoch is the transfer's start on the wall clock.
    #[test]
    fn a_backend_on_its_own_timer_reports_its_switches_within_the_transfer() {
        let seen = Arc::new(Mutex::new(None));
        let schedule = schedule(0.1, model::rekey::RekeyOrder::MakeBeforeBreak);
        let epoch = Instant::now() - Duration::from_millis(50);
        let wall = SystemTime::now() - Duration::from_millis(50);
        let rekeyer = Rekeyer::start((schedule, Box::new(OwnTimer(seen.clone()))), epoch, 0.35).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let switches = rekeyer.finish().unwrap();
        let at: Vec<f64> = switches.iter().map(|s| s.at_s).collect();
        assert_eq!(at, [0.12, 0.3]);
        assert_eq!(switches[0].took_ms, Some(4.0));
        let told = seen.lock().unwrap().unwrap();
        let off = told.duration_since(wall).unwrap_or_else(|e| e.duration());
        assert!(off < Duration::from_millis(20), "{off:?}");
    }

    /// Dropped without finish (an error, Ctrl-C): the thread stops and is joined.
    #[test]
    fn dropping_the_rekeyer_stops_it() {
        let log = Log::default();
        let events = log.0.clone();
        let schedule = schedule(3600.0, model::rekey::RekeyOrder::Naive);
        let started = Instant::now();
        drop(Rekeyer::start((schedule, Box::new(log)), Instant::now(), 7200.0).unwrap());
        assert!(started.elapsed() < Duration::from_secs(60));
        assert!(events.lock().unwrap().is_empty());
    }
}
