//! The xfrm backend's evidence: its SAs and their kernel counters, the ESP overhead, the
//! kernel drivers that served the suite, and with `--pcrypt` the instance the SAs ran on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::SaCounters;

/// Inner packet size the reported ESP overhead is computed for.
pub const OVERHEAD_REFERENCE_LEN: usize = 1400;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XfrmEvidence {
    pub mode: String,
    pub suite: String,
    pub reqid: String,
    pub sas: Vec<SaEvidence>,
    pub esp_overhead_bytes_per_packet: usize,
    /// `ESP in UDP port N` with `--encap udp` (its 8 bytes are in the overhead above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encap: Option<String>,
    /// Algorithm → the kernel driver /proc/crypto shows serving it, after use.
    pub kernel_drivers: BTreeMap<String, String>,
    /// With `--pcrypt`: the pcrypt instance the SAs ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcrypt: Option<PcryptEvidence>,
}

/// What the report shows of the instance (`backend_details.xfrm.pcrypt`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcryptEvidence {
    pub algorithm: String,
    /// The instance's driver, e.g. `pcrypt(rfc4106-gcm-aesni)`.
    pub driver: String,
    /// Its /proc/crypto priority (pcrypt adds 100 to what it wraps, so it serves the SAs).
    pub priority: i32,
    /// Its /proc/crypto reference count while the SAs existed: 1 plus one per SA using it.
    pub refcnt_with_sas: Option<u32>,
    /// Whether this run made it (and so removes it), or found it there.
    pub instantiated_by_run: bool,
}

impl PcryptEvidence {
    pub fn line(&self) -> String {
        let refcnt = self
            .refcnt_with_sas
            .map_or_else(|| "unknown".to_string(), |r| r.to_string());
        format!(
            "pcrypt: {} served by {} (priority {}, refcnt {refcnt} while the SAs existed), {}",
            self.algorithm,
            self.driver,
            self.priority,
            if self.instantiated_by_run {
                "instantiated over NETLINK_CRYPTO for this run and removed after it"
            } else {
                "already present before the run (left in place)"
            }
        )
    }
}

/// An SA after the transfers: which one, and the kernel's counters (their fields follow
/// `pair` in the report, as if they were this row's own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaEvidence {
    pub spi: String,
    /// e.g. `a->b (sent by a)`.
    pub direction: String,
    /// With several SA pairs (`--sas N`): which one, 0 to N-1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<u16>,
    /// A per-CPU SA's CPU (`--per-cpu-sa`), as the kernel reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    #[serde(flatten)]
    pub counters: SaCounters,
}

impl XfrmEvidence {
    /// What each SA carried, the ESP overhead and the kernel drivers that served it.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .sas
            .iter()
            .map(|sa| {
                let c = &sa.counters;
                format!(
                    "ESP SA spi {} {}: {} packets, {} bytes, {} replay drops, {} integrity failures",
                    sa.spi, sa.direction, c.packets, c.bytes, c.replay_drops, c.integrity_failures,
                )
            })
            .collect();
        let drivers: Vec<String> = self
            .kernel_drivers
            .iter()
            .map(|(alg, driver)| format!("{alg}={driver}"))
            .collect();
        let drivers = if drivers.is_empty() {
            "none seen in /proc/crypto".to_string()
        } else {
            drivers.join(", ")
        };
        let encap = match &self.encap {
            Some(e) => format!(
                ", {e} (UDP header {} bytes included)",
                crate::encap::UDP_HEADER_LEN
            ),
            None => String::new(),
        };
        lines.push(format!(
            "{} mode{encap}, ESP overhead {} bytes per {OVERHEAD_REFERENCE_LEN}-byte packet, kernel drivers: {drivers}",
            self.mode, self.esp_overhead_bytes_per_packet,
        ));
        if let Some(p) = &self.pcrypt {
            lines.push(p.line());
        }
        lines.extend(self.per_cpu_line());
        lines
    }

    /// With per-CPU SAs, where the data went, CPU by CPU ([`per_cpu_line`]).
    pub fn per_cpu_line(&self) -> Option<String> {
        per_cpu_line(self.sas.iter())
    }
}

/// With per-CPU SAs among `sas`, where the data went, CPU by CPU: the packets each CPU's SAs
/// sent a->b (a CPU may have more than one: charon negotiates one per acquire), and those
/// sent on the SA without a CPU. None where no SA has a CPU.
pub fn per_cpu_line<'a>(sas: impl Iterator<Item = &'a SaEvidence>) -> Option<String> {
    let a_to_b: Vec<&SaEvidence> = sas.filter(|sa| sa.direction.starts_with("a->b")).collect();
    if !a_to_b.iter().any(|sa| sa.cpu.is_some()) {
        return None;
    }
    let mut by_cpu = BTreeMap::<u32, u64>::new();
    let mut fallback = 0;
    for sa in &a_to_b {
        match sa.cpu {
            Some(cpu) => *by_cpu.entry(cpu).or_default() += sa.counters.packets,
            None => fallback += sa.counters.packets,
        }
    }
    let mut cells: Vec<String> = by_cpu
        .iter()
        .map(|(cpu, packets)| format!("CPU {cpu} {packets}"))
        .collect();
    cells.push(format!("the SA without a CPU {fallback}"));
    let busy = by_cpu.values().filter(|p| **p > 0).count();
    Some(format!(
        "per-CPU SAs: packets a->b by the CPU they left from: {}; {busy} CPU(s) encrypted",
        cells.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::strongswan::{Algorithm, NegotiatedSa};
    use crate::evidence::Evidence;

    #[test]
    fn xfrm_evidence_reads_as_sentences() {
        let e = XfrmEvidence {
            mode: "tunnel".into(),
            suite: "aes-256-cbc-hmac-sha256".into(),
            reqid: "0x1a5abc".into(),
            sas: vec![SaEvidence {
                spi: "0x1a500101".into(),
                direction: "a->b (sent by a)".into(),
                pair: None,
                cpu: None,
                counters: SaCounters {
                    packets: 2952,
                    bytes: 4232538,
                    replay_drops: 0,
                    integrity_failures: 0,
                },
            }],
            esp_overhead_bytes_per_packet: 68,
            encap: None,
            kernel_drivers: [("cbc(aes)".to_string(), "cbc-aes-aesni".to_string())].into(),
            pcrypt: None,
        };
        assert_eq!(
            e.lines(),
            [
                "ESP SA spi 0x1a500101 a->b (sent by a): 2952 packets, 4232538 bytes, 0 replay drops, 0 integrity failures",
                "tunnel mode, ESP overhead 68 bytes per 1400-byte packet, kernel drivers: cbc(aes)=cbc-aes-aesni",
            ]
        );
        let json = serde_json::to_value(Evidence::Xfrm(e)).unwrap();
        assert_eq!(json["sas"][0]["packets"], 2952);
        assert_eq!(json["kernel_drivers"]["cbc(aes)"], "cbc-aes-aesni");
    }

    /// An SA's row in the report, byte for byte: its fields' names and order.
    #[test]
    fn sa_rows_keep_their_json() {
        let row = |pair| SaEvidence {
            spi: "0x1".into(),
            direction: "a->b (sent by a)".into(),
            pair,
            cpu: None,
            counters: SaCounters {
                packets: 2,
                bytes: 300,
                replay_drops: 4,
                integrity_failures: 5,
            },
        };
        fn json(v: &impl Serialize) -> String {
            serde_json::to_string(v).unwrap()
        }
        assert_eq!(
            json(&row(None)),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5}"#
        );
        assert_eq!(
            json(&row(Some(1))),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","pair":1,"packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5}"#
        );
        assert_eq!(
            json(&SaEvidence {
                cpu: Some(3),
                ..row(None)
            }),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","cpu":3,"packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5}"#
        );
        let negotiated = NegotiatedSa {
            sa: row(None),
            reqid: 7,
            mode: "tunnel".into(),
            algorithms: vec![Algorithm {
                name: "rfc4106(gcm(aes))".into(),
                key_bits: 288,
                icv_bits: Some(128),
            }],
        };
        assert_eq!(
            json(&negotiated),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5,"reqid":7,"mode":"tunnel","algorithms":[{"name":"rfc4106(gcm(aes))","key_bits":288,"icv_bits":128}]}"#
        );
    }

    /// Per-CPU SAs: one line says how many packets left on each CPU's SA and on the SA
    /// without a CPU, counting the a->b direction only.
    #[test]
    fn per_cpu_sas_say_where_the_packets_left() {
        let sa = |direction: &str, cpu, packets| SaEvidence {
            spi: "0x1".into(),
            direction: direction.into(),
            pair: None,
            cpu,
            counters: SaCounters {
                packets,
                ..Default::default()
            },
        };
        let mut e = XfrmEvidence {
            mode: "tunnel".into(),
            suite: "aes-256-gcm".into(),
            reqid: "0x1".into(),
            sas: vec![
                sa("a->b (sent by a)", None, 0),
                sa("b->a (received by a)", None, 9),
                sa("a->b (sent by a), CPU 0's SA", Some(0), 100),
                sa("b->a (received by a), CPU 0's SA", Some(0), 7),
                sa("a->b (sent by a), CPU 1's SA", Some(1), 50),
            ],
            esp_overhead_bytes_per_packet: 56,
            encap: None,
            kernel_drivers: Default::default(),
            pcrypt: None,
        };
        assert_eq!(
            e.per_cpu_line().unwrap(),
            "per-CPU SAs: packets a->b by the CPU they left from: CPU 0 100, CPU 1 50, the SA without a CPU 0; 2 CPU(s) encrypted"
        );
        assert!(e.lines().last().unwrap().starts_with("per-CPU SAs"));
        e.sas.retain(|s| s.cpu.is_none());
        assert_eq!(e.per_cpu_line(), None);
    }
}
