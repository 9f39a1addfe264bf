//! The receive path, UDP → decrypt → TUN, and its buffers: one batch of receives (GRO
//! buffers split into their datagrams), each datagram decrypted in place and its inner
//! packet checked (only peer → this end passes: a key holder must not reach other
//! addresses of this host or the networks behind it), the packets written to the TUN device
//! one by one or, with offload, joined first so one write carries up to 64 KiB.
//!
//! Leaves out: when it runs (`event_loop`), the socket (`udp`), the joining rules
//! (`offload`) and the packet format (`tunnel-proto`).

use std::io;

use tunnel_proto::{Endpoint, InnerAddresses};

use crate::offload::{self, Coalescer, Group, PacketRef};
use crate::stats::{Phase, TunnelStats};
use crate::tun::Tun;
use udpbatch::{self as udp, Received, Udp};

/// Receive buffers (each a datagram or a GRO bundle) per `recvmmsg`.
const RX_MESSAGES: usize = 32;
/// A GRO bundle is at most one IP packet's worth of datagrams.
const RX_BUFFER_GRO: usize = 65_536;
const RX_BUFFER_PLAIN: usize = 2048;

pub(crate) struct ReceivePath {
    bufs: Vec<Vec<u8>>,
    received: Vec<Received>,
    /// With TUN offload: where the decrypted packets of a batch lie, and the group being
    /// joined (both kept for their allocations). None: each packet is written on its own.
    join: Option<(Vec<PacketRef>, Group)>,
}

impl ReceivePath {
    pub fn new(udp_gro: bool, tun_offload: bool) -> ReceivePath {
        let size = if udp_gro { RX_BUFFER_GRO } else { RX_BUFFER_PLAIN };
        ReceivePath {
            bufs: vec![vec![0u8; size]; RX_MESSAGES],
            received: vec![Received::default(); RX_MESSAGES],
            join: tun_offload.then(|| {
                (
                    Vec::with_capacity(RX_MESSAGES * udp::GSO_MAX_SEGMENTS),
                    Group::default(),
                )
            }),
        }
    }

    /// Receives one batch, decrypts every datagram and writes what passed (authentication,
    /// replay window, then `inner`) to TUN. Returns how many buffers the socket filled (0:
    /// nothing was waiting); an error is the socket's, and fatal.
    pub fn pump(
        &mut self,
        tun: &Tun,
        udp: &Udp,
        endpoint: &mut Endpoint,
        inner: &InnerAddresses,
        stats: &mut TunnelStats,
    ) -> io::Result<usize> {
        let received = udp.recv_batch(&mut self.bufs, &mut self.received);
        stats.lap(Phase::UdpRecv);
        let got = match received {
            Ok(got) => got,
            // A queued ICMP error (the peer not yet listening, say) was consumed instead:
            // nothing to decrypt, but not fatal, and the socket may hold more.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => return Ok(1),
            Err(e) => return Err(e),
        };
        if got == 0 {
            return Ok(0);
        }
        stats.recv_calls += 1;
        stats.recv_buffers += got as u64;
        if let Some((decrypted, _)) = &mut self.join {
            decrypted.clear();
        }
        for (i, received) in self.received[..got].iter().enumerate() {
            for datagram in received.datagrams() {
                stats.datagrams_in += 1;
                let buf = &mut self.bufs[i][datagram.clone()];
                // Checked before joining too: only packets that passed enter a group.
                let packet = match endpoint
                    .decap(buf)
                    .and_then(|p| inner.check_received(&buf[p.clone()]).map(|()| p))
                {
                    Ok(packet) => packet,
                    Err(reason) => {
                        stats.drops.count(reason);
                        continue;
                    }
                };
                match &mut self.join {
                    Some((decrypted, _)) => decrypted.push(PacketRef {
                        buf: i,
                        start: datagram.start + packet.start,
                        end: datagram.start + packet.end,
                    }),
                    // A write per packet: timing each costs little beside the system call.
                    None => {
                        stats.lap(Phase::Crypto);
                        match tun.write(&buf[packet.clone()]) {
                            Ok(_) => {
                                stats.tun_writes += 1;
                                stats.delivered.add(1, packet.len());
                            }
                            Err(_) => stats.errors.tun_write += 1,
                        }
                        stats.lap(Phase::TunWrite);
                    }
                }
            }
        }
        stats.lap(Phase::Crypto);
        if let Some((decrypted, group)) = &mut self.join {
            let authenticated = endpoint.suite().authenticates();
            offload::coalesce(&mut self.bufs, decrypted, authenticated, group, |group, bufs| {
                write_joined(tun, group, bufs, stats)
            });
            stats.lap(Phase::Joining);
        }
        Ok(got)
    }
}

/// Writes one joined packet (or a lone one) to TUN: its vnet header, its first packet
/// (rewritten into the joined packet's head) and the payloads of the others, in one `writev`.
fn write_joined(tun: &Tun, group: &Group, bufs: &mut [Vec<u8>], stats: &mut TunnelStats) {
    let Some(first) = group.first else { return };
    let hdr = Coalescer::finish(group, &mut bufs[first.buf][first.start..first.end]).bytes();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + group.more.len());
    parts.push(&hdr);
    parts.push(&bufs[first.buf][first.start..first.end]);
    parts.extend(group.more.iter().map(|m| &bufs[m.buf][m.start..m.end]));
    stats.lap(Phase::Joining);
    let written = tun.write_parts(&parts);
    stats.lap(Phase::TunWrite);
    match written {
        Ok(_) => {
            stats.tun_writes += 1;
            stats.delivered.add(group.segments(), group.packet_bytes());
        }
        Err(_) => stats.errors.tun_write += group.segments() as u64,
    }
}
