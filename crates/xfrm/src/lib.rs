//! Kernel IPsec for the lab: typed SA and policy specs ([`config`]), their netlink XFRM
//! messages laid out byte for byte as iproute2 sends them ([`message`]), an async
//! [`XfrmHandle`] that executes them inside one network namespace, and a capability
//! [`probe`](probe::probe) that finds out whether the kernel has ESP and which crypto
//! drivers serve each algorithm. [`batch`] sends many requests per socket write and
//! matches each ack to its request (for timing installs). [`driver`] makes one `cbc(aes)` driver serve the next SAs
//! for a driver sweep and names the driver that served one.
//!
//! Everything the lab installs is recognisable ([`range`]): SAs use reqids and SPIs from
//! ranges the lab owns, policies carry templates with those reqids, and
//! [`XfrmHandle::clean_lab`] removes only those. Keys come from the OS RNG, are wiped on
//! drop and never appear in `Debug` output.
//!
//! Leaves out: namespaces and links (`netns`), traffic (`traffic`), and which SAs a run
//! needs (crate `lab`'s xfrm backend).

pub mod batch;
pub mod config;
pub mod crypto_user;
pub mod driver;
pub mod encap;
pub mod error;
pub mod handle;
pub mod message;
pub mod pcrypt;
pub mod probe;
pub mod range;

pub use batch::{Batch, BatchOutcome, Prepared, Refused};
pub use config::{
    AuthTrunc, IpProto, KernelAlgorithm, KeyInput, PerCpu, PolicyDirection, PolicyId, PolicySpec, Prefix,
    Protection, SaDirection, SaId, SaSpec, Secret, SpecError, Template, TrafficSelector, LAB_REPLAY_WINDOW,
};
pub use encap::{EspInUdpSocket, UdpEncap};
pub use error::{Operation, XfrmError};
pub use handle::{
    lab_algorithms, CleanCounts, InstalledAlgorithm, PolicyInfo, SaCounters, SaInfo, XfrmHandle,
};
pub use probe::{probe, AlgorithmReport, Availability, Capabilities};
pub use range::{ReqId, RunIds, Spi, LAB_POLICY_PRIORITY};
