//! `setup-rate` (issue 46): in user-mode Linux, the kernel's XFRM installs N SAs and N
//! policies batched and one by one, a rate per table size comes back with the lookup,
//! flush and memory figures, and every SA is gone afterwards (the guest checks its tables
//! empty after each flush and fails otherwise); SIGTERM in the middle of an install stops
//! the run within seconds with 143 and nothing of it left. Needs root and
//! user-mode-linux; skips saying why, and fails under CI=true.

mod common;

use std::time::{Duration, Instant};

use common::own::Sandbox;
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

#[test]
fn setup_rate_installs_and_removes_n_sas_and_reports_a_rate_per_size() {
    let test = "setup_rate_installs_and_removes_n_sas_and_reports_a_rate_per_size";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let args = [
        "setup-rate",
        "--sizes",
        "1k,2k",
        "--flow-seconds",
        "0.1",
        "--json",
        "-",
    ];
    let run = Sandbox::default().run(&args);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    let tables = r["tables"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(tables.len(), 2, "{r}");
    for (t, size) in tables.iter().zip([1000, 2000]) {
        assert_eq!(t["size"], size, "{t}");
        for path in [
            ["batched", "sas_per_s"],
            ["batched", "policies_per_s"],
            ["one_by_one", "sas_per_s"],
            ["one_by_one", "policies_per_s"],
        ] {
            let rate = t[path[0]][path[1]]
                .as_f64()
                .unwrap_or_else(|| panic!("{path:?}: {t}"));
            assert!(rate.is_finite() && rate > 0.0, "{path:?}: {t}");
        }
        assert!(t["flush_sas_s"].as_f64().is_some_and(|s| s > 0.0), "{t}");
        let lookup = &t["lookup"];
        assert_eq!(lookup["alone_pps"].as_array().map(Vec::len), Some(6), "{t}");
        assert!(lookup["slowdown"].as_f64().is_some_and(|s| s > 0.0), "{t}");
    }
    assert!(
        r["environment"]["virtualization"]
            .as_str()
            .unwrap()
            .starts_with("uml"),
        "{r}"
    );
    // The table is on stderr when stdout carries the JSON.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SAs/s batched") && stderr.contains("2k"),
        "{stderr}"
    );
    assert_eq!(run.files_left, Vec::<String>::new());
}

#[test]
fn sigterm_in_the_middle_of_an_install_exits_143_and_leaves_nothing() {
    let test = "sigterm_in_the_middle_of_an_install_exits_143_and_leaves_nothing";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let mut child = Sandbox::default().spawn(&["setup-rate", "--sizes", "20k", "--window", "1"]);
    let pid = child.lab_pid();
    // The guest says on its stderr, a file in the run's directory under its TMPDIR, when an
    // install starts.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let tmpdir = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"TMPDIR="))
        .map(|v| std::path::PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let installing = || {
        std::fs::read_dir(&tmpdir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| {
                std::fs::read_to_string(d.path().join("stderr"))
                    .is_ok_and(|s| s.contains("installing 20000 SAs"))
            })
    };
    while !installing() {
        assert!(!child.ended(), "the run ended before its install started");
        assert!(Instant::now() < deadline, "no install started within 90 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let run = child.wait();
    let took = sent.elapsed();
    assert_eq!(run.out.status.code(), Some(143), "{}", text(&run.out));
    assert!(took < Duration::from_secs(3), "stopped after {took:?}");
    // The guest, its kernel and its tables went with the run; its directory too.
    assert_eq!(run.files_left, Vec::<String>::new(), "{}", text(&run.out));
    let uml = std::process::Command::new("pgrep")
        .args(["-f", &tmpdir.display().to_string()])
        .output()
        .unwrap();
    assert!(
        uml.stdout.is_empty(),
        "a guest of this run is still running: {}",
        text(&uml)
    );
}
