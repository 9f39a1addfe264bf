//! A transfer's timeline cut into slices (`--interval`, `--omit`), and the intervals read
//! off a tally of verified bytes per slice. Pure: the clock and the counting live in
//! [`crate::Progress`]; this only says which slice an instant falls in and what a slice is.
//!
//! Slices start at the transfer's epoch (when the run started it, as iperf3 counts) and end
//! at every multiple of the interval, with one more boundary at the end of the warm-up where
//! that is not a multiple: so no slice straddles the warm-up, and the bytes of the slices
//! inside it are exactly the bytes left out of the figure. A timed transfer (`--time`) has
//! no boundary at or after its deadline: what arrives after it was sent before it, and
//! belongs to the last slice, not to a sliver of its own whose "rate" is a burst.

use std::time::Duration;

/// Where a transfer's timeline is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeline {
    /// `--interval`: a slice per period; None: one slice (two with a warm-up).
    pub every: Option<Duration>,
    /// `--omit`: the warm-up at the start, left out of the figure (zero: none).
    pub omit: Duration,
    /// `--time`: the sender's deadline; the slice before it runs to the last byte.
    pub until: Option<Duration>,
}

impl Timeline {
    /// The whole transfer as one slice.
    pub fn whole() -> Timeline {
        Timeline::default()
    }

    /// Where the warm-up adds a boundary of its own (it is not a multiple of the interval):
    /// (multiples of the period before the warm-up ends, the warm-up's end in ns).
    fn extra(&self) -> Option<(u128, u128)> {
        let omit = self.omit.as_nanos();
        if omit == 0 {
            return None;
        }
        match self.every.map(|e| e.as_nanos()) {
            Some(e) if omit % e == 0 => None,
            Some(e) => Some((omit / e, omit)),
            None => Some((0, omit)),
        }
    }

    /// The `k`-th boundary (1-based), in nanoseconds since the epoch; None: there is none.
    fn boundary(&self, k: usize) -> Option<u128> {
        let until = self.until.map(|u| u.as_nanos());
        self.cut(k).filter(|&b| until.is_none_or(|u| b < u))
    }

    /// The `k`-th boundary as if there were no deadline.
    fn cut(&self, k: usize) -> Option<u128> {
        let k = k as u128;
        match (self.every.map(|e| e.as_nanos()), self.extra()) {
            (None, None) => None,
            (None, Some((_, omit))) => (k == 1).then_some(omit),
            (Some(e), None) => Some(k * e),
            (Some(e), Some((before, omit))) => Some(match k {
                k if k <= before => k * e,
                k if k == before + 1 => omit,
                k => (k - 1) * e,
            }),
        }
    }

    /// The slice holding the instant `t` after the epoch.
    pub fn slice_of(&self, t: Duration) -> usize {
        // After the deadline: the slice the deadline ends (it has no boundary there).
        let t = match self.until {
            Some(until) if !until.is_zero() && t >= until => until.as_nanos() - 1,
            _ => t.as_nanos(),
        };
        let extra = usize::from(self.extra().is_some_and(|(_, omit)| t >= omit));
        match self.every.map(|e| e.as_nanos()) {
            Some(e) => usize::try_from(t / e).unwrap_or(usize::MAX - 1) + extra,
            None => extra,
        }
    }

    /// Start of slice `k` and its end (None: it runs to the end of the transfer).
    pub fn bounds(&self, k: usize) -> (Duration, Option<Duration>) {
        let at = |n: u128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
        let start = if k == 0 { 0 } else { self.boundary(k).unwrap_or(0) };
        (at(start), self.boundary(k + 1).map(at))
    }

    /// Whether slice `k` lies inside the warm-up.
    pub fn omitted(&self, k: usize) -> bool {
        !self.omit.is_zero() && self.bounds(k).1.is_some_and(|end| end <= self.omit)
    }
}

/// Verified bytes per slice of a [`Timeline`], and when the first and last arrived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Slice k's bytes at index k; slices after the last one written are absent (zero).
    pub slices: Vec<u64>,
    /// The same per stream: stream i's at index i (`-P N`); they add up to `slices`.
    pub streams: Vec<Vec<u64>>,
    /// Since the epoch.
    pub first_byte: Option<Duration>,
    pub last_byte: Option<Duration>,
    /// Streams verified to their last byte.
    pub streams_done: u16,
    /// When the oldest byte read but not yet filed arrived (a timed stream's held-back
    /// tail): slices from there on may still grow.
    pub held_since: Option<Duration>,
}

impl Tally {
    pub fn bytes(&self) -> u64 {
        self.slices.iter().sum()
    }

    /// Files `n` bytes of stream `stream` in slice `slice`: counted once in the slice's
    /// total and once in the stream's, so the two always add up.
    pub fn add(&mut self, stream: u16, slice: usize, n: u64) {
        fn at(v: &mut Vec<u64>, k: usize) -> &mut u64 {
            if v.len() <= k {
                v.resize(k + 1, 0);
            }
            &mut v[k]
        }
        *at(&mut self.slices, slice) += n;
        let stream = usize::from(stream);
        if self.streams.len() <= stream {
            self.streams.resize(stream + 1, Vec::new());
        }
        *at(&mut self.streams[stream], slice) += n;
    }
}

/// One interval of a transfer: a slice, with the bytes verified in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub index: usize,
    /// Since the epoch. The last interval ends at the last byte, not at its slice's end.
    pub start: Duration,
    pub end: Duration,
    pub bytes: u64,
    /// Inside the warm-up (`--omit`): not counted in the figure.
    pub omitted: bool,
    /// Each stream's bytes (stream i's at index i, for every stream that filed any); they
    /// add up to `bytes`.
    pub streams: Vec<u64>,
}

impl Interval {
    pub fn seconds(&self) -> f64 {
        self.end.saturating_sub(self.start).as_secs_f64()
    }

    /// 10^6 bytes per second; 0 for an interval of no length.
    pub fn mb_per_s(&self) -> f64 {
        let s = self.seconds();
        if s > 0.0 {
            self.bytes as f64 / s / 1e6
        } else {
            0.0
        }
    }
}

fn interval(timeline: &Timeline, tally: &Tally, k: usize, end: Duration) -> Interval {
    Interval {
        index: k,
        start: timeline.bounds(k).0,
        end,
        bytes: tally.slices.get(k).copied().unwrap_or(0),
        omitted: timeline.omitted(k),
        streams: tally
            .streams
            .iter()
            .map(|stream| stream.get(k).copied().unwrap_or(0))
            .collect(),
    }
}

/// The intervals from `from` on that had ended by `now` (since the epoch) and before any
/// byte still held, with `tally` taken at `now`: no byte can be added to them any more (see
/// [`crate::Progress::tally`]).
pub fn closed(timeline: &Timeline, tally: &Tally, now: Duration, from: usize) -> Vec<Interval> {
    let now = tally.held_since.map_or(now, |held| held.min(now));
    (from..)
        .map_while(|k| match timeline.bounds(k).1 {
            Some(end) if end <= now => Some(interval(timeline, tally, k, end)),
            _ => None,
        })
        .collect()
}

/// The intervals from `from` on of a finished transfer: every slice up to the one holding
/// the last byte, which ends there. With those emitted before, they add up to every byte.
pub fn rest(timeline: &Timeline, tally: &Tally, from: usize) -> Vec<Interval> {
    let Some(last) = tally.last_byte else {
        return Vec::new();
    };
    let last_slice = timeline.slice_of(last).max(tally.slices.len().saturating_sub(1));
    (from..=last_slice)
        .map(|k| {
            let end = if k == last_slice {
                last.max(timeline.bounds(k).0)
            } else {
                timeline.bounds(k).1.unwrap_or(last)
            };
            interval(timeline, tally, k, end)
        })
        .collect()
}

/// The warm-up left out of a finished transfer's figure: its bytes, and its length (the
/// whole `--omit`; shorter only if the transfer ended inside it).
pub fn warm_up(timeline: &Timeline, tally: &Tally) -> (u64, Duration) {
    let bytes = (0..tally.slices.len())
        .filter(|&k| timeline.omitted(k))
        .map(|k| tally.slices[k])
        .sum();
    let length = tally
        .last_byte
        .map_or(timeline.omit, |last| last.min(timeline.omit));
    (bytes, length)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn timeline(every: Option<u64>, omit: u64) -> Timeline {
        Timeline {
            every: every.map(ms),
            omit: ms(omit),
            until: None,
        }
    }

    fn timed(every: u64, omit: u64, until: u64) -> Timeline {
        Timeline {
            until: Some(ms(until)),
            ..timeline(Some(every), omit)
        }
    }

    /// Every instant falls inside the bounds of the slice it is put in, for every shape of
    /// timeline, and slices follow each other without gaps.
    #[test]
    fn slices_tile_the_timeline() {
        for tl in [
            timeline(None, 0),
            timeline(None, 700),
            timeline(Some(1000), 0),
            timeline(Some(1000), 2000),
            timeline(Some(1000), 2500),
            timeline(Some(300), 100),
            timed(1000, 0, 2000),
            timed(1000, 0, 2500),
            timed(1000, 1500, 3000),
            timed(300, 0, 1000),
        ] {
            for t in (0..10_000).step_by(7).map(ms) {
                let k = tl.slice_of(t);
                let (start, end) = tl.bounds(k);
                assert!(start <= t && end.is_none_or(|e| t < e), "{tl:?} t={t:?} k={k}");
            }
            for k in 0..20 {
                if let Some(end) = tl.bounds(k).1 {
                    assert_eq!(tl.bounds(k + 1).0, end, "{tl:?} k={k}");
                }
            }
        }
    }

    #[test]
    fn a_warm_up_off_the_period_adds_one_boundary() {
        let tl = timeline(Some(1000), 2500);
        let ends: Vec<_> = (0..5).map(|k| tl.bounds(k).1.unwrap().as_millis()).collect();
        assert_eq!(ends, [1000, 2000, 2500, 3000, 4000]);
        let omitted: Vec<_> = (0..5).map(|k| tl.omitted(k)).collect();
        assert_eq!(omitted, [true, true, true, false, false]);
        // Without an interval: the warm-up and the rest.
        let tl = timeline(None, 700);
        assert_eq!(tl.bounds(0), (ms(0), Some(ms(700))));
        assert_eq!(tl.bounds(1), (ms(700), None));
        assert!(tl.omitted(0) && !tl.omitted(1));
        assert!(!timeline(Some(1000), 0).omitted(0));
    }

    fn tally(per_slice: &[u64], last_ms: u64) -> Tally {
        Tally {
            slices: per_slice.to_vec(),
            streams: vec![per_slice.to_vec()],
            first_byte: Some(ms(3)),
            last_byte: Some(ms(last_ms)),
            streams_done: 1,
            held_since: None,
        }
    }

    /// What was emitted live and what is emitted at the end add up to every byte, each slice
    /// once, the last ending at the last byte.
    #[test]
    fn live_and_final_intervals_add_up_to_the_total() {
        let tl = timeline(Some(1000), 0);
        let t = tally(&[10, 20, 30, 5], 3400);
        let live = closed(&tl, &t, ms(2100), 0);
        assert_eq!(live.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1]);
        let rest = rest(&tl, &t, live.len());
        assert_eq!(rest.iter().map(|i| i.index).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(rest.last().unwrap().end, ms(3400));
        let all: Vec<_> = live.iter().chain(&rest).collect();
        assert_eq!(all.iter().map(|i| i.bytes).sum::<u64>(), t.bytes());
        assert_eq!(all[1].mb_per_s(), 20.0 / 1e6);
        // Nothing is left to emit twice.
        assert!(super::rest(&tl, &t, 4).is_empty());
        // A byte held since 1.5 s may still be filed there: slice 1 is not final yet.
        let held = Tally {
            held_since: Some(ms(1500)),
            ..t.clone()
        };
        assert_eq!(closed(&tl, &held, ms(2100), 0).len(), 1);
    }

    #[test]
    fn warm_up_bytes_are_those_of_its_slices() {
        let tl = timeline(Some(1000), 2500);
        let t = tally(&[1, 2, 4, 8, 16], 4200);
        assert_eq!(warm_up(&tl, &t), (7, ms(2500)));
        // A transfer that ended inside the warm-up: all of it is warm-up.
        let t = tally(&[1, 2], 1500);
        assert_eq!(warm_up(&tl, &t), (3, ms(1500)));
    }

    #[test]
    fn no_bytes_no_intervals() {
        let tl = timeline(Some(1000), 0);
        assert!(rest(&tl, &Tally::default(), 0).is_empty());
        let empty = Interval {
            index: 0,
            start: ms(5),
            end: ms(5),
            bytes: 9,
            omitted: false,
            streams: vec![9],
        };
        assert_eq!(empty.mb_per_s(), 0.0);
    }

    /// Regression: `--time 2 --interval 1` ended with "2.00-2.01 s 24.1 MB 3615.1 MB/s": the
    /// bytes in flight at the deadline, reported as an interval of their own. They belong
    /// to the last interval, which is not shown before the transfer ends.
    #[test]
    fn a_timed_transfers_tail_is_folded_into_its_last_interval() {
        let tl = timed(1000, 0, 2000);
        assert_eq!(tl.slice_of(ms(1999)), 1);
        assert_eq!(tl.slice_of(ms(2000)), 1);
        assert_eq!(tl.slice_of(ms(2012)), 1);
        assert_eq!(tl.bounds(1), (ms(1000), None));
        let mut t = Tally::default();
        for (at, n) in [(500, 10), (1500, 20), (2010, 5)] {
            t.add(0, tl.slice_of(ms(at)), n);
        }
        t.last_byte = Some(ms(2010));
        // At 2.005 s the slice before the deadline is not closed: its tail may still come.
        let live = closed(&tl, &t, ms(2005), 0);
        assert_eq!(live.iter().map(|i| i.index).collect::<Vec<_>>(), [0]);
        let rest = rest(&tl, &t, live.len());
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert_eq!(
            (rest[0].start, rest[0].end, rest[0].bytes),
            (ms(1000), ms(2010), 25)
        );
        assert_eq!(live[0].bytes + rest[0].bytes, t.bytes());
        // A deadline off the period keeps its short last period, tail included.
        let tl = timed(1000, 0, 2500);
        assert_eq!(tl.bounds(2), (ms(2000), None));
        assert_eq!(tl.slice_of(ms(2600)), 2);
        // Without a deadline, nothing changes.
        assert_eq!(timeline(Some(1000), 0).slice_of(ms(2010)), 2);
    }

    /// Per-stream intervals add up to the interval's total, slice by slice.
    #[test]
    fn each_streams_bytes_add_up_to_the_interval() {
        let tl = timeline(Some(1000), 0);
        let mut t = Tally::default();
        for (stream, at, n) in [(0, 100, 3), (1, 200, 4), (1, 1100, 5), (3, 1900, 6)] {
            t.add(stream, tl.slice_of(ms(at)), n);
        }
        t.last_byte = Some(ms(1900));
        let all = rest(&tl, &t, 0);
        assert_eq!(all[0].streams, [3, 4, 0, 0]);
        assert_eq!(all[1].streams, [0, 5, 0, 6]);
        for i in &all {
            assert_eq!(i.streams.iter().sum::<u64>(), i.bytes, "{i:?}");
        }
    }
}
