//! pcrypt, the kernel's parallel crypto template: an AEAD wrapped in `pcrypt(...)` hands
//! each request to padata, so the packets of ONE SA are encrypted on several CPUs and put
//! back in order. An SA gets it when a pcrypt instance of its algorithm has the highest
//! priority (pcrypt adds 100 to what it wraps): [`instantiate`] builds
//! `pcrypt(<the driver serving the algorithm>)` over NETLINK_CRYPTO before the SAs are made
//! and checks in /proc/crypto that it now serves the algorithm; [`remove`] takes it away
//! again (DELALG), waiting while the kernel still frees the deleted SAs' transforms.
//!
//! Leaves out recording the instance for `clean` (the lab's xfrm backend does).

use std::time::{Duration, Instant};

use crate::crypto_user::{CryptoUser, CryptoUserError, Instantiated};

/// The ESP AES-GCM algorithm the lab's pcrypt row wraps.
pub const GCM: &str = "rfc4106(gcm(aes))";

#[derive(Debug, thiserror::Error)]
pub enum PcryptError {
    #[error(
        "this kernel has no pcrypt template (CONFIG_CRYPTO_PCRYPT): {0}; load it with `modprobe pcrypt` or use \
         --vm with a stock kernel (Debian's linux-image-amd64 has it as a module)"
    )]
    Unavailable(String),
    #[error("no driver of {0} in /proc/crypto after asking the kernel to build one")]
    NoDriver(String),
    #[error("{algorithm}: /proc/crypto shows {serving} serving it after {driver} was instantiated")]
    NotServing {
        algorithm: String,
        driver: String,
        serving: String,
    },
    #[error(transparent)]
    CryptoUser(#[from] CryptoUserError),
}

/// Whether the running kernel can build pcrypt instances: the module loaded, built in, or
/// loadable (the kernel loads `crypto-pcrypt` itself on the first NEWALG).
pub fn available() -> Result<(), PcryptError> {
    if std::path::Path::new("/sys/module/pcrypt").exists() {
        return Ok(());
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let dir = std::path::Path::new("/lib/modules").join(release.trim());
    let listed = |file: &str| {
        std::fs::read_to_string(dir.join(file)).is_ok_and(|t| {
            t.lines().any(|l| {
                l.split(':').next().is_some_and(|m| {
                    m.ends_with("/pcrypt.ko") || m.ends_with("/pcrypt.ko.xz") || m.ends_with("/pcrypt.ko.zst")
                })
            })
        })
    };
    if listed("modules.builtin") || listed("modules.dep") {
        return Ok(());
    }
    Err(PcryptError::Unavailable(format!(
        "not loaded (/sys/module/pcrypt), not in {}/modules.builtin or modules.dep",
        dir.display()
    )))
}

/// One /proc/crypto entry of a driver: what [`instantiate`] checks and the report shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub driver: String,
    pub priority: i32,
    /// The kernel's reference count: 1 plus one per transform (an SA each) using it.
    pub refcnt: Option<u32>,
}

/// The highest-priority driver /proc/crypto (`text`) lists for `algorithm`, excluding
/// pcrypt instances when `skip_pcrypt`.
pub fn serving(text: &str, algorithm: &str, skip_pcrypt: bool) -> Option<Serving> {
    text.split("\n\n")
        .filter_map(|block| {
            let field = |key: &str| {
                block.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == key).then(|| v.trim().to_string())
                })
            };
            let usable = field("selftest").is_none_or(|s| s == "passed")
                && field("internal").as_deref() != Some("yes");
            (usable && field("name")? == algorithm).then(|| Serving {
                driver: field("driver").unwrap_or_default(),
                priority: field("priority").and_then(|p| p.parse().ok()).unwrap_or(0),
                refcnt: field("refcnt").and_then(|r| r.parse().ok()),
            })
        })
        .filter(|s| !(skip_pcrypt && s.driver.starts_with("pcrypt(")))
        .max_by_key(|s| s.priority)
}

/// The pcrypt instance's driver name for the driver it wraps, as the kernel names it.
pub fn driver_name(child: &str) -> String {
    format!("pcrypt({child})")
}

/// The instance `instantiate` will build for `algorithm`: pcrypt around the driver serving
/// it now (the kernel is asked to build that one first if no lookup has yet).
pub fn planned_driver(cu: &mut CryptoUser, algorithm: &str) -> Result<String, PcryptError> {
    available()?;
    cu.instantiate_aead_by_name(algorithm)?;
    let text = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
    let child = serving(&text, algorithm, true).ok_or_else(|| PcryptError::NoDriver(algorithm.into()))?;
    Ok(driver_name(&child.driver))
}

/// Builds `driver` (from [`planned_driver`]) and checks that it now serves `algorithm`.
pub fn instantiate(
    cu: &mut CryptoUser,
    algorithm: &str,
    driver: &str,
) -> Result<(Instantiated, Serving), PcryptError> {
    let made = cu.instantiate_aead(driver)?;
    let text = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
    match serving(&text, algorithm, false) {
        Some(s) if s.driver == driver => Ok((made, s)),
        other => Err(PcryptError::NotServing {
            algorithm: algorithm.into(),
            driver: driver.into(),
            serving: other.map_or_else(|| "nothing".into(), |s| s.driver),
        }),
    }
}

/// `driver`'s entry in /proc/crypto now.
pub fn entry(driver: &str) -> Option<Serving> {
    let text = std::fs::read_to_string("/proc/crypto").ok()?;
    text.split("\n\n").find_map(|block| {
        let is = block.lines().any(|l| {
            l.split_once(':')
                .is_some_and(|(k, v)| k.trim() == "driver" && v.trim() == driver)
        });
        if !is {
            return None;
        }
        let name = block.lines().find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.trim() == "name")
                .map(|(_, v)| v.trim().to_string())
        })?;
        serving(block, &name, false)
    })
}

/// Whether `driver` is an instance the lab builds, by /proc/crypto (`text`): `pcrypt(CHILD)`
/// of [`GCM`] around a CHILD that is itself a driver of [`GCM`]. `Ok(false)` when no such
/// driver is listed (gone); an error saying why for one listed that is not the lab's kind.
pub fn is_lab_instance(text: &str, driver: &str) -> Result<bool, String> {
    let Some(child) = driver.strip_prefix("pcrypt(").and_then(|d| d.strip_suffix(')')) else {
        return Err("the lab builds only pcrypt(...) instances".into());
    };
    let entries = model::env::parse_proc_crypto(text);
    let name_of = |d: &str| entries.iter().find(|e| e.driver == d).map(|e| e.name.as_str());
    match name_of(driver) {
        None => Ok(false),
        Some(GCM) if name_of(child) == Some(GCM) => Ok(true),
        Some(GCM) => Err(format!("{child} is no {GCM} driver the lab wraps")),
        Some(other) => Err(format!("an instance of {other}; the lab wraps only {GCM}")),
    }
}

/// Removes the instance `driver` (DELALG). The kernel frees a deleted SA's transform a
/// little later (a work queue), and refuses with EBUSY until then: retried until `wait`
/// has passed. An instance already gone is not an error.
pub fn remove(cu: &mut CryptoUser, driver: &str, wait: Duration) -> Result<(), CryptoUserError> {
    let deadline = Instant::now() + wait;
    loop {
        match cu.delete_aead(driver) {
            Ok(()) | Err(CryptoUserError::NoSuchDriver { .. }) => return Ok(()),
            Err(CryptoUserError::Kernel { errno, .. })
                if errno == libc::EBUSY && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/crypto of the Debian 6.1 guest after the lab's NEWALG: aesni's AEAD, its
    /// internal half, and the pcrypt instance around it.
    const PROC: &str = "name         : __rfc4106(gcm(aes))\ndriver       : __rfc4106-gcm-aesni\nmodule       : aesni_intel\npriority     : 400\nrefcnt       : 2\nselftest     : passed\ninternal     : yes\ntype         : aead\n\nname         : rfc4106(gcm(aes))\ndriver       : rfc4106-gcm-aesni\nmodule       : aesni_intel\npriority     : 400\nrefcnt       : 2\nselftest     : passed\ninternal     : no\ntype         : aead\n\nname         : rfc4106(gcm(aes))\ndriver       : pcrypt(rfc4106-gcm-aesni)\nmodule       : pcrypt\npriority     : 500\nrefcnt       : 5\nselftest     : passed\ninternal     : no\ntype         : aead\n";

    #[test]
    fn the_pcrypt_instance_serves_and_wraps_the_best_other_driver() {
        let top = serving(PROC, GCM, false).unwrap();
        assert_eq!(top.driver, "pcrypt(rfc4106-gcm-aesni)");
        assert_eq!((top.priority, top.refcnt), (500, Some(5)));
        let child = serving(PROC, GCM, true).unwrap();
        assert_eq!(child.driver, "rfc4106-gcm-aesni");
        assert_eq!(driver_name(&child.driver), "pcrypt(rfc4106-gcm-aesni)");
        assert_eq!(serving(PROC, "cbc(aes)", false), None);
    }

    #[test]
    fn only_pcrypt_around_an_aes_gcm_driver_is_the_labs() {
        assert_eq!(is_lab_instance(PROC, "pcrypt(rfc4106-gcm-aesni)"), Ok(true));
        // Gone: nothing to remove.
        assert_eq!(is_lab_instance(PROC, "pcrypt(rfc4106-gcm-generic)"), Ok(false));
        assert!(is_lab_instance(PROC, "rfc4106-gcm-aesni").is_err());
        let other = PROC.replace(
            "name         : rfc4106(gcm(aes))\ndriver       : pcrypt",
            "name         : rfc7539esp(chacha20,poly1305)\ndriver       : pcrypt",
        );
        let e = is_lab_instance(&other, "pcrypt(rfc4106-gcm-aesni)").unwrap_err();
        assert!(e.contains("rfc7539esp"), "{e}");
        // A pcrypt of GCM around no GCM driver the kernel lists.
        let orphan = PROC.replace(
            "driver       : rfc4106-gcm-aesni\n",
            "driver       : rfc4106-gcm-x\n",
        );
        assert!(is_lab_instance(&orphan, "pcrypt(rfc4106-gcm-aesni)").is_err());
    }

    #[test]
    fn internal_and_failed_drivers_never_serve() {
        let text = PROC.replace("priority     : 500", "priority     : 100");
        let failed = text.replacen("selftest     : passed", "selftest     : unknown", 2);
        // The internal __rfc4106 half is never picked, whatever its priority.
        assert_eq!(serving(&failed, "__rfc4106(gcm(aes))", false), None);
        assert_eq!(
            serving(&failed, GCM, false).unwrap().driver,
            "pcrypt(rfc4106-gcm-aesni)"
        );
    }
}
