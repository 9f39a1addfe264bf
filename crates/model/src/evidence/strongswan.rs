//! strongSwan's evidence: what charon negotiated over IKEv2 and installed in end a's
//! kernel, beside what the lab's own xfrm backend installs for the same suite.

use serde::{Deserialize, Serialize};

use super::xfrm::SaEvidence;

/// What strongSwan's charon negotiated over IKEv2 and installed in end a's kernel, beside
/// what the lab's own xfrm backend installs for the same suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StrongswanEvidence {
    /// The daemon's version (`swanctl --version --daemon`), e.g. `strongSwan 5.9.8
    /// charon-systemd (Linux, 6.1.0-57-amd64, x86_64)`.
    pub version: String,
    pub ike_version: u8,
    pub ike_proposal: String,
    /// The only ESP proposal both ends offered (the run's suite).
    pub esp_proposal: String,
    pub auth: String,
    /// The ESP SAs between the two ends, read back over netlink after the transfers: the
    /// current CHILD_SA's (charon keeps a rekeyed one's inbound SA a few seconds; those are
    /// left out).
    pub sas: Vec<NegotiatedSa>,
    /// What the lab's xfrm backend installs for this suite (the same attributes it sends,
    /// read the way the SAs above were).
    pub lab_xfrm_installs: Vec<Algorithm>,
    /// How the SAs differ from the lab's; empty when they match.
    pub differences: Vec<String>,
    /// `--rekey-every`: the rekeys charon did on the lab's command, each seen done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rekeys: Option<CharonRekeys>,
}

/// The rekeys of a run, counted as each was seen done (new SPIs in the kernel, a new
/// IKE_SA listed by charon).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharonRekeys {
    pub child_sa: u32,
    pub ike_sa: u32,
    /// SAs of earlier CHILD_SAs still in the kernel when the SAs were read (charon deletes a
    /// rekeyed inbound SA some seconds later), left out of `sas`.
    pub earlier_sas: u32,
}

/// An SA someone else negotiated, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NegotiatedSa {
    #[serde(flatten)]
    pub sa: SaEvidence,
    pub reqid: u32,
    pub mode: String,
    pub algorithms: Vec<Algorithm>,
}

/// An algorithm as an SA carries it: the kernel's name, key and ICV lengths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Algorithm {
    pub name: String,
    pub key_bits: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icv_bits: Option<u32>,
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}-bit key", self.name, self.key_bits)?;
        match self.icv_bits {
            Some(icv) => write!(f, ", {icv}-bit ICV"),
            None => Ok(()),
        }
    }
}

impl StrongswanEvidence {
    /// Each SA's algorithms and counters, then whether they match the lab's own.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{}: IKEv{} ({}, {}) negotiated ESP {}",
            self.version, self.ike_version, self.auth, self.ike_proposal, self.esp_proposal
        )];
        for sa in &self.sas {
            let (id, c) = (&sa.sa, &sa.sa.counters);
            let algorithms: Vec<String> = sa.algorithms.iter().map(|a| a.to_string()).collect();
            lines.push(format!(
                "ESP SA spi {} {} (reqid {}, {} mode): {}; {} packets, {} bytes, {} replay drops, {} integrity failures",
                id.spi,
                id.direction,
                sa.reqid,
                sa.mode,
                algorithms.join(" + "),
                c.packets,
                c.bytes,
                c.replay_drops,
                c.integrity_failures
            ));
        }
        if let Some(r) = self.rekeys {
            lines.push(format!(
                "charon rekeyed the CHILD_SA {} times and the IKE_SA {} times on the lab's command; \
                 the SAs above are the current CHILD_SA's, their counters since it was made \
                 ({} SAs of earlier ones were still in the kernel)",
                r.child_sa, r.ike_sa, r.earlier_sas
            ));
        }
        let lab: Vec<String> = self.lab_xfrm_installs.iter().map(|a| a.to_string()).collect();
        lines.push(if self.differences.is_empty() {
            format!("the same as the lab's xfrm backend installs: {}", lab.join(" + "))
        } else {
            format!(
                "differs from the lab's xfrm backend ({}): {}",
                lab.join(" + "),
                self.differences.join("; ")
            )
        });
        lines
    }
}
