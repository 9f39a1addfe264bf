//! The userspace tunnel's event loop: ONE thread per end, pinned to one core, owning a TUN
//! device and a UDP socket, moving every packet through [`tunnel_proto::Endpoint`]. Or, with
//! [`MultiQueue`], one such thread per queue of a multi-queue TUN device, each with its own
//! socket, port pair and packet-id space.
//!
//! The thread enters its network namespace first, so the TUN device and the socket are
//! created there. I/O is batched so that crypto, not system calls, is the limit. With
//! [`Batching::Offload`] (the default of the lab) the TUN device speaks virtio-net headers:
//! the kernel hands over TCP super-packets of up to 64 KiB, which the thread cuts into
//! wire-sized segments (`offload`) and encrypts as a batch, then sends with one `sendmsg`
//! using UDP GSO; on the way in `recvmmsg` with UDP GRO, per-datagram decryption, and
//! consecutive segments of a flow joined again so one TUN write delivers up to 64 KiB. The
//! datagrams on the wire are the same as without offload: one encrypted inner packet each.
//!
//! # Layout
//!
//! * `lib.rs`: the public face: [`Tunnel`] (start a thread, stop it, get its
//!   [`TunnelStats`], rekey it through its [`KeyControl`]).
//! * `control`: the thread's control block (stop flag, key commands, the eventfd that wakes
//!   its `poll`) and [`KeyControl`], which asks the thread to install, switch to and retire
//!   key epochs while it runs and waits for its answer.
//! * `multi`: [`MultiQueue`], N [`Tunnel`]s serving the queues of one TUN device;
//!   `steer`: the eBPF program that spreads the lab's flows over the queues by port.
//! * `event_loop`: the thread's set-up and its loop, which runs the two paths in turn and
//!   sleeps in `poll` only when both are idle.
//! * `send`: TUN → encrypt → UDP, with its own buffers.
//! * `receive`: UDP → decrypt → TUN, with its own buffers.
//! * crate `udpbatch` (shared with the UDP workload): the connected socket; batches out (GSO, or `sendmmsg` where refused) and in
//!   (`recvmmsg` with GRO, each receive split by its stride).
//! * `tun`: the TUN device. `offload`: segmenting and joining TCP, no I/O.
//! * `config`: where an end sits, how it batches, its errors. `stats`: the counters.
//!   `cpu`: pinning threads.
//!
//! Leaves out: the packet format and crypto (`tunnel-proto`, `crypto`), the namespaces and
//! veth (`netns`), and the traffic that flows through (`traffic`).

mod config;
mod control;
mod cpu;
mod event_loop;
mod multi;
pub mod offload;
mod receive;
mod send;
mod stats;
mod steer;
mod tun;

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use control::Control;
use event_loop::Loop;
use netns::Namespace;
use tunnel_proto::Endpoint;

pub use config::{inner_mtu, inner_mtu_over, largest_batch, Batching, TunnelConfig, TunnelError, BATCH};
pub use control::{KeyControl, KeyControlError, ANSWER_TIMEOUT};
pub use cpu::pin_current_thread;
pub use multi::MultiQueue;
pub use stats::{Flow, IoErrors, TunnelStats};
pub use tun::Tun;

/// A running tunnel end. [`Tunnel::stop`] ends it and returns its statistics; dropping it
/// stops it too. Either way the thread is joined and its TUN device is gone afterwards.
pub struct Tunnel {
    tun_name: String,
    batching: Batching,
    control: Arc<Control>,
    thread: Option<JoinHandle<Result<TunnelStats, TunnelError>>>,
}

impl Tunnel {
    /// Starts an end in `ns`: returns once its TUN device is up and its socket bound, or with
    /// the reason it could not be set up.
    pub fn start(ns: &Namespace, config: TunnelConfig, endpoint: Endpoint) -> Result<Tunnel, TunnelError> {
        let control = Arc::new(Control::new().map_err(|source| TunnelError::Setup {
            step: "create eventfd".into(),
            tun: config.tun_name.clone(),
            source,
        })?);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Batching, TunnelError>>();
        let tun_name = config.tun_name.clone();
        let thread_control = control.clone();
        let thread = ns.spawn(&config.thread_name(), move || {
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
            let _ = ready_tx.send(Ok(lp.batching()));
            lp.run(&thread_control)
        })?;
        let mut tunnel = Tunnel {
            tun_name: tun_name.clone(),
            batching: Batching::Mmsg,
            control,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(batching)) => {
                tunnel.batching = batching;
                Ok(tunnel)
            }
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

    /// The batching the kernel granted at set-up.
    pub fn batching(&self) -> Batching {
        self.batching
    }

    /// The thread's key commands (see [`KeyControl`]); valid while it runs, refused after.
    pub fn keys(&self) -> KeyControl {
        KeyControl::new(vec![(self.tun_name.clone(), self.control.clone())])
    }

    /// Stops the thread, waits for it, and returns what it did. Its TUN device is removed
    /// when the thread closes it.
    pub fn stop(mut self) -> Result<TunnelStats, TunnelError> {
        self.control.request_stop();
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
            self.control.request_stop();
            let _ = thread.join();
        }
    }
}
