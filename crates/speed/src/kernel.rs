//! The kernel's crypto API as an implementation: probed through AF_ALG, the way a user
//! program reaches it, and named by the driver /proc/crypto says serves it.
//!
//! Timing through AF_ALG is not implemented yet; the probe says why kernel rows are absent,
//! so the table never silently drops them.

use model::env::{parse_proc_crypto, preferred_drivers};

/// Why the kernel rows are not in the table, with the driver the kernel would use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProbe {
    /// `cbc(aes)` driver from /proc/crypto (`cbc-aes-aesni`, `cbc(aes-generic)`, …), if the
    /// kernel has instantiated it.
    pub cbc_aes_driver: Option<String>,
    pub af_alg: Result<(), String>,
}

impl KernelProbe {
    /// The line printed (and recorded) for the kernel rows.
    pub fn skip_reason(&self) -> String {
        let driver = match &self.cbc_aes_driver {
            Some(d) => format!("/proc/crypto: cbc(aes) is served by {d}"),
            None => "/proc/crypto lists no cbc(aes) driver".into(),
        };
        match &self.af_alg {
            Err(why) => format!("no AF_ALG in this kernel ({why}); {driver}"),
            Ok(()) => format!("AF_ALG is available but the lab does not time it yet; {driver}"),
        }
    }
}

pub fn probe() -> KernelProbe {
    let text = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
    let drivers = preferred_drivers(&parse_proc_crypto(&text), &["cbc(aes)"]);
    KernelProbe {
        cbc_aes_driver: drivers.get("cbc(aes)").cloned(),
        af_alg: af_alg_socket(),
    }
}

/// Opens and binds an AF_ALG skcipher socket for cbc(aes), then closes it.
fn af_alg_socket() -> Result<(), String> {
    use nix::sys::socket::{bind, socket, AddressFamily, AlgAddr, SockFlag, SockType};
    let fd = socket(
        AddressFamily::Alg,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket(AF_ALG): {}", e.desc()))?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &AlgAddr::new("skcipher", "cbc(aes)"),
    )
    .map_err(|e| format!("bind(skcipher, cbc(aes)): {}", e.desc()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_reason_names_the_cause_and_driver() {
        let p = KernelProbe {
            cbc_aes_driver: Some("cbc-aes-aesni".into()),
            af_alg: Err("socket(AF_ALG): Address family not supported by protocol".into()),
        };
        let r = p.skip_reason();
        assert!(r.contains("no AF_ALG") && r.contains("cbc-aes-aesni"), "{r}");
    }

    #[test]
    fn probe_on_this_kernel_gives_a_reason() {
        let r = probe().skip_reason();
        eprintln!("kernel probe: {r}");
        assert!(r.contains("AF_ALG"), "{r}");
    }
}
