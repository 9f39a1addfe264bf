//! Stage two of the subcommand's arguments: a plain [`SpeedRequest`] (what the user asked
//! for, as the binary's command line parsed it) validated into a [`SpeedPlan`] (what a run
//! will do). Bad input is refused here, with a [`UsageError`] naming the fix, before
//! anything is timed. Leaves the command line itself (clap) to the binary.

use std::str::FromStr;

use crypto::CryptoChoice;
use model::ByteSize;
use serde::{Deserialize, Serialize};

use crate::suite::{SpeedSuite, UnknownSuite};

/// Block sizes of the full table: openssl's, plus 1400 (a tunnel packet).
pub const BLOCK_SIZES: [usize; 7] = [16, 64, 256, 1024, 1400, 8192, 16384];

/// Seconds per cell (over its repeats) when one suite is timed, and when several are: the
/// repeats of 1 s cells were as far apart as those of 3 s cells (see the commit that set
/// them), so the longer cells bought nothing but time.
pub const DEFAULT_SECONDS_ONE_SUITE: f64 = 1.0;
pub const DEFAULT_SECONDS: f64 = 0.5;

/// The subcommand name the binary registers; soft rows re-run it in a child process.
pub const SUBCOMMAND: &str = "speed";

/// What one timed call does to a block (`--mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Each block a message of its own: a fresh IV or nonce, the AEAD's tag, as a tunnel
    /// pays per packet ([`crate::ops::build`]).
    #[default]
    Packet,
    /// One cipher context set up once, then one update per block that continues it (the CBC
    /// chain, the AEAD's counter and MAC): `openssl speed -evp`'s loop ([`crate::ops::build_stream`]).
    Stream,
}

/// What a cell's bytes are divided by (`--clock`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// The wall-clock window (`openssl speed -elapsed`).
    #[default]
    Wall,
    /// The timing thread's CPU time, user and system (`getrusage`); openssl's default counts
    /// its user time. Bytes per CPU-second, which other work on a busy machine does not shrink.
    Cpu,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Packet, Mode::Stream];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Packet => "packet",
            Mode::Stream => "stream",
        }
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        let known = Mode::ALL.into_iter().find(|m| m.name() == s.trim());
        known.ok_or_else(|| {
            format!("{s:?}: use packet (a new IV or nonce per block, as a tunnel) or stream (one context, as openssl speed -evp)")
        })
    }
}

impl Clock {
    pub const ALL: [Clock; 2] = [Clock::Wall, Clock::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            Clock::Wall => "wall",
            Clock::Cpu => "cpu",
        }
    }
}

impl FromStr for Clock {
    type Err = String;
    fn from_str(s: &str) -> Result<Clock, String> {
        let known = Clock::ALL.into_iter().find(|c| c.name() == s.trim());
        known.ok_or_else(|| format!("{s:?}: use wall (elapsed time) or cpu (the timing thread's CPU time)"))
    }
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
    #[error("unknown implementation {0:?}: use auto, soft, rustcrypto, aws-lc, libcrypto or kernel, comma-separated")]
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
    #[error(
        "--mode stream times a library's cipher context; the kernel rows (AF_ALG, tcrypt) are per packet: leave kernel out of --crypto"
    )]
    StreamKernel,
    #[error("--clock cpu divides by the timing thread's CPU time, one thread's: leave out --multi, or use --clock wall")]
    CpuClockThreads,
}

/// What the user asked for, unchecked; the defaults are the command line's.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedRequest {
    /// Suite names; empty: every suite.
    pub suites: Vec<String>,
    /// Implementation names; empty: auto, rustcrypto, soft and kernel.
    pub crypto: Vec<String>,
    /// Seconds per cell over all repeats; None: [`DEFAULT_SECONDS_ONE_SUITE`] for one
    /// suite, else [`DEFAULT_SECONDS`].
    pub seconds: Option<f64>,
    /// `--multi`: threads, one pinned per core.
    pub threads: usize,
    pub repeats: usize,
    /// Block sizes; empty: [`BLOCK_SIZES`].
    pub sizes: Vec<ByteSize>,
    /// Also run `openssl speed` for the same suites.
    pub against_openssl: bool,
    /// `--vm`: None = kernel rows here; Some(None) = in a VM with the default kernel;
    /// Some(Some(path)) = in a VM booting that kernel image.
    pub vm: Option<Option<String>>,
    /// This process is a child run (soft rows, or kernel rows in the VM).
    pub child: bool,
    pub mode: Mode,
    pub clock: Clock,
}

impl Default for SpeedRequest {
    fn default() -> SpeedRequest {
        SpeedRequest {
            suites: Vec::new(),
            crypto: Vec::new(),
            seconds: None,
            threads: 1,
            repeats: 3,
            sizes: Vec::new(),
            against_openssl: false,
            vm: None,
            child: false,
            mode: Mode::Packet,
            clock: Clock::Wall,
        }
    }
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
    pub against_openssl: bool,
    /// As [`SpeedRequest::vm`].
    pub vm: Option<Option<String>>,
    pub child: bool,
    pub mode: Mode,
    pub clock: Clock,
}

/// Each name parsed once, in the order given.
fn parse_unique<T: FromStr + PartialEq>(names: &[String]) -> Result<Vec<T>, T::Err> {
    let mut v = Vec::new();
    for name in names {
        let item: T = name.parse()?;
        if !v.contains(&item) {
            v.push(item);
        }
    }
    Ok(v)
}

impl SpeedRequest {
    pub fn validate(&self) -> Result<SpeedPlan, UsageError> {
        let suites = if self.suites.is_empty() {
            SpeedSuite::all()
        } else {
            parse_unique(&self.suites)?
        };
        let implementations = if self.crypto.is_empty() {
            let mut v = vec![
                SpeedImpl::Crypto(CryptoChoice::Auto),
                SpeedImpl::Crypto(CryptoChoice::Rustcrypto),
                SpeedImpl::Crypto(CryptoChoice::Soft),
            ];
            if self.mode == Mode::Packet {
                v.push(SpeedImpl::Kernel);
            }
            v
        } else {
            parse_unique(&self.crypto)?
        };
        if self.mode == Mode::Stream && implementations.contains(&SpeedImpl::Kernel) {
            return Err(UsageError::StreamKernel);
        }
        if self.clock == Clock::Cpu && self.threads > 1 {
            return Err(UsageError::CpuClockThreads);
        }
        if self.threads == 0 {
            return Err(UsageError::ZeroThreads);
        }
        if self.repeats == 0 {
            return Err(UsageError::ZeroRepeats);
        }
        let seconds = self.seconds.unwrap_or(if suites.len() == 1 {
            DEFAULT_SECONDS_ONE_SUITE
        } else {
            DEFAULT_SECONDS
        });
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
        if self.vm.is_some() && !implementations.contains(&SpeedImpl::Kernel) {
            return Err(UsageError::VmWithoutKernel);
        }
        Ok(SpeedPlan {
            suites,
            implementations,
            sizes,
            seconds,
            threads: self.threads,
            repeats: self.repeats,
            against_openssl: self.against_openssl,
            vm: self.vm.clone(),
            child: self.child,
            mode: self.mode,
            clock: self.clock,
        })
    }
}

impl SpeedPlan {
    /// The arguments (after the program name) that time this plan's `implementation` rows
    /// in a child run of this binary (the soft child, the VM's guest); the caller adds
    /// `--json FILE`.
    pub fn child_args(&self, implementation: SpeedImpl) -> Vec<String> {
        let sizes: Vec<String> = self.sizes.iter().map(|s| s.to_string()).collect();
        let mut v = vec![SUBCOMMAND.to_string()];
        v.extend(self.suites.iter().map(|s| s.name()));
        v.extend(
            [
                "--crypto",
                implementation.name(),
                "--child",
                "--seconds",
                &self.seconds.to_string(),
                "--multi",
                &self.threads.to_string(),
                "--repeat",
                &self.repeats.to_string(),
                "--sizes",
                &sizes.join(","),
                "--mode",
                self.mode.name(),
                "--clock",
                self.clock.name(),
            ]
            .map(String::from),
        );
        v
    }

    /// Cells of one implementation's row: every suite's directions at every size.
    pub fn cells_per_row(&self) -> usize {
        self.suites.iter().map(|s| s.crypto_ops().len()).sum::<usize>() * self.sizes.len()
    }

    /// Cells this process waits for; with `kernel_elsewhere` the kernel rows (timed in the
    /// VM before this run starts) are not among them.
    pub fn cells(&self, kernel_elsewhere: bool) -> usize {
        let rows = self
            .implementations
            .iter()
            .filter(|i| !(kernel_elsewhere && **i == SpeedImpl::Kernel))
            .count()
            + usize::from(self.against_openssl && !self.child);
        rows * self.cells_per_row()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpeedError;

    fn request(suites: &[&str]) -> SpeedRequest {
        SpeedRequest {
            suites: suites.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_cover_every_suite_and_size() {
        let p = request(&[]).validate().unwrap();
        assert_eq!(p.suites.len(), 10);
        assert_eq!(p.sizes, BLOCK_SIZES);
        assert_eq!(p.seconds, DEFAULT_SECONDS);
        assert_eq!(
            request(&["aes-128-cbc"]).validate().unwrap().seconds,
            DEFAULT_SECONDS_ONE_SUITE
        );
        assert!(p.implementations.contains(&SpeedImpl::Crypto(CryptoChoice::Soft)));
        assert!(p.implementations.contains(&SpeedImpl::Kernel));
        let mut stream = request(&[]);
        stream.mode = Mode::Stream;
        let p = stream.validate().unwrap();
        assert!(
            !p.implementations.contains(&SpeedImpl::Kernel),
            "the kernel has no stream rows"
        );
    }

    #[test]
    fn bad_input_is_refused_with_its_reason() {
        let mut r = request(&[]);
        r.threads = 0;
        assert_eq!(r.validate(), Err(UsageError::ZeroThreads));
        let mut r = request(&[]);
        r.repeats = 0;
        assert_eq!(r.validate(), Err(UsageError::ZeroRepeats));
        let mut r = request(&[]);
        r.seconds = Some(-1.0);
        let e = r.validate().unwrap_err();
        assert_eq!(e, UsageError::BadSeconds(-1.0));
        assert!(e.to_string().contains("positive number of seconds"));
        let mut r = request(&[]);
        r.seconds = Some(f64::NAN);
        assert!(r.validate().is_err());
        let e = request(&["aes-512-cbc"]).validate().unwrap_err();
        assert!(matches!(e, UsageError::UnknownSuite(_)), "{e}");
        let mut r = request(&[]);
        r.crypto = vec!["nonsense".into()];
        assert_eq!(
            r.validate(),
            Err(UsageError::UnknownImplementation("nonsense".into()))
        );
        let mut r = request(&[]);
        r.sizes = vec![ByteSize(0)];
        assert_eq!(r.validate(), Err(UsageError::BadSize(0)));
        let mut r = request(&[]);
        r.mode = Mode::Stream;
        r.crypto = vec!["auto".into(), "kernel".into()];
        assert_eq!(r.validate(), Err(UsageError::StreamKernel));
        let mut r = request(&[]);
        r.clock = Clock::Cpu;
        r.threads = 2;
        assert_eq!(r.validate(), Err(UsageError::CpuClockThreads));
        let err = SpeedError::from(UsageError::ZeroThreads);
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn cells_count_every_row_this_process_times() {
        let mut r = request(&["aes-128-cbc"]);
        r.crypto = vec!["auto".into(), "kernel".into()];
        r.sizes = vec![ByteSize(64), ByteSize(1400)];
        let plan = r.validate().unwrap();
        // 2 implementations x 2 directions x 2 sizes.
        assert_eq!(plan.cells(false), 8);
        // Kernel rows timed in the VM are not waited for here.
        assert_eq!(plan.cells(true), 4);
        r.against_openssl = true;
        assert_eq!(r.validate().unwrap().cells(false), 12);
        // A child never runs openssl.
        r.child = true;
        assert_eq!(r.validate().unwrap().cells(false), 8);
    }

    #[test]
    fn vm_needs_the_kernel_rows_and_passes_the_plan_to_the_guest() {
        let mut r = request(&["aes-128-cbc", "hmac-sha256"]);
        r.vm = Some(None);
        r.seconds = Some(0.05);
        r.sizes = vec![ByteSize(64), ByteSize(1400)];
        let p = r.validate().unwrap();
        assert_eq!(p.vm, Some(None));
        assert_eq!(
            p.child_args(SpeedImpl::Kernel).join(" "),
            "speed aes-128-cbc hmac-sha256 --crypto kernel --child --seconds 0.05 --multi 1 --repeat 3 --sizes 64,1400 \
             --mode packet --clock wall"
        );
        r.crypto = vec!["auto".into()];
        assert_eq!(r.validate(), Err(UsageError::VmWithoutKernel));
    }
}
