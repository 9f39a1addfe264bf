//! Many XFRM requests per socket write, for timing how fast a kernel installs SAs and
//! policies (`ipsec-lab setup-rate`): up to `window` requests go out in one `sendmsg`, the
//! kernel handles them one after the other inside that call, and their acks are then
//! collected, each error matched to its request by sequence number. A window of 1 is the
//! one-by-one way (request, ack, next request) that `ip xfrm state add` in a loop takes.
//!
//! Blocking, on the calling thread's namespace: the timed loop has nothing else to wait
//! for, and no runtime's wake-ups sit inside the figure. The messages are
//! [`crate::message`]'s, the same bytes iproute2 sends.

use std::num::NonZeroUsize;
use std::time::Instant;

use netlink_packet_core::{NetlinkBuffer, NLMSG_ERROR};
use netlink_packet_xfrm::XfrmMessage;
use netlink_sys::{Socket, SocketAddr};
use zeroize::Zeroizing;

use crate::config::{PolicySpec, SaSpec};
use crate::error::{Operation, XfrmError};
use crate::handle::XfrmHandle;
use crate::message::{self, Reply};

/// Socket buffer room per request of a window: an SA add is about 300 bytes, an ack takes
/// a small skb's truesize (under 1 KiB); twice that, so a full window never overruns.
const BUFFER_PER_REQUEST: usize = 2048;
/// The least buffer either way, whatever the window.
const MIN_BUFFER: usize = 1 << 20;

/// A request the kernel refused: its place in the batch and the cause.
#[derive(Debug)]
pub struct Refused {
    pub index: usize,
    pub error: XfrmError,
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Requests the kernel acknowledged.
    pub acked: usize,
    pub refused: Vec<Refused>,
    /// A stop request ended the batch before every request was sent.
    pub stopped: bool,
    /// From the first write to the last ack, in seconds.
    pub seconds: f64,
}

/// One write's worth of requests, sequence numbers from `first_seq` on, each message
/// padded to 4 bytes (the kernel steps from one to the next by NLMSG_ALIGN(len)).
fn encode_window(messages: Vec<XfrmMessage>, first_seq: u32) -> Zeroizing<Vec<u8>> {
    let mut bytes = Zeroizing::new(Vec::new());
    for (seq, msg) in (first_seq..).zip(messages) {
        bytes.extend_from_slice(&message::encode(message::request(msg, Reply::Ack, seq)));
        let aligned = bytes.len().next_multiple_of(4);
        bytes.resize(aligned, 0);
    }
    bytes
}

/// Requests encoded for [`Batch::send`], keys included (wiped when dropped).
pub struct Prepared {
    windows: Vec<Window>,
}

/// One write's requests: its first sequence number, what each request does, the bytes.
struct Window {
    first_seq: u32,
    ops: Vec<Operation>,
    bytes: Zeroizing<Vec<u8>>,
}

/// A netlink XFRM socket sending `window` requests per write.
pub struct Batch {
    socket: Socket,
    window: usize,
    seq: u32,
}

impl Batch {
    /// A socket in the calling thread's namespace whose buffers hold a whole window of
    /// requests and of acks (`SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`: needs CAP_NET_ADMIN, as
    /// every XFRM change does).
    pub fn open(window: NonZeroUsize) -> Result<Batch, XfrmError> {
        use nix::sys::socket::{setsockopt, sockopt};
        let socket = XfrmHandle::new_socket().map_err(|source| XfrmError::Socket {
            op: Operation::OpenSocket,
            source,
        })?;
        let bytes = (window.get() * BUFFER_PER_REQUEST).max(MIN_BUFFER);
        for set in [
            setsockopt(&socket, sockopt::SndBufForce, &bytes),
            setsockopt(&socket, sockopt::RcvBufForce, &bytes),
        ] {
            set.map_err(|e| XfrmError::Socket {
                op: Operation::OpenSocket,
                source: e.into(),
            })?;
        }
        Ok(Batch {
            socket,
            window: window.get(),
            seq: 1,
        })
    }

    /// `ip xfrm state add …` for every spec, encoded a window per write.
    pub fn sas(&mut self, specs: &[SaSpec]) -> Prepared {
        self.prepare(
            specs
                .iter()
                .map(|s| (Operation::InstallSa(s.id()), message::add_sa(s))),
        )
    }

    /// `ip xfrm policy add …` for every spec, encoded a window per write.
    pub fn policies(&mut self, specs: &[PolicySpec]) -> Prepared {
        self.prepare(specs.iter().map(|p| {
            let op = Operation::InstallPolicy {
                selector: p.selector,
                direction: p.direction.name(),
            };
            (op, message::add_policy(p))
        }))
    }

    /// `ip xfrm state flush`: every SA of this namespace, the lab's or not (the caller owns
    /// the namespace).
    pub fn flush_sas(&mut self) -> Result<(), XfrmError> {
        self.one(Operation::FlushSas, message::flush_sa())
    }

    /// `ip xfrm policy flush`: every policy of this namespace.
    pub fn flush_policies(&mut self) -> Result<(), XfrmError> {
        self.one(Operation::FlushPolicies, message::flush_policy())
    }

    fn one(&mut self, op: Operation, message: XfrmMessage) -> Result<(), XfrmError> {
        let prepared = self.prepare(std::iter::once((op, message)));
        match self.send(&prepared, &|| false)?.refused.pop() {
            Some(refused) => Err(refused.error),
            None => Ok(()),
        }
    }

    fn prepare(&mut self, requests: impl Iterator<Item = (Operation, XfrmMessage)>) -> Prepared {
        let mut requests = requests.peekable();
        let mut windows = Vec::new();
        while requests.peek().is_some() {
            let (ops, messages): (Vec<Operation>, Vec<XfrmMessage>) =
                requests.by_ref().take(self.window).unzip();
            let first_seq = self.seq;
            self.seq = self.seq.wrapping_add(ops.len() as u32);
            let bytes = encode_window(messages, first_seq);
            windows.push(Window {
                first_seq,
                ops,
                bytes,
            });
        }
        Prepared { windows }
    }

    /// Sends `prepared` a window per write and collects each window's acks before the next
    /// one; `stop` is asked between windows. The time taken is the writes and the acks: the
    /// kernel's work, not the building of messages.
    pub fn send(&mut self, prepared: &Prepared, stop: &dyn Fn() -> bool) -> Result<BatchOutcome, XfrmError> {
        let mut outcome = BatchOutcome::default();
        let started = Instant::now();
        let mut index = 0;
        for w in &prepared.windows {
            if stop() {
                outcome.stopped = true;
                break;
            }
            self.socket
                .send_to(&w.bytes, &SocketAddr::new(0, 0), 0)
                .map_err(|source| XfrmError::Socket {
                    op: w.ops[0].clone(),
                    source,
                })?;
            self.collect_acks(w, index, &mut outcome)?;
            index += w.ops.len();
        }
        outcome.seconds = started.elapsed().as_secs_f64();
        Ok(outcome)
    }

    /// Reads until every request of the window sent with sequence numbers from `first_seq`
    /// has its ack or error (an `NLMSG_ERROR` whose code is 0 or the errno, negated).
    fn collect_acks(
        &self,
        window: &Window,
        index: usize,
        outcome: &mut BatchOutcome,
    ) -> Result<(), XfrmError> {
        let (first_seq, ops) = (window.first_seq, &window.ops);
        let mut answered = 0;
        while answered < ops.len() {
            let op = &ops[answered];
            let (datagram, _) = self.socket.recv_from_full().map_err(|source| XfrmError::Socket {
                op: op.clone(),
                source,
            })?;
            let decode = |detail: String| XfrmError::Decode {
                op: op.clone(),
                detail,
            };
            let mut offset = 0;
            while offset < datagram.len() {
                let message =
                    NetlinkBuffer::new_checked(&datagram[offset..]).map_err(|e| decode(e.to_string()))?;
                let len = message.length() as usize;
                if len == 0 {
                    return Err(decode("a message of length 0".into()));
                }
                offset += len.next_multiple_of(4);
                let at = message.sequence_number().wrapping_sub(first_seq) as usize;
                // Only acks and errors answer an add; an earlier window's are all in.
                if message.message_type() != NLMSG_ERROR || at >= ops.len() {
                    continue;
                }
                let code = message
                    .payload()
                    .first_chunk::<4>()
                    .map(|c| i32::from_ne_bytes(*c))
                    .ok_or_else(|| decode("an error message without its code".into()))?;
                answered += 1;
                match code {
                    0 => outcome.acked += 1,
                    errno => outcome.refused.push(Refused {
                        index: index + at,
                        error: XfrmError::from_errno(ops[at].clone(), errno.abs(), None),
                    }),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PolicyDirection, Template, TrafficSelector};
    use crate::range::ReqId;
    use model::IpsecMode;

    /// A window is the iproute2 requests one after the other, numbered in turn: here the
    /// out and in policies of `message`'s fixtures, then an SA flush (17 bytes, padded).
    #[test]
    fn a_window_is_iproute2s_requests_back_to_back() {
        let ip = |s: &str| s.parse().unwrap();
        let policy = |src, dst, dir, tsrc, tdst, reqid| {
            let template = Template {
                src: ip(tsrc),
                dst: ip(tdst),
                reqid: ReqId(reqid),
                mode: IpsecMode::Tunnel,
            };
            message::add_policy(&PolicySpec::new(
                TrafficSelector::hosts(ip(src), ip(dst)),
                dir,
                template,
            ))
        };
        let messages = vec![
            policy(
                "198.19.0.1",
                "198.19.0.2",
                PolicyDirection::Out,
                "198.18.0.1",
                "198.18.0.2",
                0x1a5001,
            ),
            policy(
                "198.19.0.2",
                "198.19.0.1",
                PolicyDirection::In,
                "198.18.0.2",
                "198.18.0.1",
                0x1a5002,
            ),
            message::flush_sa(),
        ];
        let got = encode_window(messages, 7);
        let mut want = Vec::new();
        for (seq, name) in (7u32..).zip(["policy_out_tunnel", "policy_in_tunnel", "sa_flush"]) {
            let mut one = testcap::hex_fixture("iproute2", name);
            one[8..12].copy_from_slice(&seq.to_ne_bytes());
            // iproute2 sets NLM_F_ACK for the flush too; the padding is the next message's.
            want.extend_from_slice(&one);
            want.resize(want.len().next_multiple_of(4), 0);
        }
        assert_eq!(got.as_slice(), want.as_slice());
    }
}
