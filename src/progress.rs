//! How the binary draws [`lab::progress::Progress`]: bars and a spinner on a terminal; for
//! a sweep whose stderr is not a terminal, a line per finished cell; for a child sweep
//! (`matrix --report-cells`), marker lines its parent counts; else nothing.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{HumanDuration, ProgressBar, ProgressStyle};
use lab::error::{LabError, LabResult};
use lab::progress::{CellDone, Eta, Marker, Progress, Quiet, SweepCells};

/// Decimal units (MB = 10^6 bytes), as the tables count them: never indicatif's binary MiB.
const TRANSFER_TEMPLATE: &str =
    "{prefix} [{bar:30}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA {eta}";
/// A timed transfer (`--time`) has no total: bytes and rate beside a spinner.
const TIMED_TEMPLATE: &str = "{prefix} {spinner} {decimal_bytes} {decimal_bytes_per_sec} (elapsed {elapsed})";
/// `{sweep_eta}` is the sweep's own estimate ([`Eta`]: VM boots and cells included), not
/// indicatif's, which would take a VM's cells for as quick as this machine's.
const SWEEP_TEMPLATE: &str = "cell {pos}/{len} [{bar:30}] {msg} (elapsed {elapsed}, ETA {sweep_eta})";

fn on_terminal(no_progress: bool) -> bool {
    !no_progress && std::io::stderr().is_terminal()
}

/// The watcher of one run.
pub fn for_run(no_progress: bool) -> Box<dyn Progress> {
    if on_terminal(no_progress) {
        Box::new(Bars::default())
    } else {
        Box::new(Quiet)
    }
}

/// The watcher of a sweep: a child sweep reports its cells to its parent (on stdout, or
/// appended to `cells_file` by a VM's guest); else bars on a terminal, a line per cell
/// where stderr is not one, nothing with `--no-progress`.
pub fn for_sweep(
    no_progress: bool,
    report_cells: bool,
    cells_file: Option<&Path>,
) -> LabResult<Box<dyn Progress>> {
    if let Some(path) = cells_file {
        let file = File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| LabError::failed(anyhow::anyhow!("{}: {e}", path.display())))?;
        return Ok(Box::new(CellMarkers(Mutex::new(Box::new(SyncedFile(file))))));
    }
    Ok(if report_cells {
        Box::new(CellMarkers(Mutex::new(Box::new(std::io::stdout()))))
    } else if no_progress {
        Box::new(Quiet)
    } else if std::io::stderr().is_terminal() {
        Box::new(Bars::default())
    } else {
        Box::new(CellLines::default())
    })
}

/// The sweep's estimate as the bar shows it.
fn eta_text(eta: &Mutex<Option<Eta>>) -> String {
    match eta
        .lock()
        .expect("eta lock")
        .as_ref()
        .and_then(|e| e.remaining(Instant::now()))
    {
        Some(left) => HumanDuration(left).to_string(),
        None => "?".into(),
    }
}

/// One bar (or spinner) at a time, replaced as the run moves on.
#[derive(Default)]
struct Bars {
    current: Mutex<Option<ProgressBar>>,
    /// The sweep's bar outlives the bars of the transfers inside it.
    sweep: Mutex<Option<ProgressBar>>,
    eta: Arc<Mutex<Option<Eta>>>,
}

impl Bars {
    fn show(&self, bar: ProgressBar) {
        if let Some(old) = self.current.lock().expect("bar lock").replace(bar) {
            old.finish_and_clear();
        }
    }

    fn clear(&self) {
        if let Some(old) = self.current.lock().expect("bar lock").take() {
            old.finish_and_clear();
        }
    }

    /// The bar's length follows the cells now known (a guest counts its own).
    fn resize(&self, bar: &ProgressBar) {
        // The lock is let go first: drawing the bar takes it (`sweep_eta`).
        let total = self.eta.lock().expect("eta lock").as_ref().map(Eta::total);
        if let Some(total) = total {
            bar.set_length(total);
        }
    }
}

fn styled(bar: ProgressBar, template: &str) -> ProgressBar {
    bar.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

impl Progress for Bars {
    fn backend_starting(&self, what: &str) {
        // OpenVPN takes seconds to come up: say what the wait is.
        let spinner = ProgressBar::new_spinner().with_message(format!("starting {what}…"));
        spinner.enable_steady_tick(Duration::from_millis(120));
        self.show(spinner);
    }

    fn backend_started(&self) {
        self.clear();
    }

    fn transfer_started(&self, label: &str, total: u64) {
        let bar = if total == 0 {
            let spinner = styled(ProgressBar::new_spinner(), TIMED_TEMPLATE);
            spinner.enable_steady_tick(Duration::from_millis(120));
            spinner
        } else {
            styled(ProgressBar::new(total), TRANSFER_TEMPLATE)
        };
        bar.set_prefix(label.to_string());
        self.show(bar);
    }

    fn transfer_bytes(&self, bytes: u64) {
        if let Some(bar) = &*self.current.lock().expect("bar lock") {
            bar.set_position(bytes);
        }
    }

    fn transfer_finished(&self) {
        self.clear();
    }

    fn sweep_started(&self, cells: &SweepCells) {
        *self.eta.lock().expect("eta lock") = Some(Eta::new(cells, Instant::now()));
        let eta = Arc::clone(&self.eta);
        let bar = ProgressBar::new(cells.total()).with_style(
            ProgressStyle::with_template(SWEEP_TEMPLATE)
                .expect("valid template")
                .with_key(
                    "sweep_eta",
                    move |_: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = w.write_str(&eta_text(&eta));
                    },
                )
                .progress_chars("=> "),
        );
        *self.sweep.lock().expect("bar lock") = Some(bar);
    }

    fn vm_started(&self) {
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            eta.vm_started(Instant::now());
        }
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            self.resize(bar);
            bar.set_message("booting the VM");
            // No transfer bar of this process moves while the guest works: tick instead.
            bar.enable_steady_tick(Duration::from_secs(1));
        }
    }

    fn phase_cells(&self, cells: u64) {
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            eta.phase_cells(cells);
        }
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            self.resize(bar);
        }
    }

    fn cell_started(&self, label: &str) {
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            bar.set_message(label.to_string());
        }
    }

    fn cell_finished(&self, cell: &CellDone) {
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            eta.cell_finished(Duration::from_secs_f64(cell.elapsed_s), Instant::now());
        }
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            self.resize(bar);
            bar.inc(1);
            bar.set_message(cell.label.clone());
        }
    }

    fn sweep_finished(&self) {
        if let Some(bar) = self.sweep.lock().expect("bar lock").take() {
            bar.finish_and_clear();
        }
    }

    fn note(&self, line: &str) {
        match &*self.sweep.lock().expect("bar lock") {
            Some(bar) => bar.println(format!("ipsec-lab: {line}")),
            None => eprintln!("ipsec-lab: {line}"),
        }
    }
}

/// A line per finished cell on stderr, where it is not a terminal (a pipe, a log file):
/// `ipsec-lab: cell 3/12 LABEL: 812.3 MB/s (4.2 s), ETA 1 minute`.
#[derive(Default)]
struct CellLines {
    eta: Mutex<Option<Eta>>,
}

impl CellLines {
    fn line(&self, cell: &CellDone, now: Instant) -> String {
        let mut eta = self.eta.lock().expect("eta lock");
        let Some(eta) = eta.as_mut() else {
            return format!("ipsec-lab: cell {}", cell.line());
        };
        eta.cell_finished(Duration::from_secs_f64(cell.elapsed_s), now);
        let left = match eta.remaining(now) {
            Some(left) if eta.done() < eta.total() => format!(", ETA {}", HumanDuration(left)),
            _ => String::new(),
        };
        format!(
            "ipsec-lab: cell {}/{} {}{left}",
            eta.done(),
            eta.total(),
            cell.line()
        )
    }
}

impl Progress for CellLines {
    fn sweep_started(&self, cells: &SweepCells) {
        *self.eta.lock().expect("eta lock") = Some(Eta::new(cells, Instant::now()));
    }

    fn vm_started(&self) {
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            eta.vm_started(Instant::now());
        }
    }

    fn phase_cells(&self, cells: u64) {
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            eta.phase_cells(cells);
        }
    }

    fn cell_finished(&self, cell: &CellDone) {
        eprintln!("{}", self.line(cell, Instant::now()));
    }
}

/// A file whose every write reaches the host before the next: a VM's guest writes it
/// through the directory shared with the host, which reads it while the guest runs.
struct SyncedFile(File);

impl Write for SyncedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.sync_data()
    }
}

/// A child sweep's report to its parent: how many cells it holds, then a line per
/// finished cell ([`Marker`]).
struct CellMarkers(Mutex<Box<dyn Write + Send>>);

impl CellMarkers {
    fn send(&self, marker: &Marker) {
        let mut out = self.0.lock().expect("marker lock");
        // A parent that stopped reading loses only its progress, never the sweep.
        let _ = writeln!(out, "{}", marker.line()).and_then(|()| out.flush());
    }
}

impl Progress for CellMarkers {
    fn sweep_started(&self, cells: &SweepCells) {
        self.send(&Marker::Cells(cells.total()));
    }

    fn cell_finished(&self, cell: &CellDone) {
        self.send(&Marker::Done(cell.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25: the sweep bar's ETA was indicatif's, over this process's cells alone.
    #[test]
    fn the_sweep_bar_shows_the_sweeps_own_eta() {
        assert!(SWEEP_TEMPLATE.contains("ETA {sweep_eta}"), "{SWEEP_TEMPLATE}");
        assert!(!SWEEP_TEMPLATE.contains("{eta}"), "{SWEEP_TEMPLATE}");
    }

    #[test]
    fn a_cell_line_counts_the_vm_cells_and_the_last_has_no_eta() {
        let lines = CellLines::default();
        let t0 = Instant::now();
        lines.sweep_started(&SweepCells {
            host: 1,
            vms: vec![2],
        });
        let cell = |label: &str, mb_per_s| CellDone {
            label: label.into(),
            mb_per_s,
            elapsed_s: 2.0,
        };
        assert_eq!(
            lines.line(
                &cell("plain (line rate)", Some(900.0)),
                t0 + Duration::from_secs(2)
            ),
            "ipsec-lab: cell 1/3 plain (line rate): 900.0 MB/s (2.0 s), ETA 34 seconds"
        );
        lines.vm_started();
        lines.phase_cells(1);
        assert_eq!(
            lines.line(&cell("(vm) xfrm 128", None), t0 + Duration::from_secs(40)),
            "ipsec-lab: cell 2/2 (vm) xfrm 128: not run (2.0 s)"
        );
    }

    #[test]
    fn progress_bar_counts_mb_not_mib() {
        let fields: Vec<&str> = TRANSFER_TEMPLATE
            .split('{')
            .filter_map(|f| f.split('}').next())
            .filter(|f| f.contains("bytes"))
            .collect();
        assert_eq!(
            fields,
            ["decimal_bytes", "decimal_total_bytes", "decimal_bytes_per_sec"]
        );
    }
}
