//! What charon installed, read back from the kernel, beside what the lab's own xfrm
//! backend installs for the same suite: the SAs between the two outer addresses, their
//! algorithms and key sizes, their counters, and in words how they differ. Pure: the
//! kernel's dump comes in as [`xfrm::SaInfo`].

use std::net::IpAddr;

use model::IpsecMode;
use xfrm::{InstalledAlgorithm, SaInfo};

use model::evidence::{Algorithm, NegotiatedSa, SaEvidence};

/// An algorithm as the report shows it, from the kernel's dump.
pub fn algorithm(a: &InstalledAlgorithm) -> Algorithm {
    Algorithm {
        name: a.name.clone(),
        key_bits: a.key_bits,
        icv_bits: a.icv_bits,
    }
}

/// The ESP SAs between `a` and `b` in a dump (seen from end a: `a->b` is what it sent),
/// outbound first, each way's by CPU (the SA without one first); a per-CPU SA with its CPU
/// as the kernel reports it.
pub fn negotiated_sas(dump: &[SaInfo], a: IpAddr, b: IpAddr) -> Vec<NegotiatedSa> {
    let mut sas: Vec<NegotiatedSa> = dump
        .iter()
        .filter_map(|sa| {
            let direction = match (sa.id.src, sa.id.dst) {
                (s, d) if s == a && d == b => "a->b (sent by a)",
                (s, d) if s == b && d == a => "b->a (received by a)",
                _ => return None,
            };
            Some(NegotiatedSa {
                sa: SaEvidence {
                    cpu: sa.pcpu,
                    spi: sa.id.spi.to_string(),
                    direction: direction.into(),
                    pair: None,
                    counters: sa.counters,
                },
                reqid: sa.reqid.0,
                mode: sa.mode.map_or("unknown", IpsecMode::name).into(),
                // By name, the order the lab's own list has (cbc before hmac).
                algorithms: {
                    let mut a: Vec<Algorithm> = sa.algorithms.iter().map(algorithm).collect();
                    a.sort_by(|x, y| x.name.cmp(&y.name));
                    a
                },
            })
        })
        .collect();
    sas.sort_by_key(|sa| (!sa.sa.direction.starts_with("a->b"), sa.sa.cpu));
    sas
}

/// How the negotiated SAs differ from the lab's (`expected`, tunnel mode); empty when they
/// match. Two SAs, one per direction, are expected; with per-CPU CHILD_SAs (`per_cpu`) one
/// without a CPU each way, the fallback, beside those of the CPUs.
pub fn differences(sas: &[NegotiatedSa], expected: &[Algorithm], per_cpu: bool) -> Vec<String> {
    let mut out = Vec::new();
    for direction in ["a->b", "b->a"] {
        let n = sas
            .iter()
            .filter(|sa| sa.sa.direction.starts_with(direction))
            .filter(|sa| !per_cpu || sa.sa.cpu.is_none())
            .count();
        match (n, per_cpu) {
            (1, _) => {}
            (n, false) => out.push(format!("{n} SAs {direction} (the lab installs 1)")),
            (n, true) => out.push(format!(
                "{n} SAs {direction} without a CPU (per-CPU SAs have one fallback)"
            )),
        }
    }
    for sa in sas {
        let spi = &sa.sa.spi;
        if sa.mode != "tunnel" {
            out.push(format!("SA {spi}: {} mode (the lab's: tunnel)", sa.mode));
        }
        for want in expected {
            match sa.algorithms.iter().find(|a| a.name == want.name) {
                None => out.push(format!("SA {spi}: no {} (the lab's: {want})", want.name)),
                Some(got) if got != want => out.push(format!("SA {spi}: {got} (the lab's: {want})")),
                Some(_) => {}
            }
        }
        for got in &sa.algorithms {
            if !expected.iter().any(|w| w.name == got.name) {
                out.push(format!("SA {spi}: also {got}, which the lab does not install"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfrm::{ReqId, SaCounters as KernelCounters, SaId, Spi};

    fn alg(name: &str, key_bits: u32, icv_bits: Option<u32>) -> InstalledAlgorithm {
        InstalledAlgorithm {
            name: name.into(),
            key_bits,
            icv_bits,
        }
    }

    fn sa(src: &str, dst: &str, spi: u32, algorithms: Vec<InstalledAlgorithm>) -> SaInfo {
        SaInfo {
            id: SaId {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                spi: Spi(spi),
            },
            reqid: ReqId(1),
            mode: Some(IpsecMode::Tunnel),
            counters: KernelCounters {
                packets: 3,
                bytes: 4200,
                replay_drops: 0,
                integrity_failures: 0,
            },
            algorithms,
            pcpu: None,
        }
    }

    fn cbc_hmac(key_bits: u32) -> Vec<InstalledAlgorithm> {
        vec![
            alg("cbc(aes)", key_bits, None),
            alg("hmac(sha256)", 256, Some(128)),
        ]
    }

    #[test]
    fn sas_between_the_ends_are_picked_and_ordered_outbound_first() {
        let dump = [
            sa("198.18.0.2", "198.18.0.1", 0xc0000002, cbc_hmac(256)),
            sa("10.0.0.1", "10.0.0.2", 0xc0000009, cbc_hmac(256)),
            sa("198.18.0.1", "198.18.0.2", 0xc0000001, cbc_hmac(256)),
        ];
        let sas = negotiated_sas(
            &dump,
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
        );
        assert_eq!(sas.len(), 2);
        assert_eq!(sas[0].sa.spi, Spi(0xc0000001).to_string());
        assert_eq!(sas[0].sa.direction, "a->b (sent by a)");
        assert_eq!(sas[1].sa.direction, "b->a (received by a)");
        assert_eq!(
            sas[0].algorithms[1].to_string(),
            "hmac(sha256) 256-bit key, 128-bit ICV"
        );
        let expected: Vec<Algorithm> = cbc_hmac(256).iter().map(algorithm).collect();
        assert!(differences(&sas, &expected, false).is_empty());
    }

    /// Per-CPU CHILD_SAs: each SA says its CPU as the kernel does, each way's SAs by CPU
    /// after the fallback; one fallback each way and any number of CPUs' SAs are no
    /// difference, where without per-CPU SAs a second SA each way is.
    #[test]
    fn per_cpu_sas_carry_their_cpu_and_one_fallback_each_way_is_expected() {
        let with_cpu = |src, dst, spi, cpu| SaInfo {
            pcpu: cpu,
            ..sa(src, dst, spi, cbc_hmac(256))
        };
        let dump = [
            with_cpu("198.18.0.1", "198.18.0.2", 0xc0000011, Some(1)),
            with_cpu("198.18.0.2", "198.18.0.1", 0xc0000002, None),
            with_cpu("198.18.0.1", "198.18.0.2", 0xc0000010, Some(0)),
            with_cpu("198.18.0.1", "198.18.0.2", 0xc0000001, None),
            with_cpu("198.18.0.2", "198.18.0.1", 0xc0000012, Some(1)),
        ];
        let sas = negotiated_sas(
            &dump,
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
        );
        let order: Vec<(&str, Option<u32>)> = sas.iter().map(|s| (&s.sa.direction[..4], s.sa.cpu)).collect();
        assert_eq!(
            order,
            [
                ("a->b", None),
                ("a->b", Some(0)),
                ("a->b", Some(1)),
                ("b->a", None),
                ("b->a", Some(1))
            ]
        );
        let expected: Vec<Algorithm> = cbc_hmac(256).iter().map(algorithm).collect();
        assert!(differences(&sas, &expected, true).is_empty());
        assert_eq!(
            differences(&sas, &expected, false),
            [
                "3 SAs a->b (the lab installs 1)",
                "2 SAs b->a (the lab installs 1)"
            ]
        );
        assert_eq!(
            differences(&sas[1..], &expected, true),
            ["0 SAs a->b without a CPU (per-CPU SAs have one fallback)"]
        );
    }

    #[test]
    fn a_different_key_size_a_missing_hmac_and_a_missing_sa_are_said() {
        let dump = [sa(
            "198.18.0.1",
            "198.18.0.2",
            0xc0000001,
            vec![alg("cbc(aes)", 128, None)],
        )];
        let sas = negotiated_sas(
            &dump,
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
        );
        let expected: Vec<Algorithm> = cbc_hmac(256).iter().map(algorithm).collect();
        let d = differences(&sas, &expected, false);
        assert_eq!(
            d,
            [
                "0 SAs b->a (the lab installs 1)".to_string(),
                format!(
                    "SA {}: cbc(aes) 128-bit key (the lab's: cbc(aes) 256-bit key)",
                    Spi(0xc0000001)
                ),
                format!(
                    "SA {}: no hmac(sha256) (the lab's: hmac(sha256) 256-bit key, 128-bit ICV)",
                    Spi(0xc0000001)
                ),
            ]
        );
    }
}
