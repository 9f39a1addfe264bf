//! The lab's traffic: a sender and a receiver that move a seeded pseudo-random payload over
//! TCP and verify every byte, with time measured at the receiver (first byte to last) and
//! the CPU time of each side. A transfer is of a given size, or timed (`--time`: the
//! sender stops at a deadline and closes each stream with the count it sent); its verified
//! bytes are tallied per slice of a timeline (`--interval`, `--omit`). UDP trials (`--udp`:
//! datagrams each verified on their own, loss, reordering, jitter) are [`udp`]. `--find-ndr`'s search
//! for the highest rate within a loss tolerance is [`ndr`], generic over the trial it runs.
//!
//! Runs on whatever thread calls it, in whatever network namespace that thread is in; leaves
//! out topology, tunnels and printing. Memory stays flat: nothing holds the whole payload.
//! Round trips (`--latency`) are measured by a UDP prober and echo responder ([`latency`]).

mod bulk;
mod error;
pub mod fine;
pub mod interval;
pub mod latency;
pub mod ndr;
pub mod payload;
pub mod transfer;
pub mod udp;

pub use interval::{Interval, Tally, Timeline};
pub use payload::{PayloadGenerator, TimedVerifier, Verifier, VerifyError};
pub use tokio_util::sync::CancellationToken;
pub use transfer::{send, Progress, Receiver, TrafficError, TransferConfig};
