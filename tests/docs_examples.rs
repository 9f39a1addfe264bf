//! The docs' example commands run on the machines the lab is built for: hosts whose own
//! kernel has no ESP (and no WireGuard module). An example of a kernel backend there needs
//! `--vm` (user-mode Linux or a VM) or a `--peer`; without either it exits 3, which is what a
//! newcomer copying it from the docs met (docs/packets.md's `ipsec-lab run --latency`).

use std::path::Path;

/// Every `ipsec-lab run` line inside a code block of README.md and docs/*.md, with its
/// file, as written (a leading `$ ` taken off; a trailing `# comment` kept).
fn example_runs() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut runs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut fenced = false;
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let command = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            let command = command.trim();
            if (fenced || line.starts_with("    ")) && command.starts_with("ipsec-lab run ") {
                runs.push((file.display().to_string(), command.to_string()));
            }
        }
    }
    runs
}

/// The backend a run line asks for (xfrm where it names none, as `run` does).
fn backend(words: &[&str]) -> String {
    words
        .windows(2)
        .find(|w| w[0] == "--backend")
        .map(|w| w[1].to_string())
        .or_else(|| {
            words
                .iter()
                .find_map(|w| w.strip_prefix("--backend=").map(String::from))
        })
        .unwrap_or_else(|| "xfrm".into())
}

#[test]
fn every_kernel_backend_example_says_where_its_kernel_is() {
    let runs = example_runs();
    assert!(
        runs.len() > 20,
        "found only {} examples: is the scan broken?",
        runs.len()
    );
    let mut bare = Vec::new();
    for (file, line) in &runs {
        let (command, comment) = line.split_once(" #").unwrap_or((line, ""));
        // An example written for a host whose kernel has ESP says so.
        if comment.contains("with ESP") {
            continue;
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        let kernel = matches!(backend(&words).as_str(), "xfrm" | "strongswan" | "wireguard");
        let placed = words.iter().any(|w| {
            w.starts_with("--vm") || w.starts_with("--peer") || *w == "--plan-file" || *w == "--help"
        });
        if kernel && !placed {
            bare.push(format!("{file}: {line}"));
        }
    }
    assert!(
        bare.is_empty(),
        "examples of a kernel backend without --vm or --peer exit 3 on a host without ESP; add --vm auto:\n{}",
        bare.join("\n")
    );
}
