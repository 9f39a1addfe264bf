//! How the binary draws [`lab::progress::Progress`]: bars and a spinner on a terminal, a
//! line per finished cell for a parent sweep (`matrix --report-cells`), else nothing.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use lab::progress::{Progress, Quiet};

/// Decimal units (MB = 10^6 bytes), as the tables count them: never indicatif's binary MiB.
const TRANSFER_TEMPLATE: &str =
    "{prefix} [{bar:30}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA {eta}";
/// A timed transfer (`--time`) has no total: bytes and rate beside a spinner.
const TIMED_TEMPLATE: &str = "{prefix} {spinner} {decimal_bytes} {decimal_bytes_per_sec} (elapsed {elapsed})";
const SWEEP_TEMPLATE: &str = "cell {pos}/{len} [{bar:30}] {msg} (elapsed {elapsed}, ETA {eta})";

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

/// The watcher of a sweep; a child sweep reports each finished cell on stdout instead.
pub fn for_sweep(no_progress: bool, report_cells: bool) -> Box<dyn Progress> {
    if report_cells {
        Box::new(CellLines)
    } else {
        for_run(no_progress)
    }
}

/// One bar (or spinner) at a time, replaced as the run moves on.
#[derive(Default)]
struct Bars {
    current: Mutex<Option<ProgressBar>>,
    /// The sweep's bar outlives the bars of the transfers inside it.
    sweep: Mutex<Option<ProgressBar>>,
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

    fn sweep_started(&self, cells: u64) {
        *self.sweep.lock().expect("bar lock") = Some(styled(ProgressBar::new(cells), SWEEP_TEMPLATE));
    }

    fn cell_started(&self, label: &str) {
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            bar.set_message(label.to_string());
        }
    }

    fn cell_finished(&self) {
        if let Some(bar) = &*self.sweep.lock().expect("bar lock") {
            bar.inc(1);
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

/// A child sweep's report to its parent: one line per finished cell.
struct CellLines;

impl Progress for CellLines {
    fn cell_finished(&self) {
        println!("{}", lab::sweep::CELL_DONE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
