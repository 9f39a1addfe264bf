//! The async handle that sends XFRM requests to one network namespace's kernel.
//!
//! A netlink socket belongs to the namespace of the thread that created it, for its whole
//! life. So the handle's socket is created by a short-lived thread that entered the target
//! namespace (or by the caller, inside `netns::Namespace::run`), and is then used from any
//! tokio task. Requests are serialised on the socket: XFRM set-up is a handful of messages,
//! so one at a time costs nothing and keeps replies unambiguous.

use std::fs::File;
use std::net::IpAddr;
use std::os::fd::IntoRawFd;
use std::os::unix::io::FromRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use model::IpsecMode;
use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload, Nla};
use netlink_packet_xfrm::{Address, Selector, XfrmAttrs, XfrmMessage, AF_INET, AF_INET6};
use netlink_sys::{protocols::NETLINK_XFRM, AsyncSocketExt, Socket, SocketAddr, TokioSocket};
use zeroize::Zeroizing;

use crate::config::{
    mode_from_raw, IpProto, KernelAlgorithm, PolicyDirection, PolicyId, PolicySpec, Prefix, Protection, SaId,
    SaSpec, TrafficSelector,
};
use crate::error::{Operation, XfrmError};
use crate::message::{self, Reply};
use crate::range::{ReqId, Spi};

pub use model::evidence::SaCounters;

/// An algorithm as installed in an SA (no key bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledAlgorithm {
    pub name: String,
    pub key_bits: u32,
    /// ICV bits for auth-trunc and AEAD algorithms.
    pub icv_bits: Option<u32>,
}

/// One SA as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaInfo {
    pub id: SaId,
    pub reqid: ReqId,
    pub mode: Option<IpsecMode>,
    pub counters: SaCounters,
    pub algorithms: Vec<InstalledAlgorithm>,
    /// The CPU a per-CPU SA serves (`XFRMA_SA_PCPU`); None for an SA of any CPU.
    pub pcpu: Option<u32>,
}

impl SaInfo {
    /// Whether the lab created this SA (reqid and SPI both from its ranges).
    pub fn is_lab(&self) -> bool {
        self.reqid.is_lab() && self.id.spi.is_lab()
    }
}

/// One policy as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyInfo {
    pub index: u32,
    pub direction: Option<PolicyDirection>,
    pub priority: u32,
    /// Protocols other than TCP/UDP show as no protocol.
    pub selector: Option<TrafficSelector>,
    pub template_reqids: Vec<ReqId>,
}

impl PolicyInfo {
    /// Whether the lab created this policy: every template asks for a lab reqid.
    pub fn is_lab(&self) -> bool {
        !self.template_reqids.is_empty() && self.template_reqids.iter().all(|r| r.is_lab())
    }
}

/// What [`XfrmHandle::clean_lab`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanCounts {
    pub sas: usize,
    pub policies: usize,
}

pub struct XfrmHandle {
    socket: tokio::sync::Mutex<TokioSocket>,
    seq: AtomicU32,
}

impl XfrmHandle {
    /// A blocking netlink XFRM socket in the calling thread's namespace, for
    /// [`XfrmHandle::from_socket`]. Replies to errors carry no copy of the request
    /// (`NETLINK_CAP_ACK`), so a refused SA add does not echo its keys back.
    pub fn new_socket() -> std::io::Result<Socket> {
        let mut socket = Socket::new(NETLINK_XFRM)?;
        socket.set_cap_ack(true)?;
        socket.bind_auto()?;
        Ok(socket)
    }

    /// Wraps a socket made by [`XfrmHandle::new_socket`]. Needs a tokio runtime.
    pub fn from_socket(socket: Socket) -> Result<XfrmHandle, XfrmError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(XfrmError::Socket {
                op: Operation::OpenSocket,
                source: std::io::Error::other("called outside a tokio runtime"),
            });
        }
        // SAFETY: the fd comes from a Socket we own and give up here.
        let socket = unsafe { TokioSocket::from_raw_fd(socket.into_raw_fd()) };
        Ok(XfrmHandle {
            socket: tokio::sync::Mutex::new(socket),
            seq: AtomicU32::new(1),
        })
    }

    /// A handle on the calling thread's namespace.
    pub fn open() -> Result<XfrmHandle, XfrmError> {
        let socket = XfrmHandle::new_socket().map_err(open_error)?;
        XfrmHandle::from_socket(socket)
    }

    /// A handle on the namespace at `netns` (e.g. `/run/netns/ipl-a`, `/proc/PID/ns/net`).
    pub fn open_in(netns: &Path) -> Result<XfrmHandle, XfrmError> {
        let path = netns.to_path_buf();
        let socket = std::thread::scope(|s| {
            s.spawn(|| -> Result<Socket, XfrmError> {
                let ns_error = |source| XfrmError::Namespace {
                    path: path.clone(),
                    source,
                };
                let file = File::open(&path).map_err(ns_error)?;
                nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| ns_error(std::io::Error::from(e)))?;
                XfrmHandle::new_socket().map_err(open_error)
            })
            .join()
            .unwrap_or_else(|_| Err(open_error(std::io::Error::other("namespace thread panicked"))))
        })?;
        XfrmHandle::from_socket(socket)
    }

    /// A handle on a new, empty namespace that exists only as long as the handle: its
    /// thread unshares, makes the socket and ends, so nothing is mounted and nothing is
    /// left behind when the handle drops (the kernel flushes a dying namespace's SAs).
    pub fn open_throwaway() -> Result<XfrmHandle, XfrmError> {
        let socket = std::thread::spawn(|| -> Result<Socket, XfrmError> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| XfrmError::Namespace {
                path: "(new throw-away namespace)".into(),
                source: e.into(),
            })?;
            XfrmHandle::new_socket().map_err(open_error)
        })
        .join()
        .unwrap_or_else(|_| Err(open_error(std::io::Error::other("namespace thread panicked"))))?;
        XfrmHandle::from_socket(socket)
    }

    /// `ip xfrm state add …`. Fails with [`XfrmError::SaExists`] rather than replace.
    pub async fn add_sa(&self, spec: &SaSpec) -> Result<(), XfrmError> {
        spec.validate()?;
        let algorithms = spec.protection.algorithms();
        let op = Operation::InstallSa(spec.id());
        self.transact(op, message::add_sa(spec), Reply::Ack, Some(&algorithms))
            .await
            .map(drop)
    }

    /// `ip xfrm state delete …`
    pub async fn delete_sa(&self, id: &SaId) -> Result<(), XfrmError> {
        self.transact(Operation::DeleteSa(*id), message::delete_sa(id), Reply::Ack, None)
            .await
            .map(drop)
    }

    /// `ip -s xfrm state get …`: the SA with its counters.
    pub async fn get_sa(&self, id: &SaId) -> Result<SaInfo, XfrmError> {
        let op = Operation::ReadSa(*id);
        let replies = self
            .transact(op.clone(), message::get_sa(id), Reply::Object, None)
            .await?;
        replies.into_iter().find_map(sa_info).ok_or(XfrmError::Decode {
            op,
            detail: "no SA in the reply".into(),
        })
    }

    /// Packet and byte counters of one SA.
    pub async fn sa_counters(&self, id: &SaId) -> Result<SaCounters, XfrmError> {
        Ok(self.get_sa(id).await?.counters)
    }

    /// `ip xfrm state list`, every SA in the namespace.
    pub async fn list_sas(&self) -> Result<Vec<SaInfo>, XfrmError> {
        let replies = self
            .transact(Operation::ListSas, message::dump_sa(), Reply::Dump, None)
            .await?;
        Ok(replies.into_iter().filter_map(sa_info).collect())
    }

    /// `ip xfrm policy add …`. Fails with [`XfrmError::PolicyExists`] rather than replace.
    pub async fn add_policy(&self, spec: &PolicySpec) -> Result<(), XfrmError> {
        spec.validate()?;
        let op = Operation::InstallPolicy {
            selector: spec.selector,
            direction: spec.direction.name(),
        };
        self.transact(op, message::add_policy(spec), Reply::Ack, None)
            .await
            .map(drop)
    }

    /// `ip xfrm policy delete …`
    pub async fn delete_policy(&self, id: &PolicyId) -> Result<(), XfrmError> {
        self.transact(
            Operation::DeletePolicy(*id),
            message::delete_policy(id),
            Reply::Ack,
            None,
        )
        .await
        .map(drop)
    }

    /// `ip xfrm policy list`, every policy in the namespace.
    pub async fn list_policies(&self) -> Result<Vec<PolicyInfo>, XfrmError> {
        let replies = self
            .transact(Operation::ListPolicies, message::dump_policy(), Reply::Dump, None)
            .await?;
        Ok(replies.into_iter().filter_map(policy_info).collect())
    }

    /// Removes the lab's SAs and policies (reqid/SPI in the lab's ranges) and nothing else.
    pub async fn clean_lab(&self) -> Result<CleanCounts, XfrmError> {
        let mut counts = CleanCounts::default();
        for sa in self.list_sas().await?.into_iter().filter(SaInfo::is_lab) {
            match self.delete_sa(&sa.id).await {
                Ok(()) => counts.sas += 1,
                // Gone meanwhile (expired, or a concurrent clean): nothing left to do.
                Err(XfrmError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        for pol in self.list_policies().await?.into_iter().filter(PolicyInfo::is_lab) {
            let Some(direction) = pol.direction else { continue };
            let id = PolicyId::Index {
                index: pol.index,
                direction,
            };
            match self.delete_policy(&id).await {
                Ok(()) => counts.policies += 1,
                Err(XfrmError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(counts)
    }

    /// Sends one request and collects the kernel's answer: nothing (ACK), one object, or
    /// a dump. Key bytes in replies (SA dumps carry them) are wiped before returning.
    pub(crate) async fn transact(
        &self,
        op: Operation,
        request: XfrmMessage,
        reply: Reply,
        algorithms: Option<&[KernelAlgorithm]>,
    ) -> Result<Vec<XfrmMessage>, XfrmError> {
        let socket = self.socket.lock().await;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let bytes = message::encode(message::request(request, reply, seq));
        let kernel = SocketAddr::new(0, 0);
        let io_error = |source| XfrmError::Socket {
            op: op.clone(),
            source,
        };
        socket.send_to(&bytes, &kernel).await.map_err(io_error)?;
        drop(bytes);
        let mut out = Vec::new();
        loop {
            let (datagram, _) = socket.recv_from_full().await.map_err(io_error)?;
            let datagram = Zeroizing::new(datagram);
            let mut offset = 0;
            while offset < datagram.len() {
                let rest = &datagram[offset..];
                let len = NetlinkBuffer::new_checked(rest)
                    .map(|b| b.length() as usize)
                    .map_err(|e| decode_error(&op, e))?;
                if len == 0 || len > rest.len() {
                    return Err(decode_error(&op, format!("bad message length {len}")));
                }
                offset += len.next_multiple_of(4);
                let msg = NetlinkMessage::<XfrmMessage>::deserialize(&rest[..len])
                    .map_err(|e| decode_error(&op, e))?;
                if msg.header.sequence_number != seq {
                    continue; // a late answer to an abandoned request
                }
                match msg.payload {
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(out),
                        Some(code) => return Err(XfrmError::from_errno(op, code.get().abs(), algorithms)),
                    },
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::InnerMessage(mut m) => {
                        message::scrub(&mut m);
                        out.push(m);
                        if reply == Reply::Object {
                            return Ok(out);
                        }
                    }
                    NetlinkPayload::Noop | NetlinkPayload::Overrun(_) => {}
                    _ => {}
                }
            }
        }
    }
}

fn open_error(source: std::io::Error) -> XfrmError {
    match source.raw_os_error() {
        Some(libc::EPROTONOSUPPORT) => XfrmError::NoXfrmNetlink {
            op: Operation::OpenSocket,
        },
        Some(libc::EPERM | libc::EACCES) => XfrmError::NotPermitted {
            op: Operation::OpenSocket,
        },
        _ => XfrmError::Socket {
            op: Operation::OpenSocket,
            source,
        },
    }
}

fn decode_error(op: &Operation, e: impl std::fmt::Display) -> XfrmError {
    XfrmError::Decode {
        op: op.clone(),
        detail: e.to_string(),
    }
}

fn ip(family: u16, a: &Address) -> Option<IpAddr> {
    match family {
        AF_INET => Some(IpAddr::V4(a.to_ipv4())),
        AF_INET6 => Some(IpAddr::V6(a.to_ipv6())),
        _ => None,
    }
}

fn alg_name(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// The algorithms (names, key and ICV lengths; no key bytes) that `nlas` install. The
/// kernel reports an HMAC twice, as `XFRMA_ALG_AUTH` (no truncation, for old tools) and as
/// `XFRMA_ALG_AUTH_TRUNC`: only the latter, which says what the packets carry, is kept.
fn installed_algorithms(nlas: &[XfrmAttrs]) -> Vec<InstalledAlgorithm> {
    let all: Vec<InstalledAlgorithm> = nlas
        .iter()
        .filter_map(|nla| match nla {
            XfrmAttrs::EncryptionAlg(a) | XfrmAttrs::AuthenticationAlg(a) => Some(InstalledAlgorithm {
                name: alg_name(&a.alg_name),
                key_bits: a.alg_key_len,
                icv_bits: None,
            }),
            XfrmAttrs::AuthenticationAlgTrunc(a) => Some(InstalledAlgorithm {
                name: alg_name(&a.alg_name),
                key_bits: a.alg_key_len,
                icv_bits: Some(a.alg_trunc_len),
            }),
            XfrmAttrs::EncryptionAlgAead(a) => Some(InstalledAlgorithm {
                name: alg_name(&a.alg_name),
                key_bits: a.alg_key_len,
                icv_bits: Some(a.alg_icv_len),
            }),
            _ => None,
        })
        .collect();
    let truncated = |name: &str| all.iter().any(|a| a.name == name && a.icv_bits.is_some());
    all.iter()
        .filter(|a| a.icv_bits.is_some() || !truncated(&a.name))
        .cloned()
        .collect()
}

/// What the lab's own SAs with `protection` install, as a dump of them reports it: the
/// attributes [`XfrmHandle::add_sa`] sends, read back the way [`XfrmHandle::list_sas`]
/// reads the kernel's (for comparing SAs someone else negotiated with the lab's).
pub fn lab_algorithms(protection: &Protection) -> Vec<InstalledAlgorithm> {
    let mut message = XfrmMessage::AddSa(netlink_packet_xfrm::state::ModifyMessage {
        nlas: message::protection_attrs(protection),
        ..Default::default()
    });
    let algorithms = match &message {
        XfrmMessage::AddSa(m) => installed_algorithms(&m.nlas),
        _ => Vec::new(),
    };
    message::scrub(&mut message);
    algorithms
}

fn sa_info(m: XfrmMessage) -> Option<SaInfo> {
    let (XfrmMessage::AddSa(m) | XfrmMessage::UpdateSa(m)) = m else {
        return None;
    };
    let info = &m.user_sa_info;
    let algorithms = installed_algorithms(&m.nlas);
    Some(SaInfo {
        id: SaId {
            src: ip(info.family, &info.saddr)?,
            dst: ip(info.family, &info.id.daddr)?,
            spi: Spi(info.id.spi),
        },
        reqid: ReqId(info.reqid),
        mode: mode_from_raw(info.mode),
        counters: SaCounters {
            packets: info.lifetime_cur.packets,
            bytes: info.lifetime_cur.bytes,
            replay_drops: info.stats.replay,
            integrity_failures: info.stats.integrity_failed,
        },
        algorithms,
        pcpu: pcpu(&m.nlas),
    })
}

/// The `XFRMA_SA_PCPU` of a per-CPU SA's attributes.
fn pcpu(nlas: &[XfrmAttrs]) -> Option<u32> {
    nlas.iter().find_map(|nla| match nla {
        XfrmAttrs::Other(a) if a.kind() == message::XFRMA_SA_PCPU => {
            let mut value = [0u8; 4];
            a.emit_value(&mut value);
            (a.value_len() == 4).then(|| u32::from_ne_bytes(value))
        }
        _ => None,
    })
}

fn traffic_selector(s: &Selector) -> Option<TrafficSelector> {
    let src = ip(s.family, &s.saddr)?;
    let dst = ip(s.family, &s.daddr)?;
    let proto = [IpProto::Tcp, IpProto::Udp]
        .into_iter()
        .find(|p| p.raw() == s.proto);
    Some(TrafficSelector {
        src: Prefix {
            addr: src,
            len: s.prefixlen_s,
        },
        dst: Prefix {
            addr: dst,
            len: s.prefixlen_d,
        },
        proto,
        src_port: (s.sport_mask != 0).then_some(s.sport),
        dst_port: (s.dport_mask != 0).then_some(s.dport),
    })
}

fn policy_info(m: XfrmMessage) -> Option<PolicyInfo> {
    let (XfrmMessage::AddPolicy(m) | XfrmMessage::UpdatePolicy(m)) = m else {
        return None;
    };
    let info = &m.user_policy_info;
    let template_reqids = m
        .nlas
        .iter()
        .filter_map(|nla| match nla {
            XfrmAttrs::Template(ts) => Some(ts.iter().map(|t| ReqId(t.reqid)).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    Some(PolicyInfo {
        index: info.index,
        direction: PolicyDirection::from_raw(info.direction),
        priority: info.priority,
        selector: traffic_selector(&info.selector),
        template_reqids,
    })
}

#[cfg(test)]
mod pcpu_tests {
    use super::*;

    /// A per-CPU SA's CPU survives the wire: the request the lab sends, read back as the
    /// kernel's dump of it is read (the dump carries the same attribute).
    #[test]
    fn a_per_cpu_sas_cpu_is_read_back() {
        let protection = crate::config::Protection::generate(
            model::CipherSuite::AesGcm {
                key: model::KeyBits::Aes128,
            },
            crate::config::AuthTrunc::Bits128,
        )
        .unwrap();
        let mut spec = crate::config::SaSpec {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            spi: Spi(crate::range::SPI_FIRST),
            reqid: ReqId(crate::range::REQID_FIRST),
            mode: IpsecMode::Tunnel,
            replay_window: crate::config::LAB_REPLAY_WINDOW,
            protection,
            selector: None,
            pcpu: Some(crate::config::PerCpu {
                cpu: 3,
                direction: crate::config::SaDirection::In,
            }),
        };
        let round_trip = |spec: &crate::config::SaSpec| {
            let bytes = message::encode(message::request(message::add_sa(spec), message::Reply::Ack, 1));
            let parsed = NetlinkMessage::<XfrmMessage>::deserialize(&bytes).unwrap();
            match parsed.payload {
                NetlinkPayload::InnerMessage(m) => sa_info(m).unwrap(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(round_trip(&spec).pcpu, Some(3));
        spec.pcpu = None;
        assert_eq!(round_trip(&spec).pcpu, None);
    }
}

#[cfg(test)]
mod lab_algorithm_tests {
    use super::*;
    use crate::config::AuthTrunc;
    use model::{CipherSuite, Hmac, KeyBits};

    fn alg(name: &str, key_bits: u32, icv_bits: Option<u32>) -> InstalledAlgorithm {
        InstalledAlgorithm {
            name: name.into(),
            key_bits,
            icv_bits,
        }
    }

    #[test]
    fn lab_algorithms_are_what_a_dump_of_the_lab_sa_shows() {
        let cbc = CipherSuite::AesCbc {
            key: KeyBits::Aes192,
            hmac: Hmac::Sha256,
        };
        let p = Protection::generate(cbc, AuthTrunc::Bits128).unwrap();
        assert_eq!(
            lab_algorithms(&p),
            [alg("cbc(aes)", 192, None), alg("hmac(sha256)", 256, Some(128))]
        );
        let gcm = CipherSuite::AesGcm { key: KeyBits::Aes128 };
        let p = Protection::generate(gcm, AuthTrunc::Bits128).unwrap();
        // The kernel counts GCM's 4-byte salt into the key length.
        assert_eq!(lab_algorithms(&p), [alg("rfc4106(gcm(aes))", 160, Some(128))]);
    }

    #[test]
    fn an_hmac_the_kernel_reports_twice_is_listed_once_with_its_truncation() {
        let auth = |trunc: bool| {
            let name = {
                let mut n = [0u8; netlink_packet_xfrm::XFRM_ALG_NAME_LEN];
                n[..12].copy_from_slice(b"hmac(sha256)");
                n
            };
            if trunc {
                XfrmAttrs::AuthenticationAlgTrunc(netlink_packet_xfrm::AlgAuth {
                    alg_name: name,
                    alg_key_len: 256,
                    alg_trunc_len: 128,
                    alg_key: vec![],
                })
            } else {
                XfrmAttrs::AuthenticationAlg(netlink_packet_xfrm::Alg {
                    alg_name: name,
                    alg_key_len: 256,
                    alg_key: vec![],
                })
            }
        };
        // The order a kernel dump has them in.
        assert_eq!(
            installed_algorithms(&[auth(false), auth(true)]),
            [alg("hmac(sha256)", 256, Some(128))]
        );
    }
}
