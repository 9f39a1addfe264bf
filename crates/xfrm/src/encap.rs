//! ESP in UDP (RFC 3948, NAT traversal): the SA attribute that makes the kernel wrap an
//! SA's ESP packets in UDP (`XFRMA_ENCAP`, as `ip xfrm state add … encap espinudp SPORT
//! DPORT 0.0.0.0` sends it), and the receiving end's UDP socket that hands arriving
//! ESP-in-UDP packets to the kernel's ESP input (`UDP_ENCAP_ESPINUDP`), as an IKE daemon
//! holds it on port 4500.
//!
//! Leaves out: which SAs get encapsulated and for how long the socket is held (crate
//! `lab`'s xfrm backend).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;

use netlink_packet_xfrm::{Address, EncapTmpl, XfrmAttrs, XfrmMessage, UDP_ENCAP_ESPINUDP};

use crate::config::SaSpec;
use crate::error::{Operation, XfrmError};
use crate::handle::XfrmHandle;
use crate::message::{self, Reply};

/// `UDP_ENCAP_ESPINUDP` encapsulation of one SA: the UDP ports its packets travel
/// between. The original-address field (NAT-OA) stays unset (0.0.0.0), as the lab has no
/// NAT in the path and only transport mode behind a NAT would need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpEncap {
    pub sport: u16,
    pub dport: u16,
}

impl UdpEncap {
    /// Both ends on the same port (4500 by default), as between two IKE daemons.
    pub fn symmetric(port: u16) -> UdpEncap {
        UdpEncap {
            sport: port,
            dport: port,
        }
    }

    /// The `XFRMA_ENCAP` attribute (the crate's `EncapTmpl` writes the ports big-endian).
    pub fn attr(&self) -> XfrmAttrs {
        XfrmAttrs::EncapsulationTemplate(EncapTmpl {
            encap_type: UDP_ENCAP_ESPINUDP,
            encap_sport: self.sport,
            encap_dport: self.dport,
            encap_oa: Address::default(),
        })
    }

    /// The words iproute2 takes for it, after `ip xfrm state add …`.
    pub fn iproute2_args(&self) -> [String; 5] {
        [
            "encap".into(),
            "espinudp".into(),
            self.sport.to_string(),
            self.dport.to_string(),
            "0.0.0.0".into(),
        ]
    }
}

/// `ip xfrm state add … encap espinudp SPORT DPORT 0.0.0.0`: the SA's attributes followed
/// by `XFRMA_ENCAP`, in iproute2's order.
pub fn add_sa_with_encap(spec: &SaSpec, encap: &UdpEncap) -> XfrmMessage {
    let mut msg = message::add_sa(spec);
    if let XfrmMessage::AddSa(m) = &mut msg {
        m.nlas.push(encap.attr());
    }
    msg
}

impl XfrmHandle {
    /// [`XfrmHandle::add_sa`] with UDP encapsulation.
    pub async fn add_sa_with_encap(&self, spec: &SaSpec, encap: &UdpEncap) -> Result<(), XfrmError> {
        spec.validate()?;
        let algorithms = spec.protection.algorithms();
        let op = Operation::InstallSa(spec.id());
        self.transact(op, add_sa_with_encap(spec, encap), Reply::Ack, Some(&algorithms))
            .await
            .map(drop)
    }
}

/// A UDP socket on which the kernel decapsulates ESP (`setsockopt(UDP_ENCAP,
/// UDP_ENCAP_ESPINUDP)`): without one bound to the port, arriving ESP-in-UDP packets are
/// plain UDP to a closed port and are dropped. Closing it (drop) ends that.
#[derive(Debug)]
pub struct EspInUdpSocket {
    socket: UdpSocket,
}

impl EspInUdpSocket {
    /// Binds `addr:port` in the calling thread's namespace and turns on ESP decapsulation.
    pub fn bind(addr: IpAddr, port: u16) -> io::Result<EspInUdpSocket> {
        let socket = UdpSocket::bind(SocketAddr::new(addr, port))?;
        let kind = libc::c_int::from(UDP_ENCAP_ESPINUDP);
        // SAFETY: a valid fd we own, and an int option value of the size we pass.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_ENCAP,
                (&kind as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EspInUdpSocket { socket })
    }

    /// [`EspInUdpSocket::bind`] inside the namespace at `netns` (a socket stays in the
    /// namespace it was made in, so a short-lived thread enters it to make the socket).
    pub fn bind_in(netns: &Path, addr: IpAddr, port: u16) -> io::Result<EspInUdpSocket> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(netns)?;
                nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                EspInUdpSocket::bind(addr, port)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain UDP socket on the host takes the option too (no ESP needed to set it).
    #[test]
    fn a_socket_takes_the_espinudp_option_and_frees_its_port_on_drop() {
        let s = EspInUdpSocket::bind("127.0.0.1".parse().unwrap(), 0).unwrap();
        let addr = s.local_addr().unwrap();
        let mut kind: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd, out-pointers to an int and its length.
        let rc = unsafe {
            libc::getsockopt(
                s.socket.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_ENCAP,
                (&mut kind as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        // Linux answers getsockopt(UDP_ENCAP) with the type set.
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        assert_eq!(kind, libc::c_int::from(UDP_ENCAP_ESPINUDP));
        drop(s);
        UdpSocket::bind(addr).expect("the port is free again once the socket is dropped");
    }

    /// Byte for byte what iproute2 6.1 sends for the same SA with `encap espinudp 4500 4500
    /// 0.0.0.0` (tests/fixtures/iproute2, captured with strace like the other requests);
    /// only the sequence number (bytes 8..12, iproute2's clock) is ignored.
    #[test]
    fn sa_with_espinudp_4500_matches_iproute2() {
        use crate::config::{AuthTrunc, KeyInput, Protection, LAB_REPLAY_WINDOW};
        use crate::range::{ReqId, Spi};
        use model::{CipherSuite, Hmac, IpsecMode, KeyBits};

        let enc: Vec<u8> = (0u8..32).collect();
        let auth: Vec<u8> = (0x20u8..0x40).collect();
        let protection = Protection::from_keys(
            CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256),
            AuthTrunc::Bits128,
            KeyInput {
                enc: &enc,
                auth: Some(&auth),
            },
        )
        .unwrap();
        let spec = SaSpec {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            spi: Spi(0x1a50_0101),
            reqid: ReqId(0x1a5001),
            mode: IpsecMode::Tunnel,
            replay_window: LAB_REPLAY_WINDOW,
            protection,
            selector: None,
            pcpu: None,
        };
        let name = "sa_cbc256_hmac_sha256_tunnel_espinudp4500";
        let mut want = testcap::hex_fixture("iproute2", name);
        want[8..12].fill(0);
        let msg = add_sa_with_encap(&spec, &UdpEncap::symmetric(4500));
        let got = message::encode(message::request(msg, Reply::Ack, 0));
        assert_eq!(got.len(), want.len(), "length differs");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "byte {i:#x} differs (ours {g:#04x}, iproute2 {w:#04x})");
        }
    }

    #[test]
    fn iproute2_words_name_the_ports() {
        assert_eq!(
            UdpEncap::symmetric(4500).iproute2_args().join(" "),
            "encap espinudp 4500 4500 0.0.0.0"
        );
    }
}
