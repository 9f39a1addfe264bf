//! 64-bit ARM: the CPU's name and crypto features as an ARM kernel's `/proc/cpuinfo` gives
//! them (`Features` where x86 has `flags`, `CPU implementer`/`CPU part` where x86 has a
//! model name), and the features of the CPU qemu-user emulates.

/// ARM CPU features that decide crypto speed: the AES and PMULL (carry-less multiply, GCM's
/// GHASH) instructions, SHA-1 and SHA-2, and Advanced SIMD (NEON: software AES without them).
pub const CRYPTO_FEATURES: [&str; 5] = ["aes", "pmull", "sha1", "sha2", "asimd"];

/// Arm's own cores (`CPU implementer : 0x41`) by `CPU part`.
const ARM_CORES: [(&str, &str); 16] = [
    ("0xd03", "Cortex-A53"),
    ("0xd04", "Cortex-A35"),
    ("0xd05", "Cortex-A55"),
    ("0xd07", "Cortex-A57"),
    ("0xd08", "Cortex-A72"),
    ("0xd09", "Cortex-A73"),
    ("0xd0a", "Cortex-A75"),
    ("0xd0b", "Cortex-A76"),
    ("0xd0c", "Neoverse-N1"),
    ("0xd0d", "Cortex-A77"),
    ("0xd40", "Neoverse-V1"),
    ("0xd41", "Cortex-A78"),
    ("0xd46", "Cortex-A510"),
    ("0xd47", "Cortex-A710"),
    ("0xd49", "Neoverse-N2"),
    ("0xd4f", "Neoverse-V2"),
];

/// The CPU's name and crypto features from an ARM kernel's cpuinfo text; `None` for another
/// architecture's (no `Features` line). `field` reads a field of the first processor.
pub(super) fn parse_cpuinfo(field: &dyn Fn(&str) -> Option<String>) -> Option<(String, Vec<String>)> {
    let features = field("Features")?;
    let features: Vec<&str> = features.split_whitespace().collect();
    let part = field("CPU part").unwrap_or_default();
    let core = match field("CPU implementer").as_deref() {
        Some("0x41") => ARM_CORES
            .iter()
            .find(|(p, _)| *p == part)
            .map(|(_, name)| format!("ARM {name}")),
        _ => None,
    };
    let core = core.unwrap_or_else(|| {
        let implementer = field("CPU implementer").unwrap_or_else(|| "?".into());
        format!("ARM CPU implementer {implementer} part {part}")
    });
    // A board's name where its kernel gives one (a Raspberry Pi's "Model" line).
    let model = match field("Model") {
        Some(board) => format!("{board}, {core}"),
        None => core,
    };
    Some((model, named(|f| features.contains(&f))))
}

/// The crypto features, in [`CRYPTO_FEATURES`]' order, that `has` says the CPU has.
fn named(has: impl Fn(&str) -> bool) -> Vec<String> {
    CRYPTO_FEATURES
        .iter()
        .filter(|f| has(f))
        .map(|f| f.to_string())
        .collect()
}

/// The crypto features this process's CPU offers, as the kernel (or qemu-user, which
/// emulates that CPU) hands them to it (the auxiliary vector's HWCAP): what AWS-LC itself
/// reads, where `/proc/cpuinfo` describes the host's CPU instead.
#[cfg(target_arch = "aarch64")]
pub fn this_cpus_features() -> Vec<String> {
    use std::arch::is_aarch64_feature_detected as has;
    named(|f| match f {
        // Rust's "aes" is FEAT_AES with FEAT_PMULL, its "sha2" FEAT_SHA1 with FEAT_SHA256.
        "aes" | "pmull" => has!("aes"),
        "sha1" | "sha2" => has!("sha2"),
        "asimd" => has!("neon"),
        _ => false,
    })
}

/// Other architectures: no ARM features to report.
#[cfg(not(target_arch = "aarch64"))]
pub fn this_cpus_features() -> Vec<String> {
    Vec::new()
}
