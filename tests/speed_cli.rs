//! `ipsec-lab speed` end to end: the real binary, its soft child process, the table, JSON,
//! and refusals of bad input.

use std::process::{Command, Output};

fn speed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
        .arg("speed")
        .args(args)
        .env_remove("OPENSSL_ia32cap")
        .output()
        .expect("ipsec-lab runs")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn cpu_has_aes() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "aes"))
}

#[test]
fn short_run_prints_every_implementation_ratios_and_the_kernel_reason() {
    let out = speed(&["aes-128-cbc", "--seconds", "0.05"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "aes-128-cbc              encrypt  auto",
        "aes-128-cbc              decrypt  auto",
        "soft = aws-lc-rs, software AES (hardware AES masked)",
        "rustcrypto = rustcrypto",
        "auto/soft",
        "auto/rustcrypto",
        "16384 B",
        "1400 B",
        "skipped kernel: ",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{t}");
    }
}

#[test]
fn json_to_stdout_has_one_record_per_cell_and_names_hardware_aes() {
    let out = speed(&[
        "aes-256-gcm",
        "hmac-sha256",
        "--crypto",
        "auto,soft",
        "--seconds",
        "0.02",
        "--repeats",
        "1",
        "--sizes",
        "64,1400",
        "--json",
        "-",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is only JSON");
    let records = v["records"].as_array().unwrap();
    // 2 implementations x 2 suites (one direction each) x 2 sizes.
    assert_eq!(records.len(), 8, "{v:#}");
    for r in records {
        for field in [
            "implementation",
            "suite",
            "direction",
            "block_bytes",
            "threads",
            "mb_per_s",
        ] {
            assert!(!r[field].is_null(), "record without {field}: {r}");
        }
        assert!(r["mb_per_s"].as_f64().unwrap() > 0.0);
        if r["implementation"] == "soft" {
            assert_eq!(r["hardware_aes"], false, "{r}");
        } else if cpu_has_aes() {
            assert_eq!(r["hardware_aes"], true, "{r}");
        }
    }
    assert!(v["environment"]["cpu_model"].is_string());
    // The table went to stderr so that stdout stays parseable.
    assert!(String::from_utf8_lossy(&out.stderr).contains("auto/soft"));
}

#[test]
fn json_file_and_openssl_units() {
    let dir = std::env::temp_dir().join(format!("ipl-speed-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("speed.json");
    let out = speed(&[
        "chacha20-poly1305",
        "--crypto",
        "rustcrypto",
        "--seconds",
        "0.02",
        "--sizes",
        "256",
        "--openssl-units",
        "--json",
        path.to_str().unwrap(),
    ]);
    let t = text(&out);
    let json = std::fs::read_to_string(&path);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("1000s of bytes per second"), "{t}");
    let cell_in_k = |l: &str| {
        l.split_whitespace()
            .last()
            .is_some_and(|c| c.trim_end_matches('~').ends_with('k'))
    };
    assert!(
        t.lines()
            .any(|l| l.contains("encrypt  rustcrypto") && cell_in_k(l)),
        "{t}"
    );
    let v: serde_json::Value = serde_json::from_str(&json.unwrap()).unwrap();
    assert_eq!(v["records"][0]["suite"], "chacha20-poly1305");
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    for (args, hint) in [
        (
            &["--multi", "0"][..],
            "'--multi <MULTI>': 0 is out of range: use 1 to 1024",
        ),
        (&["aes-512-cbc"][..], "unknown suite \"aes-512-cbc\""),
        (&["--seconds", "-1"][..], "positive number of seconds"),
        (&["--crypto", "nonsense"][..], "unknown implementation"),
    ] {
        let out = speed(args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(hint), "{args:?}: {t}");
        assert!(!t.contains("encrypt  auto"), "{args:?} measured something: {t}");
    }
}
