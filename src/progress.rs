//! How the binary draws [`lab::progress::Progress`]: bars and a spinner on a terminal; for
//! a sweep whose stderr is not a terminal, a line per finished cell; for a child sweep
//! (`matrix --report-cells`), marker lines its parent counts; else nothing. A run with
//! `--interval` or `--json-stream` shows its intervals instead ([`Live`]): a line each, or
//! a JSON object each on stdout, live for a local run and from the report afterwards for a
//! VM's (whose console is not the user's).

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use lab::error::{LabError, LabResult};
use lab::progress::{eta_text, CellDone, Eta, Marker, Progress, Quiet, SweepCells};
use model::modes::IntervalRecord;
use model::packets::UdpTrial;
use model::RunReport;

/// Decimal units (MB = 10^6 bytes), as the tables count them: never indicatif's binary MiB.
/// Every template ends in `{wide_msg}` (the label), cut to what the terminal has left, so a
/// line never wraps: a wrapped line is redrawn as copies.
const TRANSFER_TEMPLATE: &str =
    "[{bar:12}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA {left} {wide_msg}";
/// A timed transfer (`--time`) has no total: bytes and rate beside a spinner.
const TIMED_TEMPLATE: &str =
    "{spinner} {decimal_bytes} {decimal_bytes_per_sec} (elapsed {elapsed}) {wide_msg}";
/// A sweep's (and `speed`'s) cells: `{left}` is the sweep's own estimate ([`Eta`]: VM boots
/// and cells included), not indicatif's, which would take a VM's cells for as quick as this
/// machine's. The count is of cells done: the one under way is not among them.
const CELLS_TEMPLATE: &str = "{pos}/{len} cells done [{bar:12}] ETA {left}: {wide_msg}";

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

/// How intervals are shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Show {
    /// A line per interval (and one per stream under it with `-P N`); on stderr when
    /// stdout carries JSON. `period_s`: the `--interval`, to tell a short interval.
    Lines { to_stderr: bool, period_s: f64 },
    /// `--json-stream`: an object per interval on stdout, the report last.
    JsonStream,
}

/// Prints intervals as they close.
pub struct Live {
    pub show: Show,
}

impl Progress for Live {
    fn interval(&self, record: &IntervalRecord) {
        emit_interval(self.show, record);
    }

    fn udp_trial(&self, stage: &str, trial: &UdpTrial) {
        if self.show == Show::JsonStream {
            emit_trial(stage, trial);
        }
    }
}

/// `--udp --json-stream`: an object per trial as it ends, what it was for beside it.
fn emit_trial(stage: &str, trial: &UdpTrial) {
    let _ = crate::output::stream_event("trial", &serde_json::json!({ "stage": stage, "trial": trial }));
}

fn emit_interval(show: Show, record: &IntervalRecord) {
    match show {
        Show::Lines {
            to_stderr: false,
            period_s,
        } => println!("{}", report::run::modes::interval_lines(record, period_s)),
        Show::Lines {
            to_stderr: true,
            period_s,
        } => eprintln!("{}", report::run::modes::interval_lines(record, period_s)),
        Show::JsonStream => {
            let _ = crate::output::stream_event("interval", record);
        }
    }
}

/// The intervals (or UDP trials) of a report that was not watched live (a VM's), shown now.
pub fn replay(show: Show, report: &RunReport) {
    for record in report.modes.iter().flat_map(|m| &m.intervals) {
        emit_interval(show, record);
    }
    if let (Show::JsonStream, Some(udp)) = (show, &report.udp) {
        let searches = [
            (udp.baseline.as_ref(), "bare link NDR search"),
            (udp.ndr.as_ref(), "NDR search"),
        ];
        for (ndr, stage) in searches {
            for trial in ndr.iter().flat_map(|n| &n.trials) {
                emit_trial(stage, trial);
            }
        }
        for trial in &udp.trials {
            emit_trial("trial", trial);
        }
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

/// A bar of `template`, whose `{left}` is what `left` says, in [`eta_text`]'s one format
/// (`?` where it cannot tell yet).
fn bar_with_eta(
    bar: ProgressBar,
    template: &str,
    left: impl Fn(&ProgressState) -> Option<Duration> + Clone + Send + Sync + 'static,
) -> ProgressBar {
    bar.with_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .with_key(
                "left",
                move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = w.write_str(&left(state).map_or_else(|| "?".into(), eta_text));
                },
            )
            .progress_chars("=> "),
    )
}

/// The bar of a sweep of `cells` (or of `speed`'s cells): its estimate from `eta`, else
/// `guess` before the first cell is done.
pub fn cells_bar(cells: u64, eta: Arc<Mutex<Option<Eta>>>, guess: Option<Duration>) -> ProgressBar {
    bar_with_eta(ProgressBar::new(cells), CELLS_TEMPLATE, move |_| {
        eta.lock()
            .expect("eta lock")
            .as_ref()
            .and_then(|e| e.remaining(Instant::now()))
            .or(guess)
    })
}

/// The bar of a transfer of `total` bytes (0: a timed one, a spinner).
fn transfer_bar(label: &str, total: u64) -> ProgressBar {
    let bar = if total == 0 {
        let spinner = ProgressBar::new_spinner()
            .with_style(ProgressStyle::with_template(TIMED_TEMPLATE).expect("valid template"));
        spinner.enable_steady_tick(Duration::from_millis(120));
        spinner
    } else {
        bar_with_eta(ProgressBar::new(total), TRANSFER_TEMPLATE, |state| {
            (state.pos() > 0).then(|| state.eta())
        })
    };
    bar.set_message(label.to_string());
    bar
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
        self.show(transfer_bar(label, total));
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
        let bar = cells_bar(cells.total(), Arc::clone(&self.eta), None);
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
            bar.set_message(format!("running {label}"));
        }
    }

    fn cell_finished(&self, cell: &CellDone) {
        if let Some(eta) = &mut *self.eta.lock().expect("eta lock") {
            eta.cell_finished(Duration::from_secs_f64(cell.elapsed_s), Instant::now());
        }
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            self.resize(bar);
            bar.inc(1);
            bar.set_message(format!("done {}", cell.line()));
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
            Some(left) if eta.done() < eta.total() => format!(", ETA {}", eta_text(left)),
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

    /// A terminal `width` columns wide that keeps what is drawn on it.
    #[derive(Clone, Debug)]
    struct Screen {
        width: u16,
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl Screen {
        fn new(width: u16) -> Screen {
            Screen {
                width,
                lines: Arc::default(),
            }
        }

        /// Draws `bar` on this screen now and returns its line.
        fn draw(&self, bar: &ProgressBar) -> String {
            self.lines.lock().unwrap().clear();
            bar.set_draw_target(indicatif::ProgressDrawTarget::term_like(Box::new(self.clone())));
            bar.tick();
            let lines = self.lines.lock().unwrap();
            let line = lines
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .cloned()
                .unwrap_or_default();
            let width = line.chars().count();
            assert!(
                width <= self.width as usize,
                "{width} columns on {}: {line:?}",
                self.width
            );
            line
        }
    }

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            self.width
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.lines.lock().unwrap().push(s.to_string());
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.write_line(s)
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue 43: `run`'s bar was 81 columns (it wrapped at 80 and left copies), and `matrix`'s
    /// with a long label more. Every bar fits the terminal, 80 columns or fewer, the label cut.
    #[test]
    fn every_bar_fits_the_terminal() {
        let label = "userspace [auto] 4 streams, 2 tunnel threads AES-256-CBC-HMAC-SHA256";
        for width in [80, 60] {
            let screen = Screen::new(width);
            let bar = transfer_bar(label, 100_000_000_000);
            bar.set_position(99_999_999_999);
            let line = screen.draw(&bar);
            assert!(line.contains("ETA ") && line.contains("users"), "{line}");
            let spinner = transfer_bar(label, 0);
            // A bar that ticks by itself ignores tick(): draw it by hand here.
            spinner.disable_steady_tick();
            let line = screen.draw(&spinner);
            assert!(line.contains("users"), "{line}");
            let bar = cells_bar(13, Arc::default(), Some(Duration::from_secs(185)));
            bar.set_message(format!("running {label}"));
            let line = screen.draw(&bar);
            assert!(line.starts_with("0/13 cells done ["), "{line}");
            assert!(line.contains("ETA 3 min 5 s: running users"), "{line}");
        }
    }

    /// Issue 43: the matrix bar said 13/13 while the last cell ran; it counts cells done and
    /// says which one runs.
    #[test]
    fn the_sweep_bar_counts_cells_done_and_names_the_one_running() {
        let bars = Bars::default();
        let screen = Screen::new(100);
        bars.sweep_started(&SweepCells { host: 2, vms: vec![] });
        let bar = || bars.sweep.lock().unwrap().clone().unwrap();
        bars.cell_started("plain (line rate)");
        bars.cell_finished(&CellDone {
            label: "plain (line rate)".into(),
            mb_per_s: Some(900.0),
            elapsed_s: 2.0,
        });
        bars.cell_started("userspace [auto] AES-128-GCM");
        let line = screen.draw(&bar());
        assert!(
            line.starts_with("1/2 cells done [") && line.ends_with("running userspace [auto] AES-128-GCM"),
            "{line}"
        );
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
            "ipsec-lab: cell 1/3 plain (line rate): 900.0 MB/s (2.0 s), ETA 34 s"
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
