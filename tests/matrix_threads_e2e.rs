//! `ipsec-lab matrix --threads 1,2` on the host at small size: the userspace row once per
//! thread count, measured, its cells' notes naming every tunnel thread; openvpn (no tunnel
//! threads) given a row at 2 that says why; xfrm's row at 2 is two SA pairs ("xfrm x2 SAs",
//! refused here where the host kernel has no ESP; tests/vm/multi_sa.rs runs it); every
//! format shows the rows; bad counts exit 2. Needs root and TUN; skips with the reason
//! otherwise.

mod common;

use common::*;

#[test]
fn userspace_rows_per_thread_count_and_threadless_backends_say_why() {
    let test = "userspace_rows_per_thread_count_and_threadless_backends_say_why";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-matrix-threads");
    let out = lab()
        .args([
            "matrix",
            "--backends",
            "userspace,xfrm,openvpn",
            "--crypto",
            "auto",
            "--threads",
            "2,1",
            "--ciphers",
            "aes-256-gcm,aes-128-cbc-hmac-sha256",
            "--bytes",
            "3MB",
            "--repeat",
            "1",
            "--no-progress",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("matrix.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let row = |backend: &str, threads: u64| {
        rows.iter()
            .find(|r| {
                r["key"]["backend"] == backend && r["key"]["tunnel_threads"].as_u64().unwrap_or(1) == threads
            })
            .unwrap_or_else(|| panic!("no {backend} row at {threads} threads: {rows:?}"))
    };
    for threads in [1u64, 2] {
        let r = row("userspace", threads);
        // One thread leaves the key as reports always had it.
        assert_eq!(
            r["key"].get("tunnel_threads").is_some(),
            threads > 1,
            "{}",
            r["key"]
        );
        for cell in r["cells"].as_array().unwrap() {
            assert_eq!(cell["status"], "measured", "{threads} threads: {cell}");
            assert!(cell["mb_per_s"]["median"].as_f64().unwrap() > 0.0);
            let notes = cell["notes"].to_string();
            for q in 0..threads {
                let name = if threads == 1 {
                    "encrypting thread ipl-tun-a:".to_string()
                } else {
                    format!("encrypting thread ipl-tun-a/{q}:")
                };
                assert!(notes.contains(&name), "{threads} threads, no {name}: {notes}");
                // 2 streams by default (the largest count): each thread carried one.
                let line = notes.split(&name).nth(1).unwrap();
                assert!(
                    !line.contains("(0 sent"),
                    "{threads} threads, {name} idle: {notes}"
                );
            }
        }
    }
    for (backend, why) in [("xfrm", "ESP"), ("openvpn", "one thread")] {
        for cell in row(backend, 2)["cells"].as_array().unwrap() {
            // A host kernel with ESP measures the xfrm row (two SA pairs).
            if backend == "xfrm" && cell["status"] == "measured" {
                continue;
            }
            assert_eq!(cell["status"], "not_run", "{backend}: {cell}");
            assert!(
                cell["reason"].as_str().unwrap().contains(why),
                "{backend}: {cell}"
            );
        }
    }
    // Every rendering labels the rows by thread count.
    for file in ["matrix.md", "matrix.svg", "matrix.html", "matrix.csv"] {
        let body = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(body.contains("userspace [auto] x2 threads"), "{file}");
        assert!(body.contains("openvpn x2 threads"), "{file}");
        assert!(body.contains("xfrm x2 SAs"), "{file}");
    }
}

#[test]
fn bad_thread_counts_exit_2_before_anything_runs() {
    for bad in ["0", "257", "1,x"] {
        let out = own::run_lab_leaving_nothing(&[
            "matrix",
            "--backends",
            "userspace",
            "--threads",
            bad,
            "--bytes",
            "2MB",
            "--json",
            "-",
        ]);
        assert_eq!(out.status.code(), Some(2), "--threads {bad}: {}", text(&out));
        assert!(out.stdout.is_empty(), "--threads {bad}: nothing measured");
    }
}
