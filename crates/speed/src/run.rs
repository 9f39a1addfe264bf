//! Measuring a [`SpeedPlan`]: each implementation's rows in this process (after its
//! known-answer tests), the kernel's through AF_ALG, the soft rows in a child of this binary
//! with hardware AES masked, and `openssl speed` beside them, into one [`SpeedReport`].
//! Tells a [`SpeedProgress`] how far it got; leaves drawing that, and printing the report,
//! to the binary.

use crypto::{CryptoChoice, CryptoError, Implementation, AES_BLOCK_LEN};
use model::Environment;

use crate::measure::{measure_cell, measure_cell_with, Method};
use crate::ops::{self, OpError};
use crate::plan::{Mode, SpeedImpl, SpeedPlan};
use crate::report::{Interruption, Record, RecordHead, Skipped, SpeedReport, SPEED_SCHEMA_VERSION};
use crate::suite::CryptoOp;
use crate::{kernel, openssl, stop, tcrypt, SpeedError};

/// What a run tells its watcher while it works. Every method defaults to nothing.
pub trait SpeedProgress {
    /// The run will time `cells` cells (see [`SpeedPlan::cells`]).
    fn started(&mut self, _cells: usize) {}
    /// Timing `what` begins, e.g. `aws-lc-rs aes-128-cbc encrypt 1400 B`: one cell, or for
    /// what is timed in one piece (openssl's row, the soft child's rows) all its cells.
    fn timing(&mut self, _what: &str) {}
    /// `cells` more cells are done: timed, skipped, or timed in a child process.
    fn cells_done(&mut self, _cells: usize) {}
}

/// Shows nothing.
pub struct NoProgress;

impl SpeedProgress for NoProgress {}

/// Counts the cells done, so that a row's skipped cells can be counted as done too and the
/// watcher never hears of more cells than the run has.
struct Tally<'a> {
    watcher: &'a mut dyn SpeedProgress,
    done: usize,
    total: usize,
}

impl Tally<'_> {
    fn timing(&mut self, what: &str) {
        self.watcher.timing(what);
    }

    fn advance(&mut self, cells: usize) {
        let cells = cells.min(self.total - self.done);
        self.done += cells;
        if cells > 0 {
            self.watcher.cells_done(cells);
        }
    }
}

/// Err once a stop was requested ([`stop`]): the run then ends with the cells done.
fn go_on() -> Result<(), SpeedError> {
    match stop::requested() {
        Some(_) => Err(SpeedError::Interrupted),
        None => Ok(()),
    }
}

/// Times one crypto implementation in this process: self-test first, then every cell.
fn measure_here(
    choice: CryptoChoice,
    plan: &SpeedPlan,
    method: &Method,
    report: &mut SpeedReport,
    progress: &mut Tally,
) -> Result<(), SpeedError> {
    let imp = Implementation::new(choice).map_err(|source| SpeedError::Implementation {
        implementation: choice.to_string(),
        source,
    })?;
    crypto::self_test(&imp)?;
    let info = imp.info();
    for &suite in &plan.suites {
        for &direction in suite.crypto_ops() {
            if plan.mode == Mode::Stream {
                // What has no stream form in this library is said once, not timed.
                if let Err(e @ (OpError::NoStream(_) | OpError::Crypto(CryptoError::NoStream { .. }))) =
                    ops::build_stream(&imp, suite, direction, AES_BLOCK_LEN)
                {
                    report.skipped.push(Skipped {
                        implementation: choice.to_string(),
                        suite: Some(format!("{suite} {direction}")),
                        reason: e.to_string(),
                    });
                    continue;
                }
            }
            for &size in &plan.sizes {
                progress.timing(&format!("{choice} {suite} {direction} {size} B"));
                let repeats = measure_cell(&imp, suite, direction, size, 1, method)?;
                progress.advance(1);
                let head = RecordHead {
                    implementation: choice.to_string(),
                    library: imp.library_text(),
                    hardware_aes: Some(info.hardware_aes),
                    suite: suite.name(),
                    direction,
                    block_bytes: size,
                    threads: plan.threads,
                    driver: None,
                    virtualization: None,
                    emulated: false,
                    mode: plan.mode,
                };
                report.records.extend(Record::from_repeats(
                    head,
                    repeats,
                    method.repeat_duration.as_secs_f64(),
                ));
            }
        }
    }
    Ok(())
}

/// `openssl speed`, a row (every size) per run of it.
fn openssl_records(
    plan: &SpeedPlan,
    report: &mut SpeedReport,
    progress: &mut Tally,
) -> Result<(), SpeedError> {
    let Some(version) = openssl::version() else {
        report.skipped.push(Skipped {
            implementation: "openssl".into(),
            suite: None,
            reason: openssl::OpensslError::NotInstalled.to_string(),
        });
        return Ok(());
    };
    for &suite in &plan.suites {
        for &direction in suite.crypto_ops() {
            progress.timing(&format!(
                "openssl {suite} {direction}, {} sizes at once",
                plan.sizes.len()
            ));
            let result = openssl::run_timed(
                suite,
                direction,
                &plan.sizes,
                plan.seconds,
                plan.threads,
                plan.clock,
            );
            // A stop kills openssl at once (openssl::run_timed): what it left is no row.
            go_on()?;
            progress.advance(plan.sizes.len());
            match result {
                Ok(cells) => {
                    for c in cells {
                        let head = RecordHead {
                            implementation: "openssl".into(),
                            library: version.clone(),
                            hardware_aes: None,
                            suite: suite.name(),
                            direction,
                            block_bytes: c.block_bytes,
                            threads: plan.threads,
                            driver: None,
                            virtualization: None,
                            emulated: false,
                            // openssl speed -evp has one loop: one context, an update per block.
                            mode: Mode::Stream,
                        };
                        let mb = c.bytes_per_s / 1e6;
                        report.records.extend(Record::from_repeats(
                            head,
                            vec![mb],
                            plan.seconds.round().max(1.0),
                        ));
                    }
                }
                Err(e) => report.skipped.push(Skipped {
                    implementation: "openssl".into(),
                    suite: Some(format!("{suite} {direction}")),
                    reason: e.to_string(),
                }),
            }
        }
    }
    Ok(())
}

/// Times the kernel rows through AF_ALG in this process: each suite passes its
/// known-answer tests first; a suite the kernel lacks or fails is skipped with its reason.
fn measure_kernel(
    plan: &SpeedPlan,
    method: &Method,
    report: &mut SpeedReport,
    progress: &mut Tally,
) -> Result<(), SpeedError> {
    let skip = |suite: Option<String>, reason: String| Skipped {
        implementation: "kernel".into(),
        suite,
        reason,
    };
    if report.environment.is_uml() {
        return measure_kernel_by_tcrypt(plan, report, progress);
    }
    let probe = kernel::probe();
    if probe.af_alg.is_err() {
        report.skipped.push(skip(None, probe.skip_reason()));
        return Ok(());
    }
    let env = &report.environment;
    let virtualization = Some(env.virtualization.clone()).filter(|v| v != "host");
    for &suite in &plan.suites {
        let verified = match kernel::self_test(suite) {
            Ok(v) => v,
            Err(e) => {
                report
                    .skipped
                    .push(skip(Some(suite.name()), format!("not timed: {e}")));
                continue;
            }
        };
        for &direction in suite.crypto_ops() {
            for &size in &plan.sizes {
                progress.timing(&format!(
                    "kernel {suite} {direction} {size} B ({})",
                    verified.driver
                ));
                let build = || kernel::build(suite, direction, size);
                let measured = measure_cell_with(&build, method);
                progress.advance(1);
                let repeats = match measured {
                    Ok(r) => r,
                    Err(OpError::Interrupted) => return Err(SpeedError::Interrupted),
                    Err(e) => {
                        report.skipped.push(skip(
                            Some(format!("{suite} {direction} {size} B")),
                            format!("failed while timed: {e}"),
                        ));
                        continue;
                    }
                };
                let head = RecordHead {
                    implementation: "kernel".into(),
                    library: format!("linux {} via AF_ALG", env.kernel_release),
                    hardware_aes: None,
                    suite: suite.name(),
                    direction,
                    block_bytes: size,
                    threads: plan.threads,
                    driver: Some(verified.driver.clone()),
                    virtualization: virtualization.clone(),
                    emulated: env.is_emulated(),
                    mode: Mode::Packet,
                };
                report.records.extend(Record::from_repeats(
                    head,
                    repeats,
                    method.repeat_duration.as_secs_f64(),
                ));
            }
        }
    }
    Ok(())
}

/// The kernel rows in user-mode Linux, from tcrypt, the kernel's own speed test: AF_ALG's
/// two system calls per block cost UML more than the crypto does, so timed through it the
/// rows would be the cost of a UML system call. tcrypt times each of its own block sizes for
/// a second ([`tcrypt::measure`], shared by the sizes and suites that need the same load);
/// a size between them is read off the line through its neighbours. `--seconds` and
/// `--repeats` do not apply: one figure per cell.
fn measure_kernel_by_tcrypt(
    plan: &SpeedPlan,
    report: &mut SpeedReport,
    progress: &mut Tally,
) -> Result<(), SpeedError> {
    let release = report.environment.kernel_release.clone();
    let virtualization = Some(report.environment.virtualization.clone());
    for &suite in &plan.suites {
        for &size in &plan.sizes {
            progress.timing(&format!(
                "kernel {suite} {size} B via tcrypt (about {} s a suite)",
                tcrypt::expected_duration(suite).as_secs()
            ));
            let timed = tcrypt::measure(suite, size);
            go_on()?;
            progress.advance(suite.crypto_ops().len());
            let timed = match timed {
                Ok(t) => t,
                Err(e) => {
                    report.skipped.push(Skipped {
                        implementation: "kernel".into(),
                        suite: Some(format!("{suite} {size} B")),
                        reason: format!("tcrypt could not time it: {e}"),
                    });
                    continue;
                }
            };
            for &direction in suite.crypto_ops() {
                let mb_per_s = match direction {
                    CryptoOp::Decrypt => timed.decrypt_mb_per_s,
                    _ => timed.encrypt_mb_per_s,
                };
                let head = RecordHead {
                    implementation: "kernel".into(),
                    library: format!(
                        "linux {release} via tcrypt (the kernel's own speed test: 1 s per block size it times, \
                         other sizes read off the line through the nearest two)"
                    ),
                    hardware_aes: None,
                    suite: suite.name(),
                    direction,
                    block_bytes: size,
                    threads: 1,
                    driver: Some(timed.driver.clone()),
                    virtualization: virtualization.clone(),
                    emulated: false,
                    mode: Mode::Packet,
                };
                report
                    .records
                    .extend(Record::from_repeats(head, vec![mb_per_s], 1.0));
            }
        }
    }
    Ok(())
}

/// Measures what `plan` asks for, showing no progress.
pub fn measure(plan: &SpeedPlan) -> Result<SpeedReport, SpeedError> {
    measure_with(plan, None, &mut no_soft_rows, &mut NoProgress)
}

/// For callers that cannot start a child with hardware AES masked: soft rows are refused.
pub fn no_soft_rows(_: &SpeedPlan) -> Result<SpeedReport, SpeedError> {
    Err(SpeedError::SoftElsewhere)
}

/// Measures what `plan` asks for, telling `progress` how far it got; with `guest`, the
/// kernel rows are that report's (a run of [`SpeedPlan::child_args`] elsewhere, e.g. the
/// VM) instead of this kernel's. `soft_rows` times the soft rows where this process has
/// hardware AES (they need a process started with it masked: a child of the binary).
///
/// A stop request ([`stop`]) ends the run within a fraction of a second with the cells
/// done so far, in a report marked [`SpeedReport::interrupted`].
pub fn measure_with<E: From<SpeedError>>(
    plan: &SpeedPlan,
    guest: Option<SpeedReport>,
    soft_rows: &mut dyn FnMut(&SpeedPlan) -> Result<SpeedReport, E>,
    progress: &mut dyn SpeedProgress,
) -> Result<SpeedReport, E> {
    let method = Method {
        mode: plan.mode,
        clock: plan.clock,
        ..Method::new(plan.seconds, plan.repeats, plan.threads)
    };
    let mut report = SpeedReport {
        schema_version: SPEED_SCHEMA_VERSION,
        environment: Environment::detect(),
        block_sizes: plan.sizes.clone(),
        records: Vec::new(),
        skipped: Vec::new(),
        guest_environment: None,
        interrupted: None,
        clock: plan.clock,
    };
    let total = plan.cells(guest.is_some());
    progress.started(total);
    let mut progress = Tally {
        watcher: progress,
        done: 0,
        total,
    };
    let outcome = measure_rows(plan, guest, soft_rows, &method, &mut report, &mut progress);
    // Whatever failed after a stop request (a child or openssl stopped by the same Ctrl-C)
    // is the stop, not a failure.
    match (stop::requested(), outcome) {
        (Some(signal), _) => {
            report.interrupted = Some(Interruption {
                signal: stop::signal_name(signal),
                signal_number: signal,
                cells_done: progress.done,
                cells: total,
            })
        }
        (None, Err(e)) => return Err(e),
        (None, Ok(())) => {}
    }
    Ok(report)
}

/// Every row of [`measure_with`] into `report`.
fn measure_rows<E: From<SpeedError>>(
    plan: &SpeedPlan,
    mut guest: Option<SpeedReport>,
    soft_rows: &mut dyn FnMut(&SpeedPlan) -> Result<SpeedReport, E>,
    method: &Method,
    report: &mut SpeedReport,
    progress: &mut Tally,
) -> Result<(), E> {
    let cells_per_row = plan.cells_per_row();
    for &imp in &plan.implementations {
        let row_start = progress.done;
        let from_guest = imp == SpeedImpl::Kernel && guest.is_some();
        match imp {
            SpeedImpl::Kernel => match guest.take() {
                Some(g) => {
                    report.records.extend(g.records);
                    report.skipped.extend(g.skipped);
                    report.guest_environment = Some(g.environment);
                }
                None => measure_kernel(plan, method, report, progress)?,
            },
            // Masked already (this is the child, or the user set the variable): time here.
            SpeedImpl::Crypto(CryptoChoice::Soft) if !crypto::soft::active() => {
                progress.timing(&format!(
                    "soft in a child process with hardware AES masked, {cells_per_row} cells"
                ));
                let child = soft_rows(plan)?;
                report.records.extend(child.records);
                report.skipped.extend(child.skipped);
            }
            SpeedImpl::Crypto(choice) => {
                measure_here(choice, plan, method, report, progress)?;
            }
        }
        // Cells skipped (a kernel without a suite) or timed in the soft child count as done.
        if !from_guest {
            progress.advance((row_start + cells_per_row).saturating_sub(progress.done));
        }
        go_on()?;
    }
    if plan.against_openssl && !plan.child {
        openssl_records(plan, report, progress)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SpeedRequest;
    use model::ByteSize;

    fn request(crypto: &[&str], seconds: f64) -> SpeedRequest {
        SpeedRequest {
            suites: vec!["aes-128-cbc".into()],
            crypto: crypto.iter().map(|s| s.to_string()).collect(),
            seconds: Some(seconds),
            sizes: vec![ByteSize(64), ByteSize(1400)],
            ..Default::default()
        }
    }

    #[test]
    fn measures_every_implementation_or_says_why_not() {
        let plan = request(&["auto", "rustcrypto", "kernel"], 0.03)
            .validate()
            .unwrap();
        let report = measure(&plan).unwrap();
        assert!(report
            .records
            .iter()
            .all(|r| r.mb_per_s > 0.0 && r.repeats_mb_per_s.len() == 3));
        // Each implementation: 2 directions x 2 sizes.
        let count = |imp: &str| report.records.iter().filter(|r| r.implementation == imp).count();
        assert_eq!((count("auto"), count("rustcrypto")), (4, 4));
        match crate::af_alg::available() {
            Err(e) => {
                eprintln!("no kernel rows here: {e}");
                assert_eq!(count("kernel"), 0);
                assert_eq!(report.skipped.len(), 1);
                assert_eq!(report.skipped[0].implementation, "kernel");
                assert!(report.skipped[0].reason.contains("AF_ALG"));
            }
            Ok(()) => {
                assert_eq!(count("kernel"), 4, "{:?}", report.skipped);
                assert!(report
                    .records
                    .iter()
                    .filter(|r| r.implementation == "kernel")
                    .all(|r| r.driver.is_some()));
            }
        }
    }

    /// Records what a run tells its watcher.
    #[derive(Default)]
    struct Recorder {
        started: Option<usize>,
        timing: Vec<String>,
        done: usize,
    }

    impl SpeedProgress for Recorder {
        fn started(&mut self, cells: usize) {
            self.started = Some(cells);
        }
        fn timing(&mut self, what: &str) {
            self.timing.push(what.to_string());
        }
        fn cells_done(&mut self, cells: usize) {
            self.done += cells;
        }
    }

    #[test]
    fn progress_hears_every_cell_once_skipped_kernel_rows_included() {
        let plan = request(&["rustcrypto", "kernel"], 0.01).validate().unwrap();
        let mut recorder = Recorder::default();
        measure_with(&plan, None, &mut no_soft_rows, &mut recorder).unwrap();
        assert_eq!(recorder.started, Some(8));
        assert_eq!(
            recorder.done, 8,
            "kernel rows count as done whether timed or skipped"
        );
        // Issue 43: progress moved per row; now a line per cell.
        assert!(recorder.timing.len() >= 4, "{:?}", recorder.timing);
        let first = &recorder.timing[0];
        assert!(first == "rustcrypto aes-128-cbc encrypt 64 B", "{first}");
    }
}
