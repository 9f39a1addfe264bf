//! A multi-queue tunnel end: one TUN device with N queues (`IFF_MULTI_QUEUE`), one thread per
//! queue. The kernel spreads the flows leaving the device over its queues by flow hash, and
//! keeps a flow on the queue its packets last arrived through. Queue i owns its queue fd, a
//! UDP socket on port `base + i` connected to the peer's port `base + i`, and an endpoint
//! sending from queue i's packet-id space: a datagram reaches exactly one thread on the
//! other side (the one whose socket is connected to its 4-tuple), whose replay window sees
//! one sender's sequence.
//!
//! Why a port pair per queue and not N sockets on one port with `SO_REUSEPORT`: in a
//! reuseport group that holds connected sockets the kernel does not hash, it takes the
//! best-scoring socket, and N sockets connected to the same peer score the same, so one of
//! them would get every datagram.
//!
//! Leaves out: the loop each thread runs (`event_loop`), the id spaces (`tunnel-proto`).

use netns::Namespace;
use tunnel_proto::{Endpoint, MAX_QUEUES};

use crate::config::{TunnelConfig, TunnelError};
use crate::control::KeyControl;
use crate::stats::TunnelStats;
use crate::Tunnel;

/// The queues of one end, each a [`Tunnel`] thread; dropping it stops them all.
pub struct MultiQueue {
    queues: Vec<Tunnel>,
}

impl MultiQueue {
    /// Starts one thread per `(endpoint, cpu)`, queue i on ports `config.local.port() + i`
    /// and `config.peer.port() + i`. One queue is a single-queue device of its own, exactly
    /// [`Tunnel::start`]; with more, queue i's endpoint must come from
    /// [`Endpoint::for_queue`] with `i`. Returns once every queue is up, or with the first
    /// error after stopping those already started (the device goes with the last of them).
    pub fn start(
        ns: &Namespace,
        config: TunnelConfig,
        queues: Vec<(Endpoint, Option<usize>)>,
    ) -> Result<MultiQueue, TunnelError> {
        let n = queues.len();
        let refuse = |why: String| TunnelError::Setup {
            step: format!("{n} queues"),
            tun: config.tun_name.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
        };
        if n == 0 || n > MAX_QUEUES {
            return Err(refuse(format!("a TUN device has 1 to {MAX_QUEUES} queues")));
        }
        let last_port = |p: u16| u32::from(p) + n as u32 - 1;
        if last_port(config.local.port()) > 65_535 || last_port(config.peer.port()) > 65_535 {
            return Err(refuse("the queues' UDP ports run past 65535".into()));
        }
        let mut started: Vec<Tunnel> = Vec::with_capacity(n);
        let mut batching = config.batching;
        for (i, (endpoint, cpu)) in queues.into_iter().enumerate() {
            let mut c = config.clone();
            c.local.set_port(config.local.port() + i as u16);
            c.peer.set_port(config.peer.port() + i as u16);
            c.cpu = cpu;
            c.queue = (n > 1).then_some(i as u16);
            // Later queues take what the kernel granted the first.
            c.batching = batching;
            let tunnel = Tunnel::start(ns, c, endpoint)?;
            batching = tunnel.batching();
            started.push(tunnel);
        }
        Ok(MultiQueue { queues: started })
    }

    pub fn len(&self) -> usize {
        self.queues.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The key commands of every queue, in queue order: each step goes to all of them.
    pub fn keys(&self) -> KeyControl {
        KeyControl::join(self.queues.iter().map(Tunnel::keys))
    }

    /// Stops every queue and returns their statistics in queue order, or the first error
    /// (every thread is stopped and joined either way).
    pub fn stop(self) -> Result<Vec<TunnelStats>, TunnelError> {
        let results: Vec<_> = self.queues.into_iter().map(Tunnel::stop).collect();
        results.into_iter().collect()
    }
}
