//! `ipsec-lab speed`: crypto microbenchmarks across implementations — the lab's
//! `openssl speed -evp`, with the implementations the userspace tunnel uses (from the
//! `crypto` crate), with and without hardware AES, beside openssl itself.
//!
//! Owns the subcommand's validation ([`plan`]: a plain request → a plan), the run
//! ([`run`]: every implementation's rows into one report, progress told to a trait), the
//! timing method ([`mod@measure`]), the per-packet operations ([`ops`]), the table and JSON
//! records ([`report`]), the `openssl speed` runner ([`openssl`]), the kernel probe
//! ([`kernel`]) and the kernel's own speed test ([`tcrypt`]). Leaves the ciphers themselves to `crypto`, and the command line, the
//! progress display and the printing to the `ipsec-lab` binary.

pub mod af_alg;
pub mod kernel;
pub mod measure;
pub mod openssl;
pub mod ops;
pub mod plan;
pub mod report;
pub mod run;
pub mod stop;
pub mod suite;
pub mod tcrypt;

pub use measure::single_core_mb_per_s;
pub use plan::{Clock, Mode, SpeedImpl, SpeedPlan, SpeedRequest, UsageError, BLOCK_SIZES, SUBCOMMAND};
pub use report::{Interruption, Record, SpeedReport, Units};
pub use run::{measure, measure_with, no_soft_rows, NoProgress, SpeedProgress};
pub use suite::{CryptoOp, SpeedSuite};

#[derive(Debug, thiserror::Error)]
pub enum SpeedError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error("refusing to time a cipher that fails its known-answer tests: {0}")]
    SelfTest(#[from] crypto::SelfTestError),
    #[error("{implementation}: {source}")]
    Implementation {
        implementation: String,
        #[source]
        source: crypto::CryptoError,
    },
    #[error("{implementation} {suite}: {source}")]
    Crypto {
        implementation: String,
        suite: String,
        #[source]
        source: ops::OpError,
    },
    #[error("interrupted")]
    Interrupted,
    /// A library a row needs cannot be loaded on this machine (`--crypto libcrypto`).
    #[error("--crypto libcrypto: {0}")]
    Missing(String),
    #[error(
        "the soft rows run in a child of the ipsec-lab binary started with hardware AES masked; \
         this caller cannot start one"
    )]
    SoftElsewhere,
}

impl SpeedError {
    /// 2 for bad input (nothing was measured), 3 for a library this machine lacks (nothing
    /// was measured either), 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpeedError::Usage(_) => 2,
            SpeedError::Missing(_) => 3,
            _ => 1,
        }
    }
}

/// Refuses a plan whose rows need a library this machine cannot load, before anything is
/// started or timed.
pub fn check_available(plan: &SpeedPlan) -> Result<(), SpeedError> {
    if plan
        .implementations
        .contains(&SpeedImpl::Crypto(crypto::CryptoChoice::Libcrypto))
    {
        if let Some(why) = crypto::libcrypto::load_error() {
            return Err(SpeedError::Missing(why));
        }
    }
    Ok(())
}
