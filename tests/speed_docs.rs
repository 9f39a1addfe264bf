//! docs/speed.md and `speed --help` say the same about what the code does.

mod common;

use common::*;

/// Regression: docs/speed.md said `--vm` boots the newest /boot/vmlinuz-*, `--help` said
/// the one linux-image-amd64 points at; `vm::default_kernel` takes the latter, else the
/// newest.
#[test]
fn speed_docs_and_help_name_the_same_default_vm_kernel() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/speed.md")).unwrap();
    let help = text(&run_lab(&["speed", "--help"]));
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let (docs, help) = (flat(&docs), flat(&help));
    for both in ["linux-image-amd64", "else the newest /boot/vmlinuz-*"] {
        assert!(help.contains(both), "--help lacks {both:?}: {help}");
        assert!(
            docs.replace('`', "").contains(both),
            "docs/speed.md lacks {both:?}"
        );
    }
}

/// `--mode` and `--clock` are documented where `--help` lists them, with the same choices.
#[test]
fn speed_docs_and_help_name_the_same_modes_and_clocks() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/speed.md")).unwrap();
    let help = text(&run_lab(&["speed", "--help"]));
    for flag in ["--mode <packet|stream>", "--clock <wall|cpu>"] {
        assert!(help.contains(flag), "--help lacks {flag}: {help}");
    }
    for flag in ["`--mode packet|stream`", "`--clock wall`", "`--clock cpu`"] {
        assert!(docs.contains(flag), "docs/speed.md lacks {flag}");
    }
}
