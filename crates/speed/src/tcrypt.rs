//! The kernel's own crypto speed test, tcrypt (`modprobe tcrypt mode=N sec=1`), as a
//! crypto ceiling for kernel ESP: it times the crypto API's implementation inside the
//! kernel, one request after another with no system call per packet, which is what ESP's
//! data path pays. AF_ALG ([`crate::kernel`]) adds two system calls and copies per packet;
//! in user-mode Linux a system call is so expensive that AF_ALG reads below the tunnel
//! itself, so it is no bound there.
//!
//! How tcrypt 6.1 works, and what that costs:
//! * its module load does the whole test and then fails with EAGAIN by design; the
//!   results go to the kernel log, read here from /dev/kmsg from its end at the load, so
//!   only this load's records count;
//! * `sec=0` counts CPU cycles, which user-mode Linux does not have (`get_cycles` is 0
//!   there), so `sec=1` is used: each (key size, block size) runs one second of wall time;
//! * a mode times every key size at every block size of its list (16 … 1420 … 8192 for
//!   AEADs, 16 … 1424 … 4096 for skciphers, 16 … 8192 for hashes), nothing can be left
//!   out: mode 211 (GCM) is 64 tests, mode 200's cbc(aes) 42, mode 300 with
//!   `alg=hmac(sha256)` 22, mode 213 (ChaCha20-Poly1305) 16 — about a second each. Mode 200
//!   also lists ecb, lrw, xts, cts, ctr and cfb: it runs with module autoloading off
//!   (only what was loaded before is found), so those not loaded are skipped in a moment;
//! * tcrypt has no speed test of authenc (CBC+HMAC): the ceiling comes from its parts,
//!   the time per packet of cbc(aes) plus that of hmac(sha256) at the same size, a rate
//!   the real authenc (both, and more) cannot beat.
//!
//! The figure at the tunnel's packet size comes from the per-packet times at the two
//! nearest timed sizes, interpolated (a per-packet cost plus a per-byte one).
//!
//! Leaves out: where tcrypt may be loaded (only in the lab's own kernels: that is the
//! caller's choice, `lab::ceiling`), and AF_ALG.

use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crypto::AeadAlgorithm;
use model::KeyBits;

use crate::suite::SpeedSuite;

/// Seconds per test (`sec=`): the least a timed test can be; 0 would count cycles.
pub const SECONDS: u32 = 1;
/// The longest a load may take before it is given up on (a whole mode 200 with every
/// template loaded is about 300 tests).
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// Modes mode 200 times besides cbc(aes) when their module is loaded.
const UNUSED_TEMPLATES: &[&str] = &["ctr", "xts", "lrw", "cts", "ecb"];
/// Where the kernel finds its module loader; empty turns autoloading off.
const MODPROBE_SYSCTL: &str = "/proc/sys/kernel/modprobe";

/// modprobe where it is installed: a run's PATH may lack the sbin directories.
fn modprobe() -> &'static str {
    ["/usr/sbin/modprobe", "/sbin/modprobe"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("modprobe")
}

/// One `modprobe tcrypt` of a mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub mode: u32,
    /// `alg=`: the hash mode 300 times this one only.
    pub alg: Option<&'static str>,
    /// `klen=`: the key length a keyed hash (HMAC) is given.
    pub klen: Option<u32>,
    /// Modules loaded first, so that what the test needs is there.
    pub modules: &'static [&'static str],
    /// Run with module autoloading off: the mode also lists algorithms the suite does not
    /// need, each a minute or more, which are skipped unless already loaded.
    pub loaded_only: bool,
    /// Tests this load runs for what the suite needs (a second each).
    pub tests: u32,
    /// The algorithms whose preferred drivers decide what it times: a second load with the
    /// same drivers would time the same code, so its log is reused ([`measure`]).
    pub serves: &'static [&'static str],
}

impl Load {
    /// `mode=200 sec=1 …` as given to modprobe.
    pub fn args(&self) -> Vec<String> {
        let mut v = vec![format!("mode={}", self.mode), format!("sec={SECONDS}")];
        v.extend(self.alg.map(|a| format!("alg={a}")));
        v.extend(self.klen.map(|k| format!("klen={k}")));
        v
    }

    pub fn command_line(&self) -> String {
        format!("modprobe tcrypt {}", self.args().join(" "))
    }
}

const CBC: Load = Load {
    mode: 200,
    alg: None,
    klen: None,
    modules: &["aes", "cbc"],
    loaded_only: true,
    // cbc(aes) encrypt and decrypt, 3 key sizes x 7 block sizes.
    tests: 42,
    // A driver row pins a cbc(aes) instance by its priority.
    serves: &["cbc(aes)", "aes"],
};
const HMAC: Load = Load {
    mode: 300,
    alg: Some("hmac(sha256)"),
    klen: Some(32),
    modules: &["hmac", "sha256"],
    loaded_only: false,
    tests: 22,
    serves: &["hmac(sha256)", "sha256"],
};
const GCM: Load = Load {
    mode: 211,
    alg: None,
    klen: None,
    modules: &["gcm", "ctr", "ghash-generic"],
    loaded_only: false,
    // rfc4106 (AES-128 only) and gcm(aes) (3 key sizes), 8 sizes, both ways.
    tests: 64,
    serves: &["gcm(aes)", "rfc4106(gcm(aes))", "aes", "ghash"],
};
const CHACHA: Load = Load {
    mode: 213,
    alg: None,
    klen: None,
    modules: &["chacha20poly1305"],
    loaded_only: false,
    tests: 16,
    serves: &["rfc7539esp(chacha20,poly1305)", "chacha20", "poly1305"],
};

/// The loads a suite's ceiling needs.
pub fn loads(suite: SpeedSuite) -> Vec<Load> {
    match suite {
        SpeedSuite::AesCbc(_) => vec![CBC],
        SpeedSuite::HmacSha256 => vec![HMAC],
        SpeedSuite::AesCbcHmacSha256(_) => vec![CBC, HMAC],
        SpeedSuite::Aead(AeadAlgorithm::ChaCha20Poly1305) => vec![CHACHA],
        SpeedSuite::Aead(_) => vec![GCM],
    }
}

/// About how long a suite's tcrypt ceiling takes: a second per test, with room for the
/// module loads (a caller's time budget).
pub fn expected_duration(suite: SpeedSuite) -> Duration {
    let tests: u32 = loads(suite).iter().map(|l| l.tests).sum();
    Duration::from_secs(u64::from(tests * SECONDS) * 5 / 4 + 5)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Direction {
    Encryption,
    Decryption,
}

/// One timed test: ops of `block_bytes` in `seconds` (hashes: a digest of the block).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timed {
    /// None for an unkeyed hash line (tcrypt prints no key size there).
    pub key_bits: Option<u32>,
    pub block_bytes: u32,
    pub ops: u64,
    pub seconds: u32,
}

impl Timed {
    fn op_seconds(&self) -> Option<f64> {
        (self.ops > 0 && self.seconds > 0).then(|| f64::from(self.seconds) / self.ops as f64)
    }
}

/// One "testing speed of ALG (DRIVER) DIRECTION" section and what followed it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Section {
    pub algorithm: String,
    pub driver: String,
    /// None for hashes.
    pub direction: Option<Direction>,
    pub timed: Vec<Timed>,
    /// Lines that said a test failed.
    pub failures: Vec<String>,
}

/// What one load wrote to the kernel log, parsed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TcryptLog {
    pub sections: Vec<Section>,
    /// "failed to load transform for ALG: -2" and other lines outside a section.
    pub failures: Vec<String>,
    /// Tests that counted cycles (`sec=0`) instead of timing seconds.
    pub cycle_counts: usize,
    /// A test's header with no result after it: the log ended or was overrun there.
    pub unfinished: Option<String>,
    /// Records the kernel overwrote before they were read (/dev/kmsg said EPIPE).
    pub overruns: usize,
}

/// A kmsg record's text (`6,102,3510000,-;text`) or a dmesg line (`[ 3.51] text`), with
/// the escaped newline tcrypt starts its section lines with and its `tcrypt: ` prefix gone.
fn message(line: &str) -> &str {
    let mut s = line;
    if let Some((head, text)) = s.split_once(';') {
        if !head.is_empty() && head.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-') {
            s = text;
        }
    }
    let t = s.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        if let Some((stamp, text)) = rest.split_once(']') {
            if stamp.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                s = text;
            }
        }
    }
    let s = s.trim_start();
    let s = s.strip_prefix("tcrypt:").unwrap_or(s).trim_start();
    s.strip_prefix("\\x0a").unwrap_or(s).trim()
}

/// The first token of `s` with its parentheses balanced (`rfc4106(gcm(aes))`), and the rest.
fn balanced(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 && s.starts_with('(') {
                    return Some((&s[..=i], &s[i + 1..]));
                }
            }
            ' ' if depth == 0 => return Some((&s[..i], &s[i..])),
            _ => {}
        }
    }
    (depth == 0 && !s.is_empty()).then_some((s, ""))
}

/// `[sync |async |multibuffer ]ALG (DRIVER)[ encryption|decryption]`.
fn section(rest: &str) -> Option<Section> {
    let mut rest = rest.trim();
    for kind in ["sync ", "async ", "multibuffer "] {
        if let Some(r) = rest.strip_prefix(kind) {
            rest = r;
        }
    }
    let (algorithm, rest) = balanced(rest)?;
    let (driver, rest) = balanced(rest.trim_start())?;
    let driver = driver.strip_prefix('(')?.strip_suffix(')')?;
    let direction = match rest.trim() {
        "encryption" => Some(Direction::Encryption),
        "decryption" => Some(Direction::Decryption),
        _ => None,
    };
    Some(Section {
        algorithm: algorithm.to_string(),
        driver: driver.to_string(),
        direction,
        timed: Vec::new(),
        failures: Vec::new(),
    })
}

/// A test's header: `test 5 (256 bit key, 1424 byte blocks)` or a hash's
/// `test  8 ( 1024 byte blocks, 1024 bytes per update,   1 updates)`; key bits (if any),
/// block bytes, whether a hash's block is one digest (its only kind kept), and what follows.
struct Header<'a> {
    key_bits: Option<u32>,
    block_bytes: u32,
    one_digest: bool,
    rest: &'a str,
}

fn header(s: &str) -> Option<Header<'_>> {
    let inner = s.strip_prefix("test")?.trim_start();
    let (_, inner) = inner.split_once('(')?;
    let (fields, rest) = inner.split_once(')')?;
    let number = |f: &str, unit: &str| -> Option<u32> { f.trim().strip_suffix(unit)?.trim().parse().ok() };
    let fields: Vec<&str> = fields.split(',').collect();
    let mut h = Header {
        key_bits: None,
        block_bytes: 0,
        one_digest: true,
        rest: rest.trim_start().strip_prefix(':').unwrap_or(rest).trim(),
    };
    let mut per_update = None;
    for f in &fields {
        if let Some(v) = number(f, "bit key") {
            h.key_bits = Some(v);
        } else if let Some(v) = number(f, "byte blocks") {
            h.block_bytes = v;
        } else if let Some(v) = number(f, "bytes per update") {
            per_update = Some(v);
        }
    }
    if let Some(p) = per_update {
        h.one_digest = p == h.block_bytes;
    }
    (h.block_bytes > 0).then_some(h)
}

/// What a result says: `N operations in S seconds (B bytes)` or `N opers/sec, B bytes/sec`.
enum Outcome {
    Timed { ops: u64, seconds: u32 },
    Cycles,
}

fn outcome(s: &str) -> Option<Outcome> {
    let s = s.trim();
    if let Some((ops, rest)) = s.split_once(" operations in ") {
        let seconds = rest.split_whitespace().next()?.parse().ok()?;
        return Some(Outcome::Timed {
            ops: ops.trim().parse().ok()?,
            seconds,
        });
    }
    if let Some((ops, _)) = s.split_once(" opers/sec") {
        return Some(Outcome::Timed {
            ops: ops.trim().parse().ok()?,
            seconds: 1,
        });
    }
    (s.contains(" cycles (") || s.contains("cycles/operation")).then_some(Outcome::Cycles)
}

/// Parses a load's log lines (kmsg records or dmesg lines; others are ignored).
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> TcryptLog {
    let mut log = TcryptLog::default();
    // The header waiting for its result, as (key bits, block bytes, one digest).
    let mut pending: Option<(Option<u32>, u32, bool, String)> = None;
    for line in lines {
        let s = message(line);
        if s.is_empty() {
            continue;
        }
        if let Some((_, rest)) = s.split_once("testing speed of ") {
            if let Some((.., text)) = pending.take() {
                log.unfinished = Some(text);
            }
            if let Some(sec) = section(rest) {
                log.sections.push(sec);
            }
            continue;
        }
        let (key_bits, block_bytes, one_digest, rest) = match header(s) {
            Some(h) => {
                if let Some((.., text)) = pending.take() {
                    log.unfinished = Some(text);
                }
                (h.key_bits, h.block_bytes, h.one_digest, h.rest)
            }
            None => match pending.take() {
                Some((k, b, d, _)) if outcome(s).is_some() => (k, b, d, s),
                other => {
                    pending = other;
                    let lower = s.to_ascii_lowercase();
                    if lower.contains("failed") || lower.contains("error") {
                        match log.sections.last_mut() {
                            Some(sec) if !lower.contains("load transform") => {
                                sec.failures.push(s.to_string())
                            }
                            _ => log.failures.push(s.to_string()),
                        }
                    }
                    continue;
                }
            },
        };
        match outcome(rest) {
            Some(Outcome::Timed { ops, seconds }) => {
                if let (true, Some(sec)) = (one_digest, log.sections.last_mut()) {
                    sec.timed.push(Timed {
                        key_bits,
                        block_bytes,
                        ops,
                        seconds,
                    });
                }
            }
            Some(Outcome::Cycles) => log.cycle_counts += 1,
            None => pending = Some((key_bits, block_bytes, one_digest, s.to_string())),
        }
    }
    if let Some((.., text)) = pending {
        log.unfinished = Some(text);
    }
    log
}

/// Why a tcrypt ceiling could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TcryptError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("this kernel has no tcrypt module (CONFIG_CRYPTO_TEST): `{command}` said: {said}")]
    NoModule { command: String, said: String },
    #[error("cannot read the kernel log (/dev/kmsg): {0}")]
    Kmsg(#[source] std::io::Error),
    #[error("cannot turn module autoloading off for the load ({MODPROBE_SYSCTL}): {0}")]
    Autoload(#[source] std::io::Error),
    #[error("`{command}` did not finish in {} s", .timeout.as_secs())]
    Timeout { command: String, timeout: Duration },
    #[error("{0}")]
    Missing(String),
}

/// What [`run`] got: the parsed log and how long the load took.
#[derive(Debug, Clone)]
pub struct Ran {
    pub load: Load,
    pub log: TcryptLog,
    pub elapsed: Duration,
}

/// Module autoloading turned off while it lives, the old loader put back when dropped.
struct AutoloadOff {
    old: String,
}

impl AutoloadOff {
    fn new() -> Result<AutoloadOff, TcryptError> {
        let old = std::fs::read_to_string(MODPROBE_SYSCTL).map_err(TcryptError::Autoload)?;
        std::fs::write(MODPROBE_SYSCTL, "\n").map_err(TcryptError::Autoload)?;
        Ok(AutoloadOff {
            old: old.trim_end().to_string(),
        })
    }
}

impl Drop for AutoloadOff {
    fn drop(&mut self) {
        let _ = std::fs::write(MODPROBE_SYSCTL, format!("{}\n", self.old));
    }
}

/// Loads tcrypt once (blocking: a second per test) and returns this load's log lines,
/// parsed. Writes to the running kernel's log: call it only in a kernel the lab owns.
pub fn run(load: &Load) -> Result<Ran, TcryptError> {
    let command = load.command_line();
    // What the test needs, loaded first (quietly: built-in ones are no error).
    let _ = Command::new(modprobe())
        .arg("-q")
        .arg("-a")
        .args(load.modules)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if load.loaded_only {
        // Templates loaded for other suites but unused (ctr, which gcm brings) would each be
        // timed too, a minute apiece: unloaded where nothing holds them; autoloading brings
        // them back when something asks. Not ecb where cbc(aes) is built on it (6.10 on:
        // `cbc(ecb(aes-fixed-time))`): with autoloading off, cbc(aes) could not be built.
        let cbc_over_ecb = preferred_drivers(&["cbc(aes)"])
            .iter()
            .any(|(_, driver)| driver.contains("ecb("));
        let unused = UNUSED_TEMPLATES
            .iter()
            .filter(|t| !(cbc_over_ecb && **t == "ecb"));
        let _ = Command::new(modprobe())
            .args(["-q", "-r", "-a"])
            .args(unused)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let _autoload_off = if load.loaded_only {
        Some(AutoloadOff::new()?)
    } else {
        None
    };
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(Path::new("/dev/kmsg"))
        .map_err(TcryptError::Kmsg)?;
    // Only what this load writes: from the log's end now.
    kmsg.seek(SeekFrom::End(0)).map_err(TcryptError::Kmsg)?;
    let t0 = Instant::now();
    let mut child = Command::new(modprobe())
        .arg("tcrypt")
        .args(load.args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| TcryptError::Spawn {
            command: command.clone(),
            source,
        })?;
    let mut records = Vec::new();
    let mut overruns = 0;
    let mut buf = vec![0u8; 16 * 1024];
    let mut finished = false;
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                records.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string());
                continue;
            }
            // Records overwritten before they were read: the reader goes on from the next.
            Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => {
                overruns += 1;
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(TcryptError::Kmsg(e)),
        }
        // The log is drained: done once the load has returned and one more read found nothing.
        if finished {
            break;
        }
        if child.try_wait().ok().flatten().is_some() {
            finished = true;
            continue;
        }
        if t0.elapsed() > LOAD_TIMEOUT {
            // The module's init cannot be stopped; it goes on in the kernel.
            return Err(TcryptError::Timeout {
                command,
                timeout: LOAD_TIMEOUT,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = t0.elapsed();
    let mut said = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut said);
    }
    let said = said.trim().to_string();
    // The load fails by design (EAGAIN: "Resource temporarily unavailable"); anything else
    // without a single section means there was nothing to load.
    let mut log = parse(records.iter().map(String::as_str));
    log.overruns = overruns;
    if log.sections.is_empty() && (said.contains("not found") || said.contains("FATAL")) {
        return Err(TcryptError::NoModule { command, said });
    }
    Ok(Ran {
        load: load.clone(),
        log,
        elapsed,
    })
}

/// A timed section and its per-packet times for one key size.
struct Series<'a> {
    section: &'a Section,
    /// (block bytes, seconds per op), by size.
    points: Vec<(u32, f64)>,
}

impl Series<'_> {
    /// Seconds per op at `bytes`, from the two nearest timed sizes (a line through their
    /// per-op times: a cost per request plus one per byte), and how it was had.
    fn op_seconds_at(&self, bytes: u32) -> Option<(f64, String)> {
        let p = &self.points;
        if let Some(&(_, t)) = p.iter().find(|(b, _)| *b == bytes) {
            return Some((t, format!("{bytes}-byte figure")));
        }
        let (a, b) = match p.iter().position(|(b, _)| *b > bytes) {
            Some(0) | None if p.len() < 2 => {
                let (b0, t0) = *p.first()?;
                // One size only: the same rate.
                return Some((t0 * f64::from(bytes) / f64::from(b0), format!("{b0}-byte rate")));
            }
            Some(0) => (p[0], p[1]),
            Some(i) => (p[i - 1], p[i]),
            None => (p[p.len() - 2], p[p.len() - 1]),
        };
        let slope = (b.1 - a.1) / f64::from(b.0 - a.0);
        let t = a.1 + slope * (f64::from(bytes) - f64::from(a.0));
        // A line through noisy points may fall at or below zero far outside them: then the
        // rate of the nearer size.
        let near = if bytes < a.0 { a } else { b };
        let t = if t > 0.0 {
            t
        } else {
            near.1 * f64::from(bytes) / f64::from(near.0)
        };
        Some((t, format!("between the {}- and {}-byte figures", a.0, b.0)))
    }
}

fn series<'a>(
    logs: &'a [TcryptLog],
    algorithm: &str,
    direction: Option<Direction>,
    key_bits: Option<u32>,
) -> Result<Series<'a>, String> {
    let sections: Vec<&Section> = logs
        .iter()
        .flat_map(|l| &l.sections)
        .filter(|s| s.algorithm == algorithm && s.direction == direction)
        .collect();
    let what = format!(
        "{algorithm}{}{}",
        key_bits.map_or(String::new(), |k| format!(" with a {k}-bit key")),
        match direction {
            Some(Direction::Encryption) => " encrypting",
            Some(Direction::Decryption) => " decrypting",
            None => "",
        }
    );
    let Some(section) = sections.last() else {
        let failed: Vec<&String> = logs
            .iter()
            .flat_map(|l| &l.failures)
            .filter(|f| f.contains(algorithm))
            .collect();
        return Err(match failed.first() {
            Some(f) => format!("tcrypt could not time {what}: {f}"),
            None => format!("tcrypt's log has no {what}"),
        });
    };
    let mut points: Vec<(u32, f64)> = section
        .timed
        .iter()
        .filter(|t| key_bits.is_none() || t.key_bits == key_bits)
        .filter_map(|t| Some((t.block_bytes, t.op_seconds()?)))
        .collect();
    points.sort_by_key(|p| p.0);
    points.dedup_by_key(|p| p.0);
    if points.is_empty() {
        let why = section
            .failures
            .first()
            .cloned()
            .or_else(|| {
                logs.iter()
                    .find_map(|l| l.unfinished.clone())
                    .map(|u| format!("the log ends at `{u}`"))
            })
            .unwrap_or_else(|| "no timed test".into());
        return Err(format!("tcrypt's log has no figure for {what} ({why})"));
    }
    Ok(Series { section, points })
}

/// The suite's ceiling from tcrypt's logs.
#[derive(Debug, Clone, PartialEq)]
pub struct TcryptSpeed {
    /// `kernel gcm(aes) (gcm_base(ctr(aes-generic),ghash-generic)) via tcrypt`.
    pub implementation: String,
    /// The driver(s) timed: `cbc(aes-generic)`, `cbc(aes-generic) + hmac(sha256-generic)`.
    pub driver: String,
    pub encrypt_mb_per_s: f64,
    pub decrypt_mb_per_s: f64,
    /// How each figure was had, for the ceiling's notes.
    pub notes: Vec<String>,
}

/// The suite's encrypt and decrypt MB/s of payload at `packet_bytes`, from `logs` (pure:
/// the arithmetic of [`measure`]).
pub fn speed(suite: SpeedSuite, packet_bytes: usize, logs: &[TcryptLog]) -> Result<TcryptSpeed, String> {
    let n = packet_bytes.max(1) as u32;
    let mb = |t: f64| f64::from(n) / t / 1e6;
    let pad = |n: u32| n.div_ceil(16) * 16;
    let cbc = |bits: KeyBits| -> Result<(Series, Series), String> {
        let k = Some(u32::from(bits.bits()));
        Ok((
            series(logs, "cbc(aes)", Some(Direction::Encryption), k)?,
            series(logs, "cbc(aes)", Some(Direction::Decryption), k)?,
        ))
    };
    let at = |s: &Series, bytes: u32| {
        s.op_seconds_at(bytes)
            .ok_or_else(|| format!("no {} figure", s.section.algorithm))
    };
    let mut notes = Vec::new();
    let (implementation, driver, enc, dec) = match suite {
        SpeedSuite::AesCbc(bits) => {
            let (e, d) = cbc(bits)?;
            let ((te, how), (td, _)) = (at(&e, pad(n))?, at(&d, pad(n))?);
            notes.push(format!("at {} bytes (padded to whole blocks): {how}", pad(n)));
            (
                format!("kernel cbc(aes) ({})", e.section.driver),
                e.section.driver.clone(),
                mb(te),
                mb(td),
            )
        }
        SpeedSuite::HmacSha256 => {
            let h = series(logs, "hmac(sha256)", None, None)?;
            let (t, how) = at(&h, n)?;
            notes.push(format!("at {n} bytes: {how}"));
            (
                format!("kernel hmac(sha256) ({})", h.section.driver),
                h.section.driver.clone(),
                mb(t),
                mb(t),
            )
        }
        SpeedSuite::AesCbcHmacSha256(bits) => {
            let (e, d) = cbc(bits)?;
            let h = series(logs, "hmac(sha256)", None, None)?;
            // ESP: CBC over the padded payload, the HMAC over IV || ciphertext.
            let (cbc_bytes, mac_bytes) = (pad(n), pad(n) + 16);
            let ((te, how), (td, _)) = (at(&e, cbc_bytes)?, at(&d, cbc_bytes)?);
            let (th, how_mac) = at(&h, mac_bytes)?;
            notes.push(format!(
                "CBC+HMAC from its parts, as tcrypt times no authenc: per packet the time of cbc(aes) \
                 ({:.1} MB/s encrypting, {:.1} decrypting at {cbc_bytes} bytes, {how}) plus that of \
                 hmac(sha256) ({:.1} MB/s over IV || ciphertext, {mac_bytes} bytes, {how_mac}); the real \
                 authenc does both and more, so it is no faster than this",
                f64::from(cbc_bytes) / te / 1e6,
                f64::from(cbc_bytes) / td / 1e6,
                f64::from(mac_bytes) / th / 1e6,
            ));
            (
                format!(
                    "kernel cbc(aes) ({}) + hmac(sha256) ({})",
                    e.section.driver, h.section.driver
                ),
                format!("{} + {}", e.section.driver, h.section.driver),
                mb(te + th),
                mb(td + th),
            )
        }
        SpeedSuite::Aead(a) => {
            let (algorithm, key_bits) = match a {
                AeadAlgorithm::ChaCha20Poly1305 => ("rfc7539esp(chacha20,poly1305)", 288),
                // ESP's own wrapper, which tcrypt times with AES-128 only (a 160-bit key:
                // the salt is 4 bytes of it).
                AeadAlgorithm::Aes128Gcm => ("rfc4106(gcm(aes))", 160),
                AeadAlgorithm::Aes256Gcm => ("gcm(aes)", 256),
            };
            let pick = |algorithm: &str, bits: u32| -> Result<(Series, Series), String> {
                Ok((
                    series(logs, algorithm, Some(Direction::Encryption), Some(bits))?,
                    series(logs, algorithm, Some(Direction::Decryption), Some(bits))?,
                ))
            };
            let (e, d) = match (pick(algorithm, key_bits), a) {
                (Ok(s), _) => s,
                (Err(_), AeadAlgorithm::Aes128Gcm) => pick("gcm(aes)", 128)?,
                (Err(e), _) => return Err(e),
            };
            if e.section.algorithm == "gcm(aes)" {
                notes.push(
                    "gcm(aes) as tcrypt times it (8 bytes of associated data); ESP wraps it in rfc4106, \
                     which tcrypt times with AES-128 only"
                        .into(),
                );
            }
            let ((te, how), (td, _)) = (at(&e, n)?, at(&d, n)?);
            notes.push(format!("at {n} bytes: {how}"));
            (
                format!("kernel {} ({})", e.section.algorithm, e.section.driver),
                e.section.driver.clone(),
                mb(te),
                mb(td),
            )
        }
    };
    Ok(TcryptSpeed {
        implementation: format!("{implementation} via tcrypt"),
        driver,
        encrypt_mb_per_s: enc,
        decrypt_mb_per_s: dec,
        notes,
    })
}

/// Loads timed earlier in this boot, by any run: tcrypt 6.1 times every key and block size
/// of a mode, a second each, so the cells of a sweep and the runs of a test group that time
/// the same drivers share one load (a minute) instead of each paying for it. tcrypt runs
/// only in a kernel the lab booted, whose /run is a tmpfs of its own, gone at halt; the
/// boot id keeps a file of another boot from counting.
const BOOT_CACHE: &str = "/run/ipsec-lab-tcrypt.json";

/// One load in [`BOOT_CACHE`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct CachedLoad {
    boot_id: String,
    mode: u32,
    alg: Option<String>,
    klen: Option<u32>,
    /// (algorithm, driver) preferred when it ran: what it timed.
    drivers: Vec<(String, String)>,
    log: TcryptLog,
}

impl CachedLoad {
    fn matches(&self, boot_id: &str, load: &Load, drivers: &[(String, String)]) -> bool {
        self.boot_id == boot_id
            && self.mode == load.mode
            && self.alg.as_deref() == load.alg
            && self.klen == load.klen
            && self.drivers == drivers
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn cached_loads() -> Vec<CachedLoad> {
    std::fs::read(BOOT_CACHE)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Adds a load to [`BOOT_CACHE`] (written whole and renamed: a reader sees the old file or
/// the new one). A cache that cannot be written costs time, nothing else.
fn remember(entry: CachedLoad) {
    let mut all = cached_loads();
    all.push(entry);
    let tmp = format!("{BOOT_CACHE}.{}", std::process::id());
    if let Ok(json) = serde_json::to_vec(&all) {
        if std::fs::write(&tmp, json).is_ok() && std::fs::rename(&tmp, BOOT_CACHE).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The highest-priority driver of each of `algorithms` now (absent ones left out).
fn preferred_drivers(algorithms: &[&str]) -> Vec<(String, String)> {
    let text = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
    let entries = model::env::parse_proc_crypto(&text);
    model::env::preferred_drivers(&entries, algorithms)
        .into_iter()
        .collect()
}

fn describe_drivers(drivers: &[(String, String)]) -> String {
    drivers
        .iter()
        .map(|(alg, driver)| format!("{alg}={driver}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Times `suite` with tcrypt in the running kernel (blocking: [`expected_duration`]) and
/// returns its ceiling at `packet_bytes`. Writes to the kernel's log and loads modules:
/// only for a kernel the lab owns.
pub fn measure(suite: SpeedSuite, packet_bytes: usize) -> Result<TcryptSpeed, String> {
    let mut logs = Vec::new();
    let mut said = Vec::new();
    let t0 = Instant::now();
    for load in loads(suite) {
        let drivers = preferred_drivers(load.serves);
        let boot = boot_id();
        let earlier = cached_loads()
            .into_iter()
            .find(|c| !boot.is_empty() && c.matches(&boot, &load, &drivers));
        if let Some(earlier) = earlier {
            said.push(format!(
                "{} (timed earlier in this boot with the same drivers, {}: reused)",
                load.command_line(),
                describe_drivers(&drivers)
            ));
            logs.push(earlier.log);
            continue;
        }
        let ran = run(&load).map_err(|e| e.to_string())?;
        if !boot.is_empty() {
            remember(CachedLoad {
                boot_id: boot,
                mode: load.mode,
                alg: load.alg.map(str::to_string),
                klen: load.klen,
                drivers,
                log: ran.log.clone(),
            });
        }
        // Whatever else the mode timed (an algorithm already loaded) is said: it is time spent.
        let mut timed: Vec<&str> = ran.log.sections.iter().map(|s| s.algorithm.as_str()).collect();
        timed.dedup();
        said.push(format!(
            "{} ({:.0} s, timing {})",
            load.command_line(),
            ran.elapsed.as_secs_f64(),
            timed.join(", ")
        ));
        if ran.log.overruns > 0 {
            said.push(format!(
                "{} of its log records were overwritten before they were read",
                ran.log.overruns
            ));
        }
        if ran.log.cycle_counts > 0 && ran.log.sections.iter().all(|s| s.timed.is_empty()) {
            return Err(format!(
                "{} counted cycles instead of timing seconds",
                load.command_line()
            ));
        }
        logs.push(ran.log);
    }
    let mut speed = speed(suite, packet_bytes, &logs)?;
    speed.notes.insert(
        0,
        format!(
            "timed inside the kernel by its own speed test, tcrypt: one request after another, no \
             system call per packet, {SECONDS} s of wall time per key and block size; {} took {:.0} s in all",
            said.join(", "),
            t0.elapsed().as_secs_f64()
        ),
    );
    Ok(speed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured in user-mode Linux 6.1.176 (Debian's user-mode-linux): `modprobe tcrypt
    /// mode=211 sec=1`, then `mode=300 alg=hmac(sha256) klen=32 sec=1`, then `mode=200
    /// sec=1` with module autoloading off (ecb, lrw, xts, cts skipped; ctr was loaded, so
    /// it ran and is cut short here), as /dev/kmsg gave them.
    const UML: &str = include_str!("../tests/fixtures/tcrypt-uml-6.1.176.kmsg");

    fn uml() -> TcryptLog {
        parse(UML.lines())
    }

    #[test]
    fn every_section_of_the_uml_capture_is_parsed_with_its_driver() {
        let log = uml();
        let names: Vec<(&str, Option<Direction>)> = log
            .sections
            .iter()
            .map(|s| (s.algorithm.as_str(), s.direction))
            .collect();
        assert_eq!(
            names,
            [
                ("rfc4106(gcm(aes))", Some(Direction::Encryption)),
                ("gcm(aes)", Some(Direction::Encryption)),
                ("rfc4106(gcm(aes))", Some(Direction::Decryption)),
                ("gcm(aes)", Some(Direction::Decryption)),
                ("hmac(sha256)", None),
                ("cbc(aes)", Some(Direction::Encryption)),
                ("cbc(aes)", Some(Direction::Decryption)),
                ("ctr(aes)", Some(Direction::Encryption)),
            ]
        );
        assert_eq!(log.sections[1].driver, "gcm_base(ctr(aes-generic),ghash-generic)");
        assert_eq!(log.sections[5].driver, "cbc(aes-generic)");
        assert_eq!(log.sections[4].driver, "hmac(sha256-generic)");
        // 8 sizes; gcm(aes) with three key sizes.
        assert_eq!(log.sections[0].timed.len(), 8);
        assert_eq!(log.sections[1].timed.len(), 24);
        assert_eq!(log.sections[5].timed.len(), 21);
        // The hash keeps its one-digest tests only, whose figure is a record of its own.
        let sizes: Vec<u32> = log.sections[4].timed.iter().map(|t| t.block_bytes).collect();
        assert_eq!(sizes, [16, 64, 256, 1024, 2048, 4096, 8192]);
        assert_eq!(log.sections[4].timed[3].ops, 175279);
        let t = log.sections[0].timed[5];
        assert_eq!(
            (t.key_bits, t.block_bytes, t.ops, t.seconds),
            (Some(160), 1420, 57286, 1)
        );
        assert_eq!(log.failures.len(), 8, "{:?}", log.failures);
        assert!(log.failures[0].contains("ecb(aes): -2"));
        assert_eq!(log.cycle_counts, 0);
    }

    fn gcm_256_enc_ops(bytes: u32) -> f64 {
        let log = uml();
        let t = log.sections[1]
            .timed
            .iter()
            .find(|t| t.key_bits == Some(256) && t.block_bytes == bytes)
            .unwrap();
        t.ops as f64
    }

    #[test]
    fn gcm_at_the_tunnels_size_is_interpolated_between_1420_and_4096() {
        let logs = [uml()];
        let s = speed("aes-256-gcm".parse().unwrap(), 1420, &logs).unwrap();
        // test 21 (256 bit key, 1420 byte blocks): 63699 and 64229 operations in 1 s.
        assert!(
            (s.encrypt_mb_per_s - 1420.0 * 63699.0 / 1e6).abs() < 1e-6,
            "{s:?}"
        );
        assert!(
            (s.decrypt_mb_per_s - 1420.0 * 64229.0 / 1e6).abs() < 1e-6,
            "{s:?}"
        );
        assert!(
            s.implementation
                .contains("gcm_base(ctr(aes-generic),ghash-generic)"),
            "{s:?}"
        );
        assert!(s.implementation.ends_with("via tcrypt"));
        // 1431 bytes lies between 1420 and 4096: per-op time on the line between them.
        let s = speed("aes-256-gcm".parse().unwrap(), 1431, &logs).unwrap();
        let at = |ops: f64, bytes: f64| (bytes, 1.0 / ops);
        let (a, b) = (at(63699.0, 1420.0), at(gcm_256_enc_ops(4096), 4096.0));
        let t = a.1 + (b.1 - a.1) * (1431.0 - a.0) / (b.0 - a.0);
        assert!((s.encrypt_mb_per_s - 1431.0 / t / 1e6).abs() < 1e-9, "{s:?}");
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("between the 1420- and 4096-byte")),
            "{s:?}"
        );
        // AES-128 is ESP's rfc4106, which tcrypt times with a 160-bit key (salt included).
        let s = speed("aes-128-gcm".parse().unwrap(), 1420, &logs).unwrap();
        assert!(s.implementation.contains("rfc4106(gcm(aes))"), "{s:?}");
        assert!((s.encrypt_mb_per_s - 1420.0 * 57286.0 / 1e6).abs() < 1e-6);
    }

    #[test]
    fn cbc_hmac_is_bounded_by_its_parts_added_per_packet() {
        let logs = [uml()];
        let s = speed("aes-256-cbc-hmac-sha256".parse().unwrap(), 1424, &logs).unwrap();
        // cbc(aes) 256 at 1424: 174660 ops/s encrypting, 201605 decrypting.
        let cbc_e = 1.0 / 174660.0;
        let cbc_d = 1.0 / 201605.0;
        // hmac(sha256) over 1440 bytes, between the 1024- and 2048-byte digests.
        let (t1, t2) = (1.0 / 175279.0, 1.0 / 88018.0);
        let mac = t1 + (t2 - t1) * (1440.0 - 1024.0) / 1024.0;
        let enc = 1424.0 / (cbc_e + mac) / 1e6;
        let dec = 1424.0 / (cbc_d + mac) / 1e6;
        assert!((s.encrypt_mb_per_s - enc).abs() < 1e-9, "{s:?} vs {enc}");
        assert!((s.decrypt_mb_per_s - dec).abs() < 1e-9, "{s:?} vs {dec}");
        // Slower than either part alone.
        assert!(s.encrypt_mb_per_s < 1424.0 * 174660.0 / 1e6);
        assert!(s.encrypt_mb_per_s < 1440.0 / mac / 1e6);
        assert!(
            s.implementation.contains("cbc(aes-generic)")
                && s.implementation.contains("hmac(sha256-generic)")
        );
        assert!(
            s.notes[0].contains("from its parts") && s.notes[0].contains("no faster"),
            "{s:?}"
        );
    }

    #[test]
    fn a_suite_missing_from_the_log_says_which_and_why() {
        let logs = [uml()];
        let e = speed("chacha20-poly1305".parse().unwrap(), 1420, &logs).unwrap_err();
        assert!(e.contains("no rfc7539esp(chacha20,poly1305)"), "{e}");
        // Only the GCM load: CBC+HMAC's parts are not there.
        let gcm_only: Vec<&str> = UML.lines().take_while(|l| !l.contains("hmac(sha256)")).collect();
        let e = speed(
            "aes-128-cbc-hmac-sha256".parse().unwrap(),
            1420,
            &[parse(gcm_only)],
        )
        .unwrap_err();
        assert!(e.contains("cbc(aes)"), "{e}");
        // A transform that could not be loaded is named with tcrypt's words.
        let failed = parse(["3,200,90050000,-;tcrypt: failed to load transform for cbc(aes): -2"]);
        let e = speed("aes-256-cbc".parse().unwrap(), 1420, &[failed]).unwrap_err();
        assert!(e.contains("failed to load transform for cbc(aes): -2"), "{e}");
    }

    #[test]
    fn a_truncated_log_keeps_what_finished_and_says_where_it_stopped() {
        // Cut inside the hash section: test 8's header is there, its figure is not.
        let cut: Vec<&str> = UML.lines().take_while(|l| !l.starts_with("4,183,")).collect();
        let log = parse(cut);
        assert!(log
            .unfinished
            .as_deref()
            .unwrap()
            .contains("1024 byte blocks, 1024 bytes per update"));
        let h = log
            .sections
            .iter()
            .find(|s| s.algorithm == "hmac(sha256)")
            .unwrap();
        assert_eq!(h.timed.len(), 3, "{h:?}");
        // Cut right after the cbc(aes) header: a section with nothing timed.
        let cut: Vec<&str> = UML.lines().take_while(|l| !l.starts_with("6,203,")).collect();
        let e = speed("aes-256-cbc".parse().unwrap(), 1420, &[parse(cut)]).unwrap_err();
        assert!(
            e.contains("no figure for cbc(aes) with a 256-bit key encrypting"),
            "{e}"
        );
        // A half record and stray lines are ignored.
        let log = parse(["6,1,2,-;tcrypt: test 0 (128 bit key", "garbage", ""]);
        assert!(log.sections.is_empty() && log.unfinished.is_none());
    }

    #[test]
    fn dmesg_lines_and_cycle_counts_are_read_too() {
        let log = parse([
            "[    3.78] tcrypt: ",
            "               testing speed of sync cbc(aes) (cbc(aes-generic)) encryption",
            "[    3.78] tcrypt: test 5 (128 bit key, 1424 byte blocks): 1 operation in 0 cycles (1424 bytes)",
            "[    4.40] test 0 (160 bit key, 16 byte blocks): ",
            "[    4.40] 1 operation in 0 cycles (16 bytes)",
        ]);
        assert_eq!(log.sections.len(), 1);
        assert_eq!(log.sections[0].driver, "cbc(aes-generic)");
        assert_eq!(log.cycle_counts, 2);
        assert!(log.sections[0].timed.is_empty());
    }

    #[test]
    fn loads_time_only_what_the_suite_needs() {
        let l = loads("aes-256-cbc-hmac-sha256".parse().unwrap());
        assert_eq!(
            l.iter().map(Load::command_line).collect::<Vec<_>>(),
            [
                "modprobe tcrypt mode=200 sec=1",
                "modprobe tcrypt mode=300 sec=1 alg=hmac(sha256) klen=32"
            ]
        );
        assert!(l[0].loaded_only && !l[1].loaded_only);
        assert_eq!(loads("aes-256-gcm".parse().unwrap())[0].mode, 211);
        assert_eq!(loads("chacha20-poly1305".parse().unwrap())[0].mode, 213);
        let d = expected_duration("aes-256-cbc-hmac-sha256".parse().unwrap());
        assert!(
            d >= Duration::from_secs(64) && d <= Duration::from_secs(90),
            "{d:?}"
        );
    }

    #[test]
    fn balanced_names_keep_their_parentheses() {
        let s = section("rfc4106(gcm(aes)) (rfc4106(gcm_base(ctr(aes-generic),ghash-generic))) decryption")
            .unwrap();
        assert_eq!(s.algorithm, "rfc4106(gcm(aes))");
        assert_eq!(s.driver, "rfc4106(gcm_base(ctr(aes-generic),ghash-generic))");
        assert_eq!(s.direction, Some(Direction::Decryption));
        let s = section("async hmac(sha256) (hmac(sha256-generic))").unwrap();
        assert_eq!((s.algorithm.as_str(), s.direction), ("hmac(sha256)", None));
    }
}
