//! The bulk of a TCP stream, moved with blocking calls on the stream's own thread.
//!
//! Why not the event loop: a non-blocking read that comes back short makes tokio wait in
//! `epoll_wait` before the next one, so every read costs two system calls and a wake-up.
//! On two cores shared by sender, receiver and the kernel's TCP work, that was most of the
//! gap between the lab's plain row and iperf3's (issue 26; the two builds in turn, six runs
//! each: median 0.89 of iperf3 with the event loop, 0.97 blocking, see docs/guide.md). A
//! blocking call sleeps in the socket itself, as iperf3's do.
//!
//! What the event loop gave for free is kept two ways. A stopped side ([`Halt`]: Ctrl-C,
//! or another stream that failed) shuts its sockets down, which returns a call blocked in
//! one at once, and sets a flag every call looks at when it returns: a stream moving data
//! stops after the call under way, not when its payload is done. Silence is counted
//! against the run's idle timeout with a socket timeout of [`SLICE`].

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::TrafficError;

/// The longest one blocking call waits before looking at the clock (and the cancel token,
/// should a stop reach a stream other than through its [`Halt`]).
const SLICE: Duration = Duration::from_millis(100);

/// What stops one side's streams at once, shared by them and whoever watches the side's
/// cancel token: a flag each call looks at when it returns (an atomic load), and the
/// streams' sockets, shut down so that a call blocked in one returns now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Halt(Arc<HaltState>);

#[derive(Debug, Default)]
struct HaltState {
    stopped: AtomicBool,
    /// The open sockets' descriptors: a stream removes its own before it closes it, under
    /// the lock [`Halt::stop`] holds, so no descriptor shut down is another's reused one.
    sockets: Mutex<Vec<RawFd>>,
}

impl Halt {
    /// Stops every stream of the side, those to come included.
    pub(crate) fn stop(&self) {
        let sockets = self.0.sockets.lock().expect("halt lock");
        self.0.stopped.store(true, Ordering::Release);
        for &fd in sockets.iter() {
            shutdown(fd);
        }
    }

    fn stopped(&self) -> bool {
        self.0.stopped.load(Ordering::Acquire)
    }

    fn register(&self, fd: RawFd) {
        let mut sockets = self.0.sockets.lock().expect("halt lock");
        if self.stopped() {
            shutdown(fd);
        }
        sockets.push(fd);
    }

    fn unregister(&self, fd: RawFd) {
        self.0.sockets.lock().expect("halt lock").retain(|&s| s != fd);
    }
}

/// Both directions of the socket `fd` shut: a blocked read returns 0 and a blocked write
/// what it wrote (or EPIPE), at once.
fn shutdown(fd: RawFd) {
    // SAFETY: `fd` is an open socket: it leaves the list before its stream closes it.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// A connected stream in blocking mode, with its peer (for errors), the silence it
/// tolerates and what ends it.
pub(crate) struct BulkStream {
    socket: TcpStream,
    peer: SocketAddr,
    idle_timeout: Duration,
    stop: CancellationToken,
    halt: Halt,
}

impl Drop for BulkStream {
    fn drop(&mut self) {
        // Before the socket closes (fields drop after this).
        self.halt.unregister(self.socket.as_raw_fd());
    }
}

impl BulkStream {
    pub(crate) fn new(
        socket: TcpStream,
        peer: SocketAddr,
        idle_timeout: Duration,
        stop: CancellationToken,
        halt: Halt,
    ) -> Result<BulkStream, TrafficError> {
        let io = |source| TrafficError::Io {
            action: "set up the stream to",
            peer,
            source,
        };
        socket.set_nonblocking(false).map_err(io)?;
        socket.set_read_timeout(Some(SLICE)).map_err(io)?;
        socket.set_write_timeout(Some(SLICE)).map_err(io)?;
        halt.register(socket.as_raw_fd());
        Ok(BulkStream {
            socket,
            peer,
            idle_timeout,
            stop,
            halt,
        })
    }

    /// Reads what has arrived, waiting for at least a byte; 0 means the peer closed.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Result<usize, TrafficError> {
        let called = Instant::now();
        loop {
            match self.socket.read(buf) {
                // A stopped stream's last read is not the peer's end (shutdown returns 0).
                _ if self.halt.stopped() => return Err(TrafficError::Cancelled),
                // The peer's end may be this run's stop seen from the other side first.
                Ok(0) if self.stop.is_cancelled() => return Err(TrafficError::Cancelled),
                Ok(n) => return Ok(n),
                Err(e) => self.keep_waiting(e, called, "receive from")?,
            }
        }
    }

    /// Writes all of `buf`, or what the socket takes before `deadline`; returns the count
    /// written, which is exact: a call cut short by its timeout reports what it sent.
    pub(crate) fn write(&mut self, buf: &[u8], deadline: Option<Instant>) -> Result<usize, TrafficError> {
        let mut at = 0;
        let mut progress = Instant::now();
        let mut shortened = false;
        while at < buf.len() {
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                // Near the deadline the call must give up on it, not a slice later.
                if left < SLICE {
                    self.set_write_timeout(left)?;
                    shortened = true;
                }
            }
            match self.socket.write(&buf[at..]) {
                _ if self.halt.stopped() => return Err(TrafficError::Cancelled),
                Ok(0) => return Err(self.error("send to", ErrorKind::WriteZero.into())),
                Ok(n) => {
                    at += n;
                    progress = Instant::now();
                }
                Err(e) => self.keep_waiting(e, progress, "send to")?,
            }
        }
        // What follows the deadline (a timed stream's trailer) waits in slices again.
        if shortened {
            self.set_write_timeout(SLICE)?;
        }
        Ok(at)
    }

    fn set_write_timeout(&self, timeout: Duration) -> Result<(), TrafficError> {
        self.socket
            .set_write_timeout(Some(timeout))
            .map_err(|source| self.error("send to", source))
    }

    /// Whether a call that failed with `error` may be made again: after a timeout (a
    /// slice without progress) or a signal, unless the run was cancelled or has been
    /// silent since `quiet_since` for longer than it tolerates.
    fn keep_waiting(
        &self,
        error: std::io::Error,
        quiet_since: Instant,
        action: &'static str,
    ) -> Result<(), TrafficError> {
        match error.kind() {
            ErrorKind::Interrupted => Ok(()),
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                if self.stop.is_cancelled() || self.halt.stopped() {
                    Err(TrafficError::Cancelled)
                } else if quiet_since.elapsed() >= self.idle_timeout {
                    Err(TrafficError::Timeout {
                        action,
                        peer: self.peer,
                        seconds: self.idle_timeout.as_secs(),
                    })
                } else {
                    Ok(())
                }
            }
            // A broken connection is the run's stop when the stop came first (the other
            // side, stopped a moment earlier, closed it).
            _ if self.stop.is_cancelled() => Err(TrafficError::Cancelled),
            _ => Err(self.error(action, error)),
        }
    }

    fn error(&self, action: &'static str, source: std::io::Error) -> TrafficError {
        TrafficError::Io {
            action,
            peer: self.peer,
            source,
        }
    }

    /// Sends our FIN: the peer reads the end of the stream.
    pub(crate) fn close(&self) -> Result<(), TrafficError> {
        self.socket
            .shutdown(Shutdown::Write)
            .map_err(|source| self.error("close", source))
    }

    /// Waits until the kernel has the connection in CLOSED, i.e. the peer acknowledged our
    /// FIN after its own; gives up quietly after `limit` or when the run is cancelled (a
    /// lost ACK costs only a lingering socket).
    pub(crate) fn wait_until_closed(&self, limit: Duration) {
        const TCP_CLOSE: u8 = 7; // include/net/tcp_states.h
        let deadline = Instant::now() + limit;
        loop {
            match tcp_state(&self.socket) {
                Some(TCP_CLOSE) | None => return,
                Some(state) if Instant::now() >= deadline || self.halt.stopped() => {
                    tracing::debug!(
                        "FIN to {} not acknowledged after {limit:?} (TCP state {state})",
                        self.peer
                    );
                    return;
                }
                Some(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// The connection's TCP state as the kernel's tcp_info reports it; None if it cannot be read.
fn tcp_state(socket: &TcpStream) -> Option<u8> {
    // SAFETY: tcp_info is plain data; the kernel writes at most `len` bytes into it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(info.tcpi_state)
}
