//! A plan as reports and child runs have always written it: one flat object. [`RunPlan`]
//! is read and written through this form, so the JSON keeps its field names.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Addressing, Backend, BackendPlan, CipherSuite, CryptoChoice, IpsecMode, Link, Peer, Placement, RunPlan,
    UserspacePlan, VmKernel, Workload, XfrmPlan,
};
use crate::backend::OwnOptions;
use crate::encap::Encap;
use crate::family::Family;
use crate::modes::Modes;
use crate::netem::NetemSpec;
use crate::packets::{NdrSearch, UdpWorkload};
use crate::size::ByteSize;

#[derive(Serialize, Deserialize)]
struct FlatPlan {
    backend: Backend,
    suite: CipherSuite,
    crypto: CryptoChoice,
    bytes: ByteSize,
    repeat: u32,
    parallel: u16,
    mtu: u32,
    mode: IpsecMode,
    seed: u64,
    port: u16,
    addressing: Addressing,
    vm: Option<Option<String>>,
    #[serde(default)]
    with_iperf3: bool,
    ignored: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    peer: Option<Peer>,
    #[serde(default)]
    reverse: bool,
    #[serde(default = "one")]
    tunnel_threads: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    encap: Option<Encap>,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    sas: u16,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pcrypt: bool,
    /// Reports before the family existed were IPv4.
    #[serde(default)]
    family: Family,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netem: Option<NetemSpec>,
    #[serde(default, skip_serializing_if = "Modes::is_default")]
    modes: Modes,
    #[serde(default)]
    ceiling: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    udp: Option<UdpWorkload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ndr: Option<NdrSearch>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    latency: bool,
}

fn one() -> u16 {
    1
}

fn is_one(n: &u16) -> bool {
    *n == 1
}

impl From<RunPlan> for FlatPlan {
    fn from(p: RunPlan) -> FlatPlan {
        let vm = p.vm().map(|k| match k {
            VmKernel::Stock => None,
            VmKernel::Image(k) => Some(k.clone()),
            VmKernel::Auto => Some("auto".to_string()),
            VmKernel::Uml(None) => Some("uml".to_string()),
            VmKernel::Uml(Some(release)) => Some(format!("uml:{release}")),
        });
        FlatPlan {
            backend: p.backend(),
            suite: p.suite,
            crypto: p.crypto(),
            mode: p.mode(),
            tunnel_threads: p.tunnel_threads(),
            encap: p.encap(),
            sas: p.sas(),
            pcrypt: p.pcrypt(),
            peer: p.peer().cloned(),
            vm,
            bytes: p.workload.bytes,
            repeat: p.workload.repeat,
            parallel: p.workload.parallel,
            seed: p.workload.seed,
            port: p.workload.port,
            reverse: p.workload.reverse,
            modes: p.workload.modes,
            with_iperf3: p.workload.with_iperf3,
            udp: p.workload.udp,
            ndr: p.workload.ndr,
            latency: p.workload.latency,
            mtu: p.link.mtu,
            family: p.link.family,
            addressing: p.link.addressing,
            netem: p.link.netem,
            ignored: p.ignored,
            ceiling: p.ceiling,
        }
    }
}

impl TryFrom<FlatPlan> for RunPlan {
    type Error = String;
    fn try_from(f: FlatPlan) -> Result<RunPlan, String> {
        let backend = match f.backend.describe().options {
            OwnOptions::None => BackendPlan::Bare(f.backend),
            OwnOptions::Xfrm => BackendPlan::Xfrm(XfrmPlan {
                mode: f.mode,
                encap: f.encap,
                sas: f.sas,
                pcrypt: f.pcrypt,
            }),
            OwnOptions::Userspace => BackendPlan::Userspace(UserspacePlan {
                crypto: f.crypto,
                tunnel_threads: f.tunnel_threads,
            }),
        };
        let placement = match (f.peer, f.vm) {
            (Some(_), Some(_)) => return Err("a plan cannot have both a peer and a VM".into()),
            (Some(peer), None) => Placement::Peer(peer),
            (None, Some(kernel)) => Placement::Vm(VmKernel::from_arg(kernel)),
            (None, None) => Placement::Local,
        };
        Ok(RunPlan {
            backend,
            suite: f.suite,
            workload: Workload {
                bytes: f.bytes,
                repeat: f.repeat,
                parallel: f.parallel,
                seed: f.seed,
                port: f.port,
                reverse: f.reverse,
                modes: f.modes,
                with_iperf3: f.with_iperf3,
                udp: f.udp,
                ndr: f.ndr,
                latency: f.latency,
            },
            link: Link {
                mtu: f.mtu,
                family: f.family,
                addressing: f.addressing,
                netem: f.netem,
            },
            placement,
            ignored: f.ignored,
            ceiling: f.ceiling,
        })
    }
}

impl Serialize for RunPlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FlatPlan::from(self.clone()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RunPlan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RunPlan, D::Error> {
        RunPlan::try_from(FlatPlan::deserialize(d)?).map_err(serde::de::Error::custom)
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
