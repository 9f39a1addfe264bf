//! A TUN device (`/dev/net/tun`, `IFF_TUN | IFF_NO_PI`: bare IP packets, no extra header),
//! configured with ioctls from the thread that owns it, so it lands in that thread's network
//! namespace. Not persistent: closing the fd removes the device, so a dropped [`Tun`] leaves
//! nothing behind, also when the thread panics. A multi-queue device (`IFF_MULTI_QUEUE`) has
//! one fd per queue, each opened by the thread that serves it; the device goes with the last.

use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// Each packet on the fd is preceded by a `virtio_net_hdr` (see `offload`).
const IFF_VNET_HDR: libc::c_int = 0x4000;
/// Every open of the same name attaches one more queue; the kernel spreads flows over them.
const IFF_MULTI_QUEUE: libc::c_int = 0x0100;
/// The device may hand over packets whose checksum it must complete, and TCP/IPv4 packets
/// of up to 64 KiB to be cut into segments (`TUN_F_CSUM | TUN_F_TSO4`).
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;

pub struct Tun {
    fd: OwnedFd,
    name: String,
}

fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    let cname =
        CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in device name"))?;
    let bytes = cname.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("device name {name:?} is longer than {} bytes", libc::IFNAMSIZ - 1),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok(req)
}

fn sockaddr_v4(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(addr).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux; the kernel reads it as
    // sockaddr_in because sin_family says so.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn ioctl(fd: RawFd, request: libc::c_ulong, req: &mut libc::ifreq, what: &str) -> io::Result<()> {
    // SAFETY: every request used here takes a pointer to an ifreq, which outlives the call.
    let rc = unsafe { libc::ioctl(fd, request as _, req as *mut libc::ifreq) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// A datagram socket of `domain`, used only as an ioctl handle.
fn ioctl_socket(domain: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); owned right after.
    let raw = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `struct in6_ifreq` (linux/ipv6.h): what SIOCSIFADDR takes on an AF_INET6 socket.
#[repr(C)]
struct In6Ifreq {
    addr: libc::in6_addr,
    prefix_len: u32,
    ifindex: libc::c_int,
}

/// Adds `addr/prefix_len` to interface `ifindex` (`ip -6 addr add`).
fn set_ipv6_address(ifindex: libc::c_int, addr: Ipv6Addr, prefix_len: u8) -> io::Result<()> {
    let sock = ioctl_socket(libc::AF_INET6)?;
    let mut req = In6Ifreq {
        addr: libc::in6_addr {
            s6_addr: addr.octets(),
        },
        prefix_len: u32::from(prefix_len.min(128)),
        ifindex,
    };
    // SAFETY: SIOCSIFADDR on an AF_INET6 socket takes a pointer to an in6_ifreq, which
    // outlives the call.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFADDR as _,
            &mut req as *mut In6Ifreq,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("SIOCSIFADDR {addr}/{prefix_len}: {e}"),
        ));
    }
    Ok(())
}

/// Waits until `addr` can be bound: the kernel marks a new IPv6 address tentative until
/// its (for a `NOARP` device, instant but asynchronous) duplicate address detection ran,
/// and a socket bound to it before then fails with EADDRNOTAVAIL.
fn wait_usable(addr: IpAddr) -> io::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        match std::net::UdpSocket::bind((addr, 0)) {
            Ok(_) => return Ok(()),
            Err(e)
                if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("{addr} not usable: {e}"))),
        }
    }
}

impl Tun {
    /// Creates TUN device `name` in the calling thread's namespace, non-blocking; with
    /// `vnet_hdr`, every packet read or written carries a `virtio_net_hdr` in front.
    pub fn create(name: &str, vnet_hdr: bool) -> io::Result<Tun> {
        Tun::open(name, vnet_hdr, false)
    }

    /// One queue of multi-queue TUN device `name`: the first call creates the device, each
    /// further one (with the same `vnet_hdr`) attaches another queue to it.
    pub fn create_queue(name: &str, vnet_hdr: bool) -> io::Result<Tun> {
        Tun::open(name, vnet_hdr, true)
    }

    fn open(name: &str, vnet_hdr: bool, multi_queue: bool) -> io::Result<Tun> {
        // SAFETY: plain open(2) of a device node; the fd is owned right after.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")));
        }
        // SAFETY: `raw` is a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = ifreq_named(name)?;
        let vnet = if vnet_hdr { IFF_VNET_HDR } else { 0 };
        let mq = if multi_queue { IFF_MULTI_QUEUE } else { 0 };
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet | mq) as libc::c_short;
        ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req, "TUNSETIFF")?;
        Ok(Tun {
            fd,
            name: name.to_string(),
        })
    }

    /// Lets the kernel hand over TCP/IPv4 super-packets and partial checksums (needs a
    /// device created with `vnet_hdr`).
    pub fn enable_tso(&self) -> io::Result<()> {
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), TUNSETOFFLOAD as _, TUN_F_CSUM | TUN_F_TSO4) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETOFFLOAD: {e}")));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets address, netmask, MTU and transmit queue length and brings the device up
    /// (`ip addr add ADDR/PREFIX dev NAME; ip link set NAME mtu MTU up`). The kernel adds the
    /// connected route for the prefix. An IPv6 address goes on after the MTU (IPv6 needs
    /// 1280 bytes) and needs no duplicate address detection: a TUN device is `NOARP`.
    pub fn configure(&self, addr: IpAddr, prefix_len: u8, mtu: u32, txqueuelen: u32) -> io::Result<()> {
        let sock = ioctl_socket(libc::AF_INET)?;
        let s = sock.as_raw_fd();
        let mut req = ifreq_named(&self.name)?;
        if let IpAddr::V4(addr) = addr {
            req.ifr_ifru.ifru_addr = sockaddr_v4(addr);
            ioctl(s, libc::SIOCSIFADDR, &mut req, "SIOCSIFADDR")?;
            let mask = if prefix_len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix_len.min(32)))
            };
            req.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::from(mask));
            ioctl(s, libc::SIOCSIFNETMASK, &mut req, "SIOCSIFNETMASK")?;
        }
        req.ifr_ifru.ifru_mtu = mtu as libc::c_int;
        ioctl(s, libc::SIOCSIFMTU, &mut req, "SIOCSIFMTU")?;
        req.ifr_ifru.ifru_metric = txqueuelen as libc::c_int; // ifr_qlen shares the slot
        ioctl(s, libc::SIOCSIFTXQLEN, &mut req, "SIOCSIFTXQLEN")?;
        if let IpAddr::V6(addr) = addr {
            ioctl(s, libc::SIOCGIFINDEX, &mut req, "SIOCGIFINDEX")?;
            // SAFETY: SIOCGIFINDEX just filled the ifindex member of the union.
            let index = unsafe { req.ifr_ifru.ifru_ifindex };
            set_ipv6_address(index, addr, prefix_len)?;
        }
        ioctl(s, libc::SIOCGIFFLAGS, &mut req, "SIOCGIFFLAGS")?;
        // SAFETY: SIOCGIFFLAGS just filled the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        ioctl(s, libc::SIOCSIFFLAGS, &mut req, "SIOCSIFFLAGS")?;
        if addr.is_ipv6() {
            wait_usable(addr)?;
        }
        Ok(())
    }

    /// One packet, or `WouldBlock` when the queue is empty.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Hands one packet to the kernel's stack.
    pub fn write(&self, packet: &[u8]) -> io::Result<usize> {
        // SAFETY: packet is valid for reads of packet.len() bytes.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl Tun {
    /// Hands one packet, gathered from `parts`, to the kernel's stack.
    pub fn write_parts(&self, parts: &[&[u8]]) -> io::Result<usize> {
        let iovs: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr().cast_mut().cast(),
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: every iovec points at a slice that outlives the call; the kernel only reads.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), iovs.as_ptr(), iovs.len() as libc::c_int) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
