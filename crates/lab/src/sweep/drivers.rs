//! Choosing the kernel's `cbc(aes)` driver for an xfrm row: which drivers exist, raising
//! one above the others for a row (and putting every priority back, also after a SIGKILL
//! through the state file), which driver served a cell, and the evidence note that the
//! kernel was left as found.
//!
//! Leaves out: running the rows ([`super::rows`]); crypto_user's netlink messages
//! (`xfrm::crypto_user`).

use model::env::{parse_proc_crypto, CryptoEntry};
use model::{CipherSuite, Hmac};
use xfrm::crypto_user::{CryptoUser, PriorityGuard};

fn proc_crypto() -> Vec<CryptoEntry> {
    parse_proc_crypto(&std::fs::read_to_string("/proc/crypto").unwrap_or_default())
}

/// Every `cbc(aes)` skcipher driver and its priority, sorted.
pub(super) fn cbc_aes_priorities() -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = proc_crypto()
        .into_iter()
        .filter(|e| e.name == "cbc(aes)" && e.kind == "skcipher")
        .map(|e| (e.driver, e.priority))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The `cbc(aes)` skcipher drivers, after asking the kernel to instantiate the generic one
/// (which a lookup never builds while a faster driver exists). Err says why the sweep
/// cannot choose drivers here.
pub(super) fn cbc_aes_drivers() -> Result<Vec<String>, String> {
    let mut cu = CryptoUser::open().map_err(|e| e.to_string())?;
    if let Err(e) = cu.instantiate("cbc(aes-generic)") {
        tracing::info!("cbc(aes-generic) not instantiated: {e}");
    }
    let mut drivers: Vec<(i32, String)> = proc_crypto()
        .into_iter()
        .filter(|e| e.name == "cbc(aes)" && e.selftest_passed && e.kind == "skcipher")
        .map(|e| (e.priority, e.driver))
        .collect();
    drivers.sort_by(|a, b| b.cmp(a));
    drivers.dedup_by(|a, b| a.1 == b.1);
    match drivers.len() {
        0 => Err("no cbc(aes) driver in /proc/crypto".into()),
        1 => Err(format!(
            "{} is the only cbc(aes) driver in this kernel",
            drivers[0].1
        )),
        _ => Ok(drivers.into_iter().map(|(_, d)| d).collect()),
    }
}

/// Driver priorities changed for one row: restored by the guard, and recorded with their
/// originals in the state file until then, so `clean` restores them after a SIGKILL.
pub(super) struct PinnedDriver {
    guard: Option<PriorityGuard<CryptoUser>>,
    records: Vec<owner::Record>,
}

impl PinnedDriver {
    /// Restores now and says whether every priority went back; what did not stays
    /// recorded for `clean`.
    pub(super) fn restore(mut self) -> Result<(), Vec<String>> {
        self.restore_now()
    }

    fn restore_now(&mut self) -> Result<(), Vec<String>> {
        let restored = self.guard.take().map_or(Ok(()), PriorityGuard::restore);
        if restored.is_ok() {
            for r in self.records.drain(..) {
                owner::forget(&r);
            }
        }
        restored
    }
}

impl Drop for PinnedDriver {
    fn drop(&mut self) {
        let _ = self.restore_now();
    }
}

/// Raises `driver` above every other `cbc(aes)` driver and flushes the algorithm instances
/// built on any of them (an UPDATEALG removes them), so the next SA is built from `driver`.
/// Everything goes back when the guard drops.
pub(super) fn pin_driver(driver: &str) -> Result<PinnedDriver, String> {
    let entries: Vec<CryptoEntry> = proc_crypto()
        .into_iter()
        .filter(|e| e.name == "cbc(aes)" && e.kind == "skcipher")
        .collect();
    let top = entries.iter().map(|e| e.priority).max().unwrap_or(0).max(0) as u32 + 100;
    let mut pinned = PinnedDriver {
        guard: Some(PriorityGuard::new(CryptoUser::open().map_err(|e| e.to_string())?)),
        records: Vec::new(),
    };
    for e in &entries {
        let original = e.priority.max(0) as u32;
        let new = if e.driver == driver { top } else { original };
        // Recorded before the change, so a kill right after it still leaves the original.
        let record = owner::Record::DriverPriority {
            driver: e.driver.clone(),
            original,
        };
        owner::record(record.clone()).map_err(|e| e.to_string())?;
        pinned.records.push(record);
        let guard = pinned.guard.as_mut().expect("set above");
        guard.set(&e.driver, original, new).map_err(|e| e.to_string())?;
    }
    if !entries.iter().any(|e| e.driver == driver) {
        return Err(format!("{driver} is no longer in /proc/crypto"));
    }
    Ok(pinned)
}

/// The kernel algorithm instance an ESP SA of `suite` uses (without the IV generator).
fn instance_name(suite: CipherSuite) -> Option<&'static str> {
    match suite {
        CipherSuite::AesCbc { hmac: Hmac::None, .. } => Some("authenc(digest_null,cbc(aes))"),
        CipherSuite::AesCbc {
            hmac: Hmac::Sha256, ..
        } => Some("authenc(hmac(sha256),cbc(aes))"),
        CipherSuite::AesGcm { .. } => Some("rfc4106(gcm(aes))"),
        CipherSuite::None => None,
    }
}

/// The driver that served the last SA of `suite`, from /proc/crypto.
pub(super) fn served_by(suite: CipherSuite) -> Option<String> {
    let name = instance_name(suite)?;
    model::env::preferred_drivers(&proc_crypto(), &[name]).remove(name)
}

/// The evidence note that the driver rows left the kernel's `cbc(aes)` priorities as they
/// found them (or not).
pub(super) fn priorities_note(before: &[(String, i32)], after: &[(String, i32)]) -> String {
    let list = |v: &[(String, i32)]| {
        v.iter()
            .map(|(d, p)| format!("{d}={p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if after == before {
        format!(
            "cbc(aes) driver priorities restored after the driver rows: {}",
            list(after)
        )
    } else {
        format!(
            "cbc(aes) driver priorities NOT restored: before {}, after {}",
            list(before),
            list(after)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esp_instances_are_named_as_the_kernel_builds_them() {
        assert_eq!(
            instance_name(CipherSuite::classic_six()[0]),
            Some("authenc(digest_null,cbc(aes))")
        );
        assert_eq!(
            instance_name(CipherSuite::classic_six()[5]),
            Some("authenc(hmac(sha256),cbc(aes))")
        );
    }

    #[test]
    fn the_priorities_note_says_whether_they_came_back() {
        let before = vec![("aesni".to_string(), 400), ("generic".to_string(), 100)];
        assert_eq!(
            priorities_note(&before, &before),
            "cbc(aes) driver priorities restored after the driver rows: aesni=400, generic=100"
        );
        let after = vec![("aesni".to_string(), 400), ("generic".to_string(), 500)];
        assert!(priorities_note(&before, &after).contains("NOT restored"));
    }
}
