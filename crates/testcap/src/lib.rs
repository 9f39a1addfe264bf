//! How a test that needs a capability it lacks (root, `/dev/net/tun`, virtme-ng, a kernel
//! image, openvpn) gives up: on a developer's machine it skips with the reason printed; under
//! `CI=true` it fails, because CI machines have every one of them and a skip there would hide
//! a test that never ran.
//!
//! Leaves out: deciding what a test needs (each test checks its own conditions) and conditions
//! that are facts about the kernel rather than the machine's set-up (a kernel that already
//! has ESP cannot show the no-ESP refusal: such tests skip everywhere).

/// True when missing capabilities must fail tests (`CI=true`, as CI sets it).
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Ends a test that cannot run here: prints `skipped TEST: REASON`, or panics under CI.
/// Call it and `return` from the test.
pub fn skip(test: &str, reason: &str) {
    if required() {
        panic!("{test}: {reason} — CI=true, where every capability must be present, so this is a failure, not a skip");
    }
    eprintln!("skipped {test}: {reason}");
}

/// True when the process runs as root; otherwise [`skip`]s with the reason.
pub fn root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        skip(test, "needs root (network namespaces, netlink)");
    }
    root
}

/// True when `/dev/net/tun` exists; otherwise [`skip`]s with the reason.
pub fn tun(test: &str) -> bool {
    let present = std::path::Path::new("/dev/net/tun").exists();
    if !present {
        skip(test, "no /dev/net/tun (modprobe tun)");
    }
    present
}

/// The bytes of `tests/fixtures/DIR/NAME.hex` (whitespace-separated hex, as the capture
/// scripts write what iproute2, tc or wg sent): the reference a netlink builder is tested
/// against byte for byte.
pub fn hex_fixture(dir: &str, name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../tests/fixtures/{dir}/{name}.hex",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap_or_else(|e| panic!("{path}: {b:?}: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_true_makes_a_skip_a_failure() {
        // One test touches CI, so no other test in this binary races on it.
        let before = std::env::var_os("CI");
        std::env::set_var("CI", "true");
        let failed = std::panic::catch_unwind(|| skip("t", "no widget")).is_err();
        std::env::set_var("CI", "false");
        let skipped = std::panic::catch_unwind(|| skip("t", "no widget")).is_ok();
        match before {
            Some(v) => std::env::set_var("CI", v),
            None => std::env::remove_var("CI"),
        }
        assert!(failed, "under CI=true a missing capability must fail");
        assert!(skipped, "outside CI a missing capability skips");
    }
}
