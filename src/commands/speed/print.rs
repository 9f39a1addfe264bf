//! What `ipsec-lab speed` shows: progress lines while it times, then the table (on stderr
//! when stdout carries the JSON) and the JSON report. A child run prints only its JSON.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use lab::progress::{Eta, SweepCells};
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

/// The progress of a run on a terminal (else nothing): one line, redrawn per cell and each
/// second, with the cells done out of all, the time left (from the pace so far, or from
/// --seconds per cell before the first cell is done) and the cell being timed, cut to the
/// terminal's width. A child run shows nothing: its parent's line stands for it.
pub fn progress(plan: &SpeedPlan) -> Box<dyn SpeedProgress> {
    if std::io::stderr().is_terminal() && !plan.child {
        Box::new(Line::new(plan.seconds))
    } else {
        Box::new(speed::NoProgress)
    }
}

struct Line {
    bar: Option<ProgressBar>,
    eta: Arc<Mutex<Option<Eta>>>,
    seconds_per_cell: f64,
    /// When the last cells were done (or the run started).
    last: Instant,
}

impl Line {
    fn new(seconds_per_cell: f64) -> Line {
        Line {
            bar: None,
            eta: Arc::default(),
            seconds_per_cell,
            last: Instant::now(),
        }
    }
}

impl SpeedProgress for Line {
    fn started(&mut self, cells: usize) {
        let now = Instant::now();
        let whole = SweepCells {
            host: cells as u64,
            vms: Vec::new(),
        };
        *self.eta.lock().expect("eta lock") = Some(Eta::new(&whole, now));
        let guess = Duration::from_secs_f64(self.seconds_per_cell * cells as f64);
        let bar = crate::progress::cells_bar(cells as u64, Arc::clone(&self.eta), Some(guess));
        bar.enable_steady_tick(Duration::from_secs(1));
        self.bar = Some(bar);
        self.last = now;
    }

    fn timing(&mut self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("timing {what}"));
        }
    }

    fn cells_done(&mut self, cells: usize) {
        let now = Instant::now();
        // Cells done at once (openssl's row, the soft child's) share the time since the last.
        let each = now.duration_since(self.last) / cells.max(1) as u32;
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            for _ in 0..cells {
                eta.cell_finished(each, now);
            }
        }
        self.last = now;
        if let Some(bar) = &self.bar {
            bar.inc(cells as u64);
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        // The table (or the partial table after Ctrl-C) takes the line's place.
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
