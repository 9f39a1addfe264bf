//! The xfrm backend's options beyond one SA pair: `--sas N` (N SA pairs, stream i on pair
//! i mod N, as multi-SA deployments spread load over cores) and `--pcrypt` (the SAs on a
//! `pcrypt(rfc4106(gcm(aes)))` instance, which spreads each SA's packets over the CPUs).
//! Checked here with the rest of a [`RunRequest`], before anything touches the kernel.

use crate::plan::{Backend, PlanError, RunRequest};
use crate::suite::CipherSuite;

/// Most SA pairs a run installs: each pair takes two of the run's 256 SPIs, and 64 keeps
/// the netlink work of a run small.
pub const MAX_SA_PAIRS: u16 = 64;

/// The run's SA pair count, or why the request cannot have it / `--pcrypt`. Where `--sas`
/// does not apply (another backend) it is noted in `ignored` and 1 is used.
pub(crate) fn check(
    r: &RunRequest,
    suite: CipherSuite,
    peer: bool,
    ignored: &mut Vec<String>,
) -> Result<u16, PlanError> {
    if r.sas == 0 || r.sas > MAX_SA_PAIRS {
        return Err(PlanError::Sas(r.sas));
    }
    if r.pcrypt {
        if r.backend != Backend::Xfrm {
            return Err(PlanError::PcryptBackend(r.backend));
        }
        if !matches!(suite, CipherSuite::AesGcm { .. }) {
            return Err(PlanError::PcryptSuite(suite));
        }
        if peer {
            return Err(PlanError::PeerPcrypt);
        }
    }
    if r.sas == 1 {
        return Ok(1);
    }
    if r.backend != Backend::Xfrm {
        ignored.push(format!("--sas {} (only the xfrm backend has SAs)", r.sas));
        return Ok(1);
    }
    if peer {
        return Err(PlanError::PeerSas);
    }
    // A pair without a stream would carry nothing: its counters would prove nothing.
    if r.sas > r.parallel {
        return Err(PlanError::SasStreams {
            sas: r.sas,
            parallel: r.parallel,
        });
    }
    Ok(r.sas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::KeyBits;

    fn req(backend: Backend, sas: u16, parallel: u16) -> RunRequest {
        RunRequest {
            backend,
            sas,
            parallel,
            ..Default::default()
        }
    }

    #[test]
    fn sas_within_range_and_the_streams_and_only_for_xfrm() {
        assert_eq!(RunRequest::default().validate().unwrap().sas, 1);
        assert_eq!(req(Backend::Xfrm, 4, 4).validate().unwrap().sas, 4);
        assert_eq!(req(Backend::Xfrm, 2, 5).validate().unwrap().sas, 2);
        assert_eq!(req(Backend::Xfrm, 0, 1).validate(), Err(PlanError::Sas(0)));
        assert_eq!(req(Backend::Xfrm, 65, 128).validate(), Err(PlanError::Sas(65)));
        assert_eq!(
            req(Backend::Xfrm, 3, 2).validate(),
            Err(PlanError::SasStreams { sas: 3, parallel: 2 })
        );
        let userspace = req(Backend::Userspace, 2, 2).validate().unwrap();
        assert_eq!(userspace.sas, 1);
        assert!(
            userspace.ignored[0].contains("--sas 2"),
            "{:?}",
            userspace.ignored
        );
        let peer = RunRequest {
            peer: Some("192.0.2.1".into()),
            ..req(Backend::Xfrm, 2, 2)
        };
        assert_eq!(peer.validate(), Err(PlanError::PeerSas));
    }

    #[test]
    fn pcrypt_needs_xfrm_with_aes_gcm_locally() {
        let gcm = CipherSuite::AesGcm { key: KeyBits::Aes128 };
        let pcrypt = |backend, cipher| RunRequest {
            backend,
            cipher: Some(cipher),
            pcrypt: true,
            ..Default::default()
        };
        assert!(pcrypt(Backend::Xfrm, gcm).validate().unwrap().pcrypt);
        assert!(!RunRequest::default().validate().unwrap().pcrypt);
        assert_eq!(
            pcrypt(Backend::Userspace, gcm).validate(),
            Err(PlanError::PcryptBackend(Backend::Userspace))
        );
        let cbc = CipherSuite::cbc(KeyBits::Aes256, crate::suite::Hmac::Sha256);
        assert_eq!(
            pcrypt(Backend::Xfrm, cbc).validate(),
            Err(PlanError::PcryptSuite(cbc))
        );
        let peer = RunRequest {
            peer: Some("192.0.2.1".into()),
            ..pcrypt(Backend::Xfrm, gcm)
        };
        assert_eq!(peer.validate(), Err(PlanError::PeerPcrypt));
    }

    #[test]
    fn plans_without_the_options_read_as_before() {
        let plan = RunRequest::default().validate().unwrap();
        let json = serde_json::to_value(&plan).unwrap();
        assert!(
            json.get("sas").is_none() && json.get("pcrypt").is_none(),
            "{json}"
        );
        let back: crate::RunPlan = serde_json::from_value(json).unwrap();
        assert_eq!((back.sas, back.pcrypt), (1, false));
    }
}
