//! strongSwan's evidence: what charon negotiated over IKEv2 and installed in end a's
//! kernel, beside what the lab's own xfrm backend installs for the same suite.

use serde::{Deserialize, Serialize};

use super::xfrm::{per_cpu_line, SaEvidence};

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
    /// `--per-cpu-sa`: the CHILD_SAs were configured per CPU (`per_cpu_sas`); each SA of
    /// `sas` with a CPU is one charon negotiated for that CPU.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_cpu_sas: bool,
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
            let cpu = match (self.per_cpu_sas, id.cpu) {
                (_, Some(cpu)) => format!(", CPU {cpu}'s SA"),
                (true, None) => ", the fallback SA (no CPU)".to_string(),
                (false, None) => String::new(),
            };
            lines.push(format!(
                "ESP SA spi {} {}{cpu} (reqid {}, {} mode): {}; {} packets, {} bytes, {} replay drops, {} integrity failures",
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
        if self.per_cpu_sas {
            let a_to_b = self.sas.iter().filter(|sa| sa.sa.direction.starts_with("a->b"));
            let cpus = a_to_b.clone().filter(|sa| sa.sa.cpu.is_some()).count();
            lines.push(format!(
                "charon negotiated per-CPU CHILD_SAs (per_cpu_sas): a fallback without a CPU, then {cpus} \
                 with a CPU of a's, each on an acquire for a packet that left a CPU without an SA of its own \
                 (in a's kernel or b's)"
            ));
            lines.extend(per_cpu_line(self.sas.iter().map(|sa| &sa.sa)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::SaCounters;

    /// Per-CPU CHILD_SAs: each SA line says its CPU (or that it is the fallback), a line
    /// says what charon negotiated, one where the packets left, CPU by CPU (a CPU's SAs
    /// added: charon may negotiate two for one CPU), and the JSON carries each SA's CPU.
    #[test]
    fn per_cpu_child_sas_say_their_cpu_and_where_the_packets_left() {
        let sa = |direction: &str, cpu, packets| NegotiatedSa {
            sa: SaEvidence {
                spi: "0xc1".into(),
                direction: direction.into(),
                pair: None,
                cpu,
                counters: SaCounters {
                    packets,
                    ..Default::default()
                },
            },
            reqid: 1,
            mode: "tunnel".into(),
            algorithms: vec![],
        };
        let mut e = StrongswanEvidence {
            version: "strongSwan 6.1.0 charon-systemd (Linux, 7.2.13+deb14-amd64, x86_64)".into(),
            ike_version: 2,
            ike_proposal: "aes256-sha256-modp2048".into(),
            esp_proposal: "aes256gcm16-noesn".into(),
            auth: "psk".into(),
            sas: vec![
                sa("a->b (sent by a)", None, 12),
                sa("a->b (sent by a)", Some(0), 300),
                sa("a->b (sent by a)", Some(1), 200),
                sa("a->b (sent by a)", Some(1), 5),
                sa("b->a (received by a)", None, 40),
            ],
            lab_xfrm_installs: vec![],
            differences: vec![],
            rekeys: None,
            per_cpu_sas: true,
        };
        let lines = e.lines();
        assert!(
            lines[1].contains("a->b (sent by a), the fallback SA (no CPU) (reqid 1"),
            "{lines:?}"
        );
        assert!(
            lines[2].contains("a->b (sent by a), CPU 0's SA (reqid 1"),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.starts_with(
            "charon negotiated per-CPU CHILD_SAs (per_cpu_sas): a fallback without a CPU, then 3 with a CPU of a's"
        )));
        assert!(
            lines.contains(
                &"per-CPU SAs: packets a->b by the CPU they left from: CPU 0 300, CPU 1 205, the SA without a CPU 12; 2 CPU(s) encrypted"
                    .to_string()
            ),
            "{lines:?}"
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["per_cpu_sas"], true);
        assert_eq!(json["sas"][2]["cpu"], 1);
        assert_eq!(serde_json::from_value::<StrongswanEvidence>(json).unwrap(), e);
        // Without per-CPU SAs the lines and JSON are as before.
        e.per_cpu_sas = false;
        e.sas.retain(|s| s.sa.cpu.is_none());
        assert!(e.lines().iter().all(|l| !l.contains("CPU")), "{:?}", e.lines());
        assert!(serde_json::to_value(&e).unwrap().get("per_cpu_sas").is_none());
    }
}
