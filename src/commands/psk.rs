//! `ipsec-lab psk generate`: a new pre-shared key for `serve` and `run --peer`.
//!
//! Prints 32 random bytes as 64 hex digits and a newline. When standard output is a regular
//! file (`ipsec-lab psk generate > FILE`), that file is made mode 0600 first, because
//! `serve` and `run --peer` refuse a key file that group or others can read.

use std::io::Write;
use std::os::fd::AsFd;

use control::Psk;
use nix::sys::stat::{fchmod, fstat, Mode, SFlag};

use crate::cli::{PskArgs, PskCommand};
use lab::{LabError, LabResult};

pub fn run(args: PskArgs) -> LabResult<()> {
    match args.command {
        PskCommand::Generate => generate(),
    }
}

fn generate() -> LabResult<()> {
    let psk = Psk::generate().map_err(LabError::failed)?;
    let stdout = std::io::stdout();
    let fd = stdout.as_fd();
    if let Ok(st) = fstat(fd) {
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG {
            // Before a key byte is written: the file never holds the key with a wider mode.
            fchmod(fd, Mode::from_bits_truncate(0o600))
                .map_err(|e| LabError::failed(anyhow::anyhow!("making the key file mode 0600: {e}")))?;
        }
    }
    let mut out = stdout.lock();
    out.write_all(psk.to_file_text().as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| LabError::failed(anyhow::anyhow!("writing the key: {e}")))
}
