//! The conditions a measurement was taken under. A number without its conditions is not a
//! result, so every report carries one of these.
//!
//! Parsing is pure (tested on fixed text); [`Environment::detect`] only reads `/proc` and
//! `uname`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod arm;

/// x86 CPU flags that decide crypto speed (ARM's: [`arm::CRYPTO_FEATURES`]).
pub const CRYPTO_FLAGS: [&str; 7] = ["aes", "vaes", "pclmulqdq", "sha_ni", "avx2", "avx512f", "ssse3"];

/// How hardware AES is turned off for a process on this binary's architecture: AWS-LC (and
/// OpenSSL) read `var` once, when they initialise, and clear the capability bits of `mask`.
pub struct HardwareAesOff {
    pub var: &'static str,
    pub mask: &'static str,
    /// The AES instructions' bit, which a mask must clear to count as turning them off.
    pub aes_bit: u64,
}

/// x86: AES-NI (bit 57) and PCLMULQDQ (bit 33), the value openssl's own documentation uses.
#[cfg(not(target_arch = "aarch64"))]
pub const HARDWARE_AES_OFF: HardwareAesOff = HardwareAesOff {
    var: "OPENSSL_ia32cap",
    mask: "~0x200000200000000",
    aes_bit: 1 << 57,
};

/// 64-bit ARM: ARMV8_AES (bit 2) and ARMV8_PMULL (bit 5) of AWS-LC's `arm_arch.h`, so AES
/// and GHASH fall back to NEON code, as on x86 to vector-permute code.
#[cfg(target_arch = "aarch64")]
pub const HARDWARE_AES_OFF: HardwareAesOff = HardwareAesOff {
    var: "OPENSSL_armcap",
    mask: "~0x24",
    aes_bit: 1 << 2,
};

/// Kernel crypto algorithms whose serving driver the reports name.
pub const KERNEL_ALGORITHMS: [&str; 4] = ["cbc(aes)", "hmac(sha256)", "gcm(aes)", "rfc4106(gcm(aes))"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub hostname: String,
    pub kernel_release: String,
    pub cpu_model: String,
    pub cpus: usize,
    /// The subset of [`CRYPTO_FLAGS`] (or, on ARM, [`arm::CRYPTO_FEATURES`]) this CPU has.
    pub crypto_flags: Vec<String>,
    /// Algorithm → highest-priority driver in /proc/crypto (what the kernel would pick now).
    /// Empty where the kernel has not instantiated that algorithm yet.
    pub kernel_drivers: BTreeMap<String, String>,
    /// Where the run happened: "host", or "vm (kvm)" / "vm (tcg: emulated, speeds not
    /// representative)", or "qemu-user (aarch64 emulated on an x86_64 kernel, ...)".
    pub virtualization: String,
    pub tool_version: String,
    /// How the binary that measured was built (reports written before it existed lack it).
    #[serde(default)]
    pub build: BuildInfo,
}

/// What `ipsec-lab --version` says: the commit, the build profile and the crypto libraries'
/// versions. The binary knows them at compile time and hands them in with [`BuildInfo::set`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    pub commit: String,
    /// "release" or "debug".
    pub profile: String,
    /// "aws-lc-rs 1.19.0, aes 0.9.4, ...", as locked in Cargo.lock.
    pub crypto_libraries: String,
}

static BUILD: std::sync::OnceLock<BuildInfo> = std::sync::OnceLock::new();

impl BuildInfo {
    /// Records this binary's build for every [`Environment::detect`] after it (the first call wins).
    pub fn set(info: BuildInfo) {
        let _ = BUILD.set(info);
    }

    /// The recorded build, or an empty one where the binary did not set it (library tests).
    pub fn current() -> BuildInfo {
        BUILD.get().cloned().unwrap_or_default()
    }
}

impl Environment {
    /// One host's conditions in a line: where it ran, its name, kernel, CPUs and their
    /// crypto flags. The name is quoted and said to be one: a host named "vm" read as
    /// "vm (host)" is easily taken for a VM.
    pub fn describe(&self) -> String {
        let place = match self.virtualization.as_str() {
            "host" => format!("host {:?}", self.hostname),
            virt => match virt.strip_prefix("vm ") {
                Some(how) => format!("a VM {how}, hostname {:?}", self.hostname),
                None => format!("{virt}, hostname {:?}", self.hostname),
            },
        };
        format!(
            "{place}, kernel {}, {}, {} [{}]",
            self.kernel_release,
            crate::plural(self.cpus, "CPU"),
            self.cpu_model,
            self.crypto_flags_text()
        )
    }

    pub fn detect() -> Environment {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let crypto = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
        let mut cpu = parse_cpuinfo(&cpuinfo);
        let emulation = user_emulation(&read_trimmed("/proc/sys/kernel/arch"), std::env::consts::ARCH);
        if emulation.is_some() {
            // /proc/cpuinfo describes the host's CPU, not the one this binary runs on.
            cpu = CpuInfo {
                model: format!("{} emulated on {}", std::env::consts::ARCH, cpu.model),
                crypto_flags: arm::this_cpus_features(),
            };
        }
        Environment {
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            kernel_release: kernel_release(),
            cpu_model: cpu.model,
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            crypto_flags: cpu.crypto_flags,
            kernel_drivers: preferred_drivers(&parse_proc_crypto(&crypto), &KERNEL_ALGORITHMS),
            virtualization: std::env::var("IPSEC_LAB_VIRT")
                .ok()
                .or(emulation)
                .unwrap_or_else(|| "host".into()),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            build: BuildInfo::current(),
        }
    }

    /// The CPU's crypto flags as a report lists them. In user-mode Linux they are the host
    /// CPU's: its processes use them, its kernel (generic C drivers only) does not.
    pub fn crypto_flags_text(&self) -> String {
        let flags = self.crypto_flags.join(" ");
        match self.is_uml() && !flags.is_empty() {
            true => format!("{flags}; userspace only, the UML kernel uses none"),
            false => flags,
        }
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.crypto_flags.iter().any(|f| f == flag)
    }

    /// True in user-mode Linux: real speed, of its one CPU and generic C crypto.
    pub fn is_uml(&self) -> bool {
        self.virtualization.starts_with("uml")
    }

    /// True when the numbers come from an emulated CPU and say nothing about speed.
    pub fn is_emulated(&self) -> bool {
        self.virtualization.contains("tcg") || self.virtualization.starts_with("qemu-user")
    }
}

/// Where this binary's architecture is not its kernel's (`/proc/sys/kernel/arch`, which
/// qemu-user passes through unchanged, unlike uname): the label of a process that qemu-user
/// emulates, as binfmt_misc runs an arm64 binary on an x86-64 machine.
fn user_emulation(kernel_arch: &str, binary_arch: &str) -> Option<String> {
    (!kernel_arch.is_empty() && kernel_arch != binary_arch).then(|| {
        format!("qemu-user ({binary_arch} emulated on an {kernel_arch} kernel: speeds not representative)")
    })
}

/// The running kernel's release (`uname -r`), or empty where /proc says nothing.
pub fn kernel_release() -> String {
    read_trimmed("/proc/sys/kernel/osrelease")
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    pub model: String,
    pub crypto_flags: Vec<String>,
}

pub fn parse_cpuinfo(text: &str) -> CpuInfo {
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    if let Some((model, crypto_flags)) = arm::parse_cpuinfo(&field) {
        return CpuInfo { model, crypto_flags };
    }
    let flags = field("flags").unwrap_or_default();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    CpuInfo {
        model: field("model name").unwrap_or_else(|| "unknown".into()),
        crypto_flags: CRYPTO_FLAGS
            .iter()
            .filter(|f| flags.contains(f))
            .map(|f| f.to_string())
            .collect(),
    }
}

/// One entry of /proc/crypto.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CryptoEntry {
    pub name: String,
    pub driver: String,
    pub module: String,
    pub priority: i32,
    pub selftest_passed: bool,
    pub kind: String,
}

pub fn parse_proc_crypto(text: &str) -> Vec<CryptoEntry> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut e = CryptoEntry {
            name: String::new(),
            driver: String::new(),
            module: String::new(),
            priority: 0,
            selftest_passed: true,
            kind: String::new(),
        };
        for line in block.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.trim() {
                "name" => e.name = v.into(),
                "driver" => e.driver = v.into(),
                "module" => e.module = v.into(),
                "priority" => e.priority = v.parse().unwrap_or(0),
                "selftest" => e.selftest_passed = v == "passed",
                "type" => e.kind = v.into(),
                _ => {}
            }
        }
        if !e.name.is_empty() {
            out.push(e);
        }
    }
    out
}

/// For each algorithm, the driver the kernel picks: the highest priority that passed its
/// self-test.
pub fn preferred_drivers(entries: &[CryptoEntry], algorithms: &[&str]) -> BTreeMap<String, String> {
    algorithms
        .iter()
        .filter_map(|alg| {
            entries
                .iter()
                .filter(|e| e.name == *alg && e.selftest_passed)
                .max_by_key(|e| e.priority)
                .map(|e| (alg.to_string(), e.driver.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: "measured on vm (host)" for a host named vm read as "in a VM".
    #[test]
    fn the_description_tells_the_hostname_from_where_it_ran() {
        let mut env = Environment::detect();
        env.hostname = "vm".into();
        env.virtualization = "host".into();
        let text = env.describe();
        assert!(text.starts_with("host \"vm\", kernel "), "{text}");
        env.hostname = "guest".into();
        env.virtualization = "vm (tcg: emulated, speeds not representative)".into();
        let text = env.describe();
        assert!(
            text.starts_with("a VM (tcg: emulated, speeds not representative), hostname \"guest\", kernel "),
            "{text}"
        );
    }

    #[test]
    fn a_uml_guest_does_not_call_the_host_cpus_flags_its_kernels() {
        let mut env = Environment::detect();
        env.crypto_flags = vec!["aes".into(), "avx2".into()];
        env.virtualization = "host".into();
        assert_eq!(env.crypto_flags_text(), "aes avx2");
        env.virtualization = "uml (user-mode Linux: native speed, 1 CPU, generic C crypto)".into();
        assert_eq!(
            env.crypto_flags_text(),
            "aes avx2; userspace only, the UML kernel uses none"
        );
        assert!(
            env.describe().contains("[aes avx2; userspace only"),
            "{}",
            env.describe()
        );
    }

    const CRYPTO: &str = "name         : cbc(aes)\ndriver       : cbc(aes-generic)\nmodule       : kernel\npriority     : 100\nrefcnt       : 1\nselftest     : passed\ntype         : skcipher\n\nname         : cbc(aes)\ndriver       : cbc-aes-aesni\nmodule       : aesni_intel\npriority     : 400\nselftest     : passed\ntype         : skcipher\n\nname         : hmac(sha256)\ndriver       : hmac(sha256-avx2)\nmodule       : kernel\npriority     : 170\nselftest     : passed\ntype         : shash\n";

    #[test]
    fn highest_priority_driver_wins() {
        let entries = parse_proc_crypto(CRYPTO);
        assert_eq!(entries.len(), 3);
        let d = preferred_drivers(&entries, &KERNEL_ALGORITHMS);
        assert_eq!(d["cbc(aes)"], "cbc-aes-aesni");
        assert_eq!(d["hmac(sha256)"], "hmac(sha256-avx2)");
        assert!(!d.contains_key("gcm(aes)"));
    }

    #[test]
    fn reports_from_before_the_build_field_still_read() {
        let old = r#"{"hostname":"h","kernel_release":"6.1","cpu_model":"c","cpus":2,"crypto_flags":[],
            "kernel_drivers":{},"virtualization":"host","tool_version":"0.1.0"}"#;
        let env: Environment = serde_json::from_str(old).unwrap();
        assert_eq!(env.build, BuildInfo::default());
        let new = serde_json::to_value(Environment {
            build: BuildInfo {
                commit: "abc".into(),
                profile: "release".into(),
                crypto_libraries: "aws-lc-rs 1.19.0".into(),
            },
            ..env
        })
        .unwrap();
        assert_eq!(new["build"]["commit"], "abc");
        assert_eq!(new["build"]["profile"], "release");
    }

    #[test]
    fn cpu_flags_are_filtered_to_crypto_ones() {
        let info = parse_cpuinfo(
            "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 aes avx2 sha_ni vaes\n",
        );
        assert_eq!(info.model, "AMD EPYC");
        assert_eq!(info.crypto_flags, ["aes", "vaes", "sha_ni", "avx2"]);
    }

    #[test]
    fn a_binary_of_another_architecture_than_its_kernel_is_emulated() {
        assert_eq!(user_emulation("x86_64", "x86_64"), None);
        assert_eq!(
            user_emulation("", "aarch64"),
            None,
            "a kernel without kernel.arch"
        );
        let virt = user_emulation("x86_64", "aarch64").unwrap();
        assert_eq!(
            virt,
            "qemu-user (aarch64 emulated on an x86_64 kernel: speeds not representative)"
        );
        let mut env = Environment::detect();
        env.virtualization = virt;
        assert!(env.is_emulated());
        assert!(
            env.describe().starts_with("qemu-user (aarch64 emulated"),
            "{}",
            env.describe()
        );
    }

    /// Raspberry Pi 4 (BCM2711), Raspberry Pi OS 64-bit: no crypto extensions at all.
    const PI4: &str = include_str!("env/fixtures/cpuinfo-pi4");
    /// Raspberry Pi 5 (BCM2712): Cortex-A76 with AES, PMULL, SHA-1 and SHA-2.
    const PI5: &str = include_str!("env/fixtures/cpuinfo-pi5");
    /// AWS Graviton2 (m6g), Debian 12: Neoverse-N1, no board line.
    const GRAVITON2: &str = include_str!("env/fixtures/cpuinfo-graviton2");
    /// AWS Graviton3 (c7g): Neoverse-V1, SHA-512 and SVE beside the rest.
    const GRAVITON3: &str = include_str!("env/fixtures/cpuinfo-graviton3");

    #[test]
    fn a_raspberry_pi_4_is_named_and_has_no_crypto_extensions() {
        let cpu = parse_cpuinfo(PI4);
        assert_eq!(cpu.model, "Raspberry Pi 4 Model B Rev 1.4, ARM Cortex-A72");
        assert_eq!(cpu.crypto_flags, ["asimd"]);
    }

    #[test]
    fn a_raspberry_pi_5_has_the_crypto_extensions() {
        let cpu = parse_cpuinfo(PI5);
        assert_eq!(cpu.model, "Raspberry Pi 5 Model B Rev 1.0, ARM Cortex-A76");
        assert_eq!(cpu.crypto_flags, ["aes", "pmull", "sha1", "sha2", "asimd"]);
    }

    #[test]
    fn gravitons_are_named_by_their_core() {
        let cpu = parse_cpuinfo(GRAVITON2);
        assert_eq!(cpu.model, "ARM Neoverse-N1");
        assert_eq!(cpu.crypto_flags, ["aes", "pmull", "sha1", "sha2", "asimd"]);
        assert_eq!(parse_cpuinfo(GRAVITON3).model, "ARM Neoverse-V1");
    }

    #[test]
    fn an_unknown_core_is_named_by_its_ids() {
        let cpu = parse_cpuinfo(
            "processor\t: 0\nFeatures\t: fp asimd aes\nCPU implementer\t: 0x61\nCPU part\t: 0x022\n",
        );
        assert_eq!(cpu.model, "ARM CPU implementer 0x61 part 0x022");
        assert_eq!(cpu.crypto_flags, ["aes", "asimd"]);
    }
}
