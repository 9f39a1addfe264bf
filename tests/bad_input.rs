//! Bad input is refused with exit code 2, a message that says what to do, and nothing created.

mod common;

use common::*;

#[test]
fn bad_values_exit_2_and_create_nothing() {
    assert_usage_errors(&[
        (&["run", "--key-bits", "100"][..], "128, 192 or 256"),
        (&["run", "--bytes", "abc"][..], "100MB"),
        (&["run", "--hmac", "md5"][..], "none or sha256"),
        (
            &[
                "run",
                "--backend",
                "userspace",
                "--cipher",
                "aes-256-gcm",
                "--key-bits",
                "128",
            ][..],
            "not both",
        ),
        (&["run", "--repeat", "0"][..], "1 to 1000"),
        // OpenVPN's data channel offload: AEAD only, no user-mode Linux (no ovpn there), no
        // rekey run yet.
        (
            &["run", "--backend", "openvpn-dco", "--cipher", "aes-128-cbc"][..],
            "data channel offload carries AEAD ciphers only",
        ),
        (
            &["run", "--backend", "openvpn-dco", "--hmac", "sha256"][..],
            "which --backend openvpn measures",
        ),
        (
            &["run", "--backend", "openvpn-dco", "--vm", "uml"][..],
            "user-mode Linux has no ovpn module",
        ),
        (
            &[
                "run",
                "--backend",
                "openvpn-dco",
                "--rekey-every",
                "2",
                "--time",
                "8",
            ][..],
            "cannot rekey the openvpn-dco backend",
        ),
        (&["run", "--parallel", "0"][..], "1 to 128"),
        (
            &["run", "--rekey-order", "sideways"][..],
            "make-before-break (mbb) or naive",
        ),
        (&["run", "--rekey-order", "naive"][..], "add --rekey-every"),
        (
            &["run", "--backend", "plain", "--rekey-every", "1"][..],
            "use --backend xfrm",
        ),
        (
            &["run", "--rekey-every", "5", "--time", "2"][..],
            "no rekey would happen",
        ),
        (
            &["run", "--rekey-every", "1", "--bytes", "10MB"][..],
            "give --time SECONDS",
        ),
        // OpenVPN's static-key mode has no renegotiation; its timer counts whole seconds;
        // it keeps the old key in its own order.
        (
            &[
                "run",
                "--backend",
                "openvpn",
                "--cipher",
                "aes-256-cbc",
                "--rekey-every",
                "1",
                "--time",
                "3",
            ][..],
            "use --cipher aes-256-gcm",
        ),
        (
            &[
                "run",
                "--backend",
                "openvpn",
                "--cipher",
                "aes-256-gcm",
                "--rekey-every",
                "0.5",
                "--time",
                "3",
            ][..],
            "whole seconds",
        ),
        (
            &[
                "run",
                "--backend",
                "openvpn",
                "--cipher",
                "aes-256-gcm",
                "--rekey-every",
                "1",
                "--rekey-order",
                "naive",
                "--time",
                "3",
            ][..],
            "leave out --rekey-order",
        ),
        (&["run", "--rekey-sa", "esp"][..], "use child or ike"),
        (
            &["run", "--rekey-every", "1", "--time", "3.5", "--rekey-sa", "ike"][..],
            "only the strongswan backend has",
        ),
        (
            &[
                "run",
                "--backend",
                "strongswan",
                "--rekey-every",
                "1",
                "--time",
                "3.5",
                "--rekey-order",
                "naive",
            ][..],
            "make-before-break per RFC 7296",
        ),
        (
            &[
                "run",
                "--backend",
                "boringtun",
                "--rekey-every",
                "1",
                "--time",
                "3.5",
            ][..],
            "give --rekey-every 120",
        ),
    ]);
}

/// The hidden `--plan-file` a child run reads its plan from: refused as bad input where the
/// file is unreadable or holds no plan, and with plan options beside it.
#[test]
fn a_plan_file_that_is_unreadable_or_no_plan_exits_2_and_creates_nothing() {
    let dir = private_dir("ipl-bad-plan-");
    let missing = dir.path().join("missing.json");
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, r#"{"backend": "xfrm"}"#).unwrap();
    let (missing, junk) = (missing.to_str().unwrap(), junk.to_str().unwrap());
    assert_usage_errors(&[
        (
            &["run", "--plan-file", missing, "--no-progress"][..],
            "cannot read it",
        ),
        (&["run", "--plan-file", junk][..], "not a plan"),
        (
            &["matrix", "--plan-file", missing, "--no-progress"][..],
            "cannot read it",
        ),
        (&["matrix", "--plan-file", junk][..], "not a plan"),
        (
            &["run", "--plan-file", junk, "--backend", "plain"][..],
            "cannot be used with",
        ),
        (
            &["matrix", "--plan-file", junk, "--bytes", "1MB"][..],
            "cannot be used with",
        ),
    ]);
}

#[test]
fn without_net_admin_nothing_is_created_and_exit_is_3() {
    if !nix::unistd::geteuid().is_root() {
        // Already unprivileged: the real situation under test.
        let out = run_lab(&["run", "--backend", "plain", "--bytes", "1MB"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        return;
    }
    // As root, drop every capability for the child with setpriv (util-linux).
    if std::process::Command::new("setpriv")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("skipped without_net_admin_nothing_is_created_and_exit_is_3: setpriv not installed");
        return;
    }
    // In a namespace of its own, dropping every capability inside it: what is counted
    // afterwards is this run's alone.
    let run = own::Sandbox::default()
        .wrapper(&[
            "setpriv",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .run(&["run", "--backend", "plain", "--bytes", "1MB"]);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(3), "{}", text(out));
    assert!(text(out).contains("needs CAP_NET_ADMIN"), "{}", text(out));
    assert!(
        !text(out).contains("ipsec-lab: ipsec-lab"),
        "name doubled: {}",
        text(out)
    );
    assert_eq!(run.namespaces_left, Vec::<String>::new());
}

/// `--crypto libcrypto` where no libcrypto loads: exit 3 before anything is made, naming the
/// file tried and what to install.
#[test]
fn a_missing_libcrypto_exits_3_and_creates_nothing() {
    let wrapper = ["env", "IPSEC_LAB_LIBCRYPTO=/nonexistent/libcrypto.so.3"];
    let args = [
        "run",
        "--backend",
        "userspace",
        "--crypto",
        "libcrypto",
        "--bytes",
        "1MB",
    ];
    let (out, left) = if own::is_root() {
        let run = own::Sandbox::default().wrapper(&wrapper).run(&args);
        (run.out, run.namespaces_left)
    } else {
        let out = lab()
            .args(args)
            .env("IPSEC_LAB_LIBCRYPTO", "/nonexistent/libcrypto.so.3")
            .output()
            .unwrap();
        (out, vec![])
    };
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains("/nonexistent/libcrypto.so.3") && t.contains("apt-get install libssl3"),
        "{t}"
    );
    assert_eq!(left, Vec::<String>::new());
}

/// Runs `args` in a fresh empty directory, in a namespace of its own (own.rs); returns the
/// output, what the directory holds afterwards (nothing may be created there by a refused
/// command) and the lab namespaces the run left.
fn run_in_empty_dir(args: &[&str]) -> (std::process::Output, Vec<String>, Vec<String>) {
    let dir = private_dir("ipl-bad-input-");
    // Not root, nothing can be made to count.
    let (out, namespaces_left) = if own::is_root() {
        let run = own::Sandbox::default().current_dir(dir.path()).run(args);
        (run.out, run.namespaces_left)
    } else {
        (lab().args(args).current_dir(dir.path()).output().unwrap(), vec![])
    };
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    (out, left, namespaces_left)
}

#[test]
fn json_to_nonexistent_dir_is_refused_before_any_work() {
    let missing = "No such file or directory";
    for (args, why) in [
        (
            &["run", "--backend", "plain", "--json", "/nonexistent/x.json"][..],
            missing,
        ),
        (
            &["speed", "aes-128-cbc", "--json", "/nonexistent/x.json"][..],
            missing,
        ),
        (&["matrix", "--json", "/nonexistent/x.json"][..], missing),
        (&["matrix", "--out", "/dev/null/results"][..], "Not a directory"),
    ] {
        let started = std::time::Instant::now();
        let (out, left, namespaces_left) = run_in_empty_dir(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let path = args.last().unwrap();
        assert!(
            text(&out).contains(path),
            "{args:?} does not name the path: {}",
            text(&out)
        );
        assert!(
            text(&out).contains(why),
            "{args:?} does not say why: {}",
            text(&out)
        );
        // Refused up front: no transfer, no timing, no sweep, and no file.
        assert!(started.elapsed().as_secs() < 5, "{args:?} worked first");
        assert_eq!(left, Vec::<String>::new(), "{args:?}");
        assert_eq!(namespaces_left, Vec::<String>::new(), "{args:?}");
    }
}

#[test]
fn bytes_20kb_and_0_are_refused_with_the_minimum() {
    assert_usage_errors(&[
        (&["run", "--bytes", "20kB"][..], "at least 1.0 MB"),
        (&["run", "--bytes", "1"][..], "at least 1.0 MB"),
        (&["matrix", "--bytes", "20kB"][..], "at least 1.0 MB"),
        (
            &["matrix", "--vm", "--vm-bytes", "1kB"][..],
            "--vm-bytes 1.0 kB is too small",
        ),
        (&["run", "--bytes", "0"][..], "must be above zero"),
    ]);
}

#[test]
fn vm_bytes_without_vm_is_refused() {
    let out = run_lab(&["matrix", "--vm-bytes", "10MB"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--vm"), "{}", text(&out));
}

#[test]
fn speed_repeats_is_a_visible_alias_of_repeat_and_sizes_take_units() {
    let out = lab()
        .args(["speed", "aes-128-cbc", "--crypto", "auto", "--seconds", "0.01"])
        .args(["--repeats", "1", "--sizes", "1400,8KiB,16k", "--json", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["block_sizes"], serde_json::json!([1400, 8192, 16000]));
    let help = run_lab(&["speed", "--help"]);
    let help = text(&help);
    assert!(help.contains("--repeat <REPEAT>"), "{help}");
    // Regression: --repeats worked and --help did not say so; it is a visible alias now.
    assert!(help.contains("[alias: --repeats]"), "{help}");
}

#[test]
fn run_help_says_port_range_and_peer_mode() {
    let help = text(&run_lab(&["run", "--help"]));
    assert!(help.contains("PORT..PORT+P-1"), "{help}");
    assert!(
        help.contains("with --peer") && help.contains("transport"),
        "{help}"
    );
}

/// Regression (issue 25, item 6): hints that led nowhere. Negative numbers were taken for
/// unknown flags; `matrix --threads 0` ran with --backends plain and otherwise named
/// `--tunnel-threads`; `speed --sizes 0` suggested a payload size; `--peer --vm` sent the
/// user to the machines they were on.
#[test]
fn every_refusal_names_the_flag_given_and_a_way_that_works() {
    assert_usage_errors(&[
        (
            &["run", "--repeat", "-1"][..],
            "-1 is out of range: use 1 to 1000",
        ),
        (
            &["matrix", "--repeat", "-1"][..],
            "-1 is out of range: use 1 to 1000",
        ),
        (&["run", "--repeat", "1001"][..], "use 1 to 1000"),
        (&["run", "-P", "-1"][..], "-1 is out of range: use 1 to 128"),
        (&["matrix", "-P", "-1"][..], "-1 is out of range: use 1 to 128"),
        (&["run", "--mtu", "-1"][..], "-1 is out of range: use 576 to 9000"),
        (
            &["matrix", "--mtu", "-1"][..],
            "-1 is out of range: use 576 to 9000",
        ),
        (
            &["speed", "--multi", "-1"][..],
            "-1 is out of range: use 1 to 1024",
        ),
        (
            &["speed", "--repeat", "-1"][..],
            "-1 is out of range: use 1 to 1000",
        ),
        (
            &["compare", "a.json", "b.json", "--threshold", "-5"][..],
            "--threshold -5 is out of range",
        ),
        (
            &["compare", "a.json", "b.json", "--confidence", "-5"][..],
            "--confidence -5 is out of range",
        ),
        (
            &["matrix", "--threads", "0", "--backends", "plain"][..],
            "'--threads",
        ),
        (&["matrix", "--threads", "1,0"][..], "0 is not in 1..=256"),
        (&["matrix", "--threads", "-1"][..], "-1 is not in 1..=256"),
        (&["speed", "--sizes", "0"][..], "e.g. 1400"),
        (
            &["speed", "--mode", "stream", "--crypto", "kernel"][..],
            "leave kernel out of --crypto",
        ),
        (
            &["run", "--peer", "192.0.2.1", "--vm"][..],
            "use --backend userspace",
        ),
    ]);
    for args in [
        &["matrix", "--threads", "0"][..],
        &["matrix", "--threads", "0", "--backends", "plain"][..],
    ] {
        let out = text(&own::run_lab_leaving_nothing(args));
        assert!(!out.contains("--tunnel-threads"), "{args:?}: {out}");
    }
    let out = text(&own::run_lab_leaving_nothing(&["speed", "--sizes", "0"]));
    assert!(!out.contains("100MB"), "a payload size is no block size: {out}");
    let out = text(&own::run_lab_leaving_nothing(&[
        "run",
        "--peer",
        "192.0.2.1",
        "--vm",
    ]));
    assert!(!out.contains("on the machines themselves"), "{out}");
}

/// `setup-rate`: a table size with an unknown suffix, of 0 or above what the guest's memory
/// is sized for, a window of 0 or above 4096, a flow too short, a suite ESP cannot carry,
/// a VM it cannot use, a JSON path that cannot be written, a backend it does not know or
/// an option that is another backend's: refused before any boot or daemon.
#[test]
fn setup_rate_refuses_bad_sizes_windows_and_flows_before_it_boots() {
    assert_usage_errors(&[
        (
            &["setup-rate", "--backend", "openvpn"][..],
            "choose xfrm (SAs and policies), strongswan",
        ),
        (
            &["setup-rate", "--backend", "strongswan", "--cipher", "aes-128-gcm"][..],
            "--cipher is for setup-rate --backend xfrm: IKE_SAs carry no ESP SA",
        ),
        (
            &["setup-rate", "--backend", "wireguard-go", "--flow-seconds", "1"][..],
            "--flow-seconds is for setup-rate --backend xfrm",
        ),
        (
            &["setup-rate", "--backend", "strongswan", "--sizes", "20k"][..],
            "measures at most 10000 IKE_SAs",
        ),
        (
            &["setup-rate", "--backend", "wireguard-go", "--window", "2000"][..],
            "peers in flight must be 1 to 1024",
        ),
        (
            &["setup-rate", "--backend", "strongswan", "--vm", "uml"][..],
            "--vm is for setup-rate --backend xfrm",
        ),
        (&["setup-rate", "--sizes", "10x"][..], "unknown suffix \"x\""),
        (&["setup-rate", "--sizes", "1k,0"][..], "at least 1 SA, e.g. 1k"),
        (&["setup-rate", "--sizes", "1m"][..], "above 200000 SAs"),
        (&["setup-rate", "--sizes", "1.5"][..], "whole number"),
        (
            &["setup-rate", "--window", "0"][..],
            "1 to 4096 (1 is one by one)",
        ),
        (&["setup-rate", "--window", "5000"][..], "1 to 4096"),
        (&["setup-rate", "--window", "-1"][..], "--window"),
        (&["setup-rate", "--flow-seconds", "0"][..], "0.05 to 60 s"),
        (&["setup-rate", "--flow-seconds", "nan"][..], "0.05 to 60 s"),
        (&["setup-rate", "--cipher", "none"][..], "ESP SAs the lab can key"),
        (
            &["setup-rate", "--vm", "/boot/vmlinuz"][..],
            "--vm uml or uml:RELEASE",
        ),
        (
            &["setup-rate", "--json", "/nonexistent/x.json"][..],
            "/nonexistent/x.json",
        ),
    ]);
}
