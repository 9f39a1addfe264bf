//! Typed descriptions of what the lab asks the kernel for: SAs (with their keys) and
//! policies. Only valid combinations can be built; raw protocol numbers and algorithm
//! strings stay inside this crate.
//!
//! * `selector`: which packets (prefixes, protocol, ports), shared by SAs and policies.
//! * `protection`: algorithms and keys.
//! * `sa`: one ESP SA; its mode is the plan's `model::IpsecMode`.
//! * `policy`: one policy, its direction and template.
//! * `error`: why a spec cannot be built.

mod error;
mod policy;
mod protection;
mod sa;
mod selector;

pub use error::SpecError;
pub use policy::{PolicyDirection, PolicyId, PolicySpec, Template};
pub use protection::{
    AuthTrunc, HmacSha256, KernelAlgorithm, KeyInput, Protection, Secret, GCM_ICV_BITS, GCM_SALT_BYTES,
    HMAC_SHA256_KEY_BYTES,
};
pub(crate) use sa::{mode_from_raw, mode_raw};
pub use sa::{PerCpu, SaDirection, SaId, SaSpec, LAB_REPLAY_WINDOW};
pub use selector::{IpProto, Prefix, TrafficSelector};
