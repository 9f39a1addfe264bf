//! The lab's traffic: a sender and a receiver that move a seeded pseudo-random payload over
//! TCP and verify every byte, with time measured at the receiver (first byte to last) and
//! the CPU time of each side.
//!
//! Runs on whatever thread calls it, in whatever network namespace that thread is in; leaves
//! out topology, tunnels and printing. Memory stays flat: nothing holds the whole payload.

pub mod payload;
pub mod transfer;

pub use payload::{PayloadGenerator, Verifier, VerifyError};
pub use tokio_util::sync::CancellationToken;
pub use transfer::{send, Progress, Receiver, TrafficError, TransferConfig};
