//! `--find-ndr`: the highest offered rate whose loss stays within a tolerance (0 %: the
//! non-drop rate, NDR; more: a partial-drop rate, PDR), as RFC 2544's throughput test and
//! CSIT's MLRsearch look for it. Pure: the caller's trial function sends and counts.
//!
//! The search, per packet size:
//! 1. One unlimited short trial: its sent rate is the sender's ceiling R, its delivered
//!    rate the first guess at the path's capacity.
//! 2. Tolerances highest first, each starting from every trial run so far, re-judged
//!    against its own tolerance: the lowest failing rate is `hi`, the highest passing rate
//!    under it `lo`. Nothing failed: the sender, not the path, is the limit; one final
//!    unlimited trial confirms it and the bound has no `upper`.
//! 3. Short trials bisect (lo, hi), the first one just under that guess, until
//!    `(hi - lo) / hi <= precision`; then a final, full-length trial at `lo`. If it fails,
//!    short trials have been missing loss at these rates (a buffer absorbing their bursts):
//!    it becomes `hi`, and from there on this tolerance's search runs full-length trials
//!    only, starting just under the rate that final trial delivered.
//! 4. No rate passing down to a floor (R × precision, at least 1 pps): the bound is 0 pps.
//!    At most [`MAX_TRIALS_PER_TOLERANCE`] trials each: a path whose loss never settles
//!    ends with the best full-length passing trial found, not a loop.
//!
//! Bisection is geometric (`sqrt(lo * hi)`): the stop rule is relative, and the interval
//! can span orders of magnitude (a 1 Mpps sender over a path that carries 10 kpps), where
//! an arithmetic midpoint would spend trial after trial near the top. While nothing has
//! passed (lo = 0) the probe halves `hi` instead.

use model::packets::{NdrBound, NdrReport, NdrSearch, PacketSize, UdpTrial};

/// The most trials one tolerance's search runs, search and final together.
pub const MAX_TRIALS_PER_TOLERANCE: usize = 40;

/// A guess sits this far under the rate an overloaded path delivered, so that it lands on
/// the passing side rather than exactly on the edge.
const GUESS_MARGIN: f64 = 0.99;

/// Searches the rate of each of `search`'s tolerances over the path `trial` measures.
///
/// `trial(offered_pps, seconds)` runs one trial: `offered_pps` None is as fast as the
/// sender goes. Search trials last `search.trial_seconds`, final ones `final_seconds`.
/// Its first error ends the search and is returned as is.
pub fn find<E>(
    search: &NdrSearch,
    packet_size: PacketSize,
    final_seconds: f64,
    mut trial: impl FnMut(Option<f64>, f64) -> Result<UdpTrial, E>,
) -> Result<NdrReport, E> {
    let max_rate = trial(None, search.trial_seconds)?;
    let mut runs = Runs {
        list: Vec::new(),
        final_seconds,
    };
    runs.push(max_rate.clone(), search.trial_seconds);

    let mut tolerances: Vec<f64> = search
        .tolerances_pct
        .iter()
        .copied()
        .filter(|t| t.is_finite())
        .collect();
    // Highest first: loss grows with rate, so NDR <= PDR, and the trials of the wider
    // tolerance's search narrow the interval the stricter one starts from.
    tolerances.sort_by(|a, b| b.total_cmp(a));
    tolerances.dedup();

    let mut bounds = Vec::new();
    for tolerance in tolerances {
        let found = if max_rate.sent == 0 {
            // A sender that sent nothing leaves nothing to search (the trial function should
            // have said why, as an error).
            Found {
                lower: None,
                upper: None,
            }
        } else {
            let mut one = Search {
                runs: &mut runs,
                tolerance,
                trial_seconds: search.trial_seconds,
                precision: search.precision,
                floor: (max_rate.sent_pps * search.precision).max(1.0),
                first_guess: max_rate.received_pps() * GUESS_MARGIN,
            };
            one.run(&mut trial)?
        };
        bounds.push(runs.bound(tolerance, found, packet_size));
    }
    bounds.reverse();

    Ok(NdrReport {
        packet_size,
        max_rate,
        bounds,
        trials: runs.list.into_iter().map(|run| run.trial).collect(),
    })
}

/// One trial, and whether it lasted as long as a final one.
struct Run {
    trial: UdpTrial,
    full_length: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
}

impl Run {
    /// The rate this trial says something about: the one offered, unless the sender did not
    /// keep it (or was unlimited), where the path saw what was sent, not what was asked.
    fn rate(&self) -> f64 {
        match (self.trial.offered_pps, self.trial.kept_rate) {
            (Some(offered), Some(true) | None) => offered,
            _ => self.trial.sent_pps,
        }
    }

    /// Judged against `tolerance_pct`; None for a trial that sent nothing, which shows
    /// nothing either way.
    fn verdict(&self, tolerance_pct: f64) -> Option<Verdict> {
        if self.trial.sent == 0 {
            None
        } else if self.trial.loss_pct() <= tolerance_pct {
            Some(Verdict::Pass)
        } else {
            Some(Verdict::Fail)
        }
    }

    fn is(&self, tolerance_pct: f64, verdict: Verdict) -> bool {
        self.verdict(tolerance_pct) == Some(verdict)
    }
}

/// Every trial run, in order: all of it stays evidence for the tolerances still to come.
struct Runs {
    list: Vec<Run>,
    final_seconds: f64,
}

/// Where one tolerance's search ended: indices into [`Runs::list`].
#[derive(Debug, Clone, Copy)]
struct Found {
    lower: Option<usize>,
    upper: Option<usize>,
}

/// The interval the trials so far leave for one tolerance.
struct Bracket {
    /// The lowest failing trial.
    hi: Option<usize>,
    /// The highest passing trial under `hi` (only full-length ones in `full_length_only`).
    lo: Option<usize>,
    /// A full-length trial failed at or under a rate a short one passed: short trials miss
    /// loss here, so only full-length ones count.
    full_length_only: bool,
}

impl Runs {
    fn push(&mut self, trial: UdpTrial, seconds: f64) {
        self.list.push(Run {
            trial,
            full_length: seconds >= self.final_seconds,
        });
    }

    fn rate(&self, i: usize) -> f64 {
        self.list[i].rate()
    }

    fn bracket(&self, tolerance: f64) -> Bracket {
        let runs = || self.list.iter().enumerate();
        let hi = runs()
            .filter(|(_, r)| r.is(tolerance, Verdict::Fail))
            .min_by(|(_, a), (_, b)| a.rate().total_cmp(&b.rate()))
            .map(|(i, _)| i);
        let full_length_only = runs()
            .filter(|(_, r)| r.full_length && r.is(tolerance, Verdict::Fail))
            .any(|(_, failed)| {
                runs().any(|(_, r)| {
                    !r.full_length && r.is(tolerance, Verdict::Pass) && r.rate() >= failed.rate()
                })
            });
        let hi_rate = hi.map_or(f64::INFINITY, |i| self.rate(i));
        let lo = runs()
            .filter(|(_, r)| r.is(tolerance, Verdict::Pass) && r.rate() < hi_rate)
            .filter(|(_, r)| r.full_length || !full_length_only)
            // At equal rates a full-length trial wins: it needs no final trial.
            .max_by(|(_, a), (_, b)| {
                a.rate()
                    .total_cmp(&b.rate())
                    .then(a.full_length.cmp(&b.full_length))
            })
            .map(|(i, _)| i);
        Bracket {
            hi,
            lo,
            full_length_only,
        }
    }

    /// The highest full-length trial that passed under `below`: the best answer there is
    /// when the trials run out.
    fn best_full_length_pass(&self, tolerance: f64, below: f64) -> Option<usize> {
        self.list
            .iter()
            .enumerate()
            .filter(|(_, r)| r.full_length && r.is(tolerance, Verdict::Pass) && r.rate() < below)
            .max_by(|(_, a), (_, b)| a.rate().total_cmp(&b.rate()))
            .map(|(i, _)| i)
    }

    /// A full-length unlimited trial that passed: the sender's ceiling confirmed.
    fn unlimited_full_length_pass(&self, tolerance: f64) -> Option<usize> {
        self.list
            .iter()
            .position(|r| r.full_length && r.trial.offered_pps.is_none() && r.is(tolerance, Verdict::Pass))
    }

    fn offered(&self, pps: f64, full_length: bool) -> bool {
        self.list
            .iter()
            .any(|r| r.full_length == full_length && r.trial.offered_pps == Some(pps))
    }

    fn bound(&self, tolerance: f64, found: Found, packet_size: PacketSize) -> NdrBound {
        let pps = found.lower.map_or(0.0, |i| self.rate(i));
        let trial = |i: Option<usize>| i.map(|i| self.list[i].trial.clone());
        NdrBound {
            name: if tolerance == 0.0 { "NDR" } else { "PDR" }.to_string(),
            tolerance_pct: tolerance,
            pps,
            mbit_per_s: pps * packet_size.mean() * 8.0 / 1e6,
            lower: trial(found.lower),
            upper: trial(found.upper),
        }
    }
}

/// One tolerance's search.
struct Search<'a> {
    runs: &'a mut Runs,
    tolerance: f64,
    trial_seconds: f64,
    precision: f64,
    /// Under this, with nothing passing, the search gives up: 0 pps.
    floor: f64,
    /// Just under what the unlimited trial delivered.
    first_guess: f64,
}

impl Search<'_> {
    fn run<E>(
        &mut self,
        trial: &mut impl FnMut(Option<f64>, f64) -> Result<UdpTrial, E>,
    ) -> Result<Found, E> {
        let start = self.runs.list.len();
        let final_seconds = self.runs.final_seconds;
        loop {
            let spent = self.runs.list.len() - start >= MAX_TRIALS_PER_TOLERANCE;
            let last_one = self.runs.list.len() - start + 1 >= MAX_TRIALS_PER_TOLERANCE;
            let bracket = self.runs.bracket(self.tolerance);

            let Some(hi) = bracket.hi else {
                // Nothing failed, the unlimited trial included: the path carried all the
                // sender made. Confirm at full length; if that fails, it is a `hi` like any.
                if let Some(lower) = self.runs.unlimited_full_length_pass(self.tolerance) {
                    return Ok(Found {
                        lower: Some(lower),
                        upper: None,
                    });
                }
                if spent {
                    let lower = self.runs.best_full_length_pass(self.tolerance, f64::INFINITY);
                    return Ok(Found { lower, upper: None });
                }
                self.runs.push(trial(None, final_seconds)?, final_seconds);
                continue;
            };

            let hi_rate = self.runs.rate(hi);
            let lo_rate = bracket.lo.map_or(0.0, |i| self.runs.rate(i));
            let converged = bracket.lo.is_some() && (hi_rate - lo_rate) / hi_rate <= self.precision;
            if let Some(lo) = bracket.lo {
                if self.runs.list[lo].full_length && (converged || spent) {
                    return Ok(Found {
                        lower: Some(lo),
                        upper: Some(hi),
                    });
                }
            }
            if spent {
                let lower = self.runs.best_full_length_pass(self.tolerance, hi_rate);
                return Ok(Found {
                    lower,
                    upper: Some(hi),
                });
            }
            // Converged on a short trial (or one trial left): confirm it at full length.
            if bracket.lo.is_some() && (converged || last_one) {
                self.runs
                    .push(trial(Some(lo_rate), final_seconds)?, final_seconds);
                continue;
            }

            let probe = self.probe(&bracket, lo_rate, hi_rate);
            // Halving has gone as low as is worth trying; a guess under the floor may still
            // pass (a path that carries far less than the sender makes).
            if bracket.lo.is_none() && hi_rate <= self.floor && !probe.is_guess {
                return Ok(Found {
                    lower: None,
                    upper: Some(hi),
                });
            }
            let seconds = if bracket.full_length_only {
                final_seconds
            } else {
                self.trial_seconds
            };
            self.runs.push(trial(Some(probe.pps), seconds)?, seconds);
        }
    }

    /// The next rate to try inside (lo, hi): a guess from what an overloaded trial
    /// delivered, where one is still untried there; otherwise the midpoint.
    fn probe(&self, bracket: &Bracket, lo_rate: f64, hi_rate: f64) -> Probe {
        let guess = if bracket.full_length_only {
            // What the lowest failing full-length trial delivered is what the path carries
            // at full length.
            self.runs
                .list
                .iter()
                .filter(|r| r.full_length && r.is(self.tolerance, Verdict::Fail))
                .min_by(|a, b| a.rate().total_cmp(&b.rate()))
                .map(|r| r.trial.received_pps() * GUESS_MARGIN)
        } else {
            Some(self.first_guess)
        };
        match guess {
            Some(g) if lo_rate < g && g < hi_rate && !self.runs.offered(g, bracket.full_length_only) => {
                Probe {
                    pps: g,
                    is_guess: true,
                }
            }
            _ => Probe {
                pps: if lo_rate > 0.0 {
                    (lo_rate * hi_rate).sqrt()
                } else {
                    hi_rate / 2.0
                },
                is_guess: false,
            },
        }
    }
}

/// The rate a search trial is offered, and whether it is a guess rather than a midpoint.
struct Probe {
    pps: f64,
    is_guess: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    // The plan's defaults (model::plan's NDR_TRIAL_SECONDS, NDR_PRECISION).
    const SHORT: f64 = 0.5;
    const PRECISION: f64 = 0.02;
    const LONG: f64 = 10.0;

    fn search(tolerances_pct: &[f64]) -> NdrSearch {
        NdrSearch {
            tolerances_pct: tolerances_pct.to_vec(),
            trial_seconds: SHORT,
            precision: PRECISION,
        }
    }

    /// A path under test: a sender that goes up to `sender_pps`, and `lost(sent, seconds,
    /// call)` saying how many of `sent` datagrams the path drops.
    struct Path<L> {
        sender_pps: f64,
        lost: L,
        calls: u64,
    }

    impl<L: FnMut(u64, f64, u64) -> u64> Path<L> {
        fn new(sender_pps: f64, lost: L) -> Self {
            Path {
                sender_pps,
                lost,
                calls: 0,
            }
        }

        fn trial(&mut self, offered: Option<f64>, seconds: f64) -> Result<UdpTrial, String> {
            self.calls += 1;
            let pps = offered.unwrap_or(self.sender_pps).min(self.sender_pps);
            let sent = (pps * seconds).round() as u64;
            let lost = (self.lost)(sent, seconds, self.calls).min(sent);
            Ok(UdpTrial {
                offered_pps: offered,
                send_seconds: seconds,
                sent,
                sent_pps: sent as f64 / seconds,
                kept_rate: offered.map(|o| pps >= o * 0.99),
                received: sent - lost,
                lost,
                reordered: 0,
                duplicates: 0,
                corrupted: 0,
                jitter_ms: 0.0,
                receive_seconds: seconds,
                payload_bytes: 0,
                packet_bytes: 0,
                link_bytes: None,
                outside_drops: None,
            })
        }
    }

    /// Drops what exceeds `capacity_pps` over the trial, less what a buffer of `buffer`
    /// datagrams absorbs.
    fn overflow(capacity_pps: f64, buffer: f64) -> impl FnMut(u64, f64, u64) -> u64 {
        move |sent, seconds, _| (sent as f64 - capacity_pps * seconds - buffer).max(0.0) as u64
    }

    fn run<L: FnMut(u64, f64, u64) -> u64>(path: &mut Path<L>, tolerances: &[f64]) -> NdrReport {
        find(&search(tolerances), PacketSize::Fixed(1000), LONG, |o, s| {
            path.trial(o, s)
        })
        .unwrap()
    }

    fn is_full_length(t: &UdpTrial) -> bool {
        t.send_seconds >= LONG
    }

    /// What every bound must be: a full-length lower within tolerance at `pps`, an upper
    /// over it above the lower.
    fn check_bound(b: &NdrBound) {
        if let Some(lower) = &b.lower {
            assert!(is_full_length(lower), "{b:?}");
            assert!(lower.loss_pct() <= b.tolerance_pct, "{b:?}");
            assert!(b.pps > 0.0);
        } else {
            assert_eq!(b.pps, 0.0);
        }
        if let Some(upper) = &b.upper {
            assert!(upper.loss_pct() > b.tolerance_pct, "{b:?}");
            assert!(upper.offered_pps.unwrap_or(upper.sent_pps) > b.pps, "{b:?}");
        }
        assert!((b.mbit_per_s - b.pps * 1000.0 * 8.0 / 1e6).abs() < 1e-9);
    }

    #[test]
    fn ndr_lands_within_precision_of_a_paths_capacity() {
        let capacity = 100_000.0;
        let mut path = Path::new(150_000.0, overflow(capacity, 0.0));
        let report = run(&mut path, &[0.0]);

        assert_eq!(report.max_rate.offered_pps, None);
        let ndr = &report.bounds[0];
        assert_eq!(ndr.name, "NDR");
        check_bound(ndr);
        assert!(
            ndr.pps <= capacity && ndr.pps >= capacity * (1.0 - PRECISION),
            "{}",
            ndr.pps
        );
        let lower = ndr.lower.as_ref().unwrap();
        let upper = ndr.upper.as_ref().unwrap();
        assert_eq!(lower.lost, 0);
        assert!(upper.lost > 0);
        assert!(upper.offered_pps.unwrap() > lower.offered_pps.unwrap());
        assert_eq!(report.trials.len() as u64, path.calls);
        assert_eq!(report.trials[0], report.max_rate);
    }

    #[test]
    fn pdr_is_above_ndr_and_bounds_come_in_ascending_tolerance() {
        let capacity = 100_000.0;
        let mut path = Path::new(150_000.0, overflow(capacity, 0.0));
        let report = run(&mut path, &[0.0, 0.5]);

        let names: Vec<_> = report
            .bounds
            .iter()
            .map(|b| (b.name.as_str(), b.tolerance_pct))
            .collect();
        assert_eq!(names, [("NDR", 0.0), ("PDR", 0.5)]);
        report.bounds.iter().for_each(check_bound);
        let (ndr, pdr) = (&report.bounds[0], &report.bounds[1]);
        assert!(ndr.pps <= pdr.pps);
        // 0.5 % of what is sent may exceed the capacity: up to capacity / 0.995.
        assert!(pdr.pps > capacity && pdr.pps <= capacity / 0.995, "{}", pdr.pps);
    }

    #[test]
    fn a_loss_floor_leaves_no_ndr_but_a_pdr_near_capacity() {
        let capacity = 100_000.0;
        let mut overflowing = overflow(capacity, 0.0);
        // 0.1 to 0.3 % lost at every rate, varying from trial to trial.
        let mut path = Path::new(150_000.0, move |sent, seconds, call| {
            let floor_pct = 0.1 + 0.2 * ((call * 7919) % 101) as f64 / 100.0;
            overflowing(sent, seconds, call) + (sent as f64 * floor_pct / 100.0).ceil() as u64
        });
        let report = run(&mut path, &[0.0, 0.5]);

        report.bounds.iter().for_each(check_bound);
        let (ndr, pdr) = (&report.bounds[0], &report.bounds[1]);
        assert_eq!(ndr.pps, 0.0);
        assert!(ndr.lower.is_none());
        assert!(ndr.upper.is_some());
        assert!(
            (pdr.pps - capacity).abs() < capacity * (PRECISION + 0.005),
            "{}",
            pdr.pps
        );
    }

    #[test]
    fn a_sender_slower_than_the_path_sets_the_bound() {
        let mut path = Path::new(80_000.0, overflow(100_000.0, 0.0));
        let report = run(&mut path, &[0.0, 0.5]);

        for b in &report.bounds {
            check_bound(b);
            assert!(b.upper.is_none(), "{b:?}");
            assert!((b.pps - 80_000.0).abs() < 1.0, "{}", b.pps);
        }
        // The max-rate trial and one full-length confirmation, shared by both tolerances.
        assert_eq!(report.trials.len(), 2);
    }

    #[test]
    fn final_trial_failing_where_short_ones_passed_sends_the_search_lower() {
        // A buffer of 10k datagrams hides 20 kpps of overload for 0.5 s, but only 1 kpps
        // for 10 s: short trials pass up to 120 kpps, full-length ones up to 101 kpps.
        let mut path = Path::new(150_000.0, overflow(100_000.0, 10_000.0));
        let report = run(&mut path, &[0.0]);

        let ndr = &report.bounds[0];
        check_bound(ndr);
        let first_final = report.trials.iter().find(|t| is_full_length(t)).unwrap();
        assert!(first_final.lost > 0, "{first_final:?}");
        assert!(first_final.offered_pps.unwrap() > 120_000.0 * (1.0 - PRECISION));
        assert!(
            ndr.pps <= 101_000.0 && ndr.pps >= 101_000.0 * (1.0 - PRECISION),
            "{}",
            ndr.pps
        );
        assert!(report.trials.len() <= 1 + MAX_TRIALS_PER_TOLERANCE);
    }

    #[test]
    fn loss_that_never_settles_ends_within_the_trial_budget() {
        // Loss that ignores the rate: each trial passes or fails as a hash says, the first
        // one failing. With no precision to reach, only the budget ends each search.
        let mut path = Path::new(150_000.0, |sent, _, call| {
            if call == 1 || (call * 2_654_435_761) % 7 < 3 {
                sent / 10
            } else {
                0
            }
        });
        let never_converges = NdrSearch {
            precision: 0.0,
            ..search(&[0.0, 0.5, 1.0])
        };
        let report = find(&never_converges, PacketSize::Fixed(1000), LONG, |o, s| {
            path.trial(o, s)
        })
        .unwrap();

        assert_eq!(report.trials.len(), 1 + 3 * MAX_TRIALS_PER_TOLERANCE);
        report.bounds.iter().for_each(check_bound);
    }

    #[test]
    fn a_path_far_slower_than_the_sender_is_found_under_the_floor() {
        // 1 Mpps into a path that carries 1 kpps: the floor (20 kpps) must not hide it.
        let mut path = Path::new(1e6, overflow(1_000.0, 0.0));
        let report = run(&mut path, &[0.0]);

        let ndr = &report.bounds[0];
        check_bound(ndr);
        assert!(
            ndr.pps <= 1_000.0 && ndr.pps >= 1_000.0 * (1.0 - PRECISION),
            "{}",
            ndr.pps
        );
    }

    #[test]
    fn a_trial_error_ends_the_search() {
        let mut path = Path::new(150_000.0, overflow(100_000.0, 0.0));
        let mut calls = 0;
        let result = find(&search(&[0.0]), PacketSize::Imix, LONG, |o, s| {
            calls += 1;
            if calls == 3 {
                Err("receiver went away".to_string())
            } else {
                path.trial(o, s)
            }
        });
        assert_eq!(result, Err("receiver went away".to_string()));
        assert_eq!(calls, 3);
    }

    #[test]
    fn a_sender_that_missed_its_rate_counts_at_the_rate_it_sent() {
        let mut path = Path::new(50_000.0, overflow(100_000.0, 0.0));
        let missed = Run {
            trial: path.trial(Some(70_000.0), SHORT).unwrap(),
            full_length: false,
        };
        assert_eq!(missed.trial.kept_rate, Some(false));
        assert_eq!(missed.rate(), 50_000.0);
    }
}
