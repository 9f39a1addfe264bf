//! Issue 25 item 8: what `matrix` shows while it sweeps. Where stderr is not a terminal (a
//! pipe, a log) it printed nothing for the whole sweep; now a line per finished cell, none
//! with `--no-progress`. The VM phase counts the guest's cells as it finishes them (a fake
//! `vng` runs the guest's command on this machine, so no VM boots). Needs root (namespaces)
//! and TUN; skips with the reason otherwise.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use common::*;

/// The per-cell lines of a sweep's stderr.
fn cell_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("ipsec-lab: cell "))
        .map(String::from)
        .collect()
}

fn small_matrix(dir: &Path, extra: &[&str]) -> std::process::Output {
    let json = dir.join("m.json");
    let mut args = vec![
        "matrix",
        "--backends",
        "plain,userspace",
        "--ciphers",
        "aes-128-gcm",
        "--bytes",
        "1MB",
        "--repeat",
        "1",
        "--no-ceiling",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(extra);
    lab()
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .expect("ipsec-lab runs")
}

#[test]
fn a_piped_matrix_prints_a_line_per_cell_and_none_with_no_progress() {
    let test = "a_piped_matrix_prints_a_line_per_cell_and_none_with_no_progress";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-progress-");
    let out = small_matrix(dir.path(), &[]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = cell_lines(&stderr);
    // plain, userspace [auto] here, userspace [soft] in the masked child.
    assert_eq!(lines.len(), 3, "{stderr}");
    for (i, (line, row)) in lines
        .iter()
        .zip(["plain (line rate)", "userspace [auto]", "userspace [soft]"])
        .enumerate()
    {
        let head = format!("ipsec-lab: cell {}/3 {row}", i + 1);
        assert!(line.starts_with(&head), "{line:?} does not start with {head:?}");
        // The result (a measured cell here), then its time.
        assert!(line.contains(" MB/s ("), "{line}");
        assert!(
            line.split(" MB/s (")
                .nth(1)
                .is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit()) && t.contains(" s)")),
            "{line}"
        );
    }
    let quiet = small_matrix(dir.path(), &["--no-progress"]);
    assert!(quiet.status.success(), "{}", text(&quiet));
    assert_eq!(
        cell_lines(&String::from_utf8_lossy(&quiet.stderr)),
        Vec::<String>::new()
    );
}

/// A `vng` that runs the guest's command (`--exec`) on this machine, then waits 3 s before
/// it exits and leaves `exited` behind: a cell shown before that was counted while the
/// "guest" ran, not read from its report afterwards.
fn fake_vng_running_the_guest(dir: &Path, exited: &Path) -> String {
    let body = format!(
        "{VNG_VERSION}\n\
         while [ $# -gt 0 ]; do [ \"$1\" = --exec ] && {{ script=\"$2\"; shift; }}; shift; done\n\
         sh -c \"$script\"\nsleep 3\ntouch '{}'",
        exited.display()
    );
    fake_vng(dir, &body)
}

/// Issue 25: on a terminal the VM phase was one step with no progress and the ETA left it
/// out; in a pipe nothing was shown. The guest now reports each cell through the directory
/// it shares with the host, and the host counts it as it comes.
#[test]
fn a_vm_sweep_counts_the_guests_cells_while_the_guest_runs() {
    let test = "a_vm_sweep_counts_the_guests_cells_while_the_guest_runs";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-progress-");
    let exited = dir.path().join("vng-exited");
    let path = fake_vng_running_the_guest(dir.path(), &exited);
    // The fake vng never boots it: any file passes for the kernel.
    let kernel = dir.path().join("vmlinuz-fake");
    std::fs::write(&kernel, "").unwrap();
    let json = dir.path().join("m.json");
    let mut child = lab()
        .args(["matrix", "--vm"])
        .arg(&kernel)
        .args([
            "--backends",
            "xfrm",
            "--ciphers",
            "aes-128-gcm",
            "--bytes",
            "1MB",
            "--repeat",
            "1",
            "--no-ceiling",
            "--json",
        ])
        .arg(&json)
        .env("PATH", path)
        .env("IPSEC_LAB_VM_ACCEL", "tcg")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut vm_cell_before_exit = None;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("ipsec-lab: cell ") && line.contains("(vm)") {
            vm_cell_before_exit.get_or_insert(!exited.exists());
        }
        lines.push(line);
    }
    let status = child.wait().unwrap();
    let all = lines.join("\n");
    assert!(status.success(), "{all}");
    // The host's baseline, then the guest's: it counted its own cells (its xfrm row cannot
    // run on this kernel, which has no ESP or has it: either way the count is the guest's).
    let cells = cell_lines(&all);
    assert!(cells[0].starts_with("ipsec-lab: cell 1/"), "{all}");
    let last = cells.last().unwrap();
    let n = cells.len();
    assert!(
        last.starts_with(&format!("ipsec-lab: cell {n}/{n} (vm) ")),
        "{all}"
    );
    assert!(
        cells
            .iter()
            .any(|l| l.contains("(vm) plain (line rate)") && l.contains(" MB/s (")),
        "{all}"
    );
    assert_eq!(vm_cell_before_exit, Some(true), "{all}");
}
