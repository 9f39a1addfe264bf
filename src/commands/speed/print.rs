//! What `ipsec-lab speed` shows: progress lines while it times, then the table (on stderr
//! when stdout carries the JSON) and the JSON report. A child run prints only its JSON.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use lab::{LabError, LabResult};
use speed::{SpeedPlan, SpeedProgress, SpeedReport, Units};

use crate::output;

/// Prints the table unless this is a child run, and writes the JSON where `json` says.
pub fn emit(report: &SpeedReport, units: Units, json: Option<&Path>, child: bool) -> LabResult<()> {
    if !child {
        output::print_human(&speed::report::render(report, units), json);
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report).map_err(LabError::failed)?;
        output::write_text(path, &(text + "\n"))?;
    }
    Ok(())
}

/// The progress of a run on a terminal (else nothing): a "timing …" line per suite and
/// direction of a row, with the cells done out of all and an estimate of the time left (from
/// the pace so far, or from --seconds per cell before the first cell is done). A child run
/// has no overall view: its lines carry none.
pub fn progress(plan: &SpeedPlan) -> Box<dyn SpeedProgress> {
    if std::io::stderr().is_terminal() {
        Box::new(Lines::new(plan.seconds, !plan.child))
    } else {
        Box::new(speed::NoProgress)
    }
}

struct Lines {
    total: usize,
    done: usize,
    seconds_per_cell: f64,
    started: Instant,
    overall: bool,
}

impl Lines {
    fn new(seconds_per_cell: f64, overall: bool) -> Lines {
        Lines {
            total: 0,
            done: 0,
            seconds_per_cell,
            started: Instant::now(),
            overall,
        }
    }

    fn status(&self) -> String {
        let left = self.total.saturating_sub(self.done) as f64;
        let per_cell = if self.done > 0 {
            self.started.elapsed().as_secs_f64() / self.done as f64
        } else {
            self.seconds_per_cell
        };
        let seconds = (left * per_cell).round() as u64;
        let eta = if seconds >= 90 {
            format!("about {} min left", (seconds + 30) / 60)
        } else {
            format!("about {seconds} s left")
        };
        format!("[cell {}/{}, {eta}]", (self.done + 1).min(self.total), self.total)
    }
}

impl SpeedProgress for Lines {
    fn started(&mut self, cells: usize) {
        self.total = cells;
        self.started = Instant::now();
    }

    fn timing(&mut self, what: &str) {
        if self.overall && self.total > 0 {
            eprintln!("timing {what} {}", self.status());
        } else {
            eprintln!("timing {what}");
        }
    }

    fn cells_done(&mut self, cells: usize) {
        self.done += cells;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_speed_shows_an_overall_eta() {
        // 8 cells, half a second each.
        let mut lines = Lines::new(0.5, true);
        lines.started(8);
        assert_eq!(lines.status(), "[cell 1/8, about 4 s left]");
        lines.cells_done(8);
        assert_eq!(lines.status(), "[cell 8/8, about 0 s left]");
        let mut lines = Lines::new(1.0, true);
        lines.started(560);
        assert!(lines.status().ends_with("min left]"), "{}", lines.status());
    }
}
