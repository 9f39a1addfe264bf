//! Kernel ESP's crypto ceiling in user-mode Linux is timed by the kernel's own tcrypt (no
//! system call per packet), so it bounds the tunnel: at or above its MB/s, a share of at
//! most 100 %, with the method and the driver named. AF_ALG there read below the tunnel.
//! The run takes about a minute and a half: tcrypt 6.1 times every key and block size of a
//! mode for a second each (AES-GCM's mode alone is a minute more, so its arithmetic is
//! checked against a real capture in `speed::tcrypt`'s unit tests instead). Needs root and Debian's user-mode-linux; under CI=true a
//! missing one fails the test.

mod common;

use common::own::Sandbox;
use common::*;

fn uml_or_skip(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    let present = std::path::Path::new("/usr/bin/linux.uml").is_file();
    if !present {
        testcap::skip(
            test,
            "no /usr/bin/linux.uml (apt-get install user-mode-linux; make setup does)",
        );
    }
    present
}

/// Runs `args` in UML with `--json F` and checks its ceiling came from tcrypt and bounds it.
fn ceiling_bounds_the_tunnel(args: &[&str], implementation: &[&str]) {
    let dir = private_dir("ipl-uml-ceiling-");
    let json = dir.path().join("report.json");
    let mut all = vec!["run", "--vm", "uml", "--no-progress", "--json"];
    all.push(json.to_str().unwrap());
    all.extend_from_slice(args);
    let run = Sandbox::default().run(&all);
    assert_eq!(run.out.status.code(), Some(0), "{args:?}: {}", text(&run.out));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["transfers"][0]["verified"], true, "{r}");
    let c = &r["ceiling"];
    let crypto = &c["crypto"];
    assert_eq!(crypto["status"], "measured", "{c}");
    let imp = crypto["implementation"].as_str().unwrap();
    assert!(imp.ends_with("via tcrypt"), "the method is named: {imp}");
    for part in implementation {
        assert!(imp.contains(part), "{part} in {imp}");
    }
    let notes = crypto["notes"].to_string();
    assert!(notes.contains("modprobe tcrypt mode="), "{notes}");
    let (tunnel, ceiling) = (
        r["mb_per_s"]["median"].as_f64().unwrap(),
        crypto["mb_per_s"].as_f64().unwrap(),
    );
    assert!(
        ceiling >= tunnel,
        "the ceiling {ceiling} MB/s is below the tunnel's {tunnel}: {c}"
    );
    let share = c["percent_of_ceiling"].as_f64().unwrap_or_else(|| panic!("{c}"));
    assert!(share > 0.0 && share <= 100.0, "{c}");
    eprintln!("{args:?}: tunnel {tunnel:.1} MB/s, ceiling {ceiling:.1} MB/s ({imp}), {share:.0} %");
}

#[test]
fn cbc_hmac_ceiling_in_user_mode_linux_comes_from_tcrypt_and_bounds_the_tunnel() {
    let test = "cbc_hmac_ceiling_in_user_mode_linux_comes_from_tcrypt_and_bounds_the_tunnel";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    ceiling_bounds_the_tunnel(
        &["--key-bits", "256", "--hmac", "sha256", "--bytes", "20MB"],
        &["cbc(aes-generic)", "hmac(sha256-generic)"],
    );
}
