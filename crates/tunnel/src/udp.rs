//! The tunnel's UDP socket and its batched system calls.
//!
//! Sending: `sendmmsg` (one call, many datagrams) or, where the kernel accepts it, UDP GSO
//! (`UDP_SEGMENT`: one call and one trip through the stack for up to 64 equal-sized
//! datagrams). Receiving: `recvmmsg`, with UDP GRO (`UDP_GRO`) so the kernel may hand over
//! several datagrams coalesced into one buffer with their segment size.
//!
//! The socket is bound and connected to the peer: the kernel hands over only datagrams from
//! the peer's address and port, so nobody else reaches the decryption (or, for the
//! unauthenticated suites, the host's IP stack) through it.

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Most datagrams one GSO send may carry (the kernel's UDP_MAX_SEGMENTS).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes one GSO send may carry (an IP packet's length field, less headers).
pub const GSO_MAX_BYTES: usize = 65_000;

pub struct Udp {
    fd: OwnedFd,
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// `bind` or `connect` of `fd` to `addr`; the error names the step and the address.
fn with_address(
    fd: RawFd,
    addr: SocketAddrV4,
    call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
    step: &str,
) -> io::Result<()> {
    let sa = sockaddr_in(addr);
    // SAFETY: sa is a sockaddr_in, passed with its size; the call only reads it.
    let rc = unsafe {
        call(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
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

fn cvt(rc: libc::c_int) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

impl Udp {
    /// A socket bound to `local` (in the calling thread's namespace) and connected to `peer`:
    /// it sends only there and receives only from there. Blocking for sends (a full socket buffer waits rather than drops), receives are
    /// always non-blocking (`MSG_DONTWAIT`).
    pub fn bind(local: SocketAddrV4, peer: SocketAddrV4, buffer_bytes: usize) -> io::Result<Udp> {
        // SAFETY: plain socket(2); owned right after.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
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
        Ok(Udp { fd })
    }

    /// Asks for coalesced receives. False when the kernel does not offer UDP GRO.
    pub fn enable_gro(&self) -> bool {
        setsockopt_int(self.fd.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
    }

    /// A header for the connected socket: no address, no control data.
    fn msghdr(iov: *mut libc::iovec, iovlen: usize) -> libc::msghdr {
        // SAFETY: msghdr is plain data; zero is "no name, no control".
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = iov;
        h.msg_iovlen = iovlen;
        h
    }

    /// Sends each slice as one datagram with `sendmmsg`; returns system calls made.
    pub fn send_mmsg(&self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let mut iovs: Vec<libc::iovec> = datagrams
            .iter()
            .map(|d| libc::iovec {
                iov_base: d.as_ptr().cast_mut().cast(),
                iov_len: d.len(),
            })
            .collect();
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
                Err(e) => return Err(e),
            }
        }
        Ok(calls)
    }

    /// Sends datagrams of equal length `segment` (the last may be shorter) in one `sendmsg`
    /// with `UDP_SEGMENT`: the kernel cuts them apart, after one trip through the stack.
    pub fn send_gso(&self, datagrams: &[&[u8]], segment: usize) -> io::Result<()> {
        let mut iovs: Vec<libc::iovec> = datagrams
            .iter()
            .map(|d| libc::iovec {
                iov_base: d.as_ptr().cast_mut().cast(),
                iov_len: d.len(),
            })
            .collect();
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

    /// Receives up to `bufs.len()` datagrams without blocking. For each, writes its length
    /// and its GRO segment size (0: not coalesced) into `out`; returns how many arrived
    /// (0 when none was waiting).
    pub fn recv_mmsg(&self, bufs: &mut [Vec<u8>], out: &mut [Received]) -> io::Result<usize> {
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
            let mut segment = 0usize;
            // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros
            // walk only within it.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                        segment = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) as usize;
                    }
                    c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
                }
            }
            *slot = Received {
                len: m.msg_len as usize,
                segment,
            };
        }
        Ok(got)
    }
}

/// One `recvmmsg` result: `len` bytes, made of datagrams of `segment` bytes each when the
/// kernel coalesced them (GRO), else one datagram.
#[derive(Debug, Clone, Copy, Default)]
pub struct Received {
    pub len: usize,
    pub segment: usize,
}

impl AsRawFd for Udp {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
