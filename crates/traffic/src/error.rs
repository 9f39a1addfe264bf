//! What a transfer reports when it fails: below both the stream set-up ([`crate::transfer`])
//! and the blocking payload loop ([`crate::bulk`]).

use std::net::SocketAddr;

use crate::payload::VerifyError;

/// Connections from other addresses a receiver closes before giving up on the transfer.
pub(crate) const MAX_FOREIGN_CONNECTIONS: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    #[error("{action} {peer}: {source}")]
    Io {
        action: &'static str,
        peer: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{action} {peer}: nothing happened for {seconds} s (is the path between the ends up?)")]
    Timeout {
        action: &'static str,
        peer: SocketAddr,
        seconds: u64,
    },
    #[error("verification failed: {0}")]
    Verify(#[from] VerifyError),
    #[error("bad stream header from {peer}: {reason}")]
    Header { peer: SocketAddr, reason: String },
    #[error("stream from {peer} is of version {got}; this ipsec-lab speaks version {supported} (the payload's format differs): use the same release on both ends")]
    Version {
        peer: SocketAddr,
        got: u16,
        supported: u16,
    },
    #[error("receiver {local}: more than {MAX_FOREIGN_CONNECTIONS} connections from addresses other than the run's peer (the last from {peer})")]
    Foreign { local: SocketAddr, peer: SocketAddr },
    #[error("interrupted")]
    Cancelled,
    /// The runtime that drives the streams could not be made (out of descriptors: EMFILE).
    /// Not a `#[source]`: the message says it, and a source would say it again in `{:#}`.
    #[error("starting the transfer's event loop: {0}")]
    Runtime(std::io::Error),
}
