//! What `--version` and every report say about this build: the commit, the profile and the
//! versions of the crypto libraries linked in (read from Cargo.lock, so they cannot drift).
//!
//! Only the binary crate has this script: a new commit rebuilds the binary, not the
//! workspace. Outside a git checkout (a source tarball) `IPSEC_LAB_COMMIT` names the commit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates that do the lab's cryptography, as the `crypto` and `control` crates use them.
const CRYPTO_CRATES: [&str; 9] = [
    "aws-lc-rs",
    "aws-lc-sys",
    "aes",
    "cbc",
    "hmac",
    "sha2",
    "aes-gcm",
    "chacha20poly1305",
    "snow",
];
/// Workspace crates whose dependencies name those versions.
const USERS: [&str; 2] = ["crypto", "control"];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let lock = root.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-env-changed=IPSEC_LAB_COMMIT");
    let commit = std::env::var("IPSEC_LAB_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git_commit(&root))
        .unwrap_or_else(|| "unknown".into());
    // "debug" or "release": the profile the binary was built with (custom profiles inherit one).
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let crypto = crypto_versions(&text)
        .iter()
        .map(|(name, version)| format!("{name} {version}"))
        .collect::<Vec<_>>()
        .join(", ");
    println!("cargo:rustc-env=IPSEC_LAB_COMMIT={commit}");
    println!("cargo:rustc-env=IPSEC_LAB_PROFILE={profile}");
    println!("cargo:rustc-env=IPSEC_LAB_CRYPTO={crypto}");
}

/// The short commit of HEAD; reruns this script when HEAD moves (also in a git worktree).
fn git_commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").current_dir(root).args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
    }
    if let (Some(common), Some(head)) = (
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        println!("cargo:rerun-if-changed={common}/{head}");
        println!("cargo:rerun-if-changed={common}/packed-refs");
    }
    Some(commit)
}

/// (crate, version) for each of [`CRYPTO_CRATES`] that [`USERS`] depend on, in that order.
fn crypto_versions(lock: &str) -> Vec<(String, String)> {
    let packages: Vec<&str> = lock.split("[[package]]").skip(1).collect();
    let field = |block: &str, key: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
            .and_then(|v| v.strip_suffix('"'))
            .map(str::to_string)
    };
    // Dependencies are "name" when one version is locked, "name version" when several are.
    let mut deps: Vec<(String, Option<String>)> = Vec::new();
    for block in &packages {
        if !USERS.iter().any(|u| field(block, "name").as_deref() == Some(u)) {
            continue;
        }
        for line in block.lines().map(str::trim) {
            let Some(dep) = line.strip_prefix('"').and_then(|l| l.strip_suffix("\",")) else {
                continue;
            };
            let mut parts = dep.split(' ');
            let name = parts.next().unwrap_or_default().to_string();
            deps.push((name, parts.next().map(str::to_string)));
        }
    }
    CRYPTO_CRATES
        .iter()
        .filter_map(|name| {
            let (_, pinned) = deps.iter().find(|(n, _)| n == name)?;
            let version = pinned.clone().or_else(|| {
                packages
                    .iter()
                    .find(|b| field(b, "name").as_deref() == Some(name))
                    .and_then(|b| field(b, "version"))
            })?;
            Some((name.to_string(), version))
        })
        .collect()
}
