//! The numbers a plan is checked against.

use crate::size::ByteSize;

/// Most queues the kernel gives one TUN device (`MAX_TAP_QUEUES`), so most tunnel threads.
pub const MAX_TUNNEL_THREADS: u16 = 256;

/// Most parallel TCP streams (`-P`).
pub const MAX_STREAMS: u16 = 128;

/// The link MTUs a run takes (`--mtu`); IPv6 needs at least 1280 of them.
pub const MIN_MTU: u32 = 576;
pub const MAX_MTU: u32 = 9000;

/// Most transfers per run (`--repeat`).
pub const MAX_REPEAT: u32 = 1000;

/// Most transfers a run may ask of an `ipsec-lab serve` started without `--max-repeat`
/// (`fleet plan` refuses more, as the fleet's servers would).
pub const DEFAULT_SERVER_MAX_REPEAT: u32 = 10;

/// TCP port `ipsec-lab serve` listens on by default.
pub const DEFAULT_PEER_PORT: u16 = 5299;

/// Smallest payload a run times. Below it the whole payload fits in the two sockets'
/// buffers, so the clock measures memory copies and scheduling rather than the data path:
/// the figure would be noise (or, for a payload read in one go, a division by zero).
pub const MIN_PAYLOAD: ByteSize = ByteSize(1_000_000);

/// Largest payload a run moves: 8 minutes of the plain row at 2 GB/s, hours in user-mode
/// Linux. Longer runs are timed (`--time`), which says up front how long they take.
pub const MAX_PAYLOAD: ByteSize = ByteSize(1_000_000_000_000);

/// Most SA pairs a run installs (`--sas`): each pair takes two of the run's 256 SPIs, and 64
/// keeps the netlink work of a run small.
pub const MAX_SA_PAIRS: u16 = 64;
