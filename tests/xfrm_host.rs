//! `--backend xfrm` on the host kernel. The lab's build machines have no ESP, so the run
//! must refuse before creating anything, with exit code 3 and a message naming the ways
//! out. Needs root; on a kernel with ESP this refusal cannot happen and the test says so.

use std::process::Command;

fn root_namespace_sas() -> String {
    let out = Command::new("ip")
        .args(["xfrm", "state", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn xfrm_without_esp_exits_3_with_the_way_out_and_creates_nothing() {
    let test = "xfrm_without_esp_exits_3_with_the_way_out_and_creates_nothing";
    if !testcap::root(test) {
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        testcap::skip(
            test,
            "needs strace to watch for namespace creation (apt-get install strace)",
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let caps = rt.block_on(xfrm::probe()).unwrap();
    if caps.esp {
        eprintln!("skipped: this kernel has ESP, so the no-ESP refusal cannot be observed here");
        return;
    }
    let before_sas = root_namespace_sas();
    // Other helpers' runs create lab namespaces concurrently, so "nothing created" is
    // checked on this process alone: a named namespace is a bind mount under /run/netns.
    let trace = std::env::temp_dir().join(format!("ipl-xfrm-host-{}.strace", std::process::id()));
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=mount", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_ipsec-lab"))
        .args([
            "run",
            "--backend",
            "xfrm",
            "--key-bits",
            "256",
            "--hmac",
            "sha256",
            "--bytes",
            "1MB",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(
        stderr.contains(
            "this kernel has no ESP support (CONFIG_INET_ESP); use --vm to run the kernel backend in a VM \
             with a stock kernel, or --backend userspace"
        ),
        "{stderr}"
    );
    let mounts = std::fs::read_to_string(&trace).unwrap_or_default();
    let _ = std::fs::remove_file(&trace);
    assert!(
        !mounts.contains("/run/netns"),
        "a namespace was created: {mounts}"
    );
    assert_eq!(root_namespace_sas(), before_sas);
}
