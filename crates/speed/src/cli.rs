//! The `speed` subcommand: raw clap arguments → a validated [`SpeedPlan`] → measurements →
//! table and JSON. Bad input is refused before anything is timed.

use std::io::{IsTerminal, Write};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Instant;

use clap::Args;
use crypto::{CryptoChoice, Implementation};
use model::{ByteSize, Environment};

use crate::measure::{measure_cell, measure_cell_with, Method};
use crate::report::{Record, RecordHead, Skipped, SpeedReport, Units, SPEED_SCHEMA_VERSION};
use crate::suite::{SpeedSuite, UnknownSuite};
use crate::{kernel, openssl, SpeedError, BLOCK_SIZES, SUBCOMMAND};

/// Time ciphers across implementations, like `openssl speed -evp`.
#[derive(Debug, Clone, Default, Args)]
pub struct SpeedArgs {
    /// Suites to time (default: all): aes-{128,192,256}-cbc, hmac-sha256,
    /// aes-{128,192,256}-cbc-hmac-sha256, aes-{128,256}-gcm, chacha20-poly1305.
    pub suites: Vec<String>,
    /// Implementations, comma-separated: auto, soft, rustcrypto, aws-lc, kernel.
    /// Default: auto,rustcrypto,soft,kernel (aws-lc is what auto uses).
    #[arg(long, value_delimiter = ',')]
    pub crypto: Vec<String>,
    /// Seconds per cell, split over the repeats (default 1 for several suites, 3 for one).
    #[arg(long, allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// Threads, one pinned per core, results summed.
    #[arg(long, default_value_t = 1)]
    pub multi: usize,
    /// Repeats per cell; the table shows the median and flags spreads above 5 %.
    #[arg(long, alias = "repeats", default_value_t = 3)]
    pub repeat: usize,
    /// Block sizes, comma-separated, with units as --bytes takes them: 1400,8KiB,16k
    /// (default 16,64,256,1024,1400,8192,16384).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<ByteSize>,
    /// Print openssl's units (1000s of bytes per second) instead of MB/s.
    #[arg(long)]
    pub openssl_units: bool,
    /// Also run `openssl speed -elapsed -evp` for the same suites and print it alongside.
    #[arg(long)]
    pub against_openssl: bool,
    /// Write one JSON record per cell (plus the environment) to FILE, or `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Time the kernel rows inside a VM booting a stock kernel (default: the newest
    /// /boot/vmlinuz-*) under virtme-ng, for kernels without AF_ALG; the other rows run here.
    /// Without KVM the VM's CPU is emulated: its rows show correctness, not speed.
    #[arg(long, value_name = "KERNEL", num_args = 0..=1, default_missing_value = "")]
    pub vm: Option<String>,
    /// Internal: this process is a child run (soft rows, or kernel rows in the VM); print
    /// only JSON.
    #[arg(long, hide = true)]
    pub child: bool,
}

/// An implementation row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeedImpl {
    Crypto(CryptoChoice),
    /// The kernel crypto API through AF_ALG.
    Kernel,
}

impl SpeedImpl {
    pub fn name(self) -> &'static str {
        match self {
            SpeedImpl::Crypto(c) => c.name(),
            SpeedImpl::Kernel => "kernel",
        }
    }
}

impl FromStr for SpeedImpl {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        if s.trim().eq_ignore_ascii_case("kernel") {
            return Ok(SpeedImpl::Kernel);
        }
        CryptoChoice::from_str(s)
            .map(SpeedImpl::Crypto)
            .map_err(|_| UsageError::UnknownImplementation(s.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    UnknownSuite(#[from] UnknownSuite),
    #[error("unknown implementation {0:?}: use auto, soft, rustcrypto, aws-lc or kernel, comma-separated")]
    UnknownImplementation(String),
    #[error("--multi 0: give the number of threads to run at once, at least 1")]
    ZeroThreads,
    #[error("--seconds {0}: give a positive number of seconds per cell, e.g. --seconds 0.5")]
    BadSeconds(f64),
    #[error("--repeat 0: give at least 1 repeat per cell")]
    ZeroRepeats,
    #[error("--sizes {0}: block sizes are 1 B to 1 MiB (1048576 bytes)")]
    BadSize(u64),
    #[error("--vm runs the kernel rows in a VM, but --crypto does not include kernel")]
    VmWithoutKernel,
}

/// Everything a run will do, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedPlan {
    pub suites: Vec<SpeedSuite>,
    pub implementations: Vec<SpeedImpl>,
    pub sizes: Vec<usize>,
    /// Seconds per cell, over all repeats.
    pub seconds: f64,
    pub threads: usize,
    pub repeats: usize,
    pub units: Units,
    pub against_openssl: bool,
    pub json: Option<String>,
    /// `--vm`: None = kernel rows here; Some(None) = in a VM with the default kernel;
    /// Some(Some(path)) = in a VM booting that kernel image.
    pub vm: Option<Option<String>>,
    pub child: bool,
}

impl SpeedPlan {
    /// The arguments (after the program name) that time this plan's kernel rows in another
    /// process, the VM's guest: the caller adds `--json FILE`.
    pub fn kernel_child_args(&self) -> Vec<String> {
        let sizes: Vec<String> = self.sizes.iter().map(|s| s.to_string()).collect();
        let mut v = vec![SUBCOMMAND.to_string()];
        v.extend(self.suites.iter().map(|s| s.name()));
        v.extend(
            [
                "--crypto",
                "kernel",
                "--child",
                "--seconds",
                &self.seconds.to_string(),
                "--multi",
                &self.threads.to_string(),
                "--repeat",
                &self.repeats.to_string(),
                "--sizes",
                &sizes.join(","),
            ]
            .map(String::from),
        );
        v
    }
}

impl SpeedArgs {
    pub fn validate(&self) -> Result<SpeedPlan, UsageError> {
        let suites = if self.suites.is_empty() {
            SpeedSuite::all()
        } else {
            let mut v = Vec::new();
            for s in &self.suites {
                let suite: SpeedSuite = s.parse()?;
                if !v.contains(&suite) {
                    v.push(suite);
                }
            }
            v
        };
        let implementations = if self.crypto.is_empty() {
            vec![
                SpeedImpl::Crypto(CryptoChoice::Auto),
                SpeedImpl::Crypto(CryptoChoice::Rustcrypto),
                SpeedImpl::Crypto(CryptoChoice::Soft),
                SpeedImpl::Kernel,
            ]
        } else {
            let mut v = Vec::new();
            for s in &self.crypto {
                let i: SpeedImpl = s.parse()?;
                if !v.contains(&i) {
                    v.push(i);
                }
            }
            v
        };
        if self.multi == 0 {
            return Err(UsageError::ZeroThreads);
        }
        if self.repeat == 0 {
            return Err(UsageError::ZeroRepeats);
        }
        let seconds = self.seconds.unwrap_or(if suites.len() == 1 { 3.0 } else { 1.0 });
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(UsageError::BadSeconds(seconds));
        }
        let sizes = if self.sizes.is_empty() {
            BLOCK_SIZES.to_vec()
        } else {
            if let Some(bad) = self.sizes.iter().find(|s| s.0 == 0 || s.0 > 1 << 20) {
                return Err(UsageError::BadSize(bad.0));
            }
            let mut v: Vec<usize> = self.sizes.iter().map(|s| s.0 as usize).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let vm = self
            .vm
            .as_ref()
            .map(|k| Some(k.clone()).filter(|k| !k.is_empty()));
        if vm.is_some() && !implementations.contains(&SpeedImpl::Kernel) {
            return Err(UsageError::VmWithoutKernel);
        }
        Ok(SpeedPlan {
            suites,
            implementations,
            sizes,
            seconds,
            threads: self.multi,
            repeats: self.repeat,
            units: if self.openssl_units {
                Units::OpensslKilobytes
            } else {
                Units::MegabytesPerSecond
            },
            against_openssl: self.against_openssl,
            json: self.json.clone(),
            vm,
            child: self.child,
        })
    }
}

/// The progress of a whole run on a terminal: "timing …" lines with the cells done out of
/// all and an estimate of the time left (from the pace so far, or from --seconds per cell
/// before the first cell is done). A child run has no overall view: its lines carry none.
struct Progress {
    total: usize,
    done: usize,
    seconds_per_cell: f64,
    started: Instant,
    overall: bool,
    terminal: bool,
}

impl Progress {
    /// Cells of one implementation's row: every suite's directions at every size.
    fn cells_per_row(plan: &SpeedPlan) -> usize {
        plan.suites.iter().map(|s| s.directions().len()).sum::<usize>() * plan.sizes.len()
    }

    fn new(plan: &SpeedPlan, guest_rows: bool) -> Progress {
        let rows = plan
            .implementations
            .iter()
            .filter(|i| !(guest_rows && **i == SpeedImpl::Kernel))
            .count()
            + usize::from(plan.against_openssl && !plan.child);
        Progress {
            total: rows * Progress::cells_per_row(plan),
            done: 0,
            seconds_per_cell: plan.seconds,
            started: Instant::now(),
            overall: !plan.child,
            terminal: std::io::stderr().is_terminal(),
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

    fn line(&self, what: &str) {
        if !self.terminal {
            return;
        }
        if self.overall && self.total > 0 {
            eprintln!("{what} {}", self.status());
        } else {
            eprintln!("{what}");
        }
    }

    fn advance(&mut self, cells: usize) {
        self.done = (self.done + cells).min(self.total);
    }
}

/// Times one crypto implementation in this process: self-test first, then every cell.
fn measure_here(
    choice: CryptoChoice,
    plan: &SpeedPlan,
    method: &Method,
    progress: &mut Progress,
) -> Result<Vec<Record>, SpeedError> {
    let imp = Implementation::new(choice).map_err(|source| SpeedError::Implementation {
        implementation: choice.to_string(),
        source,
    })?;
    crypto::self_test(&imp)?;
    let info = imp.info();
    let mut records = Vec::new();
    for &suite in &plan.suites {
        for &direction in suite.directions() {
            progress.line(&format!("timing {} {suite} {direction}", info.label));
            for &size in &plan.sizes {
                let repeats = measure_cell(&imp, suite, direction, size, method)?;
                progress.advance(1);
                let head = RecordHead {
                    implementation: choice.to_string(),
                    library: info.library.to_string(),
                    hardware_aes: Some(info.hardware_aes),
                    suite: suite.name(),
                    direction,
                    block_bytes: size,
                    threads: plan.threads,
                    driver: None,
                    virtualization: None,
                    emulated: false,
                };
                records.extend(Record::from_repeats(
                    head,
                    repeats,
                    method.repeat_duration.as_secs_f64(),
                ));
            }
        }
    }
    Ok(records)
}

/// Runs the soft rows in a child of this binary started with hardware AES masked.
fn measure_in_soft_child(plan: &SpeedPlan) -> Result<SpeedReport, SpeedError> {
    let mut cmd = crypto::soft::command()?;
    cmd.arg(SUBCOMMAND);
    cmd.args(plan.suites.iter().map(|s| s.name()));
    let sizes: Vec<String> = plan.sizes.iter().map(|s| s.to_string()).collect();
    cmd.args(["--crypto", "soft", "--child", "--json", "-"])
        .args(["--seconds", &plan.seconds.to_string()])
        .args(["--multi", &plan.threads.to_string()])
        .args(["--repeat", &plan.repeats.to_string()])
        .args(["--sizes", &sizes.join(",")]);
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(SpeedError::ChildSpawn)?;
    if !out.status.success() {
        return Err(SpeedError::ChildFailed { status: out.status });
    }
    serde_json::from_slice(&out.stdout).map_err(SpeedError::ChildOutput)
}

fn openssl_records(plan: &SpeedPlan, report: &mut SpeedReport, progress: &mut Progress) {
    let Some(version) = openssl::version() else {
        report.skipped.push(Skipped {
            implementation: "openssl".into(),
            suite: None,
            reason: openssl::OpensslError::NotInstalled.to_string(),
        });
        return;
    };
    for &suite in &plan.suites {
        for &direction in suite.directions() {
            progress.line(&format!("timing openssl {suite} {direction}"));
            let result = openssl::run(suite, direction, &plan.sizes, plan.seconds, plan.threads);
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
}

/// Times the kernel rows through AF_ALG in this process: each suite passes its
/// known-answer tests first; a suite the kernel lacks or fails is skipped with its reason.
fn measure_kernel(plan: &SpeedPlan, method: &Method, report: &mut SpeedReport, progress: &mut Progress) {
    let skip = |suite: Option<String>, reason: String| Skipped {
        implementation: "kernel".into(),
        suite,
        reason,
    };
    let probe = kernel::probe();
    if probe.af_alg.is_err() {
        report.skipped.push(skip(None, probe.skip_reason()));
        return;
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
        for &direction in suite.directions() {
            progress.line(&format!(
                "timing kernel {suite} {direction} ({})",
                verified.driver
            ));
            for &size in &plan.sizes {
                let build = || kernel::build(suite, direction, size);
                let measured = measure_cell_with(&build, method);
                progress.advance(1);
                let repeats = match measured {
                    Ok(r) => r,
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
                };
                report.records.extend(Record::from_repeats(
                    head,
                    repeats,
                    method.repeat_duration.as_secs_f64(),
                ));
            }
        }
    }
}

/// Measures what `plan` asks for, without printing.
pub fn measure(plan: &SpeedPlan) -> Result<SpeedReport, SpeedError> {
    measure_with(plan, None)
}

/// Measures what `plan` asks for; with `guest`, the kernel rows are that report's (a run of
/// [`SpeedPlan::kernel_child_args`] elsewhere, e.g. the VM) instead of this kernel's.
pub fn measure_with(plan: &SpeedPlan, guest: Option<SpeedReport>) -> Result<SpeedReport, SpeedError> {
    let method = Method::new(plan.seconds, plan.repeats, plan.threads);
    let mut report = SpeedReport {
        schema_version: SPEED_SCHEMA_VERSION,
        environment: Environment::detect(),
        block_sizes: plan.sizes.clone(),
        records: Vec::new(),
        skipped: Vec::new(),
        guest_environment: None,
    };
    let mut progress = Progress::new(plan, guest.is_some());
    let cells_per_row = Progress::cells_per_row(plan);
    let mut guest = guest;
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
                None => measure_kernel(plan, &method, &mut report, &mut progress),
            },
            // Masked already (this is the child, or the user set the variable): time here.
            SpeedImpl::Crypto(CryptoChoice::Soft) if !crypto::soft::active() => {
                progress.line("timing soft in a child process with hardware AES masked");
                let child = measure_in_soft_child(plan)?;
                report.records.extend(child.records);
                report.skipped.extend(child.skipped);
            }
            SpeedImpl::Crypto(choice) => {
                report
                    .records
                    .extend(measure_here(choice, plan, &method, &mut progress)?);
            }
        }
        // Cells skipped (a kernel without a suite) or timed in the soft child count as done.
        if !from_guest {
            progress.advance((row_start + cells_per_row).saturating_sub(progress.done));
        }
    }
    if plan.against_openssl && !plan.child {
        openssl_records(plan, &mut report, &mut progress);
    }
    Ok(report)
}

/// The subcommand: validate, measure, print the table, write JSON.
pub fn run(args: &SpeedArgs) -> Result<SpeedReport, SpeedError> {
    run_plan(&args.validate()?, None)
}

/// [`run`] for a validated plan, with the kernel rows from `guest` when given (`--vm`).
pub fn run_plan(plan: &SpeedPlan, guest: Option<SpeedReport>) -> Result<SpeedReport, SpeedError> {
    let plan = plan.clone();
    let report = measure_with(&plan, guest)?;
    let json_to_stdout = plan.json.as_deref() == Some("-");
    if !plan.child {
        let table = crate::report::render(&report, plan.units);
        // With JSON on stdout, the table goes to stderr so stdout stays parseable.
        if json_to_stdout {
            eprint!("{table}");
        } else {
            print!("{table}");
        }
    }
    if let Some(path) = &plan.json {
        let text = serde_json::to_string_pretty(&report).expect("report serialises");
        let write_err = |source| SpeedError::WriteJson {
            path: path.clone(),
            source,
        };
        if json_to_stdout {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}").map_err(write_err)?;
        } else {
            std::fs::write(path, text + "\n").map_err(write_err)?;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(suites: &[&str]) -> SpeedArgs {
        SpeedArgs {
            suites: suites.iter().map(|s| s.to_string()).collect(),
            multi: 1,
            repeat: 3,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_cover_every_suite_and_size() {
        let p = args(&[]).validate().unwrap();
        assert_eq!(p.suites.len(), 10);
        assert_eq!(p.sizes, BLOCK_SIZES);
        assert_eq!(p.seconds, 1.0);
        assert_eq!(args(&["aes-128-cbc"]).validate().unwrap().seconds, 3.0);
        assert!(p.implementations.contains(&SpeedImpl::Crypto(CryptoChoice::Soft)));
    }

    #[test]
    fn bad_input_is_refused_with_its_reason() {
        let mut a = args(&[]);
        a.multi = 0;
        assert_eq!(a.validate(), Err(UsageError::ZeroThreads));
        let mut a = args(&[]);
        a.seconds = Some(-1.0);
        let e = a.validate().unwrap_err();
        assert_eq!(e, UsageError::BadSeconds(-1.0));
        assert!(e.to_string().contains("positive number of seconds"));
        let mut a = args(&[]);
        a.seconds = Some(f64::NAN);
        assert!(a.validate().is_err());
        let e = args(&["aes-512-cbc"]).validate().unwrap_err();
        assert!(matches!(e, UsageError::UnknownSuite(_)), "{e}");
        let mut a = args(&[]);
        a.crypto = vec!["nonsense".into()];
        assert_eq!(
            a.validate(),
            Err(UsageError::UnknownImplementation("nonsense".into()))
        );
        let mut a = args(&[]);
        a.sizes = vec![ByteSize(0)];
        assert_eq!(a.validate(), Err(UsageError::BadSize(0)));
        let err = SpeedError::from(UsageError::ZeroThreads);
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn measures_every_implementation_or_says_why_not() {
        let mut a = args(&["aes-128-cbc"]);
        a.crypto = vec!["auto".into(), "rustcrypto".into(), "kernel".into()];
        a.seconds = Some(0.03);
        a.sizes = vec![ByteSize(64), ByteSize(1400)];
        let report = measure(&a.validate().unwrap()).unwrap();
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

    #[test]
    fn plain_speed_shows_an_overall_eta() {
        let mut a = args(&["aes-128-cbc"]);
        a.crypto = vec!["auto".into(), "rustcrypto".into()];
        a.seconds = Some(0.5);
        a.sizes = vec![ByteSize(64), ByteSize(1400)];
        let plan = a.validate().unwrap();
        // 2 implementations x 2 directions x 2 sizes, half a second each.
        let mut p = Progress::new(&plan, false);
        assert_eq!(p.status(), "[cell 1/8, about 4 s left]");
        p.advance(8);
        assert_eq!(p.status(), "[cell 8/8, about 0 s left]");
        let mut a = args(&[]);
        a.seconds = Some(1.0);
        let p = Progress::new(&a.validate().unwrap(), false);
        assert!(p.status().ends_with("min left]"), "{}", p.status());
        // Kernel rows timed in the VM are not waited for here.
        let mut a = args(&["aes-128-cbc"]);
        a.crypto = vec!["auto".into(), "kernel".into()];
        a.sizes = vec![ByteSize(64)];
        assert_eq!(Progress::new(&a.validate().unwrap(), true).total, 2);
    }

    #[test]
    fn vm_needs_the_kernel_rows_and_passes_the_plan_to_the_guest() {
        let mut a = args(&["aes-128-cbc", "hmac-sha256"]);
        a.vm = Some(String::new());
        a.seconds = Some(0.05);
        a.sizes = vec![ByteSize(64), ByteSize(1400)];
        let p = a.validate().unwrap();
        assert_eq!(p.vm, Some(None));
        assert_eq!(
            p.kernel_child_args().join(" "),
            "speed aes-128-cbc hmac-sha256 --crypto kernel --child --seconds 0.05 --multi 1 --repeat 3 --sizes 64,1400"
        );
        a.vm = Some("/boot/vmlinuz-x".into());
        assert_eq!(a.validate().unwrap().vm, Some(Some("/boot/vmlinuz-x".into())));
        a.crypto = vec!["auto".into()];
        assert_eq!(a.validate(), Err(UsageError::VmWithoutKernel));
    }
}
