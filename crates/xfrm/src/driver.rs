//! Which kernel driver serves the lab's ESP SAs, and making one `cbc(aes)` driver serve
//! them for a while (the modern form of loading `aes.ko` or `aes-i586.ko`).
//!
//! * [`esp_instance_name`] / [`esp_served_by`]: the algorithm instance an ESP SA of a suite
//!   uses, and the driver /proc/crypto says built it.
//! * [`cbc_aes_priorities`] / [`choosable_cbc_aes_drivers`] / [`pin_plan`]: pure reads of
//!   /proc/crypto entries; [`read_proc_crypto`] is the one place that reads the file.
//! * [`cbc_aes_drivers`] and [`pin_cbc_aes_driver`]: the root-only parts, over
//!   NETLINK_CRYPTO ([`crate::crypto_user`]). A [`PinnedDriver`] puts every priority back
//!   when dropped, and keeps each original in this process's state file until then, so
//!   `ipsec-lab clean` restores them after a SIGKILL.
//!
//! Leaves out parsing /proc/crypto (`model::env::parse_proc_crypto`) and the netlink
//! messages themselves ([`crate::crypto_user`]).

use std::fmt;

use model::env::{parse_proc_crypto, preferred_drivers, CryptoEntry};
use model::{CipherSuite, Hmac};

use crate::crypto_user::{CryptoUser, CryptoUserError, PriorityGuard};

/// The algorithm whose drivers a sweep chooses between.
pub const CBC_AES: &str = "cbc(aes)";
use crate::range::LAB_DRIVER_PRIORITY;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("no cbc(aes) driver in /proc/crypto")]
    NoDriver,
    #[error("{0} is the only cbc(aes) driver in this kernel")]
    OnlyDriver(String),
    #[error("{0} is no longer in /proc/crypto")]
    Vanished(String),
    #[error(
        "{0} holds the priority the lab pins drivers at already (left by a killed run? \
         `ipsec-lab clean` puts it back)"
    )]
    AlreadyPinned(String),
    #[error(transparent)]
    CryptoUser(#[from] CryptoUserError),
    #[error(transparent)]
    Record(#[from] owner::OwnerError),
}

/// One `cbc(aes)` skcipher driver and its priority, as /proc/crypto lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriverPriority {
    pub driver: String,
    pub priority: i32,
}

impl fmt::Display for DriverPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.driver, self.priority)
    }
}

/// A priority [`pin_cbc_aes_driver`] sets: the pinned driver's raised, every other one
/// rewritten unchanged (an UPDATEALG flushes the instances built on it either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityChange {
    pub driver: String,
    pub original: u32,
    pub new: u32,
}

/// The entries of /proc/crypto; none where it cannot be read.
pub fn read_proc_crypto() -> Vec<CryptoEntry> {
    parse_proc_crypto(&std::fs::read_to_string("/proc/crypto").unwrap_or_default())
}

/// A `cbc(aes)` driver an SA can be built on: an skcipher, or (from 6.10 on, where cbc is
/// a template over the linear `ecb(aes)`, `cbc(ecb(aes-fixed-time))`) an lskcipher.
fn is_cbc_aes(e: &CryptoEntry) -> bool {
    e.name == CBC_AES && (e.kind == "skcipher" || e.kind == "lskcipher")
}

/// Every `cbc(aes)` skcipher driver and its priority, sorted, once each.
pub fn cbc_aes_priorities(entries: &[CryptoEntry]) -> Vec<DriverPriority> {
    let mut v: Vec<DriverPriority> = entries
        .iter()
        .filter(|e| is_cbc_aes(e))
        .map(|e| DriverPriority {
            driver: e.driver.clone(),
            priority: e.priority,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The `cbc(aes)` drivers that passed their self-test, highest priority first. A sweep
/// needs two to choose between: fewer is an error that says why.
pub fn choosable_cbc_aes_drivers(entries: &[CryptoEntry]) -> Result<Vec<String>, DriverError> {
    let mut drivers: Vec<(i32, &str)> = entries
        .iter()
        .filter(|e| is_cbc_aes(e) && e.selftest_passed)
        .map(|e| (e.priority, e.driver.as_str()))
        .collect();
    drivers.sort_by(|a, b| b.cmp(a));
    drivers.dedup_by(|a, b| a.1 == b.1);
    match drivers.as_slice() {
        [] => Err(DriverError::NoDriver),
        [(_, only)] => Err(DriverError::OnlyDriver(only.to_string())),
        _ => Ok(drivers.into_iter().map(|(_, d)| d.to_string()).collect()),
    }
}

/// The priorities that make `driver` serve the next SA: it goes to
/// [`LAB_DRIVER_PRIORITY`], far above any other `cbc(aes)` priority, the others keep
/// theirs; each driver once, though /proc/crypto may list one twice. Negative priorities
/// count as 0. A driver at the lab's priority already is an error: two drivers there would
/// tie.
pub fn pin_plan(entries: &[CryptoEntry], driver: &str) -> Result<Vec<PriorityChange>, DriverError> {
    let mut cbc: Vec<&CryptoEntry> = entries.iter().filter(|e| is_cbc_aes(e)).collect();
    cbc.sort_by(|a, b| a.driver.cmp(&b.driver));
    cbc.dedup_by(|a, b| a.driver == b.driver);
    if !cbc.iter().any(|e| e.driver == driver) {
        return Err(DriverError::Vanished(driver.to_string()));
    }
    if let Some(e) = cbc
        .iter()
        .find(|e| e.priority.max(0) as u32 >= LAB_DRIVER_PRIORITY)
    {
        return Err(DriverError::AlreadyPinned(e.driver.clone()));
    }
    Ok(cbc
        .into_iter()
        .map(|e| {
            let original = e.priority.max(0) as u32;
            PriorityChange {
                driver: e.driver.clone(),
                original,
                new: if e.driver == driver {
                    LAB_DRIVER_PRIORITY
                } else {
                    original
                },
            }
        })
        .collect())
}

/// Whether `driver` is one the lab changes priorities of: a `cbc(aes)` driver in `entries`.
pub fn is_pinnable(entries: &[CryptoEntry], driver: &str) -> bool {
    entries.iter().any(|e| is_cbc_aes(e) && e.driver == driver)
}

/// The priority of `driver` in `entries` (its first entry), if listed.
pub fn priority_of(entries: &[CryptoEntry], driver: &str) -> Option<i32> {
    entries.iter().find(|e| e.driver == driver).map(|e| e.priority)
}

/// The `cbc(aes)` drivers of this kernel, after asking it to instantiate the generic one
/// (which a lookup never builds while a faster driver exists). Needs NETLINK_CRYPTO; the
/// error says why a sweep cannot choose drivers here.
pub fn cbc_aes_drivers() -> Result<Vec<String>, DriverError> {
    let mut cu = CryptoUser::open()?;
    if let Err(e) = cu.instantiate("cbc(aes-generic)") {
        tracing::info!("cbc(aes-generic) not instantiated: {e}");
    }
    choosable_cbc_aes_drivers(&read_proc_crypto())
}

/// Driver priorities changed for a while: restored when dropped (or by
/// [`PinnedDriver::restore`]), and recorded with their originals in the state file until
/// then, so `clean` restores them after a SIGKILL.
pub struct PinnedDriver {
    guard: Option<PriorityGuard<CryptoUser>>,
    records: Vec<owner::Record>,
}

impl PinnedDriver {
    /// Restores now and says whether every priority went back; what did not stays
    /// recorded for `clean`.
    pub fn restore(mut self) -> Result<(), Vec<String>> {
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
/// Everything goes back when the guard drops, also when a later change fails.
pub fn pin_cbc_aes_driver(driver: &str) -> Result<PinnedDriver, DriverError> {
    // An instance no SA holds may have been removed since the drivers were listed (a row's
    // ceiling loads and unloads templates): asked for by its driver name, it is built again.
    if !cbc_aes_priorities(&read_proc_crypto())
        .iter()
        .any(|p| p.driver == driver)
    {
        if let Err(e) = CryptoUser::open().and_then(|mut cu| cu.instantiate(driver)) {
            tracing::info!("{driver} not instantiated again: {e}");
        }
    }
    let plan = pin_plan(&read_proc_crypto(), driver)?;
    let mut pinned = PinnedDriver {
        guard: Some(PriorityGuard::new(CryptoUser::open()?)),
        records: Vec::new(),
    };
    for change in plan {
        // Recorded before the change, so a kill right after it still leaves the original.
        let record = owner::Record::DriverPriority {
            driver: change.driver.clone(),
            original: change.original,
            set: Some(change.new),
        };
        owner::record(record.clone())?;
        pinned.records.push(record);
        let guard = pinned.guard.as_mut().expect("set above");
        guard.set(&change.driver, change.original, change.new)?;
    }
    Ok(pinned)
}

/// The kernel algorithm instance an ESP SA of `suite` uses (without the IV generator);
/// `None` for no encryption.
pub fn esp_instance_name(suite: CipherSuite) -> Option<&'static str> {
    match suite {
        CipherSuite::AesCbc { hmac: Hmac::None, .. } => Some("authenc(digest_null,cbc(aes))"),
        CipherSuite::AesCbc {
            hmac: Hmac::Sha256, ..
        } => Some("authenc(hmac(sha256),cbc(aes))"),
        CipherSuite::AesGcm { .. } => Some("rfc4106(gcm(aes))"),
        CipherSuite::ChaCha20Poly1305 => Some("rfc7539esp(chacha20,poly1305)"),
        CipherSuite::None => None,
    }
}

/// The driver that built the instance of the last SA of `suite`, from /proc/crypto.
pub fn esp_served_by(suite: CipherSuite) -> Option<String> {
    let name = esp_instance_name(suite)?;
    preferred_drivers(&read_proc_crypto(), &[name]).remove(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::KeyBits;

    /// Three `cbc(aes)` drivers as a kernel with aesni_intel lists them after the generic
    /// one was instantiated, one of them twice (once per module) and one that failed its
    /// self-test, plus an entry of another algorithm and a `cbc(aes)` of another type.
    const PROC_CRYPTO: &str = "\
name         : cbc(aes)
driver       : cbc-aes-aesni
module       : aesni_intel
priority     : 400
selftest     : passed
type         : skcipher

name         : cbc(aes)
driver       : cbc(aes-generic)
module       : kernel
priority     : 100
selftest     : passed
type         : skcipher

name         : cbc(aes)
driver       : cbc-aes-aesni
module       : aesni_intel
priority     : 400
selftest     : passed
type         : skcipher

name         : cbc(aes)
driver       : cbc-aes-broken
module       : broken
priority     : 500
selftest     : unknown
type         : skcipher

name         : cbc(aes)
driver       : cbc-aes-shash
module       : kernel
priority     : 900
selftest     : passed
type         : shash

name         : authenc(hmac(sha256),cbc(aes))
driver       : authenc(hmac(sha256-avx2),cbc-aes-aesni)
module       : authenc
priority     : 2400
selftest     : passed
type         : aead
";

    fn entries() -> Vec<CryptoEntry> {
        parse_proc_crypto(PROC_CRYPTO)
    }

    #[test]
    fn priorities_list_each_cbc_aes_skcipher_once_sorted() {
        let listed: Vec<String> = cbc_aes_priorities(&entries())
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            listed,
            ["cbc(aes-generic)=100", "cbc-aes-aesni=400", "cbc-aes-broken=500"]
        );
    }

    #[test]
    fn choosable_drivers_passed_their_self_test_highest_first() {
        assert_eq!(
            choosable_cbc_aes_drivers(&entries()).unwrap(),
            ["cbc-aes-aesni", "cbc(aes-generic)"]
        );
    }

    /// How 6.12 lists its generic drivers (user-mode Linux 6.12.113 with aes_ti loaded).
    #[test]
    fn linear_cbc_templates_of_newer_kernels_are_drivers_too() {
        let listed = parse_proc_crypto(
            "name : cbc(aes)\ndriver : cbc(aes-generic)\npriority : 100\nselftest : passed\ntype : lskcipher\n\n\
             name : cbc(aes)\ndriver : cbc(ecb(aes-fixed-time))\npriority : 101\nselftest : passed\ntype : lskcipher\n\n\
             name : ecb(aes)\ndriver : ecb(aes-fixed-time)\npriority : 101\nselftest : passed\ntype : lskcipher\n",
        );
        assert_eq!(
            choosable_cbc_aes_drivers(&listed).unwrap(),
            ["cbc(ecb(aes-fixed-time))", "cbc(aes-generic)"]
        );
    }

    #[test]
    fn fewer_than_two_drivers_say_why_none_can_be_chosen() {
        assert!(matches!(
            choosable_cbc_aes_drivers(&[]),
            Err(DriverError::NoDriver)
        ));
        let only: Vec<CryptoEntry> = entries()
            .into_iter()
            .filter(|e| e.driver != "cbc(aes-generic)")
            .collect();
        let e = choosable_cbc_aes_drivers(&only).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cbc-aes-aesni is the only cbc(aes) driver in this kernel"
        );
    }

    #[test]
    fn pinning_raises_one_driver_above_all_and_keeps_the_rest() {
        let plan = pin_plan(&entries(), "cbc(aes-generic)").unwrap();
        let generic = plan.iter().find(|c| c.driver == "cbc(aes-generic)").unwrap();
        assert_eq!((generic.original, generic.new), (100, LAB_DRIVER_PRIORITY));
        assert!(plan
            .iter()
            .filter(|c| c.driver != "cbc(aes-generic)")
            .all(|c| c.new == c.original));
        assert!(plan.iter().all(|c| c.driver != "cbc-aes-shash"), "{plan:?}");
        let drivers: Vec<&str> = plan.iter().map(|c| c.driver.as_str()).collect();
        assert_eq!(drivers, ["cbc(aes-generic)", "cbc-aes-aesni", "cbc-aes-broken"]);
    }

    #[test]
    fn pinning_a_driver_that_is_gone_changes_nothing() {
        let e = pin_plan(&entries(), "cbc-aes-padlock").unwrap_err();
        assert_eq!(e.to_string(), "cbc-aes-padlock is no longer in /proc/crypto");
    }

    #[test]
    fn negative_priorities_count_as_zero() {
        let mut e = entries();
        e.iter_mut().for_each(|e| e.priority = -5);
        let plan = pin_plan(&e, "cbc-aes-aesni").unwrap();
        let aesni = plan.iter().find(|c| c.driver == "cbc-aes-aesni").unwrap();
        assert_eq!((aesni.original, aesni.new), (0, LAB_DRIVER_PRIORITY));
    }

    #[test]
    fn a_driver_left_at_the_labs_priority_stops_a_new_pin() {
        let mut e = entries();
        e[0].priority = LAB_DRIVER_PRIORITY as i32;
        let left = e[0].driver.clone();
        let err = pin_plan(&e, "cbc(aes-generic)").unwrap_err();
        assert!(
            matches!(&err, DriverError::AlreadyPinned(d) if *d == left),
            "{err}"
        );
    }

    #[test]
    fn esp_instances_are_named_as_the_kernel_builds_them() {
        let six = CipherSuite::classic_six();
        assert_eq!(esp_instance_name(six[0]), Some("authenc(digest_null,cbc(aes))"));
        assert_eq!(esp_instance_name(six[5]), Some("authenc(hmac(sha256),cbc(aes))"));
        assert_eq!(
            esp_instance_name(CipherSuite::AesGcm { key: KeyBits::Aes128 }),
            Some("rfc4106(gcm(aes))")
        );
        assert_eq!(esp_instance_name(CipherSuite::None), None);
        assert_eq!(esp_served_by(CipherSuite::None), None);
    }
}
