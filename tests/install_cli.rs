//! What `make install` puts on a machine, beyond the files being there (tests/deb_package.rs
//! checks those): the binary as small as the package's.

use std::path::Path;
use std::process::Command;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The section names of an ELF file, as `readelf -S` lists them.
fn sections(file: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(file)
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(']').nth(1))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

/// Regression: `make install` copied the 83 MB unstripped binary (the .deb's is 13.6 MB).
#[test]
fn make_install_strips_the_binary() {
    let bin = Path::new(env!("CARGO_BIN_EXE_ipsec-lab"));
    // The test binary is a debug build: it has both, so the check below can fail.
    let built = sections(bin);
    assert!(built.iter().any(|s| s == ".symtab"), "{built:?}");
    let dest = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .current_dir(REPO)
        .args(["install", "INSTALL_BUILD=", "PREFIX=/usr/local"])
        .arg(format!("BIN={}", bin.display()))
        .arg(format!("DESTDIR={}", dest.path().display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make install: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = dest.path().join("usr/local/bin/ipsec-lab");
    let left: Vec<_> = sections(&installed)
        .into_iter()
        // .debug_gdb_scripts is loaded with the program: strip keeps it, as it should.
        .filter(|s| [".symtab", ".debug_info", ".debug_line", ".debug_str"].contains(&s.as_str()))
        .collect();
    assert!(left.is_empty(), "installed with {left:?}");
    // Stripped, the installed binary still runs.
    let version = Command::new(&installed).arg("--version").output().unwrap();
    assert!(version.status.success());
    // The build output itself is left as it was.
    assert!(sections(bin).iter().any(|s| s == ".symtab"));
}
