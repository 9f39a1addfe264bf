//! A UDP socket with batched system calls, for the userspace tunnel and the UDP workload.
//!
//! Callers hand over a batch of datagrams; the socket sends them with UDP GSO (`UDP_SEGMENT`:
//! one call and one trip through the stack for up to 64 equal-sized datagrams) while the
//! kernel accepts it, and falls back for good to `sendmmsg` (one call, many datagrams) the
//! first time the kernel refuses it. Receiving: `recvmmsg`, with UDP GRO (`UDP_GRO`) so the
//! kernel may hand over several datagrams coalesced into one buffer; each [`Received`] says
//! how to split it.
//!
//! The socket is bound and connected to the peer: the kernel hands over only datagrams from
//! the peer's address and port, so nobody else reaches the decryption (or, for the
//! unauthenticated suites, the host's IP stack) through it.
//!
//! Leaves out: the arithmetic of runs and strides (`batch`, no I/O), and what the datagrams
//! hold.

mod batch;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub use batch::{Received, GSO_MAX_BYTES, GSO_MAX_SEGMENTS};

/// System calls one batch took, and how many of them the socket refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendCalls {
    pub calls: u64,
    pub refused: u64,
}

pub struct Udp {
    fd: OwnedFd,
    /// Sends use UDP GSO; turns false for good when the kernel refuses it.
    gso: bool,
}

/// `a` as the kernel takes it: a `sockaddr_in` or `sockaddr_in6` in a `sockaddr_storage`,
/// with the length of the one it holds.
pub(crate) fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr type.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// `bind` or `connect` of `fd` to `addr`; the error names the step and the address.
fn with_address(
    fd: RawFd,
    addr: SocketAddr,
    call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
    step: &str,
) -> io::Result<()> {
    let (sa, len) = sockaddr(addr);
    // SAFETY: sa holds a sockaddr of `len` bytes; the call only reads it.
    let rc = unsafe { call(fd, (&sa as *const libc::sockaddr_storage).cast(), len) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{step} {addr}: {e}")));
    }
    Ok(())
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: value is a c_int on the stack, its size passed alongside.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One iovec per slice, for a call that only reads them.
fn iovecs(slices: &[&[u8]]) -> Vec<libc::iovec> {
    slices
        .iter()
        .map(|d| libc::iovec {
            iov_base: d.as_ptr().cast_mut().cast(),
            iov_len: d.len(),
        })
        .collect()
}

fn cvt(rc: libc::c_int) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

impl Udp {
    /// A socket bound to `local` (in the calling thread's namespace) and connected to `peer`:
    /// it sends only there and receives only from there. Blocking for sends (a full socket
    /// buffer waits rather than drops), receives are always non-blocking (`MSG_DONTWAIT`).
    pub fn bind(local: SocketAddr, peer: SocketAddr, buffer_bytes: usize) -> io::Result<Udp> {
        let domain = if local.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain socket(2); owned right after.
        let raw = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        // Large buffers absorb a whole batch; the *FORCE variants pass rmem_max as root, the
        // plain ones are the fallback without CAP_NET_ADMIN.
        let bytes = buffer_bytes.min(i32::MAX as usize) as libc::c_int;
        if setsockopt_int(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_err() {
            setsockopt_int(s, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes)?;
        }
        if setsockopt_int(s, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes).is_err() {
            setsockopt_int(s, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes)?;
        }
        with_address(s, local, libc::bind, "bind")?;
        with_address(s, peer, libc::connect, "connect to")?;
        Ok(Udp { fd, gso: false })
    }

    /// Asks for coalesced receives and sends (UDP GRO, and GSO, which is older: a kernel with
    /// GRO has both). False, and both off, when the kernel does not offer UDP GRO.
    pub fn enable_offload(&mut self) -> bool {
        self.gso = setsockopt_int(self.fd.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        self.gso
    }

    /// Whether sends still use GSO (false from the start, or since the kernel refused it).
    pub fn uses_gso(&self) -> bool {
        self.gso
    }

    /// Sends each slice as one datagram, in order: in GSO runs while the kernel accepts
    /// them, else with `sendmmsg`. A run the kernel refuses because of GSO itself is sent
    /// again without, and GSO stays off from then on.
    pub fn send_batch(&mut self, datagrams: &[&[u8]]) -> SendCalls {
        let mut done = SendCalls::default();
        let mut rest = datagrams;
        while self.gso && !rest.is_empty() {
            let run = &rest[..batch::gso_run(rest)];
            done.calls += 1;
            match self.send_gso(run) {
                Err(e) if batch::refuses_gso(&e) => self.gso = false,
                result => {
                    done.refused += u64::from(result.is_err());
                    rest = &rest[run.len()..];
                }
            }
        }
        if !rest.is_empty() {
            let (calls, result) = self.send_mmsg(rest);
            done.calls += calls;
            done.refused += u64::from(result.is_err());
        }
        done
    }

    /// A header for the connected socket: no address, no control data.
    fn msghdr(iov: *mut libc::iovec, iovlen: usize) -> libc::msghdr {
        // SAFETY: msghdr is plain data; zero is "no name, no control".
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = iov;
        h.msg_iovlen = iovlen;
        h
    }

    /// Sends each slice as one datagram with `sendmmsg`; returns the system calls made, and
    /// the error that stopped it, if one did.
    fn send_mmsg(&self, datagrams: &[&[u8]]) -> (u64, io::Result<()>) {
        let mut iovs = iovecs(datagrams);
        let mut msgs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .map(|iov| libc::mmsghdr {
                msg_hdr: Self::msghdr(iov, 1),
                msg_len: 0,
            })
            .collect();
        let mut sent = 0;
        let mut calls = 0;
        while sent < msgs.len() {
            // SAFETY: every mmsghdr points at an iovec that lives until the end of this
            // function; the kernel only reads them.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs[sent..].as_mut_ptr(),
                    (msgs.len() - sent) as libc::c_uint,
                    0,
                )
            };
            calls += 1;
            match cvt(n) {
                Ok(n) => sent += n,
                // A queued ICMP error from the peer, reported once and consumed: try again.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) && calls == 1 => {}
                Err(e) => return (calls, Err(e)),
            }
        }
        (calls, Ok(()))
    }

    /// Sends one GSO run (see [`batch::gso_run`]) in one `sendmsg` with `UDP_SEGMENT` set to
    /// the first datagram's length: the kernel cuts them apart after one trip through the
    /// stack.
    fn send_gso(&self, datagrams: &[&[u8]]) -> io::Result<()> {
        let segment = datagrams.first().map_or(0, |d| d.len());
        let mut iovs = iovecs(datagrams);
        let mut h = Self::msghdr(iovs.as_mut_ptr(), iovs.len());
        // Room for one cmsg carrying a u16, 8-byte aligned.
        let mut control = [0u64; 4];
        if datagrams.len() > 1 {
            // SAFETY: CMSG_SPACE is a pure size computation.
            let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = space;
            // SAFETY: msg_control points at `control`, large enough for one cmsg of a u16;
            // CMSG_FIRSTHDR/CMSG_DATA stay inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), segment as u16);
            }
        }
        for _ in 0..2 {
            // SAFETY: h points at iovecs and control data that both outlive the call.
            let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &h, 0) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            // A queued ICMP error from the peer, reported once and consumed: try again.
            if e.raw_os_error() != Some(libc::ECONNREFUSED) {
                return Err(e);
            }
        }
        Err(io::Error::from_raw_os_error(libc::ECONNREFUSED))
    }

    /// Receives into up to `bufs.len()` buffers without blocking, and writes into `out` how
    /// each splits into datagrams; returns how many buffers were filled (0 when nothing was
    /// waiting). A segment size from the kernel that cannot be split by is an error.
    pub fn recv_batch(&self, bufs: &mut [Vec<u8>], out: &mut [Received]) -> io::Result<usize> {
        let n = bufs.len().min(out.len());
        let mut iovs: Vec<libc::iovec> = bufs[..n]
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut controls = vec![[0u64; 8]; n];
        let mut msgs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .zip(controls.iter_mut())
            .map(|(iov, control)| {
                // SAFETY: zeroed msghdr is "no name, no control"; filled in below.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_iov = iov;
                h.msg_iovlen = 1;
                h.msg_control = control.as_mut_ptr().cast();
                h.msg_controllen = std::mem::size_of_val(control);
                libc::mmsghdr {
                    msg_hdr: h,
                    msg_len: 0,
                }
            })
            .collect();
        // SAFETY: each mmsghdr points at a buffer and a control area owned by this frame.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let got = match cvt(rc) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        };
        for (m, slot) in msgs[..got].iter().zip(out.iter_mut()) {
            let len = m.msg_len as usize;
            // Without a GRO segment size, the buffer holds one datagram.
            let mut stride = len;
            // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros
            // walk only within it.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                        let size = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                        stride = usize::try_from(size).unwrap_or(0);
                    }
                    c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
                }
            }
            *slot = Received::new(len, stride).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        Ok(got)
    }
}

impl AsRawFd for Udp {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    /// Two sockets on loopback connected to each other (no root needed).
    fn pair() -> (Udp, Udp) {
        pair_on(Ipv4Addr::LOCALHOST.into())
    }

    fn pair_on(ip: std::net::IpAddr) -> (Udp, Udp) {
        let probe = |_| std::net::UdpSocket::bind((ip, 0)).unwrap();
        let (a, b) = (probe(0), probe(1));
        let addr = |s: &std::net::UdpSocket| s.local_addr().unwrap();
        let (la, lb) = (addr(&a), addr(&b));
        drop((a, b));
        let a = Udp::bind(la, lb, 1 << 20).unwrap();
        let b = Udp::bind(lb, la, 1 << 20).unwrap();
        (a, b)
    }

    /// Every datagram `udp` receives within a second, until `want` arrived.
    fn receive(udp: &Udp, want: usize) -> Vec<Vec<u8>> {
        let mut bufs = vec![vec![0u8; 65_536]; 8];
        let mut meta = vec![Received::default(); 8];
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while got.len() < want && Instant::now() < deadline {
            let n = udp.recv_batch(&mut bufs, &mut meta).unwrap();
            for (buf, m) in bufs.iter().zip(&meta[..n]) {
                got.extend(m.datagrams().map(|d| buf[d].to_vec()));
            }
            if n == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        got
    }

    fn datagrams(lens: &[usize]) -> Vec<Vec<u8>> {
        lens.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect()
    }

    #[test]
    fn a_gso_batch_arrives_as_the_datagrams_it_was() {
        let (mut a, mut b) = pair();
        assert!(
            a.enable_offload() && b.enable_offload(),
            "this kernel has UDP GRO"
        );
        let sent = datagrams(&[1000, 1000, 1000, 400, 1000, 1000]);
        let slices: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        let done = a.send_batch(&slices);
        assert_eq!(done, SendCalls { calls: 2, refused: 0 }, "two GSO runs");
        assert!(a.uses_gso());
        // Whether loopback hands them over coalesced or not, the split gives them back.
        assert_eq!(receive(&b, sent.len()), sent);
    }

    /// The IPv6 socket (`sockaddr_in6`) batches and splits the same way.
    #[test]
    fn an_ipv6_gso_batch_arrives_as_the_datagrams_it_was() {
        let (mut a, mut b) = pair_on(std::net::Ipv6Addr::LOCALHOST.into());
        assert!(a.enable_offload() && b.enable_offload());
        let sent = datagrams(&[1000, 1000, 1000, 400]);
        let slices: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        assert_eq!(a.send_batch(&slices), SendCalls { calls: 1, refused: 0 });
        assert_eq!(receive(&b, sent.len()), sent);
    }

    /// `SO_NO_CHECK` makes the kernel refuse every GSO send (EINVAL): a real refusal, no mock.
    #[test]
    fn a_refused_gso_send_falls_back_to_mmsg_for_good_and_loses_nothing() {
        let (mut a, b) = pair();
        assert!(a.enable_offload());
        setsockopt_int(a.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        let sent = datagrams(&[700, 700, 700]);
        let slices: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        let done = a.send_batch(&slices);
        assert!(!a.uses_gso(), "GSO stays off after a refusal");
        assert_eq!(
            done,
            SendCalls { calls: 2, refused: 0 },
            "the refused GSO call and one sendmmsg"
        );
        let again = a.send_batch(&slices);
        assert_eq!(again, SendCalls { calls: 1, refused: 0 }, "straight to sendmmsg");
        let mut want = sent.clone();
        want.extend(sent);
        assert_eq!(receive(&b, want.len()), want);
    }
}
