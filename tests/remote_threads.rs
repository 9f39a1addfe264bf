//! The multi-queue userspace tunnel between two hosts, played by two network namespaces
//! (`serve` in b, `run --peer` in a): `--tunnel-threads N` travels in the control request
//! and the SERVER checks it against its own `--max-tunnel-threads`, so a client cannot make
//! it create more queues than it allows. Needs root.

mod common;
mod remote_common;

use remote_common::{report, Lab};

/// Each end's queues from a two-host userspace report (`client` or `server`).
fn queues<'a>(d: &'a serde_json::Value, end: &str) -> &'a Vec<serde_json::Value> {
    d[end]["end"]["queues"]
        .as_array()
        .unwrap_or_else(|| panic!("no queues at the {end}'s end: {d}"))
}

#[test]
fn tunnel_threads_between_hosts_run_within_the_servers_limit() {
    let Some(lab) = Lab::new("remote-threads") else {
        return;
    };
    let server = lab.serve_with(&["--max-tunnel-threads", "3"]);
    for (threads, reverse) in [("2", false), ("3", true)] {
        let mut args = vec![
            "--backend",
            "userspace",
            "--tunnel-threads",
            threads,
            "-P",
            threads,
        ];
        args.extend(["--bytes", "6MB", "--json", "-"]);
        if reverse {
            args.push("--reverse");
        }
        let out = lab.run(&args);
        assert!(out.status.success(), "{args:?}: {}", common::text(&out));
        let r = report(&out);
        assert_eq!(r["transfers"][0]["verified"], true, "{r}");
        assert_eq!(r["plan"]["tunnel_threads"], threads.parse::<u64>().unwrap());
        let d = &r["backend_details"]["userspace"];
        let n: usize = threads.parse().unwrap();
        let (tx, rx) = if reverse {
            ("server", "client")
        } else {
            ("client", "server")
        };
        // Both hosts ran N queues, and the payload went through them.
        for end in [tx, rx] {
            assert_eq!(queues(d, end).len(), n, "{end}: {d}");
        }
        let sent: u64 = queues(d, tx)
            .iter()
            .map(|q| q["sent"]["bytes"].as_u64().unwrap())
            .sum();
        let delivered: u64 = queues(d, rx)
            .iter()
            .map(|q| q["delivered"]["bytes"].as_u64().unwrap())
            .sum();
        assert!(sent >= 6_000_000 && delivered >= 6_000_000, "{d}");
        let per_queue: Vec<&serde_json::Value> = queues(d, tx).iter().map(|q| &q["sent"]["bytes"]).collect();
        eprintln!(
            "{threads} threads: steering {}, sent per queue {per_queue:?}",
            d[tx]["end"]["steering"]
        );
        // Steered by port (one stream per queue), every sending queue carried a stream.
        if d[tx]["end"]["steering"] == "ports" {
            for q in queues(d, tx) {
                assert!(q["sent"]["bytes"].as_u64().unwrap() > 1_000_000, "{q}");
            }
        }
        lab.nothing_installed().unwrap();
    }

    // More than the server allows: refused by the server (exit 2), nothing made on either side.
    let out = lab.run(&["--backend", "userspace", "--tunnel-threads", "4", "-P", "4"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out));
    let text = common::text(&out);
    assert!(
        text.contains("limit of 1 to 3") && text.contains("--max-tunnel-threads"),
        "{text}"
    );
    lab.nothing_installed().unwrap();
    let log = server.log();
    assert!(
        log.contains("limits: ") && log.contains("3 tunnel threads, 600 s a run, data ports"),
        "{log}"
    );
    assert!(
        log.contains("3 streams from port 5201, reverse, 3 tunnel threads"),
        "{log}"
    );
    server.wait_for(
        "refused: 4 tunnel threads is outside",
        std::time::Duration::from_secs(10),
    );
}
