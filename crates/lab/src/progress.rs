//! What a run tells its watcher while it works. The library only reports; the binary
//! draws (progress bars on a terminal, a line per cell in a pipe or for a parent sweep, or
//! nothing).
//!
//! A child sweep (the soft-AES child, the VM's guest) reports to its parent in marker
//! lines ([`Marker`]); [`Eta`] is the sweep's remaining time, the VM boots included.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Every method has a default that does nothing, so a watcher implements what it shows.
pub trait Progress: Send + Sync {
    /// A backend is coming up (OpenVPN takes seconds).
    fn backend_starting(&self, _what: &str) {}
    fn backend_started(&self) {}
    /// A transfer of `total` bytes begins (0: a timed one, `--time`, whose size is known
    /// only at its end); `bytes` then reports how far it got.
    fn transfer_started(&self, _label: &str, _total: u64) {}
    fn transfer_bytes(&self, _bytes: u64) {}
    /// An interval of the transfer closed (`--interval`).
    fn interval(&self, _record: &model::modes::IntervalRecord) {}
    fn transfer_finished(&self) {}
    /// A sweep of `cells` begins; each cell reports its start and end.
    fn sweep_started(&self, _cells: &SweepCells) {}
    /// The next VM phase of the sweep begins (its boot first).
    fn vm_started(&self) {}
    /// The phase under way holds `cells` cells after all (a guest counted its own rows).
    fn phase_cells(&self, _cells: u64) {}
    fn cell_started(&self, _label: &str) {}
    fn cell_finished(&self, _cell: &CellDone) {}
    fn sweep_finished(&self) {}
    /// A UDP trial ended; `stage` says what it was for ("trial", "NDR search", "bare link
    /// NDR search", "load for latency").
    fn udp_trial(&self, _stage: &str, _trial: &model::packets::UdpTrial) {}
    /// A line for the user, printed so it does not tear a progress bar.
    fn note(&self, line: &str) {
        crate::say!("ipsec-lab: {line}");
    }
}

/// Shows nothing but notes.
pub struct Quiet;

impl Progress for Quiet {}

/// The cells a sweep expects, by phase: this machine's (its own process and the soft-AES
/// child), then one VM boot per kernel (estimates until each guest counts its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepCells {
    pub host: u64,
    pub vms: Vec<u64>,
}

impl SweepCells {
    pub fn total(&self) -> u64 {
        self.host + self.vms.iter().sum::<u64>()
    }
}

/// One finished cell: what a line per cell says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellDone {
    /// Row and cipher, e.g. `userspace [auto] AES-128-GCM`.
    pub label: String,
    /// The median MB/s; none when the cell did not run.
    pub mb_per_s: Option<f64>,
    /// The cell's own time (a guest's cells leave its boot out).
    pub elapsed_s: f64,
}

impl CellDone {
    /// `LABEL: 812.3 MB/s (4.2 s)` or `LABEL: not run (0.0 s)`.
    pub fn line(&self) -> String {
        let result = match self.mb_per_s {
            Some(v) => format!("{v:.1} MB/s"),
            None => "not run".into(),
        };
        format!("{}: {result} ({:.1} s)", self.label, self.elapsed_s)
    }
}

/// What a child sweep prints per event with `--report-cells`, a line each.
#[derive(Debug, Clone, PartialEq)]
pub enum Marker {
    /// The child's sweep holds this many cells.
    Cells(u64),
    /// A cell finished.
    Done(CellDone),
}

const CELLS_TAG: &str = "ipsec-lab-cells";
const DONE_TAG: &str = "ipsec-lab-cell-done";

impl Marker {
    pub fn line(&self) -> String {
        match self {
            Marker::Cells(n) => format!("{CELLS_TAG} {n}"),
            Marker::Done(cell) => format!(
                "{DONE_TAG} {}",
                serde_json::to_string(cell).expect("a cell serializes")
            ),
        }
    }

    /// The marker on `line`, if it is one (other output is not).
    pub fn parse(line: &str) -> Option<Marker> {
        let (tag, rest) = line.trim().split_once(' ')?;
        match tag {
            CELLS_TAG => rest.trim().parse().ok().map(Marker::Cells),
            DONE_TAG => serde_json::from_str(rest).ok().map(Marker::Done),
            _ => None,
        }
    }
}

/// A time left as every progress display writes it (`run`'s bar, `matrix`'s bar and cell
/// lines, `speed`'s line): `45 s`, `3 min 5 s`, `1 h 12 min`.
pub fn eta_text(left: Duration) -> String {
    let s = left.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// Until a sweep has timed a VM boot: TCG boots take about half a minute here.
pub const BOOT_GUESS: Duration = Duration::from_secs(30);

/// One phase of a sweep: this machine's cells, or one VM boot and its guest's cells.
#[derive(Debug, Clone)]
struct Phase {
    cells: u64,
    done: u64,
    /// The finished cells' own times.
    spent: Duration,
    started: Option<Instant>,
    /// Start to the end of its last finished cell.
    last: Option<Instant>,
    /// A VM phase's boot: its start to its first cell's start.
    boot: Option<Duration>,
    vm: bool,
}

/// The remaining time of a sweep: each phase's cells left at the mean time of that phase's
/// finished cells (a phase with none yet: the mean of all cells seen so far), plus a boot
/// per VM phase not yet past its boot (the boot timed earlier in the sweep, else
/// [`BOOT_GUESS`]). Pure: the caller passes the clock.
#[derive(Debug, Clone)]
pub struct Eta {
    phases: Vec<Phase>,
    current: usize,
}

impl Eta {
    pub fn new(cells: &SweepCells, now: Instant) -> Eta {
        let phase = |cells, vm| Phase {
            cells,
            done: 0,
            spent: Duration::ZERO,
            started: None,
            last: None,
            boot: None,
            vm,
        };
        let mut phases = vec![phase(cells.host, false)];
        phases.extend(cells.vms.iter().map(|n| phase(*n, true)));
        phases[0].started = Some(now);
        Eta { phases, current: 0 }
    }

    /// All the cells, as now known.
    pub fn total(&self) -> u64 {
        self.phases.iter().map(|p| p.cells).sum()
    }

    pub fn done(&self) -> u64 {
        self.phases.iter().map(|p| p.done).sum()
    }

    /// The phase under way ended: it holds what it finished.
    pub fn phase_ended(&mut self) {
        let ended = &mut self.phases[self.current];
        ended.cells = ended.done;
    }

    /// The next VM phase begins, after the one before it ended.
    pub fn vm_started(&mut self, now: Instant) {
        self.phase_ended();
        if self.current + 1 < self.phases.len() {
            self.current += 1;
        } else {
            // More VM phases than planned: count it anyway.
            self.phases.push(Phase {
                cells: 0,
                vm: true,
                ..self.phases[self.current].clone()
            });
            self.current = self.phases.len() - 1;
        }
        let phase = &mut self.phases[self.current];
        *phase = Phase {
            done: 0,
            spent: Duration::ZERO,
            started: Some(now),
            last: None,
            boot: None,
            ..phase.clone()
        };
    }

    /// The phase under way holds `cells` cells (never fewer than it finished).
    pub fn phase_cells(&mut self, cells: u64) {
        let phase = &mut self.phases[self.current];
        phase.cells = cells.max(phase.done);
    }

    /// A cell of the phase under way finished at `now` after `elapsed` of its own.
    pub fn cell_finished(&mut self, elapsed: Duration, now: Instant) {
        let phase = &mut self.phases[self.current];
        if phase.vm && phase.done == 0 {
            if let Some(started) = phase.started {
                phase.boot = Some(now.saturating_duration_since(started).saturating_sub(elapsed));
            }
        }
        phase.done += 1;
        phase.cells = phase.cells.max(phase.done);
        phase.spent += elapsed;
        phase.last = Some(now);
    }

    /// The sweep's remaining time at `now`; none before any cell finished (nothing to go by).
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        let (done, spent) = self.phases.iter().fold((0u32, Duration::ZERO), |(n, t), p| {
            (n + p.done as u32, t + p.spent)
        });
        if done == 0 {
            return None;
        }
        let mean_all = spent / done;
        let boot = self
            .phases
            .iter()
            .rev()
            .find_map(|p| p.boot)
            .unwrap_or(BOOT_GUESS);
        let mut left = Duration::ZERO;
        for (i, p) in self.phases.iter().enumerate().skip(self.current) {
            let mean = if p.done > 0 {
                p.spent / p.done as u32
            } else {
                mean_all
            };
            let cells_left = mean * (p.cells - p.done) as u32;
            if i > self.current {
                left += cells_left + if p.vm { boot } else { Duration::ZERO };
                continue;
            }
            // The phase under way: what its boot and its cell in progress have used.
            let since = p
                .last
                .or(p.started)
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
            let booting = p.vm && p.done == 0;
            let ahead = cells_left + if booting { boot } else { Duration::ZERO };
            let used = if p.cells > p.done || booting {
                since
            } else {
                Duration::ZERO
            };
            left += ahead.saturating_sub(used);
        }
        Some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn eta_text_is_short_and_one_format() {
        assert_eq!(eta_text(Duration::from_millis(400)), "0 s");
        assert_eq!(eta_text(s(45)), "45 s");
        assert_eq!(eta_text(s(185)), "3 min 5 s");
        assert_eq!(eta_text(s(2 * 3600 + 12 * 60 + 9)), "2 h 12 min");
    }

    #[test]
    fn markers_round_trip_and_other_lines_are_none() {
        let done = Marker::Done(CellDone {
            label: "xfrm AES-128-GCM".into(),
            mb_per_s: Some(12.5),
            elapsed_s: 3.25,
        });
        assert_eq!(Marker::parse(&done.line()), Some(done));
        assert_eq!(Marker::parse("ipsec-lab-cells 7\r"), Some(Marker::Cells(7)));
        assert_eq!(Marker::parse("| plain (line rate) | 812.3 |"), None);
        assert_eq!(Marker::parse("ipsec-lab-cell-done"), None);
    }

    #[test]
    fn a_cell_line_says_the_result_or_not_run_and_its_time() {
        let mut cell = CellDone {
            label: "userspace [auto] AES-128-GCM".into(),
            mb_per_s: Some(812.34),
            elapsed_s: 4.21,
        };
        assert_eq!(cell.line(), "userspace [auto] AES-128-GCM: 812.3 MB/s (4.2 s)");
        cell.mb_per_s = None;
        assert_eq!(cell.line(), "userspace [auto] AES-128-GCM: not run (4.2 s)");
    }

    #[test]
    fn eta_counts_the_vm_cells_and_a_boot_before_the_vm_phase() {
        let t0 = Instant::now();
        let mut eta = Eta::new(
            &SweepCells {
                host: 2,
                vms: vec![3],
            },
            t0,
        );
        assert_eq!(eta.total(), 5);
        assert_eq!(eta.remaining(t0), None);
        eta.cell_finished(s(10), t0 + s(10));
        // One host cell left (10 s), three VM cells at the same rate, and a boot.
        assert_eq!(eta.remaining(t0 + s(10)), Some(s(10 + 30 + BOOT_GUESS.as_secs())));
        // Time spent in the cell under way comes off.
        assert_eq!(eta.remaining(t0 + s(14)), Some(s(6 + 30 + BOOT_GUESS.as_secs())));
    }

    #[test]
    fn eta_takes_the_guests_count_its_cells_rate_and_the_timed_boot() {
        let t0 = Instant::now();
        let mut eta = Eta::new(
            &SweepCells {
                host: 1,
                vms: vec![4, 4],
            },
            t0,
        );
        eta.cell_finished(s(2), t0 + s(2));
        eta.vm_started(t0 + s(2));
        // Booting: the guess, less what the boot has used.
        assert_eq!(eta.remaining(t0 + s(12)), Some(s(20 + 4 * 2 + 30 + 4 * 2)));
        // The guest counted 3 cells; its first took 20 s after a 40 s boot.
        eta.phase_cells(3);
        eta.cell_finished(s(20), t0 + s(62));
        assert_eq!(eta.total(), 1 + 3 + 4);
        assert_eq!(eta.done(), 2);
        // Two cells left here at 20 s, then a 40 s boot and 4 cells at the mean of all (22/2 s).
        assert_eq!(eta.remaining(t0 + s(62)), Some(s(2 * 20 + 40 + 4 * 11)));
        eta.cell_finished(s(20), t0 + s(82));
        eta.cell_finished(s(20), t0 + s(102));
        eta.vm_started(t0 + s(102));
        assert_eq!(eta.total(), 1 + 3 + 4);
    }

    #[test]
    fn eta_ends_at_zero_and_a_phase_that_finished_short_shrinks() {
        let t0 = Instant::now();
        let mut eta = Eta::new(
            &SweepCells {
                host: 1,
                vms: vec![5, 2],
            },
            t0,
        );
        eta.cell_finished(s(1), t0 + s(1));
        eta.vm_started(t0 + s(1));
        eta.cell_finished(s(1), t0 + s(40));
        // That guest stopped after one cell.
        eta.vm_started(t0 + s(41));
        assert_eq!(eta.total(), 1 + 1 + 2);
        eta.cell_finished(s(1), t0 + s(70));
        eta.phase_ended();
        assert_eq!((eta.done(), eta.total()), (3, 3));
        assert_eq!(eta.remaining(t0 + s(75)), Some(Duration::ZERO));
    }
}
