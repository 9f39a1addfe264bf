//! Software AES chosen at run time: the "AES-NI off" row.
//!
//! AWS-LC reads `OPENSSL_ia32cap` (on ARM `OPENSSL_armcap`) once, when it initialises, and
//! masks CPUID bits with it; `~0x200000200000000` clears AES-NI (bit 57) and PCLMULQDQ (bit
//! 33), `~0x24` ARMv8's AES and PMULL, so AES and GHASH fall back to constant-time vector
//! code ([`model::env::HARDWARE_AES_OFF`]). Setting the variable from inside a running
//! process is too late once AWS-LC has started (and `set_var` races other threads), so the
//! process that does the crypto must be *started* with it:
//!
//! * [`command`] builds a `Command` for this same binary with the mask set (the speed
//!   benchmark runs its soft rows in such a child);
//! * [`reexec_if_needed`] replaces the current process with itself plus the mask, for a
//!   command line that asked for `--crypto soft` (call it first thing in `main`).
//!
//! [`active`] asks AWS-LC itself whether hardware AES is off, so a report never claims
//! "soft" for a run that used AES-NI.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use model::CryptoChoice;

/// The variable AWS-LC (and OpenSSL) read.
pub const ENV_VAR: &str = model::env::HARDWARE_AES_OFF.var;
/// Mask that clears hardware AES and carry-less multiply.
pub const MASK_HARDWARE_AES: &str = model::env::HARDWARE_AES_OFF.mask;

const AES_BIT: u64 = model::env::HARDWARE_AES_OFF.aes_bit;

#[derive(Debug, thiserror::Error)]
pub enum SoftError {
    #[error("cannot find this program's own path to restart it with software AES: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error("cannot restart {exe} with {ENV_VAR}={MASK_HARDWARE_AES}: {source}")]
    Exec {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{ENV_VAR}={value:?} is set but AWS-LC still uses hardware AES; unset it or set it to {MASK_HARDWARE_AES}"
    )]
    MaskIgnored { value: String },
}

/// Whether hardware AES is off in this process, as AWS-LC itself reports it.
pub fn active() -> bool {
    !crate::awslc::hardware_aes()
}

/// Whether the environment asks AWS-LC to mask hardware AES (parsing [`ENV_VAR`] the way
/// AWS-LC does: `~X` clears the bits of X, `|X` sets them, plain `X` replaces CPUID).
pub fn mask_requested() -> bool {
    std::env::var(ENV_VAR).is_ok_and(|v| value_masks_aes(&v))
}

fn value_masks_aes(value: &str) -> bool {
    let first = value.split(':').next().unwrap_or("").trim();
    let (prefix, number) = match first.chars().next() {
        Some(c @ ('~' | '|')) => (Some(c), &first[1..]),
        _ => (None, first),
    };
    let parsed = match number.strip_prefix("0x").or_else(|| number.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => number.parse::<u64>(),
    };
    let Ok(bits) = parsed else { return false };
    match prefix {
        Some('~') => bits & AES_BIT != 0,
        Some(_) => false,
        None => bits & AES_BIT == 0,
    }
}

/// A command that runs this same binary with hardware AES masked. The caller adds the
/// arguments.
pub fn command() -> Result<Command, SoftError> {
    let exe = std::env::current_exe().map_err(SoftError::CurrentExe)?;
    let mut cmd = Command::new(exe);
    cmd.env(ENV_VAR, MASK_HARDWARE_AES);
    Ok(cmd)
}

/// For `--crypto soft`: if this process still has hardware AES, replace it with the same
/// binary and arguments plus the mask (does not return on success). Returns `Ok(())` when
/// nothing is needed: another choice, or hardware AES already off.
pub fn reexec_if_needed(choice: CryptoChoice) -> Result<(), SoftError> {
    if choice != CryptoChoice::Soft || active() {
        return Ok(());
    }
    if let Ok(value) = std::env::var(ENV_VAR) {
        if value_masks_aes(&value) {
            // Already restarted once and the mask did not take: restarting again would loop.
            return Err(SoftError::MaskIgnored { value });
        }
    }
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut cmd = command()?;
    cmd.args(args);
    exec(cmd)
}

#[cfg(unix)]
fn exec(mut cmd: Command) -> Result<(), SoftError> {
    use std::os::unix::process::CommandExt;
    let exe = PathBuf::from(cmd.get_program());
    let source = cmd.exec();
    Err(SoftError::Exec { exe, source })
}

#[cfg(not(unix))]
fn exec(mut cmd: Command) -> Result<(), SoftError> {
    let exe = PathBuf::from(cmd.get_program());
    let status = cmd.status().map_err(|source| SoftError::Exec { exe, source })?;
    std::process::exit(status.code().unwrap_or(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn mask_values_are_parsed_like_aws_lc() {
        assert!(value_masks_aes(MASK_HARDWARE_AES));
        assert!(value_masks_aes("~0x200000000000000:0"));
        assert!(!value_masks_aes("~0x200000000"), "only PCLMULQDQ masked");
        assert!(!value_masks_aes("|0x200000000000000"));
        assert!(value_masks_aes("0"), "a plain value replaces CPUID");
        assert!(!value_masks_aes("nonsense"));
        assert!(!value_masks_aes(""));
    }

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn arm_mask_values_are_parsed_like_aws_lc() {
        assert!(value_masks_aes(MASK_HARDWARE_AES));
        assert!(value_masks_aes("~0x4"));
        assert!(!value_masks_aes("~0x20"), "only PMULL masked");
        assert!(value_masks_aes("0"));
    }
}
