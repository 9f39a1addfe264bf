//! The thread of one tunnel end: its set-up (CPU pinning, the connected UDP socket, the TUN
//! device, which batching the kernel grants), then one loop that runs the send path and the
//! receive path in turn until both are idle, and only then sleeps in `poll` on the TUN
//! device, the socket and the control's eventfd. Between batches it serves key commands
//! (`control`: install the next epoch, switch sending, retire the previous) on its endpoint,
//! which no other thread touches. One thread per end by default: the lab shows the
//! single-core limit of userspace tunnels. A multi-queue end runs one such loop per queue,
//! each with its own queue fd, socket and endpoint, sharing nothing.
//!
//! Leaves out: what each path does (`send`, `receive`), the thread's start, stop and key
//! commands from outside ([`crate::Tunnel`], `control`), the counters' meaning (`stats`).

use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use procstat::CpuTime;
use tunnel_proto::{Endpoint, InnerAddresses};

use crate::config::{Batching, TunnelConfig, TunnelError};
use crate::control::{CloseOnExit, Control};
use crate::cpu::pin_current_thread;
use crate::receive::ReceivePath;
use crate::send::SendPath;
use crate::stats::{Phase, TunnelStats};
use crate::tun::Tun;
use udpbatch::Udp;

const SOCKET_BUFFER: usize = 8 << 20;
const TXQUEUELEN: u32 = 1000;

/// The thread's state: its device, its socket, its endpoint, its two paths and its counts.
pub(crate) struct Loop {
    tun_name: String,
    tun: Tun,
    udp: Udp,
    endpoint: Endpoint,
    /// What may pass: peer → this end in, this end → peer out.
    inner: InnerAddresses,
    send: SendPath,
    receive: ReceivePath,
    stats: TunnelStats,
}

impl Loop {
    /// Sets up the end in the calling thread (pinned, in its namespace). Asks for
    /// `config.batching` and takes less where the kernel refuses: no UDP GRO means mmsg, a
    /// TUN device refusing offload means GSO.
    pub fn set_up(config: TunnelConfig, endpoint: Endpoint) -> Result<Loop, TunnelError> {
        let setup = |step: String, source| TunnelError::Setup {
            step,
            tun: config.tun_name.clone(),
            source,
        };
        let inner = InnerAddresses::new(config.inner, config.peer_inner).map_err(|source| {
            TunnelError::InnerAddresses {
                tun: config.tun_name.clone(),
                source,
            }
        })?;
        if let Some(cpu) = config.cpu {
            pin_current_thread(cpu).map_err(|e| setup(format!("pin thread to CPU {cpu}"), e))?;
        }
        let mut udp = Udp::bind(config.local, config.peer, SOCKET_BUFFER)
            .map_err(|e| setup(format!("UDP socket {}", config.local), e))?;
        let mut batching = match config.batching {
            Batching::Gso | Batching::Offload if udp.enable_offload() => config.batching,
            _ => Batching::Mmsg,
        };
        let create = |vnet| {
            match config.queue {
                None => Tun::create(&config.tun_name, vnet),
                Some(_) => Tun::create_queue(&config.tun_name, vnet),
            }
            .map_err(|e| setup("create TUN device".into(), e))
        };
        // Queues after the first attach to a device queue 0 created, configured and chose the
        // offload of: the caller passes that choice on, and it is not asked again.
        let attaching = config.queue.is_some_and(|i| i > 0);
        let tun = if batching == Batching::Offload && attaching {
            create(true)?
        } else if batching == Batching::Offload {
            let tun = create(true)?;
            match tun.enable_tso() {
                Ok(()) => tun,
                Err(_) => {
                    // The kernel refuses TUN offload: the same device without headers.
                    drop(tun);
                    batching = Batching::Gso;
                    create(false)?
                }
            }
        } else {
            create(false)?
        };
        if !attaching {
            tun.configure(config.inner, config.prefix_len, config.inner_mtu, TXQUEUELEN)
                .map_err(|e| setup(format!("configure {}/{}", config.inner, config.prefix_len), e))?;
        }
        // Queue 0 of a multi-queue device steers by port; where the kernel refuses, its own
        // flow hash spreads the flows (and the stats say so).
        let steering = match config.queue {
            Some(0) => Some(crate::steer::steer_by_port(tun.as_raw_fd()).map_err(|e| e.to_string())),
            _ => None,
        };
        let tun_offload = batching == Batching::Offload;
        Ok(Loop {
            send: SendPath::new(config.inner_mtu, &endpoint, tun_offload),
            receive: ReceivePath::new(batching != Batching::Mmsg, tun_offload),
            stats: TunnelStats::new(
                config.tun_name.clone(),
                endpoint.implementation().info(),
                batching,
                config.inner_mtu,
                config.cpu,
                config.queue,
                steering,
            ),
            tun_name: config.tun_name,
            tun,
            udp,
            endpoint,
            inner,
        })
    }

    /// Moves packets both ways until `stop` is requested; returns what it did. The TUN
    /// device and the socket close when it returns.
    /// What set-up got from the kernel (GSO may still fall back to mmsg while running).
    pub fn batching(&self) -> Batching {
        self.stats.batching
    }

    pub fn run(self, control: &Control) -> Result<TunnelStats, TunnelError> {
        // However the loop ends, key commands are refused from then on, not left waiting.
        let _closed = CloseOnExit(control);
        let Loop {
            tun_name,
            tun,
            mut udp,
            mut endpoint,
            inner,
            mut send,
            mut receive,
            mut stats,
        } = self;
        let io_error = |during, source| TunnelError::Io {
            during,
            tun: tun_name.clone(),
            source,
        };
        let cpu0 = CpuTime::this_thread();
        let run_queue0 = procstat::run_queue_wait_s();
        let t0 = Instant::now();
        stats.start_timing();
        let pollfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [
            pollfd(tun.as_raw_fd()),
            pollfd(udp.as_raw_fd()),
            pollfd(control.wake_fd()),
        ];
        while !control.stop_requested() {
            // Key commands between batches: one relaxed load when there are none.
            if control.pending() {
                control.serve(&mut endpoint, || stats.key_switches += 1);
            }
            // Work until both sides are empty, only then sleep: under load `poll` is skipped.
            let from_tun = send
                .pump(&tun, &mut udp, &mut endpoint, &inner, &mut stats)
                .map_err(|e| io_error("read TUN", e))?;
            let from_net = receive
                .pump(&tun, &udp, &mut endpoint, &inner, &mut stats)
                .map_err(|e| io_error("receive UDP", e))?;
            if from_tun == 0 && from_net == 0 {
                stats.lap(Phase::Other);
                // SAFETY: fds is a valid array of 3 pollfd for the duration of the call.
                let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
                if rc < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(io_error("poll", e));
                    }
                } else if fds[2].revents & libc::POLLIN != 0 {
                    // A stop or a command: the flags say which, checked at the loop's top.
                    control.drain_wake();
                }
                stats.lap(Phase::Idle);
            }
        }
        stats.lap(Phase::Other);
        stats.time.run_queue_s = procstat::run_queue_wait_s()
            .zip(run_queue0)
            .map(|(end, start)| end - start);
        if !udp.uses_gso() {
            // GSO was refused (or never on). TUN offload, if on, stays: it does not need it.
            stats.batching = Batching::Mmsg;
        }
        stats.cpu = CpuTime::this_thread().since(cpu0);
        stats.wall_s = t0.elapsed().as_secs_f64();
        Ok(stats)
    }
}
