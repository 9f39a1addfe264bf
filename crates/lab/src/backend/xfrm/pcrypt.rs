//! `--pcrypt`: the run's AES-GCM SAs on a `pcrypt(rfc4106(gcm(aes)))` instance, made once
//! per run before the SAs (crypto instances are global to the kernel, not per namespace)
//! and removed after them if this run made it. The instance is recorded in the state file
//! before it is made, so `clean` removes it if the run is killed; one that existed before
//! the run is left alone.

use std::time::Duration;

use model::evidence::PcryptEvidence;
use xfrm::crypto_user::{CryptoUser, Instantiated};
use xfrm::pcrypt;

use crate::error::{LabError, LabResult};

/// How long removal waits for the kernel to free the deleted SAs' transforms (a work
/// queue; slow under TCG emulation).
const REMOVE_WAIT: Duration = Duration::from_secs(10);

/// Refuses, before anything is created, a kernel that cannot build pcrypt instances.
pub fn preflight() -> LabResult<()> {
    pcrypt::available().map_err(|e| LabError::capability(anyhow::anyhow!(e)))?;
    CryptoUser::open().map_err(|e| LabError::capability(anyhow::anyhow!(e)))?;
    Ok(())
}

/// The run's pcrypt instance; dropping it removes the instance if the run made it.
pub struct PcryptGuard {
    driver: String,
    /// The state-file record while the run owns the instance.
    record: Option<owner::Record>,
}

impl PcryptGuard {
    /// Makes `pcrypt(<the driver serving rfc4106(gcm(aes))>)` serve the next AES-GCM SAs.
    pub fn create() -> LabResult<PcryptGuard> {
        let capability = |e: pcrypt::PcryptError| match e {
            pcrypt::PcryptError::Unavailable(_) | pcrypt::PcryptError::CryptoUser(_) => {
                LabError::capability(anyhow::anyhow!(e))
            }
            other => LabError::failed(anyhow::anyhow!(other)),
        };
        let mut cu = CryptoUser::open().map_err(|e| LabError::capability(anyhow::anyhow!(e)))?;
        let driver = pcrypt::planned_driver(&mut cu, pcrypt::GCM).map_err(capability)?;
        let record = owner::Record::CryptoInstance {
            driver: driver.clone(),
        };
        // Recorded before it is made: a kill in between leaves a record `clean` finds gone.
        owner::record(record.clone())?;
        let mut guard = PcryptGuard {
            driver: driver.clone(),
            record: Some(record),
        };
        match pcrypt::instantiate(&mut cu, pcrypt::GCM, &driver) {
            Ok((Instantiated::Created, _)) => Ok(guard),
            Ok((Instantiated::Existed, _)) => {
                // Someone else's: never removed by this run or by `clean`.
                if let Some(r) = guard.record.take() {
                    owner::forget(&r);
                }
                Ok(guard)
            }
            Err(e) => Err(capability(e)),
        }
    }

    /// The instance as /proc/crypto shows it now (call while the SAs exist).
    pub fn evidence(&self) -> PcryptEvidence {
        let entry = pcrypt::entry(&self.driver);
        PcryptEvidence {
            algorithm: pcrypt::GCM.into(),
            driver: self.driver.clone(),
            priority: entry.as_ref().map_or(0, |e| e.priority),
            refcnt_with_sas: entry.and_then(|e| e.refcnt),
            instantiated_by_run: self.record.is_some(),
        }
    }
}

impl Drop for PcryptGuard {
    fn drop(&mut self) {
        let Some(record) = self.record.take() else {
            return;
        };
        let removed = CryptoUser::open()
            .map_err(|e| e.to_string())
            .and_then(|mut cu| pcrypt::remove(&mut cu, &self.driver, REMOVE_WAIT).map_err(|e| e.to_string()));
        match removed {
            Ok(()) => owner::forget(&record),
            // Stays recorded: `clean` tries again.
            Err(e) => tracing::warn!("removing crypto instance {}: {e}", self.driver),
        }
    }
}
