//! What the running kernel can do for the xfrm backend, found out by trying: one SA per
//! algorithm combination in a throw-away namespace (removed again, and the namespace dies
//! with the probe's socket), then /proc/crypto for the driver serving each algorithm.
//! Drivers are read *after* the SA adds because the kernel instantiates templates such as
//! `cbc(aes)` lazily, on first use.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use model::{CipherSuite, Hmac, IpsecMode, KeyBits};

use crate::config::{AuthTrunc, KernelAlgorithm, Protection, SaSpec, LAB_REPLAY_WINDOW};
use crate::error::XfrmError;
use crate::handle::XfrmHandle;
use crate::range::{ReqId, Spi, REQID_LAST, SPI_LAST};

/// Whether an algorithm could be used in an SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// The kernel refused an SA needing it; the error says why.
    Refused(String),
    /// Not tried: ESP itself is missing, so no SA can be added at all.
    Untested,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlgorithmReport {
    pub algorithm: KernelAlgorithm,
    pub availability: Availability,
    /// Driver serving it per /proc/crypto (highest priority that passed its self-test).
    pub driver: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// The kernel accepted an ESP SA.
    pub esp: bool,
    pub algorithms: Vec<AlgorithmReport>,
}

impl Capabilities {
    pub fn available(&self, algorithm: KernelAlgorithm) -> bool {
        self.algorithms
            .iter()
            .any(|a| a.algorithm == algorithm && a.availability == Availability::Available)
    }

    /// Algorithm name → driver, for reports.
    pub fn drivers(&self) -> BTreeMap<String, String> {
        self.algorithms
            .iter()
            .filter_map(|a| Some((a.algorithm.name().to_string(), a.driver.clone()?)))
            .collect()
    }

    /// Whether every algorithm `suite` needs is available.
    pub fn supports(&self, suite: CipherSuite) -> bool {
        let needed: &[KernelAlgorithm] = match suite {
            CipherSuite::None => &[],
            CipherSuite::AesCbc { hmac: Hmac::None, .. } => &[KernelAlgorithm::CbcAes],
            CipherSuite::AesCbc {
                hmac: Hmac::Sha256, ..
            } => &[KernelAlgorithm::CbcAes, KernelAlgorithm::HmacSha256],
            CipherSuite::AesGcm { .. } => &[KernelAlgorithm::Rfc4106GcmAes],
            // The lab installs no ChaCha20-Poly1305 SAs.
            CipherSuite::ChaCha20Poly1305 => return false,
        };
        self.esp && needed.iter().all(|a| self.available(*a))
    }
}

/// The suites the probe tries, and the algorithm each one proves. HMAC is tried with
/// CBC because ESP does not take an authentication algorithm alone.
const PROBES: [(KernelAlgorithm, CipherSuite); 3] = [
    (
        KernelAlgorithm::CbcAes,
        CipherSuite::AesCbc {
            key: KeyBits::Aes128,
            hmac: Hmac::None,
        },
    ),
    (
        KernelAlgorithm::HmacSha256,
        CipherSuite::AesCbc {
            key: KeyBits::Aes128,
            hmac: Hmac::Sha256,
        },
    ),
    (
        KernelAlgorithm::Rfc4106GcmAes,
        CipherSuite::AesGcm { key: KeyBits::Aes128 },
    ),
];

/// Probes the kernel this process runs on. Needs root; creates and removes everything in
/// a private namespace.
pub async fn probe() -> Result<Capabilities, XfrmError> {
    let handle = XfrmHandle::open_throwaway()?;
    let mut esp = false;
    let mut results = Vec::new();
    for (i, (algorithm, suite)) in PROBES.into_iter().enumerate() {
        let spec = SaSpec {
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 255, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(198, 18, 255, 2)),
            // The top of the lab's ranges, away from the run slots' usual picks.
            spi: Spi(SPI_LAST - i as u32),
            reqid: ReqId(REQID_LAST),
            mode: IpsecMode::Tunnel,
            replay_window: LAB_REPLAY_WINDOW,
            protection: Protection::generate(suite, AuthTrunc::Bits128)?,
            selector: None,
            pcpu: None,
        };
        let availability = match handle.add_sa(&spec).await {
            Ok(()) => {
                esp = true;
                handle.delete_sa(&spec.id()).await?;
                Availability::Available
            }
            Err(e) if e.is_no_esp() => Availability::Untested,
            Err(e @ XfrmError::MissingAlgorithm { .. }) => Availability::Refused(e.to_string()),
            Err(e) => return Err(e),
        };
        results.push((algorithm, availability));
    }
    // HMAC was tried together with CBC: if CBC alone failed, the HMAC result says nothing.
    if let [(_, cbc), (_, hmac @ Availability::Refused(_)), _] = results.as_mut_slice() {
        if *cbc != Availability::Available {
            *hmac = Availability::Untested;
        }
    }
    let crypto = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
    let names: Vec<&str> = KernelAlgorithm::ALL.iter().map(|a| a.name()).collect();
    let drivers = model::env::preferred_drivers(&model::env::parse_proc_crypto(&crypto), &names);
    Ok(Capabilities {
        esp,
        algorithms: results
            .into_iter()
            .map(|(algorithm, availability)| AlgorithmReport {
                algorithm,
                availability,
                driver: drivers.get(algorithm.name()).cloned(),
            })
            .collect(),
    })
}
