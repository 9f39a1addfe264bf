//! The userspace tunnel's event loop: ONE thread per end, pinned to one core, owning a TUN
//! device and a UDP socket, moving every packet through [`tunnel_proto::Endpoint`].
//!
//! The thread enters its network namespace first, so the TUN device and the socket are
//! created there. I/O is batched so that crypto, not system calls, is the limit. With
//! [`Batching::Offload`] (the default of the lab) the TUN device speaks virtio-net headers:
//! the kernel hands over TCP super-packets of up to 64 KiB, which the thread cuts into
//! wire-sized segments and encrypts one by one (`offload`), then sends with one `sendmsg`
//! using UDP GSO; on the way in `recvmmsg` with UDP GRO, per-datagram decryption, and
//! consecutive segments of a flow joined again so one TUN write delivers up to 64 KiB. The
//! datagrams on the wire are the same as without offload: one encrypted inner packet each.
//!
//! # Layout
//!
//! * `lib.rs`: the public face: [`Tunnel`] (start a thread, stop it, get its
//!   [`TunnelStats`]), [`TunnelConfig`], [`Batching`], [`inner_mtu`].
//! * `event_loop`: the thread's set-up and its loop, which runs the two paths in turn and
//!   sleeps in `poll` only when both are idle.
//! * `send`: TUN → encrypt → UDP, with its own buffers.
//! * `receive`: UDP → decrypt → TUN, with its own buffers.
//! * `udp`: the connected socket; batches out (GSO, or `sendmmsg` where refused) and in
//!   (`recvmmsg` with GRO, each receive split by its stride).
//! * `tun`: the TUN device. `offload`: segmenting and joining TCP, no I/O.
//! * `stats`: the counters. `cpu`: pinning and thread CPU time.
//!
//! Leaves out: the packet format and crypto (`tunnel-proto`, `crypto`), the namespaces and
//! veth (`netns`), and the traffic that flows through (`traffic`).

mod cpu;
mod event_loop;
pub mod offload;
mod receive;
mod send;
mod stats;
mod tun;
mod udp;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::thread::JoinHandle;

use event_loop::{Loop, Stop};
use model::CipherSuite;
use netns::{Namespace, NetnsError};
use serde::{Deserialize, Serialize};
use tunnel_proto::Endpoint;

pub use cpu::{pin_current_thread, ThreadCpu};
pub use stats::{Flow, IoErrors, TunnelStats};
pub use tun::Tun;

/// How datagrams leave and arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// `sendmmsg`/`recvmmsg`: one system call per batch, one trip through the stack per datagram.
    Mmsg,
    /// UDP GSO/GRO: one system call and one trip through the stack per batch of equal-sized
    /// datagrams. Falls back to [`Batching::Mmsg`] where the kernel refuses it.
    Gso,
    /// [`Batching::Gso`] plus TUN offload: TCP super-packets from the TUN device, segmented
    /// (and each segment encrypted) by the tunnel; decrypted segments joined before the TUN
    /// write. Falls back to [`Batching::Gso`] where the kernel refuses it.
    Offload,
}

/// Datagrams the send path gathers into one batch, at most.
pub const BATCH: usize = 64;

/// Largest inner (TUN) MTU whose datagrams fit a link of `link_mtu` without fragmenting:
/// link MTU less IPv4 (20) and UDP (8) headers less the suite's overhead. CBC rounds up to
/// whole blocks with at least one byte of padding, so its room is counted in blocks.
pub fn inner_mtu(link_mtu: u32, suite: CipherSuite) -> u32 {
    let room = link_mtu.saturating_sub(28);
    match suite {
        CipherSuite::AesCbc { hmac, .. } => {
            let mac = if hmac == model::Hmac::Sha256 { 32 } else { 0 };
            let ct = room.saturating_sub(8 + 16 + mac);
            (ct / 16 * 16).saturating_sub(1)
        }
        _ => room.saturating_sub(Endpoint::max_overhead(suite) as u32),
    }
}

/// Where one end of the tunnel sits.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// TUN device name (at most 15 bytes; the lab's start with `ipl`).
    pub tun_name: String,
    /// Outer address the UDP socket binds (on the veth).
    pub local: SocketAddrV4,
    /// The other end's outer address.
    pub peer: SocketAddrV4,
    /// Inner address of the TUN device, and its prefix (the kernel routes the prefix into it).
    pub inner: Ipv4Addr,
    pub prefix_len: u8,
    pub inner_mtu: u32,
    /// Core to pin the thread to; None leaves it to the scheduler (it is still one thread).
    pub cpu: Option<usize>,
    pub batching: Batching,
}

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error(transparent)]
    Namespace(#[from] NetnsError),
    #[error("{step} for tunnel {tun}: {source}")]
    Setup {
        step: String,
        tun: String,
        #[source]
        source: io::Error,
    },
    #[error("tunnel {tun}: {during}: {source}")]
    Io {
        during: &'static str,
        tun: String,
        #[source]
        source: io::Error,
    },
    #[error("tunnel thread {tun} panicked")]
    Panicked { tun: String },
}

/// A running tunnel end. [`Tunnel::stop`] ends it and returns its statistics; dropping it
/// stops it too. Either way the thread is joined and its TUN device is gone afterwards.
pub struct Tunnel {
    tun_name: String,
    stop: Arc<Stop>,
    thread: Option<JoinHandle<Result<TunnelStats, TunnelError>>>,
}

impl Tunnel {
    /// Starts an end in `ns`: returns once its TUN device is up and its socket bound, or with
    /// the reason it could not be set up.
    pub fn start(ns: &Namespace, config: TunnelConfig, endpoint: Endpoint) -> Result<Tunnel, TunnelError> {
        let stop = Arc::new(Stop::new().map_err(|source| TunnelError::Setup {
            step: "create eventfd".into(),
            tun: config.tun_name.clone(),
            source,
        })?);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), TunnelError>>();
        let tun_name = config.tun_name.clone();
        let thread_stop = stop.clone();
        let thread = ns.spawn(&config.tun_name.clone(), move || {
            let lp = match Loop::set_up(config, endpoint) {
                Ok(lp) => lp,
                Err(e) => {
                    let msg = TunnelError::Setup {
                        step: "set-up".into(),
                        tun: String::new(),
                        source: io::Error::other(e.to_string()),
                    };
                    let _ = ready_tx.send(Err(e));
                    return Err(msg);
                }
            };
            let _ = ready_tx.send(Ok(()));
            lp.run(&thread_stop)
        })?;
        let mut tunnel = Tunnel {
            tun_name: tun_name.clone(),
            stop,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(tunnel),
            Ok(Err(e)) => {
                let _ = tunnel.thread.take().map(JoinHandle::join);
                Err(e)
            }
            Err(_) => {
                let _ = tunnel.thread.take().map(JoinHandle::join);
                Err(TunnelError::Panicked { tun: tun_name })
            }
        }
    }

    pub fn tun_name(&self) -> &str {
        &self.tun_name
    }

    /// Stops the thread, waits for it, and returns what it did. Its TUN device is removed
    /// when the thread closes it.
    pub fn stop(mut self) -> Result<TunnelStats, TunnelError> {
        self.stop.request();
        let thread = self.thread.take().expect("a tunnel is stopped once");
        thread.join().unwrap_or_else(|_| {
            Err(TunnelError::Panicked {
                tun: self.tun_name.clone(),
            })
        })
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.request();
            let _ = thread.join();
        }
    }
}
