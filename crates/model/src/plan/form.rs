//! How a plan is read from disk and the wire: by its parts. [`Workload`](super::Workload)
//! and [`Link`](super::Link) read their own fields; the backend part and the placement,
//! enums on the inside, read the flat fields reports have always had (`backend`, `crypto`,
//! `mode`, `sas`, ...; `vm`, `peer`). [`RunPlan`] flattens them. It is written in
//! `super` (`impl Serialize for RunPlan`), field by field in the order reports have always
//! had, so a plan reads back as it was and is written byte for byte as before.

use serde::{Deserialize, Deserializer};

use super::{Backend, BackendPlan, Peer, Placement, StrongswanPlan, UserspacePlan, VmKernel, XfrmPlan};
use crate::backend::OwnOptions;

/// The backend part as written: the backend's name beside every backend's own options
/// (reports have always carried `crypto` and `mode`, whatever the backend).
#[derive(Deserialize)]
struct BackendForm {
    backend: Backend,
    #[serde(flatten)]
    xfrm: XfrmPlan,
    #[serde(flatten)]
    userspace: UserspacePlan,
}

impl<'de> Deserialize<'de> for BackendPlan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BackendPlan, D::Error> {
        let f = BackendForm::deserialize(d)?;
        Ok(match f.backend.describe().options {
            OwnOptions::None => BackendPlan::Bare(f.backend),
            OwnOptions::Xfrm => BackendPlan::Xfrm(f.xfrm),
            OwnOptions::Userspace => BackendPlan::Userspace(f.userspace),
            // One flat `per_cpu_sa` field, read with xfrm's part (a second flattened struct
            // with the same field would not see it).
            OwnOptions::Strongswan => BackendPlan::Strongswan(StrongswanPlan {
                per_cpu_sa: f.xfrm.per_cpu_sa,
            }),
        })
    }
}

/// The placement as written: `vm` (null: none; a kernel as `--vm` takes it) and `peer`.
#[derive(Deserialize)]
struct PlacementForm {
    vm: Option<Option<String>>,
    #[serde(default)]
    peer: Option<Peer>,
}

impl<'de> Deserialize<'de> for Placement {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Placement, D::Error> {
        let f = PlacementForm::deserialize(d)?;
        Ok(match (f.peer, f.vm) {
            (Some(_), Some(_)) => {
                return Err(serde::de::Error::custom(
                    "a plan cannot have both a peer and a VM",
                ))
            }
            (Some(peer), None) => Placement::Peer(peer),
            (None, Some(kernel)) => Placement::Vm(VmKernel::from_arg(kernel)),
            (None, None) => Placement::Local,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::{RunPlan, RunRequest, VmKernel};
    use crate::Backend;

    #[test]
    fn a_plan_is_written_with_the_flat_fields_reports_always_had() {
        let plan = RunRequest {
            backend: Backend::Userspace,
            seed: Some(7),
            ..Default::default()
        }
        .validate()
        .unwrap();
        let json = serde_json::to_value(&plan).unwrap();
        let keys: Vec<_> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "addressing",
                "backend",
                "bytes",
                "ceiling",
                "crypto",
                "family",
                "ignored",
                "mode",
                "mtu",
                "parallel",
                "port",
                "repeat",
                "reverse",
                "seed",
                "suite",
                "tunnel_threads",
                "vm",
                "with_iperf3"
            ]
        );
        assert_eq!(serde_json::from_value::<RunPlan>(json).unwrap(), plan);
        for backend in Backend::ALL {
            let plan = RunRequest {
                backend,
                vm: Some(Some("auto".into())),
                ..Default::default()
            }
            .validate();
            let Ok(plan) = plan else { continue };
            let back: RunPlan = serde_json::from_value(serde_json::to_value(&plan).unwrap()).unwrap();
            assert_eq!(back, plan, "{backend}");
        }
    }

    /// `--vm uml` and `--vm uml:RELEASE` reach a guest's plan file as they were given.
    #[test]
    fn user_mode_linux_kernels_survive_the_plan_file() {
        for (arg, kernel) in [
            ("uml", VmKernel::Uml(None)),
            ("uml:6.12.113", VmKernel::Uml(Some("6.12.113".into()))),
            (
                "/boot/vmlinuz-6.1.0-57-amd64",
                VmKernel::Image("/boot/vmlinuz-6.1.0-57-amd64".into()),
            ),
        ] {
            let plan = RunRequest {
                backend: Backend::Xfrm,
                vm: Some(Some(arg.into())),
                ..Default::default()
            }
            .validate()
            .unwrap();
            assert_eq!(plan.vm(), Some(&kernel), "{arg}");
            let back: RunPlan = serde_json::from_value(serde_json::to_value(&plan).unwrap()).unwrap();
            assert_eq!(back, plan, "{arg}");
        }
    }
}

#[cfg(test)]
pub(crate) mod bytes {
    use crate::plan::{PacketsRequest, RunPlan, RunRequest};
    use crate::Backend;

    /// Plans of every shape a report or a child's plan file holds.
    pub(crate) fn samples() -> Vec<(&'static str, RunPlan)> {
        let base = || RunRequest {
            seed: Some(0x18ec_d910_7f28_b6c7),
            ..Default::default()
        };
        let gcm = crate::CipherSuite::AesGcm {
            key: crate::KeyBits::Aes128,
        };
        let requests = [
            (
                "plain",
                RunRequest {
                    backend: Backend::Plain,
                    ..base()
                },
            ),
            (
                "xfrm",
                RunRequest {
                    cipher: Some(gcm),
                    encap: Some(crate::EncapKind::Udp),
                    encap_port: Some(4600),
                    sas: 2,
                    parallel: 2,
                    pcrypt: true,
                    mode: Some(crate::IpsecMode::Transport),
                    ..base()
                },
            ),
            (
                "userspace",
                RunRequest {
                    backend: Backend::Userspace,
                    tunnel_threads: 4,
                    crypto: Some(crate::CryptoChoice::AwsLc),
                    parallel: 4,
                    repeat: 3,
                    reverse: true,
                    ..base()
                },
            ),
            (
                "vm",
                RunRequest {
                    vm: Some(Some("uml:7.2.7".into())),
                    with_iperf3: true,
                    ..base()
                },
            ),
            (
                "vm-stock",
                RunRequest {
                    vm: Some(None),
                    ..base()
                },
            ),
            (
                "peer",
                RunRequest {
                    peer: Some("[2001:db8::1]:6000".into()),
                    family: crate::Family::Ipv6,
                    key_bits: Some(crate::KeyBits::Aes128),
                    tunnel_threads: 2,
                    ..base()
                },
            ),
            (
                "udp-ndr",
                RunRequest {
                    backend: Backend::Userspace,
                    modes: crate::ModesRequest {
                        time_s: Some(3.0),
                        ..Default::default()
                    },
                    packets: PacketsRequest {
                        udp: true,
                        packet_size: Some(crate::packets::PacketSize::Imix),
                        find_ndr: Some(vec![0.0, 0.5]),
                        ..Default::default()
                    },
                    ..base()
                },
            ),
            (
                "latency",
                RunRequest {
                    backend: Backend::Wireguard,
                    modes: crate::ModesRequest {
                        time_s: Some(2.0),
                        interval_s: Some(0.5),
                        omit_s: Some(1.0),
                        bidir: true,
                    },
                    packets: PacketsRequest {
                        latency: true,
                        ..Default::default()
                    },
                    ..base()
                },
            ),
            (
                "netem",
                RunRequest {
                    backend: Backend::Openvpn,
                    netem: Some("delay 20ms loss 0.1% rate 1gbit".parse().unwrap()),
                    no_ceiling: true,
                    mtu: 1400,
                    port: 6000,
                    ..base()
                },
            ),
        ];
        requests
            .into_iter()
            .map(|(name, r)| (name, r.validate().unwrap_or_else(|e| panic!("{name}: {e}"))))
            .collect()
    }

    /// What the flat `FlatPlan` mirror this module replaced wrote for each sample plan and
    /// its line rate (captured from it before it went).
    const WRITTEN_BEFORE: [(&str, &str); 18] = [
        (
            "plain",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","ceiling":false}"#,
        ),
        (
            "plain-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":1.0},"ceiling":false}"#,
        ),
        (
            "xfrm",
            r#"{"backend":"xfrm","suite":"aes-128-gcm","crypto":"auto","bytes":100000000,"repeat":1,"parallel":2,"mtu":1500,"mode":"transport","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"encap":{"kind":"esp-in-udp","port":4600},"sas":2,"pcrypt":true,"family":"ipv4","ceiling":true}"#,
        ),
        (
            "xfrm-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":2,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":1.0},"ceiling":false}"#,
        ),
        (
            "userspace",
            r#"{"backend":"userspace","suite":"aes-256-cbc-hmac-sha256","crypto":"aws-lc","bytes":100000000,"repeat":3,"parallel":4,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":true,"tunnel_threads":4,"family":"ipv4","ceiling":true}"#,
        ),
        (
            "userspace-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":3,"parallel":4,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":true,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":1.0},"ceiling":false}"#,
        ),
        (
            "vm",
            r#"{"backend":"xfrm","suite":"aes-256-cbc-hmac-sha256","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":"uml:7.2.7","with_iperf3":true,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","ceiling":true}"#,
        ),
        (
            "vm-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":"uml:7.2.7","with_iperf3":true,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":1.0},"ceiling":false}"#,
        ),
        (
            "vm-stock",
            r#"{"backend":"xfrm","suite":"aes-256-cbc-hmac-sha256","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","ceiling":true}"#,
        ),
        (
            "vm-stock-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":1.0},"ceiling":false}"#,
        ),
        (
            "peer",
            r#"{"backend":"xfrm","suite":"aes-128-cbc-hmac-sha256","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"transport","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"2001:2::1","outer_b":"2001:2::2","inner_a":"2001:2:0:1::1","inner_b":"2001:2:0:1::2","prefix_len":64},"vm":null,"with_iperf3":false,"ignored":["--tunnel-threads 2 (only the userspace backend has tunnel threads)"],"peer":{"host":"2001:db8::1","port":6000},"reverse":false,"tunnel_threads":1,"family":"ipv6","ceiling":false}"#,
        ),
        (
            "peer-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"2001:2::1","outer_b":"2001:2::2","inner_a":"2001:2:0:1::1","inner_b":"2001:2:0:1::2","prefix_len":64},"vm":null,"with_iperf3":false,"ignored":[],"peer":{"host":"2001:db8::1","port":6000},"reverse":false,"tunnel_threads":1,"family":"ipv6","modes":{"time_s":1.0},"ceiling":false}"#,
        ),
        (
            "udp-ndr",
            r#"{"backend":"userspace","suite":"aes-256-cbc-hmac-sha256","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":3.0},"ceiling":false,"udp":{"packet_size":"imix","rate":null,"seconds":3.0},"ndr":{"tolerances_pct":[0.0,0.5],"trial_seconds":0.5,"precision":0.02}}"#,
        ),
        (
            "udp-ndr-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":3.0},"ceiling":false,"udp":{"packet_size":"imix","rate":null,"seconds":3.0},"ndr":{"tolerances_pct":[0.0,0.5],"trial_seconds":0.5,"precision":0.02}}"#,
        ),
        (
            "latency",
            r#"{"backend":"wireguard","suite":"chacha20-poly1305","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":2.0,"interval_s":0.5,"omit_s":1.0,"bidir":true},"ceiling":true,"latency":true}"#,
        ),
        (
            "latency-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1500,"mode":"tunnel","seed":1796049016290064071,"port":5201,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","modes":{"time_s":2.0,"omit_s":1.0,"bidir":true},"ceiling":false,"latency":true}"#,
        ),
        (
            "netem",
            r#"{"backend":"openvpn","suite":"aes-256-cbc-hmac-sha256","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1400,"mode":"tunnel","seed":1796049016290064071,"port":6000,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","netem":{"delay_ns":20000000,"jitter_ns":0,"loss_percent":0.1,"duplicate_percent":0.0,"reorder_percent":0.0,"rate_bytes_per_s":125000000,"limit":1000},"ceiling":false}"#,
        ),
        (
            "netem-line",
            r#"{"backend":"plain","suite":"none","crypto":"auto","bytes":100000000,"repeat":1,"parallel":1,"mtu":1400,"mode":"tunnel","seed":1796049016290064071,"port":6000,"addressing":{"outer_a":"198.18.0.1","outer_b":"198.18.0.2","inner_a":"198.19.0.1","inner_b":"198.19.0.2","prefix_len":24},"vm":null,"with_iperf3":false,"ignored":[],"reverse":false,"tunnel_threads":1,"family":"ipv4","netem":{"delay_ns":20000000,"jitter_ns":0,"loss_percent":0.1,"duplicate_percent":0.0,"reorder_percent":0.0,"rate_bytes_per_s":125000000,"limit":1000},"modes":{"time_s":1.0},"ceiling":false}"#,
        ),
    ];

    /// Issue 44: the plan is read by its parts and written by itself; what it writes is
    /// what reports and child plans always held, byte for byte, and reads back whole.
    #[test]
    fn plans_are_written_byte_for_byte_as_before_and_read_back_whole() {
        let mut written = Vec::new();
        for (name, plan) in samples() {
            written.push((name.to_string(), plan.clone()));
            written.push((format!("{name}-line"), plan.line_rate()));
        }
        assert_eq!(written.len(), WRITTEN_BEFORE.len());
        for ((name, plan), (before_name, before)) in written.iter().zip(WRITTEN_BEFORE) {
            assert_eq!(name, before_name);
            let json = serde_json::to_string(plan).unwrap();
            assert_eq!(json, before, "{name}");
            let back: RunPlan = serde_json::from_str(before).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), before, "{name}");
            // A stock kernel's VM is written as `null`, as it always was, and reads as none.
            if !name.starts_with("vm-stock") {
                assert_eq!(&back, plan, "{name}");
            }
        }
    }

    #[test]
    fn a_plan_with_both_a_peer_and_a_vm_is_refused() {
        let (_, peer) = &samples()[5];
        let mut json = serde_json::to_value(peer).unwrap();
        json["vm"] = "uml".into();
        let e = serde_json::from_value::<RunPlan>(json).unwrap_err();
        assert!(e.to_string().contains("both a peer and a VM"), "{e}");
    }
}
