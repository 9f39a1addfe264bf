//! This binary's build, as `build.rs` found it: `--version` prints it and every report's
//! environment records it ([`model::env::BuildInfo`]).

use model::env::BuildInfo;

pub const COMMIT: &str = env!("IPSEC_LAB_COMMIT");
pub const PROFILE: &str = env!("IPSEC_LAB_PROFILE");
pub const CRYPTO: &str = env!("IPSEC_LAB_CRYPTO");

/// `ipsec-lab --version`: the version, then one line each for commit, profile, crypto.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("IPSEC_LAB_COMMIT"),
    "\nprofile: ",
    env!("IPSEC_LAB_PROFILE"),
    "\ncrypto: ",
    env!("IPSEC_LAB_CRYPTO"),
);

/// Hands the build to the model before anything detects an environment.
pub fn record() {
    BuildInfo::set(BuildInfo {
        commit: COMMIT.into(),
        profile: PROFILE.into(),
        crypto_libraries: CRYPTO.into(),
    });
}
