//! The tunnel's hand-written TUN offload layer against `tun-rs`'s (a port of wireguard-go's
//! `tun/offload_linux.go`) in one run (issue 28): which one the tunnel should keep.
//!
//! Both halves of the layer, on the same bytes, with no I/O (the system calls are the same
//! either way):
//!
//! * **split** (send path): a 64 KiB TCP/IPv4 super-packet as the kernel hands it over TUN
//!   with TSO (vnet header `NEEDS_CSUM`, `GSO_TCPV4`), cut into wire-sized segments with their
//!   IP and full TCP checksums: `offload::Segmenter` against `tun_rs::gso_split`;
//! * **join** (receive path): those segments, decrypted, joined into one packet with a
//!   `GSO_TCPV4` vnet header for one TUN write: `offload::coalesce` + `Coalescer::finish`
//!   (which leaves the payloads where they are, for `writev`) against `tun_rs::handle_gro`
//!   (which copies them behind the first packet, for one `write`).
//!
//! First each pair's outputs are compared byte for byte; then each is timed for SECONDS,
//! alternating, and the nanoseconds per segment and their ratio are printed. The join's
//! inputs are restored before every call (the join rewrites the first packet in place), so
//! that copy, timed alone, is printed too and taken off both; `tun-rs`'s GRO tables are
//! built before its clock runs (see `time_tun_rs_join`).
//!
//! ```sh
//! cargo run --release -p tunnel --example vs_tun_rs [SECONDS]
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use tunnel::offload::{self, coalesce, Coalescer, Group, PacketRef, Segmenter, VnetHdr, VNET_HDR_LEN};

/// The inner MTU of a CBC+HMAC tunnel on a 1500-byte link, less IPv4 (20) and TCP with
/// timestamps (32): the segment size the kernel picks.
const GSO_SIZE: usize = 1407 - 52;
const HDR_LEN: usize = 52;
/// Segments in one super-packet: as many as fit 64 KiB.
const SEGMENTS: usize = (65_535 - HDR_LEN) / GSO_SIZE;

/// A TCP/IPv4 super-packet as TUN gives it with TSO: IP length over everything, the TCP
/// checksum field holding the pseudo-header sum (`NEEDS_CSUM`), PSH on.
fn super_packet() -> (VnetHdr, Vec<u8>) {
    let payload_len = SEGMENTS * GSO_SIZE - 700;
    let len = HDR_LEN + payload_len;
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&[10, 99, 0, 1]);
    p[16..20].copy_from_slice(&[10, 99, 0, 2]);
    let ip_csum = offload::checksum(&p[..20]);
    p[10..12].copy_from_slice(&ip_csum.to_be_bytes());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5201u16.to_be_bytes());
    p[24..28].copy_from_slice(&0x1000_0000u32.to_be_bytes());
    p[28..32].copy_from_slice(&77u32.to_be_bytes());
    p[32] = 8 << 4;
    p[33] = 0x18; // ACK | PSH
    p[34..36].copy_from_slice(&502u16.to_be_bytes());
    p[40..52].copy_from_slice(&[1, 1, 8, 10, 0, 1, 2, 3, 0, 4, 5, 6]);
    for (i, b) in p[HDR_LEN..].iter_mut().enumerate() {
        *b = (i * 7 + i / 251) as u8;
    }
    // The pseudo-header sum, not complemented, as the kernel leaves it for the device.
    let mut pseudo = Vec::from(&p[12..20]);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&((len - 20) as u16).to_be_bytes());
    let partial = !offload::checksum(&pseudo);
    p[36..38].copy_from_slice(&partial.to_be_bytes());
    let hdr = VnetHdr {
        flags: 1,
        gso_type: 1,
        hdr_len: HDR_LEN as u16,
        gso_size: GSO_SIZE as u16,
        csum_start: 20,
        csum_offset: 16,
    };
    (hdr, p)
}

fn tun_rs_hdr(h: &VnetHdr) -> tun_rs::VirtioNetHdr {
    tun_rs::VirtioNetHdr {
        flags: h.flags,
        gso_type: h.gso_type,
        hdr_len: h.hdr_len,
        gso_size: h.gso_size,
        csum_start: h.csum_start,
        csum_offset: h.csum_offset,
    }
}

fn split_lab(pkt: &[u8], hdr: &VnetHdr, out: &mut [Vec<u8>], sizes: &mut [usize]) -> usize {
    let mut seg = Segmenter::new(pkt, hdr).expect("a TCP/IPv4 super-packet");
    let mut n = 0;
    while let Some(len) = out.get_mut(n).and_then(|buf| seg.next_into(buf)) {
        sizes[n] = len;
        n += 1;
    }
    n
}

fn split_tun_rs(pkt: &mut [u8], hdr: &VnetHdr, out: &mut [Vec<u8>], sizes: &mut [usize]) -> usize {
    tun_rs::gso_split(pkt, tun_rs_hdr(hdr), out, sizes, 0, false).expect("tun-rs splits it")
}

/// The lab's join: one group here; returns the vnet header and the packet it makes (head
/// in place, payloads where they lie: assembled only to compare).
fn join_lab(bufs: &mut [Vec<u8>], refs: &[PacketRef], group: &mut Group, assemble: bool) -> Vec<u8> {
    let mut joined = Vec::new();
    coalesce(bufs, refs, true, group, |g, bufs| {
        let first = g.first.expect("a group has a first packet");
        let hdr = Coalescer::finish(g, &mut bufs[first.buf][first.start..first.end]);
        if assemble {
            joined.extend_from_slice(&hdr.bytes());
            joined.extend_from_slice(&bufs[first.buf][first.start..first.end]);
            for m in &g.more {
                joined.extend_from_slice(&bufs[m.buf][m.start..m.end]);
            }
        } else {
            black_box((hdr, g.more.len()));
        }
    });
    joined
}

/// tun-rs's join: packets at `VNET_HDR_LEN` in each buffer; returns the first packet it
/// would write, vnet header included.
fn join_tun_rs(bufs: &mut [Vec<u8>], to_write: &mut Vec<usize>) -> Vec<u8> {
    let (mut tcp, mut udp) = (Default::default(), Default::default());
    to_write.clear();
    tun_rs::handle_gro(bufs, VNET_HDR_LEN, &mut tcp, &mut udp, false, to_write).expect("tun-rs joins them");
    assert_eq!(to_write.len(), 1, "tun-rs made one packet of the run");
    bufs[to_write[0]].clone()
}

/// tun-rs's join with its input restored each call, for `seconds`; returns nanoseconds per
/// call. Its device path empties its GRO tables between calls (`reset`, private), so the
/// tables here are built before the clock runs, a hundred at a time (each pre-allocates
/// about a megabyte, which costs far more than the join), and dropped after it stops.
fn time_tun_rs_join(
    seconds: f64,
    work: &mut [Vec<u8>],
    inputs: &[Vec<u8>],
    to_write: &mut Vec<usize>,
) -> f64 {
    let (mut timed, mut calls) = (Duration::ZERO, 0u64);
    while timed < Duration::from_secs_f64(seconds) {
        let mut tables: Vec<_> = (0..100)
            .map(|_| {
                let (mut tcp, mut udp) = (Default::default(), Default::default());
                // Infers the tables' types (tun-rs does not export them), on no packets.
                let none: &mut [Vec<u8>] = &mut [];
                tun_rs::handle_gro(none, VNET_HDR_LEN, &mut tcp, &mut udp, false, to_write).unwrap();
                (tcp, udp)
            })
            .collect();
        let start = Instant::now();
        for (tcp, udp) in &mut tables {
            for (w, s) in work.iter_mut().zip(inputs) {
                w.clear();
                w.extend_from_slice(s);
            }
            to_write.clear();
            tun_rs::handle_gro(work, VNET_HDR_LEN, tcp, udp, false, to_write).unwrap();
        }
        timed += start.elapsed();
        calls += tables.len() as u64;
        drop(tables);
    }
    timed.as_secs_f64() * 1e9 / calls as f64
}

/// Runs `f` for `seconds`; returns nanoseconds per call.
fn time(seconds: f64, mut f: impl FnMut()) -> f64 {
    let (start, mut calls) = (Instant::now(), 0u64);
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        for _ in 0..16 {
            f();
        }
        calls += 16;
    }
    start.elapsed().as_secs_f64() * 1e9 / calls as f64
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .map_or(1.0, |s| s.parse().expect("SECONDS"));
    let (hdr, pkt) = super_packet();

    // Split: the same segments from both?
    let mut lab_out = vec![vec![0u8; HDR_LEN + GSO_SIZE]; SEGMENTS];
    let mut rs_out = lab_out.clone();
    let (mut lab_sizes, mut rs_sizes) = (vec![0; SEGMENTS], vec![0; SEGMENTS]);
    let mut rs_in = pkt.clone();
    let n = split_lab(&pkt, &hdr, &mut lab_out, &mut lab_sizes);
    assert_eq!(split_tun_rs(&mut rs_in, &hdr, &mut rs_out, &mut rs_sizes), n);
    for i in 0..n {
        assert_eq!(
            lab_out[i][..lab_sizes[i]],
            rs_out[i][..rs_sizes[i]],
            "segment {i} differs"
        );
        assert!(
            offload::checksums_ok(&lab_out[i][..lab_sizes[i]]),
            "segment {i}'s checksums"
        );
    }
    println!("split: {n} segments of up to {GSO_SIZE} payload bytes, identical from both");

    // Join: the same packet from both?
    let segments: Vec<Vec<u8>> = (0..n).map(|i| lab_out[i][..lab_sizes[i]].to_vec()).collect();
    let lab_bufs: Vec<Vec<u8>> = segments.clone();
    let refs: Vec<PacketRef> = segments
        .iter()
        .enumerate()
        .map(|(buf, s)| PacketRef {
            buf,
            start: 0,
            end: s.len(),
        })
        .collect();
    // tun-rs joins only into a buffer with room for the whole packet (it never grows one).
    let rs_bufs = || -> Vec<Vec<u8>> {
        segments
            .iter()
            .map(|s| {
                let mut b = Vec::with_capacity(VNET_HDR_LEN + 65_536);
                b.extend_from_slice(&[0; VNET_HDR_LEN]);
                b.extend_from_slice(s);
                b
            })
            .collect()
    };
    let mut group = Group::default();
    let mut to_write = Vec::new();
    let ours = join_lab(&mut lab_bufs.clone(), &refs, &mut group, true);
    let theirs = join_tun_rs(&mut rs_bufs(), &mut to_write);
    if ours == theirs {
        println!(
            "join: {n} segments into one {}-byte packet, identical from both",
            ours.len() - VNET_HDR_LEN
        );
    } else {
        let at = ours
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a != b)
            .unwrap_or(ours.len().min(theirs.len()));
        println!(
            "join: the packets differ from byte {at} (the vnet header is bytes 0..{VNET_HDR_LEN}): lab {:02x?}, tun-rs {:02x?}; lengths {} and {}",
            &ours[at..(at + 8).min(ours.len())],
            &theirs[at..(at + 8).min(theirs.len())],
            ours.len(),
            theirs.len()
        );
    }

    println!("\n{seconds} s per cell, alternating, 3 rounds; ns per segment ({n} segments a call)");
    let per_segment = |ns: f64| ns / n as f64;
    let (mut lab_split, mut rs_split, mut lab_join, mut rs_join) = (vec![], vec![], vec![], vec![]);
    let (mut lab_work, mut rs_work, rs_bufs) = (lab_bufs.clone(), rs_bufs(), rs_bufs());
    for round in 1..=3 {
        let a = per_segment(time(seconds, || {
            black_box(split_lab(black_box(&pkt), &hdr, &mut lab_out, &mut lab_sizes));
        }));
        // gso_split takes its input `&mut` but only reads it.
        let b = per_segment(time(seconds, || {
            black_box(split_tun_rs(
                black_box(&mut rs_in),
                &hdr,
                &mut rs_out,
                &mut rs_sizes,
            ));
        }));
        let restore_lab = per_segment(time(seconds, || {
            for (w, s) in lab_work.iter_mut().zip(&lab_bufs) {
                w[..s.len()].copy_from_slice(s);
            }
            black_box(&lab_work);
        }));
        let restore_rs = per_segment(time(seconds, || {
            for (w, s) in rs_work.iter_mut().zip(&rs_bufs) {
                w.clear();
                w.extend_from_slice(s);
            }
            black_box(&rs_work);
        }));
        let c = per_segment(time(seconds, || {
            for (w, s) in lab_work.iter_mut().zip(&lab_bufs) {
                w[..s.len()].copy_from_slice(s);
            }
            join_lab(&mut lab_work, &refs, &mut group, false);
        })) - restore_lab;
        let d = per_segment(time_tun_rs_join(seconds, &mut rs_work, &rs_bufs, &mut to_write)) - restore_rs;
        println!(
            "round {round}: split lab {a:.1}, tun-rs {b:.1}; join lab {c:.1}, tun-rs {d:.1} (input copies of {restore_lab:.1} and {restore_rs:.1} taken off)"
        );
        lab_split.push(a);
        rs_split.push(b);
        lab_join.push(c);
        rs_join.push(d);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b, c, d) = (
        median(&mut lab_split),
        median(&mut rs_split),
        median(&mut lab_join),
        median(&mut rs_join),
    );
    println!("\nmedians, ns per segment: split lab {a:.1}, tun-rs {b:.1}; join lab {c:.1}, tun-rs {d:.1}");
    println!(
        "tun-rs / lab (above 1: the lab's is faster): split {:.2}, join {:.2}",
        b / a,
        d / c
    );
}
