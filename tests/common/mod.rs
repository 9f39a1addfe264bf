//! Helpers shared by the end-to-end tests: the binary, capability checks that skip with a
//! printed reason, and a view of what the lab left in the kernel.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
}

pub fn run_lab(args: &[&str]) -> Output {
    lab().args(args).output().expect("ipsec-lab runs")
}

/// True when the test may create namespaces; otherwise prints why it is skipped.
pub fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        true
    } else {
        eprintln!("skipped {test}: needs root to create network namespaces");
        false
    }
}

/// Lab namespaces present now (name prefix `ipl-`).
pub fn lab_namespaces() -> Vec<String> {
    netns::lab_namespaces()
}

/// Lab namespaces that did not exist in `before`.
pub fn new_lab_namespaces(before: &[String]) -> Vec<String> {
    lab_namespaces()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect()
}

/// Links in the host namespace whose names carry the lab prefix.
pub fn host_lab_links() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n.starts_with("ipl"))
        .collect()
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Serialises tests that create lab objects, so "nothing new remains" checks in one test
/// are not confused by another test's run in flight.
pub fn lab_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
