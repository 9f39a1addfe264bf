//! The lab's orchestration: what `ipsec-lab run`, `matrix`, `serve` and `run --peer` share.
//! The binary parses arguments into a plan, makes one call here and prints what comes back.
//!
//! # Layout
//!
//! * [`backend`]: what carries the payload. A backend starts ONE end ([`backend::End`]) at a
//!   [`backend::Site`] from the run's [`backend::RunSecrets`]; a local run starts two, a
//!   two-host run one on each host. One module per backend (`xfrm`, `userspace`,
//!   `openvpn`, `strongswan`, `wireguard` with its kernel, wireguard-go and boringtun ends;
//!   plain needs none), each with its preflight and its evidence. What a backend can do
//!   (suites, placements, options, whose CPU, the ceiling's source) is not written here but
//!   read from its `model::backend::Description`; its evidence types are `model::evidence`'s.
//! * [`ceiling`]: each tunnel row's crypto ceiling, timed after its transfers with the
//!   implementation it used, at the packet size it sent.
//! * [`session`]: one verified transfer's configuration, idle timeout and record.
//! * [`flow`]: the data of one local transfer, one way or both (`--reverse`, `--bidir`),
//!   of a size or timed (`--time`), reported per interval (`--interval`, `--omit`), with
//!   the tunnel's own CPU per interval ([`tunnel_cpu`]); [`flow::Bench`] is what a local
//!   run's steps share (the topology, the cancellation, the progress watcher).
//! * [`local`]: a run between two namespaces of this host (`ipsec-lab run`).
//! * [`remote`]: two-host runs: the [`remote::client`] (`run --peer`) and the
//!   [`remote::server`] (`serve`, its shutdown handed in as a future), with what both
//!   derive from the control connection (addresses, MTU, the tunnel network).
//! * [`sweep`]: every backend × every suite (`ipsec-lab matrix`), with its child runs (soft
//!   AES, the VM).
//! * [`speed`]: `ipsec-lab speed`'s rows timed elsewhere (soft AES in a child, the kernel's
//!   in a VM); the measuring is crate `speed`'s.
//! * [`vm`]: a virtme-ng guest booting a stock kernel, running this binary again on the
//!   plan it is handed as a file (`run --plan-file`).
//! * [`child`]: the one way to run this binary elsewhere (a child with hardware AES
//!   masked, a VM guest) and read its report back: its validated plan written as JSON for
//!   it (never re-assembled arguments), recorded for `clean`, Ctrl-C passed on, a timeout,
//!   one mapping of its exit code.
//! * [`netem`]: `--netem`, WAN conditions on the lab's link (both veth ends), read back and
//!   its round trip measured.
//! * [`packets`]: UDP trials (`--udp`), the zero-loss search (`--find-ndr`) and round-trip
//!   probes (`--latency`) over a local run's data path.
//! * [`reference`]: iperf3 over the lab's own data path.
//! * [`rekey`]: `--rekey-every`'s thread, replacing a backend's keys on schedule while a
//!   transfer runs (what a rekey does is the backend's: `backend::xfrm::rekey`).
//! * [`setup_rate`]: `setup-rate`, XFRM SAs and policies installed per second as the
//!   tables grow, in user-mode Linux; strongSwan's IKE_SAs and wireguard-go's peers and
//!   handshakes per second (their protocol work in `backend::strongswan::rate` and
//!   `backend::wireguard::rate`).
//! * [`clean`]: removing what killed runs recorded, and nothing else.
//! * Leaves: [`error`] (one error type, one mapping to exit codes), [`log`] (stderr lines
//!   that survive a closed stderr), [`signal`] (SIGINT and
//!   SIGTERM as cancellation), [`progress`] (what a run reports while it works; the binary
//!   draws it).
//!
//! Leaves out: clap and anything printed for the user (the binary), the wire protocol
//! (crate `control`), the kernel interfaces (crates `netns`, `xfrm`, `tunnel`) and the
//! measurement of bytes (crate `traffic`).

pub mod backend;
pub mod ceiling;
pub mod child;
pub mod clean;
pub mod error;
pub mod flow;
pub mod local;
pub mod log;
pub mod netem;
pub mod packets;
pub mod progress;
pub mod reference;
pub mod rekey;
pub mod remote;
pub mod session;
pub mod setup_rate;
pub mod signal;
pub mod speed;
pub mod sweep;
pub mod tunnel_cpu;
pub mod uml;
pub mod vm;

pub use error::{require_net_admin, ExitKind, LabError, LabResult};
