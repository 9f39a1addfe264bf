//! The netem qdisc over rtnetlink: `tc qdisc add dev DEV root netem ...`, read back with a
//! qdisc dump, and `tc qdisc del dev DEV root`.
//!
//! netlink-packet-route has the qdisc message (`TcMessage`) but no netem options: netem's
//! TCA_OPTIONS is not a nest but `struct tc_netem_qopt` followed by attributes, so that
//! payload is built and parsed here ([`NetemQdisc`]), in the kernel's units, as tc 6.1
//! sends it (byte-tested against tests/fixtures/iproute2/netem_*.hex).

use futures::StreamExt;
use model::NetemSpec;
use rtnetlink::packet_core::{
    DefaultNla, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST,
};
use rtnetlink::packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcOption};
use rtnetlink::packet_route::RouteNetlinkMessage;

use crate::topology::link_index;
use crate::{Namespace, NetnsError};

const KIND: &str = "netem";
const TCA_OPTIONS: u16 = 2;
const TCA_NETEM_REORDER: u16 = 3;
const TCA_NETEM_RATE: u16 = 6;
const TCA_NETEM_RATE64: u16 = 8;
const TCA_NETEM_LATENCY64: u16 = 10;
const TCA_NETEM_JITTER64: u16 = 11;
/// `sizeof(struct tc_netem_qopt)`: latency, limit, loss, gap, duplicate, jitter (u32 each).
const QOPT_LEN: usize = 24;
/// `sizeof(struct tc_netem_rate)`: rate, packet_overhead, cell_size, cell_overhead.
const RATE_LEN: usize = 16;
/// Nanoseconds per psched tick (`PSCHED_SHIFT` 6): tc gives latency and jitter in ticks.
const NS_PER_TICK: u64 = 64;

/// A netem qdisc's parameters in the kernel's units: what tc sends and the kernel dumps.
/// Two are equal exactly when the kernel runs the same conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetemQdisc {
    pub latency_ticks: u32,
    pub jitter_ticks: u32,
    pub limit: u32,
    /// Probabilities scaled to `u32::MAX` (100 %).
    pub loss: u32,
    pub duplicate: u32,
    pub reorder: u32,
    /// Every gap-th packet is reordered; tc sets 1 with `reorder`, else 0.
    pub gap: u32,
    /// Bytes per second; 0: no rate limit.
    pub rate: u64,
}

fn scaled(percent: f64) -> u32 {
    // As tc's get_percent: rint(fraction * UINT32_MAX).
    (percent / 100.0 * f64::from(u32::MAX)).round() as u32
}

fn percent(scaled: u32) -> f64 {
    // Six decimals: what a user can have typed, without the u32 rounding's tail.
    (f64::from(scaled) / f64::from(u32::MAX) * 100.0 * 1e6).round() / 1e6
}

fn ticks(ns: u64) -> u32 {
    u32::try_from(ns / NS_PER_TICK).unwrap_or(u32::MAX)
}

impl NetemQdisc {
    pub fn from_spec(spec: &NetemSpec) -> NetemQdisc {
        let reorder = scaled(spec.reorder_percent);
        NetemQdisc {
            latency_ticks: ticks(spec.delay_ns),
            jitter_ticks: ticks(spec.jitter_ns),
            limit: spec.limit,
            loss: scaled(spec.loss_percent),
            duplicate: scaled(spec.duplicate_percent),
            reorder,
            gap: u32::from(reorder > 0),
            rate: spec.rate_bytes_per_s.unwrap_or(0),
        }
    }

    /// The parameters in tc's words.
    pub fn to_spec(&self) -> NetemSpec {
        NetemSpec {
            delay_ns: u64::from(self.latency_ticks) * NS_PER_TICK,
            jitter_ns: u64::from(self.jitter_ticks) * NS_PER_TICK,
            loss_percent: percent(self.loss),
            duplicate_percent: percent(self.duplicate),
            reorder_percent: percent(self.reorder),
            rate_bytes_per_s: (self.rate > 0).then_some(self.rate),
            limit: self.limit,
        }
    }

    /// TCA_OPTIONS' payload as tc sends it: the qopt, then REORDER, RATE64 (rates of 2^32
    /// bytes/s and more) and RATE, each only when asked for.
    pub fn options(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(QOPT_LEN + 40);
        for v in [
            self.latency_ticks,
            self.limit,
            self.loss,
            self.gap,
            self.duplicate,
            self.jitter_ticks,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        if self.reorder > 0 {
            let mut v = self.reorder.to_ne_bytes().to_vec();
            v.extend_from_slice(&0u32.to_ne_bytes()); // correlation
            push_attr(&mut out, TCA_NETEM_REORDER, &v);
        }
        if self.rate > 0 {
            let rate32 = match u32::try_from(self.rate) {
                Ok(r) => r,
                Err(_) => {
                    push_attr(&mut out, TCA_NETEM_RATE64, &self.rate.to_ne_bytes());
                    u32::MAX
                }
            };
            let mut v = rate32.to_ne_bytes().to_vec();
            v.resize(RATE_LEN, 0); // no packet or cell overhead
            push_attr(&mut out, TCA_NETEM_RATE, &v);
        }
        out
    }

    /// Reads TCA_OPTIONS' payload as the kernel dumps it (the qopt, then attributes; the
    /// 64-bit latency, jitter and rate win over the qopt's 32-bit fields).
    pub fn parse_options(payload: &[u8]) -> Result<NetemQdisc, String> {
        if payload.len() < QOPT_LEN {
            return Err(format!(
                "netem options of {} bytes, shorter than tc_netem_qopt",
                payload.len()
            ));
        }
        let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let mut q = NetemQdisc {
            latency_ticks: u32_at(payload, 0),
            limit: u32_at(payload, 4),
            loss: u32_at(payload, 8),
            gap: u32_at(payload, 12),
            duplicate: u32_at(payload, 16),
            jitter_ticks: u32_at(payload, 20),
            reorder: 0,
            rate: 0,
        };
        let mut rate64 = None;
        let mut rest = &payload[QOPT_LEN..];
        while rest.len() >= 4 {
            let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
            let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
            if len < 4 || len > rest.len() {
                return Err(format!("netem attribute {kind} of bad length {len}"));
            }
            let value = &rest[4..len];
            let u64_value = || {
                value
                    .get(..8)
                    .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
            };
            match kind {
                TCA_NETEM_REORDER if value.len() >= 4 => q.reorder = u32_at(value, 0),
                TCA_NETEM_RATE if value.len() >= 4 => q.rate = u64::from(u32_at(value, 0)),
                TCA_NETEM_RATE64 => rate64 = u64_value(),
                TCA_NETEM_LATENCY64 => {
                    if let Some(ns) = u64_value() {
                        q.latency_ticks = ticks(ns);
                    }
                }
                TCA_NETEM_JITTER64 => {
                    if let Some(ns) = u64_value() {
                        q.jitter_ticks = ticks(ns);
                    }
                }
                _ => {}
            }
            rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
        }
        if let Some(r) = rate64 {
            q.rate = r;
        }
        Ok(q)
    }
}

fn push_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// `tc qdisc add dev <index> root netem ...`: RTM_NEWQDISC, create and exclusive, acked.
pub fn add_message(index: u32, qdisc: &NetemQdisc) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut tc = root_message(index);
    tc.attributes.push(TcAttribute::Kind(KIND.to_string()));
    // Not TcAttribute::Options: that one nests attributes, and netem's payload is a struct.
    tc.attributes
        .push(TcAttribute::Other(DefaultNla::new(TCA_OPTIONS, qdisc.options())));
    request(
        RouteNetlinkMessage::NewQueueDiscipline(tc),
        NLM_F_CREATE | NLM_F_EXCL,
    )
}

/// `tc qdisc del dev <index> root`: RTM_DELQDISC, acked.
pub fn delete_message(index: u32) -> NetlinkMessage<RouteNetlinkMessage> {
    request(RouteNetlinkMessage::DelQueueDiscipline(root_message(index)), 0)
}

fn root_message(index: u32) -> TcMessage {
    let mut tc = TcMessage::with_index(index as i32);
    tc.header.parent = TcHandle::ROOT;
    tc
}

fn request(inner: RouteNetlinkMessage, flags: u16) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut msg = NetlinkMessage::from(inner);
    msg.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    msg.finalize();
    msg
}

/// Installs `spec` as the root qdisc of `device` in `ns`. A kernel without netem is
/// [`NetnsError::NoNetem`].
pub async fn install(ns: &Namespace, device: &str, spec: &NetemSpec) -> Result<(), NetnsError> {
    let h = ns.rtnetlink().await?;
    let index = link_index(&h, ns, device).await?;
    let action = format!("add netem qdisc \"{spec}\" on {device}");
    match acked(h, add_message(index, &NetemQdisc::from_spec(spec))).await {
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENOENT => Err(NetnsError::NoNetem),
        other => other.map_err(|e| crate::topology::netlink(ns, action, e)),
    }
}

/// The netem qdisc at the root of `device` in `ns`, as the kernel reports it; None when the
/// root qdisc is something else (the veth's default, after [`remove`]).
pub async fn installed(ns: &Namespace, device: &str) -> Result<Option<NetemQdisc>, NetnsError> {
    let h = ns.rtnetlink().await?;
    let index = link_index(&h, ns, device).await?;
    let mut dump = h.qdisc().get().index(index as i32).execute();
    while let Some(tc) = dump.next().await {
        let tc = tc.map_err(|e| crate::topology::netlink(ns, format!("dump qdiscs of {device}"), e))?;
        // Older kernels ignore the index in a dump request: filter here too.
        if tc.header.index != index as i32 || tc.header.parent != TcHandle::ROOT {
            continue;
        }
        let is_netem = tc
            .attributes
            .iter()
            .any(|a| matches!(a, TcAttribute::Kind(k) if k == KIND));
        if !is_netem {
            return Ok(None);
        }
        for a in &tc.attributes {
            if let TcAttribute::Options(options) = a {
                if let Some(TcOption::Other(nla)) = options.first() {
                    return options_payload(nla)
                        .and_then(|p| NetemQdisc::parse_options(&p))
                        .map(Some)
                        .map_err(|why| NetnsError::NotFound {
                            what: format!("readable netem options on {device} ({why})"),
                            namespace: ns.name().to_string(),
                        });
                }
            }
        }
    }
    Ok(None)
}

/// The raw value of the TCA_OPTIONS attribute netlink-packet-route kept whole.
fn options_payload(nla: &DefaultNla) -> Result<Vec<u8>, String> {
    use rtnetlink::packet_core::Nla;
    let mut buf = vec![0; nla.value_len()];
    nla.emit_value(&mut buf);
    Ok(buf)
}

/// Deletes the root qdisc of `device` in `ns` (the veth goes back to its default).
pub async fn remove(ns: &Namespace, device: &str) -> Result<(), NetnsError> {
    let h = ns.rtnetlink().await?;
    let index = link_index(&h, ns, device).await?;
    acked(h, delete_message(index))
        .await
        .map_err(|e| crate::topology::netlink(ns, format!("delete the root qdisc of {device}"), e))
}

async fn acked(
    mut h: rtnetlink::Handle,
    msg: NetlinkMessage<RouteNetlinkMessage>,
) -> Result<(), rtnetlink::Error> {
    let mut replies = h.request(msg)?;
    while let Some(reply) = replies.next().await {
        if let NetlinkPayload::Error(e) = reply.payload {
            if e.code.is_some() {
                return Err(rtnetlink::Error::NetlinkError(e));
            }
        }
    }
    Ok(())
}

/// Whether this kernel has the netem qdisc: tried on the loopback device of a namespace
/// that only a scratch thread is in (it dies with the thread: nothing to clean up).
pub fn kernel_has_netem() -> bool {
    let probe = std::thread::spawn(|| -> Option<bool> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let (connection, h, _) = rtnetlink::new_connection().ok()?;
            tokio::spawn(connection);
            let spec: NetemSpec = "delay 1ms".parse().ok()?;
            // lo is index 1 in every new namespace.
            match acked(h, add_message(1, &NetemQdisc::from_spec(&spec))).await {
                Ok(()) => Some(true),
                Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENOENT => Some(false),
                Err(_) => None,
            }
        })
    });
    probe.join().ok().flatten().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    //! The requests are compared byte for byte with what tc 6.1 sent for the same command
    //! (tests/fixtures/iproute2/capture-netem.sh; the device there is ifindex 3), except
    //! the sequence number (bytes 8..12), which tc takes from the clock.
    use super::*;
    use rtnetlink::packet_core::Emitable;

    fn fixture(name: &str) -> Vec<u8> {
        testcap::hex_fixture("iproute2", name)
    }

    fn assert_matches_tc(name: &str, msg: NetlinkMessage<RouteNetlinkMessage>) {
        let mut got = vec![0; msg.buffer_len()];
        msg.emit(&mut got);
        let mut want = fixture(name);
        want[8..12].fill(0);
        assert_eq!(got.len(), want.len(), "{name}: length differs");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{name}: byte {i:#x} differs (ours {g:#04x}, tc {w:#04x})");
        }
    }

    fn qdisc(spec: &str) -> NetemQdisc {
        NetemQdisc::from_spec(&spec.parse().unwrap())
    }

    #[test]
    fn add_delay_loss_rate_matches_tc() {
        assert_matches_tc(
            "netem_delay20ms_loss0.1_rate1gbit",
            add_message(3, &qdisc("delay 20ms loss 0.1% rate 1gbit")),
        );
    }

    #[test]
    fn add_with_jitter_duplicate_reorder_and_a_64_bit_rate_matches_tc() {
        assert_matches_tc(
            "netem_jitter_duplicate_reorder_rate40gbit",
            add_message(
                3,
                &qdisc("delay 20ms 5ms loss 1% duplicate 2% reorder 25% rate 40gbit limit 5000"),
            ),
        );
    }

    #[test]
    fn delete_matches_tc() {
        assert_matches_tc("netem_delete", delete_message(3));
    }

    #[test]
    fn options_parse_back_to_the_same_parameters_and_words() {
        for spec in [
            "delay 20ms loss 0.1% rate 1gbit",
            "delay 20ms 5ms loss 1% duplicate 2% reorder 25% rate 40gbit limit 5000",
            // The kernel keeps whole 64 ns ticks: 250us would read back as 249984ns.
            "delay 256us",
        ] {
            let q = qdisc(spec);
            let back = NetemQdisc::parse_options(&q.options()).unwrap();
            assert_eq!(back, q, "{spec}");
            assert_eq!(back.to_spec().to_string(), spec);
        }
    }

    #[test]
    fn the_kernels_64_bit_attributes_win_over_the_qopt() {
        let mut payload = qdisc("delay 1ms").options();
        push_attr(&mut payload, TCA_NETEM_LATENCY64, &30_000_000u64.to_ne_bytes());
        push_attr(&mut payload, TCA_NETEM_RATE64, &(5u64 << 32).to_ne_bytes());
        let q = NetemQdisc::parse_options(&payload).unwrap();
        assert_eq!(q.to_spec().delay_ns, 30_000_000);
        assert_eq!(q.rate, 5 << 32);
        assert!(NetemQdisc::parse_options(&payload[..10]).is_err());
    }
}
