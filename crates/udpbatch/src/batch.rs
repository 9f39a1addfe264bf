//! The arithmetic of batched UDP, with no I/O: which datagrams one GSO send may carry, which
//! send errors mean the kernel refuses GSO for good, and how a GRO receive splits into its
//! datagrams (quinn-udp's `RecvMeta { len, stride }` is the model).
//!
//! Leaves out: the system calls (`udp`), and what the datagrams hold.

use std::io;
use std::ops::Range;

/// Most datagrams one GSO send may carry (the kernel's UDP_MAX_SEGMENTS).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes one GSO send may carry (an IP packet's length field, less headers).
pub const GSO_MAX_BYTES: usize = 65_000;
/// The largest UDP payload over IPv4: no datagram, and so no GRO stride, is longer.
pub const MAX_DATAGRAM: usize = 65_535 - 20 - 8;

/// How many datagrams from the front of `datagrams` one GSO send carries: a run of equal
/// lengths, optionally closed by one shorter datagram (the kernel cuts a GSO buffer into
/// segments of the first's length, the last one shorter), within the kernel's limits.
/// Always at least one when `datagrams` is not empty.
pub fn gso_run(datagrams: &[&[u8]]) -> usize {
    let Some(first) = datagrams.first() else {
        return 0;
    };
    let segment = first.len();
    if segment == 0 {
        // A segment size of 0 means "no GSO" to the kernel: an empty datagram goes alone.
        return 1;
    }
    let mut bytes = segment;
    let mut end = 1;
    for d in &datagrams[1..] {
        if end == GSO_MAX_SEGMENTS || d.len() > segment || d.is_empty() || bytes + d.len() > GSO_MAX_BYTES {
            break;
        }
        end += 1;
        bytes += d.len();
        if d.len() < segment {
            break;
        }
    }
    end
}

/// Whether a failed GSO send means GSO itself is refused here (a kernel without it, a device
/// without checksum offload, a route through an XFRM policy, `SO_NO_CHECK`), so the socket
/// should send datagram by datagram from now on; any other error loses only this batch.
pub fn refuses_gso(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP)
    )
}

/// A GRO segment size that cannot be split by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadStride {
    #[error("UDP GRO segment size 0 for {len} bytes")]
    Zero { len: usize },
    #[error("UDP GRO segment size {stride} is longer than any UDP datagram ({MAX_DATAGRAM} bytes)")]
    Oversized { stride: usize },
}

/// What one receive brought: `len` bytes holding datagrams of `stride` bytes each, the last
/// one shorter (a receive without GRO holds one datagram: `stride == len`). An empty receive
/// holds no datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    len: usize,
    stride: usize,
}

impl Received {
    pub fn new(len: usize, stride: usize) -> Result<Received, BadStride> {
        if stride == 0 && len > 0 {
            return Err(BadStride::Zero { len });
        }
        if stride > MAX_DATAGRAM {
            return Err(BadStride::Oversized { stride });
        }
        Ok(Received { len, stride })
    }

    /// Where each datagram lies in the receive buffer, in order.
    pub fn datagrams(&self) -> Datagrams {
        Datagrams {
            next: 0,
            len: self.len,
            stride: self.stride,
        }
    }
}

/// The datagrams of one [`Received`], as ranges of its buffer.
#[derive(Debug, Clone)]
pub struct Datagrams {
    next: usize,
    len: usize,
    stride: usize,
}

impl Iterator for Datagrams {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.next >= self.len {
            return None;
        }
        let start = self.next;
        // The stride is not 0 here: Received::new refuses it for a non-empty receive.
        self.next = start.saturating_add(self.stride).min(self.len);
        Some(start..self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(len: usize, stride: usize) -> Vec<Range<usize>> {
        Received::new(len, stride).unwrap().datagrams().collect()
    }

    #[test]
    fn a_gro_receive_splits_into_stride_sized_datagrams_the_last_shorter() {
        assert_eq!(split(3000, 1000), vec![0..1000, 1000..2000, 2000..3000]);
        assert_eq!(split(2500, 1000), vec![0..1000, 1000..2000, 2000..2500]);
        assert_eq!(split(1001, 1000), vec![0..1000, 1000..1001]);
    }

    #[test]
    fn a_receive_without_gro_is_one_datagram() {
        assert_eq!(split(1400, 1400), vec![0..1400]);
        // A stride beyond the length (the kernel's segment size for a lone segment) is one
        // datagram too, never a range past what arrived.
        assert_eq!(split(700, 1400), vec![0..700]);
        assert_eq!(split(0, 0), vec![]);
        assert_eq!(split(0, 1400), vec![]);
    }

    #[test]
    fn zero_and_oversized_strides_are_refused() {
        assert_eq!(Received::new(3000, 0), Err(BadStride::Zero { len: 3000 }));
        assert_eq!(
            Received::new(3000, MAX_DATAGRAM + 1),
            Err(BadStride::Oversized {
                stride: MAX_DATAGRAM + 1
            })
        );
        assert!(Received::new(MAX_DATAGRAM, MAX_DATAGRAM).is_ok());
        // Refused, not split: the iterator never sees a stride of 0 (an endless loop).
        assert_eq!(Received::default().datagrams().count(), 0);
    }

    fn runs(lens: &[usize]) -> Vec<usize> {
        let bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0; n]).collect();
        let mut datagrams: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        while !datagrams.is_empty() {
            let n = gso_run(&datagrams);
            out.push(n);
            datagrams.drain(..n);
        }
        out
    }

    #[test]
    fn a_gso_run_is_equal_lengths_closed_by_at_most_one_shorter() {
        assert_eq!(runs(&[100, 100, 100]), vec![3]);
        assert_eq!(runs(&[100, 100, 50, 100]), vec![3, 1]);
        assert_eq!(runs(&[100, 50, 50]), vec![2, 1]);
        // A longer datagram cannot join: the kernel would cut it at the first's length.
        assert_eq!(runs(&[100, 200, 200]), vec![1, 2]);
        // An empty datagram always goes alone (segment size 0 means no GSO).
        assert_eq!(runs(&[0, 0, 100, 0]), vec![1, 1, 1, 1]);
        assert_eq!(runs(&[]), Vec::<usize>::new());
    }

    #[test]
    fn a_gso_run_keeps_within_the_kernels_segment_and_byte_limits() {
        assert_eq!(runs(&[10; 100]), vec![64, 36]);
        // 1400-byte datagrams: 46 fit in 65,000 bytes.
        assert_eq!(runs(&[1400; 64]), vec![46, 18]);
        // A shorter closing datagram must fit the byte limit too.
        let mut lens = vec![2000; 32];
        lens.push(1500);
        assert_eq!(runs(&lens), vec![32, 1]);
    }

    #[test]
    fn only_errors_that_refuse_gso_itself_turn_it_off() {
        for errno in [libc::EINVAL, libc::EIO, libc::EOPNOTSUPP] {
            assert!(refuses_gso(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
        // A full buffer or a queued ICMP error loses one batch; GSO stays.
        for errno in [libc::ENOBUFS, libc::EAGAIN, libc::ECONNREFUSED, libc::EMSGSIZE] {
            assert!(!refuses_gso(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
        assert!(!refuses_gso(&io::Error::other("not an OS error")));
    }
}
