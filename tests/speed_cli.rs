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
        (
            &["--mode", "burst"][..],
            "use packet (a new IV or nonce per block",
        ),
        (&["--clock", "tsc"][..], "use wall (elapsed time) or cpu"),
        (
            &["--mode", "stream", "--crypto", "auto,kernel"][..],
            "leave kernel out of --crypto",
        ),
        (&["--clock", "cpu", "--multi", "2"][..], "leave out --multi"),
    ] {
        let out = speed(args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(hint), "{args:?}: {t}");
        assert!(!t.contains("encrypt  auto"), "{args:?} measured something: {t}");
    }
}

/// Stream mode names its rows, times openssl the same way, and says what has no stream form.
#[test]
fn stream_mode_rows_are_named_and_what_cannot_stream_is_said() {
    let out = speed(&[
        "aes-128-cbc",
        "aes-128-gcm",
        "aes-128-cbc-hmac-sha256",
        "--mode",
        "stream",
        "--clock",
        "cpu",
        "--crypto",
        "auto,rustcrypto",
        "--seconds",
        "0.03",
        "--sizes",
        "16,1400",
        "--json",
        "-",
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for needle in [
        "aes-128-cbc              encrypt  auto [stream]",
        "[stream] rows = one cipher context, one update per block",
        "per CPU-second of the timing thread",
        "skipped rustcrypto aes-128-gcm encrypt: rustcrypto has no stream form of aes-128-gcm",
        "skipped auto aes-128-cbc-hmac-sha256 encrypt: no stream form",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is only JSON");
    assert_eq!(v["clock"], "cpu");
    let records = v["records"].as_array().unwrap();
    // auto: CBC both ways + GCM; rustcrypto: CBC both ways; 2 sizes each.
    assert_eq!(records.len(), 10, "{v:#}");
    assert!(records
        .iter()
        .all(|r| r["mode"] == "stream" && r["mb_per_s"].as_f64().unwrap() > 0.0));
}

/// `--crypto libcrypto` times OpenSSL's own library: its rows name the OpenSSL release, and
/// a stream row is set against `openssl speed` (the same library) in a ratio line. A bad
/// IPSEC_LAB_LIBCRYPTO is refused before anything is timed, saying what to do.
#[test]
fn libcrypto_rows_name_openssl_and_stand_against_openssl_speed() {
    let out = speed(&[
        "aes-128-cbc",
        "--mode",
        "stream",
        "--clock",
        "cpu",
        "--crypto",
        "auto,libcrypto",
        "--against-openssl",
        "--seconds",
        "0.05",
        "--sizes",
        "64",
    ]);
    let t = text(&out);
    if t.contains("could not be loaded") {
        testcap::skip("libcrypto rows", &t);
        return;
    }
    assert!(out.status.success(), "{t}");
    for needle in [
        "libcrypto [stream] = OpenSSL ",
        "aes-128-cbc              encrypt  libcrypto [stream]/openssl [stream]",
        "aes-128-cbc              decrypt  libcrypto [stream]/openssl [stream]",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
        .args([
            "speed",
            "aes-128-cbc",
            "--crypto",
            "libcrypto",
            "--seconds",
            "0.05",
            "--sizes",
            "64",
        ])
        .env("IPSEC_LAB_LIBCRYPTO", "/nonexistent/libcrypto.so.3")
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains("/nonexistent/libcrypto.so.3")
            && t.contains("apt-get install libssl3")
            && !t.contains("MB/s"),
        "{t}"
    );
}

/// Starts `speed ARGS`, sends `signal` after `after`, and returns the output and how long
/// the process took to end after the signal.
fn interrupted(args: &[&str], signal: nix::sys::signal::Signal, after: std::time::Duration) -> (Output, f64) {
    use std::process::Stdio;
    let child = Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
        .arg("speed")
        .args(args)
        .env_remove("OPENSSL_ia32cap")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ipsec-lab runs");
    std::thread::sleep(after);
    let sent = std::time::Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let out = child.wait_with_output().unwrap();
    (out, sent.elapsed().as_secs_f64())
}

/// Issue 43: Ctrl-C printed nothing, not even the rows done. A signal stops the run within
/// a second, prints the cells done as a table marked partial, and exits 128 + the signal.
#[test]
fn a_signal_stops_speed_with_a_partial_table_and_its_exit_code() {
    use nix::sys::signal::Signal;
    let sizes = "16,64,256,1024,1400";
    // SIGINT while this process times its own rows (20 cells of 0.3 s).
    let (out, stop_s) = interrupted(
        &[
            "aes-128-cbc",
            "--crypto",
            "auto,rustcrypto",
            "--seconds",
            "0.3",
            "--sizes",
            sizes,
        ],
        Signal::SIGINT,
        std::time::Duration::from_millis(2000),
    );
    let t = text(&out);
    eprintln!("SIGINT: stopped {stop_s:.2} s after the signal");
    assert_eq!(out.status.code(), Some(130), "{t}");
    assert!(stop_s < 3.0, "took {stop_s:.2} s to stop:\n{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with("PARTIAL: interrupted by SIGINT after "), "{t}");
    assert!(first.contains(" of 20 cells"), "{t}");
    assert!(stdout.contains("encrypt  auto"), "no row done:\n{t}");
    // SIGTERM while the soft child times its rows: the child stops too, the rows done here
    // are printed, and the JSON says the run was cut short.
    let (out, stop_s) = interrupted(
        &[
            "aes-128-cbc",
            "--crypto",
            "auto,soft",
            "--seconds",
            "0.3",
            "--sizes",
            sizes,
            "--json",
            "-",
        ],
        Signal::SIGTERM,
        std::time::Duration::from_millis(4500),
    );
    let t = text(&out);
    eprintln!("SIGTERM: stopped {stop_s:.2} s after the signal");
    assert_eq!(out.status.code(), Some(143), "{t}");
    assert!(stop_s < 3.0, "took {stop_s:.2} s to stop:\n{t}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is only JSON");
    assert_eq!(v["interrupted"]["signal"], "SIGTERM", "{v:#}");
    assert!(v["records"].as_array().is_some_and(|r| !r.is_empty()), "{v:#}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PARTIAL: interrupted by SIGTERM"),
        "{t}"
    );
}

/// Issue 43: SIGTERM while `openssl speed` ran (`--against-openssl`) waited for it, its sizes ×
/// seconds. Signalled once openssl is running, the run stops within a second, with nothing of
/// openssl's left running.
#[test]
fn a_signal_during_openssl_speed_stops_it_at_once() {
    use nix::sys::signal::Signal;
    use std::process::Stdio;
    let test = "a_signal_during_openssl_speed_stops_it_at_once";
    if !std::path::Path::new("/usr/bin/openssl").exists() {
        return testcap::skip(test, "no /usr/bin/openssl (apt-get install openssl)");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
        .args(["speed", "aes-128-cbc", "--crypto", "auto", "--against-openssl"])
        .args(["--seconds", "3", "--sizes", "1024,8192,16384"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ipsec-lab runs");
    let pid = child.id();
    // openssl runs in a process group of its own, led by itself: found by its parent.
    let openssl = || -> Option<u32> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let p: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let (comm, rest) = stat.split_once(") ")?;
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            (comm.ends_with("(openssl") && ppid == pid).then_some(p)
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let openssl_pid = loop {
        if let Some(p) = openssl() {
            break p;
        }
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            panic!(
                "{test}: openssl never started\n{}",
                text(&child.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let sent = std::time::Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let stop_s = sent.elapsed().as_secs_f64();
    let t = text(&out);
    eprintln!("{test}: stopped {stop_s:.2} s after SIGTERM (openssl alone would run 9 s)");
    assert_eq!(out.status.code(), Some(143), "{t}");
    assert!(stop_s < 3.0, "took {stop_s:.2} s to stop:\n{t}");
    assert!(t.contains("PARTIAL"), "{t}");
    assert!(
        !std::path::Path::new(&format!("/proc/{openssl_pid}")).exists(),
        "{test}: openssl outlived the run"
    );
}
