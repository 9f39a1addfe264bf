//! Two hosts over IPv6: `serve --listen [::]:5299` in namespace b and `run --peer
//! [2001:2::2]:5299` from namespace a, written as users write them, the two "hosts" holding
//! only IPv6 addresses (2001:2::/48). Plain and the userspace tunnel carry verified data;
//! the server chose the tunnel's IPv6 /64 itself; nothing is left. `-6` toward an IPv4-only
//! peer is refused (exit 2) rather than run over IPv4.

mod common;
mod remote_common;

use remote_common::*;

fn report(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", common::text(out));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON only")
}

#[test]
fn plain_and_userspace_between_two_ipv6_hosts() {
    let Some(lab) = Lab::with_addressing("remote-ipv6", model::Family::Ipv6.addressing()) else {
        return;
    };
    let mut serve = lab.topo().b.command(env!("CARGO_BIN_EXE_ipsec-lab"));
    serve
        .args(["serve", "--listen", "[::]:5299", "--psk-file"])
        .arg(&lab.psk);
    let mut server = lab.serve_command(serve);
    assert!(
        server.log().contains("listening on [::]:5299"),
        "{}",
        server.log()
    );
    for (backend, extra) in [("plain", &[][..]), ("userspace", &["-6"][..])] {
        let mut client = lab.topo().a.command(env!("CARGO_BIN_EXE_ipsec-lab"));
        client
            .args(["run", "--peer", "[2001:2::2]:5299", "--no-progress", "--psk-file"])
            .arg(&lab.psk)
            .args(["--backend", backend, "--bytes", "4MB", "--json", "-"])
            .args(extra);
        let r = report(&client.output().unwrap());
        assert_eq!(r["transfers"][0]["verified"], true);
        assert_eq!(r["transfers"][0]["bytes"], 4_000_000);
        let plan = &r["plan"];
        assert_eq!(plan["family"], "ipv6", "{plan}");
        let ad = &plan["addressing"];
        assert_eq!(ad["outer_a"], "2001:2::1", "{ad}");
        assert_eq!(ad["outer_b"], "2001:2::2", "{ad}");
        assert_eq!(r["backend_details"]["remote"]["receiver"], "2001:2::2", "{r}");
        if backend == "userspace" {
            // The server's own choice: the top /64 of 2001:2::/48, clear of its routes.
            assert_eq!(ad["inner_a"], "2001:2:0:ffff::1", "{ad}");
            assert_eq!(ad["inner_b"], "2001:2:0:ffff::2", "{ad}");
            assert_eq!(ad["prefix_len"], 64);
            let d = &r["backend_details"]["userspace"];
            assert!(
                d["client"]["end"]["sent"]["bytes"].as_u64().unwrap() >= 4_000_000,
                "{d}"
            );
            assert!(
                d["server"]["end"]["delivered"]["bytes"].as_u64().unwrap() >= 4_000_000,
                "{d}"
            );
        } else {
            assert_eq!(ad["inner_a"], "2001:2::1", "{ad}");
        }
        lab.nothing_installed().unwrap();
    }
    assert_eq!(
        server.log().matches("run finished").count(),
        2,
        "{}",
        server.log()
    );
    assert!(server.stop().success());
}

#[test]
fn ipv6_toward_an_ipv4_only_peer_is_refused() {
    let Some(lab) = Lab::new("remote-ipv6-refused") else {
        return;
    };
    let out = lab.run(&["--backend", "plain", "-6", "--bytes", "4MB"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out));
    assert!(
        common::text(&out).contains("no IPv6 address"),
        "{}",
        common::text(&out)
    );
    lab.nothing_installed().unwrap();
}
