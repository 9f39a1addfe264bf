//! Stage one of `ipsec-lab speed`: the command line as clap parses it, turned into the
//! `speed` crate's plain [`speed::SpeedRequest`], which that crate validates (stage two).
//! The output flags (`--json`, `--openssl-units`) stay here: printing is the binary's.

use std::path::PathBuf;

use clap::Args;
use model::ByteSize;

/// Time ciphers across implementations, like `openssl speed -evp`.
#[derive(Debug, Clone, Args)]
pub struct SpeedArgs {
    /// Suites to time (default: all): aes-{128,192,256}-cbc, hmac-sha256,
    /// aes-{128,192,256}-cbc-hmac-sha256, aes-{128,256}-gcm, chacha20-poly1305.
    pub suites: Vec<String>,
    /// Implementations, comma-separated: auto, soft, rustcrypto, aws-lc, libcrypto (OpenSSL's,
    /// the library openssl speed times), kernel.
    /// Default: auto,rustcrypto,soft,kernel (aws-lc is what auto uses).
    #[arg(long, value_delimiter = ',')]
    pub crypto: Vec<String>,
    /// Seconds per cell, split over the repeats (default 0.5 for several suites, 1 for one).
    #[arg(long, allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// Threads at once, pinned to the CPUs in turn; the figure is all their bytes over one
    /// common window: the machine's, as openssl's -multi (more threads than CPUs share them).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = crate::values::in_range::<usize>(1, 1024))]
    pub multi: usize,
    /// Repeats per cell; the table shows the median and flags spreads above 5 %.
    #[arg(long, visible_alias = "repeats", default_value_t = 3, allow_negative_numbers = true,
          value_parser = crate::values::in_range::<usize>(1, model::plan::MAX_REPEAT.into()))]
    pub repeat: usize,
    /// Block sizes, comma-separated, with units as --bytes takes them: 1400,8KiB,16k
    /// (default 16,64,256,1024,1400,8192,16384).
    #[arg(long, value_delimiter = ',', value_parser = parse_block_size)]
    pub sizes: Vec<ByteSize>,
    /// Print openssl's units (1000s of bytes per second) instead of MB/s.
    #[arg(long)]
    pub openssl_units: bool,
    /// Also run `openssl speed -evp` (-elapsed unless --clock cpu) for the same suites and print it alongside.
    #[arg(long)]
    pub against_openssl: bool,
    /// Write one JSON record per cell (plus the environment) to FILE, or `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Time the kernel rows inside a VM booting a stock kernel (default: the one Debian's
    /// linux-image-amd64 points at, else the newest /boot/vmlinuz-*) under virtme-ng, for
    /// kernels without AF_ALG; the other rows run here. KERNEL,KERNEL: one boot per kernel, each row named after its kernel.
    /// Without KVM the VM's CPU is emulated: its rows show correctness, not speed. `uml` (or
    /// `uml:RELEASE`): in user-mode Linux at native speed, its rows from the kernel's own
    /// tcrypt (about a minute per suite).
    #[arg(long, value_name = "KERNEL[,KERNEL...]", num_args = 0..=1, default_missing_value = "",
          value_hint = clap::ValueHint::FilePath)]
    pub vm: Option<String>,
    /// packet: each block a new message (a fresh IV or nonce, the AEAD's tag), as a tunnel
    /// pays per packet. stream: one cipher context, one update per block that continues it,
    /// as `openssl speed -evp` times (no kernel rows; RustCrypto streams CBC only).
    #[arg(long, default_value = "packet", value_name = "packet|stream")]
    pub mode: speed::Mode,
    /// wall: bytes per elapsed second. cpu: bytes per CPU-second of the timing thread (one
    /// thread; with --against-openssl, openssl's default user-CPU timing).
    #[arg(long, default_value = "wall", value_name = "wall|cpu")]
    pub clock: speed::Clock,
    /// Internal: this process is a child run (soft rows, or kernel rows in the VM); print
    /// only JSON.
    #[arg(long, hide = true)]
    pub child: bool,
}

/// A block size of `--sizes`: a size as --bytes takes it, whose zero is refused with a
/// block size to try (the payload sizes' hint, 100MB, is no block size).
fn parse_block_size(text: &str) -> Result<ByteSize, String> {
    text.parse::<ByteSize>().map_err(|e| match e {
        model::size::ByteSizeError::Zero(_) => {
            format!("block size {text:?} must be above zero, e.g. 1400 (a tunnel's packet) or 16KiB")
        }
        other => other.to_string(),
    })
}

impl SpeedArgs {
    pub fn request(&self) -> speed::SpeedRequest {
        speed::SpeedRequest {
            suites: self.suites.clone(),
            crypto: self.crypto.clone(),
            seconds: self.seconds,
            threads: self.multi,
            repeats: self.repeat,
            sizes: self.sizes.clone(),
            against_openssl: self.against_openssl,
            vm: self
                .vm
                .as_ref()
                .map(|k| Some(k.clone()).filter(|k| !k.is_empty())),
            child: self.child,
            mode: self.mode,
            clock: self.clock,
        }
    }

    pub fn units(&self) -> speed::Units {
        if self.openssl_units {
            speed::Units::OpensslKilobytes
        } else {
            speed::Units::MegabytesPerSecond
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        speed: SpeedArgs,
    }

    fn parse(args: &[&str]) -> SpeedArgs {
        Cli::try_parse_from(std::iter::once("speed").chain(args.iter().copied()))
            .expect("parses")
            .speed
    }

    #[test]
    fn the_command_lines_defaults_are_the_requests() {
        assert_eq!(parse(&[]).request(), speed::SpeedRequest::default());
    }

    #[test]
    fn vm_flag_takes_an_optional_kernel() {
        assert_eq!(parse(&["--vm"]).request().vm, Some(None));
        assert_eq!(
            parse(&["--vm", "/boot/vmlinuz-x"]).request().vm,
            Some(Some("/boot/vmlinuz-x".into()))
        );
    }

    /// The soft child and the VM's guest are started with [`speed::SpeedPlan::child_args`]:
    /// they must parse back into the plan they came from.
    #[test]
    fn a_child_runs_command_line_parses_back_to_its_plan() {
        use speed::SpeedImpl::{Crypto, Kernel};
        let soft = Crypto(crypto::CryptoChoice::Soft);
        for (line, implementations) in [
            (&["--multi", "2"][..], &[Kernel, soft][..]),
            (&["--mode", "stream", "--clock", "cpu"][..], &[soft][..]),
        ] {
            let mut args = vec!["aes-128-cbc", "hmac-sha256", "--seconds", "0.05"];
            args.extend(line);
            let host = parse(&args).request().validate().unwrap();
            for &implementation in implementations {
                let args = host.child_args(implementation);
                assert_eq!(args[0], speed::SUBCOMMAND);
                let child = parse(&args[1..].iter().map(String::as_str).collect::<Vec<_>>())
                    .request()
                    .validate()
                    .unwrap();
                assert_eq!(child.implementations, [implementation]);
                assert!(child.child);
                let what = |p: &speed::SpeedPlan| {
                    (
                        p.suites.clone(),
                        p.sizes.clone(),
                        p.seconds,
                        p.threads,
                        p.repeats,
                        p.mode,
                        p.clock,
                    )
                };
                assert_eq!(what(&child), what(&host));
            }
        }
    }
}
