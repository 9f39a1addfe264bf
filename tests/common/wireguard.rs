//! WireGuard checks shared by the host tests (wireguard-go) and the VM's (kernel).

use super::*;

/// True when a test may run wireguard-go (root, the binary); otherwise prints why it is
/// skipped (under CI=true a missing one fails instead).
pub fn wireguard_go_or_skip(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    let found = std::process::Command::new("wireguard-go")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        testcap::skip(
            test,
            "wireguard-go is not installed (apt-get install wireguard-go)",
        );
    }
    found
}

/// End b given a peer key that is not a's: no handshake, so b's start fails (a failed run,
/// exit 1) and both ends' processes and devices are gone once dropped. Needs root and the
/// backend's capability.
pub fn wrong_peer_key_fails(backend: model::Backend) {
    use lab::backend::wireguard::Keys;
    use lab::backend::xfrm::ShowKeys;
    use lab::backend::{End, Hosts, RunSecrets, Side, Site};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let pids = rt.block_on(async {
        let plan = model::RunRequest {
            backend,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let spec = netns::TopologySpec {
            run_id: netns::new_run_id(),
            mtu: plan.link().mtu,
            addressing: plan.link().addressing,
        };
        let topology = netns::Topology::create(&spec).await.unwrap();
        let right = RunSecrets::generate(&plan).unwrap();
        let RunSecrets::Wireguard(right_keys) = &right else {
            panic!("{backend}'s secrets are WireGuard keys")
        };
        // b keeps its own key but is told a wrong public key for a.
        let wrong = RunSecrets::Wireguard(Keys {
            a: wgnl::KeyPair::generate().unwrap(),
            b: right_keys.b.clone(),
        });
        let ad = topology.addressing;
        let hosts = Hosts {
            a: ad.outer_a,
            b: ad.outer_b,
        };
        let site_a = Site {
            side: Side::A,
            namespace: &topology.a,
            hosts,
            lab_link: Some(&topology.veth_a),
        };
        let site_b = Site {
            side: Side::B,
            namespace: &topology.b,
            hosts,
            lab_link: Some(&topology.veth_b),
        };
        let a = End::start(&plan, &right, &site_a, ShowKeys(false)).await.unwrap();
        let err = match End::start(&plan, &wrong, &site_b, ShowKeys(false)).await {
            Ok(_) => panic!("b started with a wrong peer key"),
            Err(e) => e,
        };
        assert_eq!(err.exit_code(), 1, "{:#}", err.error);
        assert!(
            format!("{:#}", err.error).contains("no WireGuard handshake"),
            "{:#}",
            err.error
        );
        let pids = wireguard_go_children();
        if backend == model::Backend::WireguardGo {
            assert_eq!(
                pids.len(),
                1,
                "a's wireguard-go runs until dropped, b's is gone: {pids:?}"
            );
        }
        // b's device went with its failed start; a's is there until a is dropped.
        assert_eq!(links_in(&topology.b, "ipl-wg"), Vec::<String>::new());
        assert_eq!(links_in(&topology.a, "ipl-wg").len(), 1);
        drop(a);
        assert_eq!(links_in(&topology.a, "ipl-wg"), Vec::<String>::new());
        let names = [topology.a.name().to_string(), topology.b.name().to_string()];
        topology.destroy().unwrap();
        // This run's own namespaces: other runs may be making theirs meanwhile.
        let left: Vec<String> = lab_namespaces()
            .into_iter()
            .filter(|n| names.contains(n))
            .collect();
        assert_eq!(left, Vec::<String>::new());
        pids
    });
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "wireguard-go {pid} left"
        );
    }
    assert!(wireguard_go_children().is_empty());
}

/// Links in namespace `ns` whose names start with `prefix`.
fn links_in(ns: &netns::Namespace, prefix: &str) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-n", ns.name(), "-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// wireguard-go processes whose parent is this test process.
fn wireguard_go_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let Some(close) = stat.rfind(')') else {
                return false;
            };
            let comm_is_wg = stat[..close].ends_with("(wireguard-go");
            let ppid = stat[close + 2..].split_whitespace().nth(1);
            comm_is_wg && ppid == Some(me.as_str())
        })
        .collect()
}
