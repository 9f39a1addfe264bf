//! The lab's orchestration: what `ipsec-lab run`, `matrix`, `serve` and `run --peer` share.
//!
//! # Layout
//!
//! (filled in as the move settles)

pub mod backend;
pub mod child;
pub mod clean;
pub mod error;
pub mod local;
pub mod progress;
pub mod reference;
pub mod remote;
pub mod signal;
pub mod sweep;
pub mod vm;

pub use error::{require_net_admin, ExitKind, LabError, LabResult};
