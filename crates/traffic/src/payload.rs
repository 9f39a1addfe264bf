//! The payload: a pseudo-random byte stream that both ends derive from a seed, so the
//! receiver checks every byte without anyone holding the whole payload in memory.
//!
//! Format 2 (the stream header's version 2; see [`crate::transfer`]). Per stream, a key
//! `k = splitmix(seed ^ PAYLOAD_DOMAIN, stream)`, where `splitmix(s, i)` is output `i` of
//! SplitMix64 started at state `s`. Byte `p` of the stream is
//!
//! ```text
//! table[p mod 64 KiB] ^ mask(p / 4 KiB)[p mod 64]
//! table: 8192 little-endian words, word i = splitmix(k, i)
//! mask(page): 8 little-endian words, word j = splitmix(mix(k ^ MASK_DOMAIN), page * 8 + j)
//! ```
//!
//! Why not a plain generator (xoshiro256++ in format 1, or an AES-CTR keystream): at 6 to
//! 10 GB/s a core either one cost each end a quarter to a third of a core at 2 GB/s (user
//! time 0.13 to 0.3 s per GB), so the plain baseline measured the generator as much as the
//! link: 0.78 to 0.85 of iperf3's, about 1.0 with this format (issue 26). AES-CTR is no
//! faster on these machines and falls to 0.3 GB/s under `--crypto soft`, whose process runs
//! with AES-NI masked. The table and a mask are XORed at memory speed (tens of GB/s, see
//! `examples/payload_speed.rs`) on any x86-64, and the stream keeps what verification needs:
//! it depends on the seed, the stream and every byte's position (a page moved by any
//! distance, the table's period included, differs in nearly every byte), and no 8 bytes
//! repeat by more than chance, so a compressing tunnel finds nothing to compress.

/// Bytes of the stream's table, the period of the stream before masking.
const TABLE_LEN: usize = 64 * 1024;
/// Bytes one mask covers; a divisor of [`TABLE_LEN`], so a page lies in one period.
const PAGE_LEN: usize = 4096;
/// Bytes of a mask, repeated over its page.
const MASK_LEN: usize = 64;
/// Sets this payload's keys apart from any other use of the seed.
const PAYLOAD_DOMAIN: u64 = 0x1AB5_EC00_0000_0002;
/// Sets the masks' sequence apart from the table's.
const MASK_DOMAIN: u64 = 0x6D61_736B_5F5F_7632;
/// SplitMix64's increment (2^64 / golden ratio).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (Stafford's mix13), a bijection on u64.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Output `i` (from 0) of SplitMix64 started at state `state`.
fn splitmix(state: u64, i: u64) -> u64 {
    mix(state.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Produces the stream for one (seed, stream index) pair. Any split of `fill` calls yields
/// the same bytes, so sender and receiver need not agree on chunk sizes.
pub struct PayloadGenerator {
    table: Box<[u8; TABLE_LEN]>,
    mask_key: u64,
    /// Bytes of the stream handed out so far.
    pos: u64,
}

impl PayloadGenerator {
    pub fn new(seed: u64, stream: u16) -> PayloadGenerator {
        let key = splitmix(seed ^ PAYLOAD_DOMAIN, u64::from(stream));
        let mut table = Box::new([0u8; TABLE_LEN]);
        for (i, word) in table.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&splitmix(key, i as u64).to_le_bytes());
        }
        PayloadGenerator {
            table,
            mask_key: mix(key ^ MASK_DOMAIN),
            pos: 0,
        }
    }

    /// The next `len` bytes as stretches of one page each, and moves past them.
    fn advance(&mut self, len: usize) -> Stretches {
        let stretches = Stretches {
            start: self.pos,
            pos: self.pos,
            end: self.pos + len as u64,
            mask_key: self.mask_key,
        };
        self.pos += len as u64;
        stretches
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for s in self.advance(buf.len()) {
            let out = &mut buf[s.at..s.at + s.len];
            let table = &self.table[s.from..s.from + s.len];
            // Whole masks' worth in fixed-size blocks, which the compiler vectorises.
            let mut outs = out.chunks_exact_mut(MASK_LEN);
            let mut ins = table.chunks_exact(MASK_LEN);
            for (o, t) in (&mut outs).zip(&mut ins) {
                let o: &mut [u8; MASK_LEN] = o.try_into().expect("a whole block");
                let t: &[u8; MASK_LEN] = t.try_into().expect("a whole block");
                for k in 0..MASK_LEN {
                    o[k] = t[k] ^ s.mask[k];
                }
            }
            let rest = outs.into_remainder().iter_mut().zip(ins.remainder());
            for ((o, t), m) in rest.zip(s.mask) {
                *o = t ^ m;
            }
        }
    }

    /// Moves to byte `pos` of the stream: a datagram's payload lies at a place of its own,
    /// so the receiver checks datagrams in whatever order they come.
    pub fn seek(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// Whether `chunk` is the next bytes of the stream (and moves past them).
    pub fn matches(&mut self, chunk: &[u8]) -> bool {
        self.first_difference(chunk).is_none()
    }

    /// Compares `chunk` with the next bytes of the stream without writing them out: the
    /// first byte that differs (its index in `chunk`, and what it should be), if any.
    fn first_difference(&mut self, chunk: &[u8]) -> Option<(usize, u8)> {
        for s in self.advance(chunk.len()) {
            let got = &chunk[s.at..s.at + s.len];
            let table = &self.table[s.from..s.from + s.len];
            let expected = |k: usize| table[k] ^ s.mask[k % MASK_LEN];
            let mut gots = got.chunks_exact(MASK_LEN);
            let mut ins = table.chunks_exact(MASK_LEN);
            for (b, (g, t)) in (&mut gots).zip(&mut ins).enumerate() {
                let g: &[u8; MASK_LEN] = g.try_into().expect("a whole block");
                let t: &[u8; MASK_LEN] = t.try_into().expect("a whole block");
                let mut differ = 0;
                for k in 0..MASK_LEN {
                    differ |= g[k] ^ t[k] ^ s.mask[k];
                }
                if differ != 0 {
                    let k = (b * MASK_LEN..(b + 1) * MASK_LEN)
                        .find(|&k| got[k] != expected(k))
                        .expect("a byte of the block differs");
                    return Some((s.at + k, expected(k)));
                }
            }
            let done = s.len - gots.remainder().len();
            if let Some(k) = (done..s.len).find(|&k| got[k] != expected(k)) {
                return Some((s.at + k, expected(k)));
            }
        }
        None
    }
}

/// A stretch of the stream inside one page: where it is in the caller's buffer, where in
/// the table, how long, and its page's mask turned so that byte 0 is the stretch's first.
struct Stretch {
    at: usize,
    from: usize,
    len: usize,
    mask: [u8; MASK_LEN],
}

/// The stretches of the stream from byte `start` to `end`; `pos`: where the next begins.
struct Stretches {
    start: u64,
    pos: u64,
    end: u64,
    mask_key: u64,
}

impl Stretches {
    /// Byte `start`'s page's mask, turned so that its byte 0 is the one for `start`.
    fn mask(&self, start: u64) -> [u8; MASK_LEN] {
        let page = start / PAGE_LEN as u64;
        let mut mask = [0u8; MASK_LEN];
        for (j, word) in mask.chunks_exact_mut(8).enumerate() {
            let n = page.wrapping_mul((MASK_LEN / 8) as u64).wrapping_add(j as u64);
            word.copy_from_slice(&splitmix(self.mask_key, n).to_le_bytes());
        }
        mask.rotate_left((start % MASK_LEN as u64) as usize);
        mask
    }
}

impl Iterator for Stretches {
    type Item = Stretch;

    fn next(&mut self) -> Option<Stretch> {
        if self.pos >= self.end {
            return None;
        }
        let in_page = self.pos % PAGE_LEN as u64;
        let len = (PAGE_LEN as u64 - in_page).min(self.end - self.pos) as usize;
        let stretch = Stretch {
            at: (self.pos - self.start) as usize,
            from: (self.pos % TABLE_LEN as u64) as usize,
            len,
            mask: self.mask(self.pos),
        };
        self.pos += len as u64;
        Some(stretch)
    }
}

/// Why a received stream is not the payload that was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("stream {stream}: byte {offset} is 0x{got:02x}, expected 0x{expected:02x} (payload corrupted)")]
    Mismatch {
        stream: u16,
        offset: u64,
        expected: u8,
        got: u8,
    },
    #[error("stream {stream}: received {got} bytes, expected {expected} (stream truncated)")]
    Short { stream: u16, got: u64, expected: u64 },
    #[error("stream {stream}: received more than the {expected} bytes announced")]
    Long { stream: u16, expected: u64 },
    #[error("stream {stream}: ended after {got} bytes without the sender's closing count (the sender stopped early or the stream was cut)")]
    NoTrailer { stream: u16, got: u64 },
    #[error("stream {stream}: the sender says it sent {announced} bytes, {got} arrived (stream truncated)")]
    Count { stream: u16, got: u64, announced: u64 },
}

/// Checks a received stream against the one the generator would produce.
pub struct Verifier {
    stream: u16,
    expected_len: u64,
    seen: u64,
    generator: PayloadGenerator,
}

impl Verifier {
    pub fn new(seed: u64, stream: u16, expected_len: u64) -> Verifier {
        Verifier {
            stream,
            expected_len,
            seen: 0,
            generator: PayloadGenerator::new(seed, stream),
        }
    }

    pub fn check(&mut self, chunk: &[u8]) -> Result<(), VerifyError> {
        if self.seen + chunk.len() as u64 > self.expected_len {
            return Err(VerifyError::Long {
                stream: self.stream,
                expected: self.expected_len,
            });
        }
        if let Some((at, expected)) = self.generator.first_difference(chunk) {
            return Err(VerifyError::Mismatch {
                stream: self.stream,
                offset: self.seen + at as u64,
                expected,
                got: chunk[at],
            });
        }
        self.seen += chunk.len() as u64;
        Ok(())
    }

    /// Bytes checked so far.
    pub fn verified(&self) -> u64 {
        self.seen
    }

    pub fn finish(&self) -> Result<u64, VerifyError> {
        if self.seen == self.expected_len {
            Ok(self.seen)
        } else {
            Err(VerifyError::Short {
                stream: self.stream,
                got: self.seen,
                expected: self.expected_len,
            })
        }
    }
}

/// Bytes of the trailer that closes a timed stream.
pub const TRAILER_LEN: usize = 16;
const TRAILER_MAGIC: [u8; 8] = *b"IPLBEND1";

/// The end of a timed stream (`--time`): only the sender knows when it stopped, so it closes
/// the stream with the count of payload bytes it sent. A stream cut short (a sender killed,
/// a connection reset into a FIN) ends in payload, which is no trailer, so it fails.
pub fn trailer(sent: u64) -> [u8; TRAILER_LEN] {
    let mut t = [0u8; TRAILER_LEN];
    t[..8].copy_from_slice(&TRAILER_MAGIC);
    t[8..].copy_from_slice(&sent.to_be_bytes());
    t
}

/// Checks a timed stream, whose length only its trailer tells: everything but the last
/// [`TRAILER_LEN`] bytes seen is payload, checked as it arrives; those last bytes are held
/// back until the end and must be the trailer naming exactly the bytes checked.
pub struct TimedVerifier {
    verifier: Verifier,
    tail: [u8; TRAILER_LEN],
    tail_len: usize,
}

impl TimedVerifier {
    pub fn new(seed: u64, stream: u16) -> TimedVerifier {
        TimedVerifier {
            verifier: Verifier::new(seed, stream, u64::MAX),
            tail: [0; TRAILER_LEN],
            tail_len: 0,
        }
    }

    /// Payload bytes checked so far (the held-back tail not yet among them).
    pub fn verified(&self) -> u64 {
        self.verifier.verified()
    }

    pub fn check(&mut self, chunk: &[u8]) -> Result<(), VerifyError> {
        let held = self.tail_len + chunk.len();
        if held <= TRAILER_LEN {
            self.tail[self.tail_len..held].copy_from_slice(chunk);
            self.tail_len = held;
            return Ok(());
        }
        // Release the oldest bytes beyond the last TRAILER_LEN: the tail's first, then the chunk's.
        let release = held - TRAILER_LEN;
        let from_tail = release.min(self.tail_len);
        self.verifier.check(&self.tail[..from_tail])?;
        let from_chunk = release - from_tail;
        self.verifier.check(&chunk[..from_chunk])?;
        let mut tail = [0u8; TRAILER_LEN];
        let kept = self.tail_len - from_tail;
        tail[..kept].copy_from_slice(&self.tail[from_tail..self.tail_len]);
        tail[kept..].copy_from_slice(&chunk[from_chunk..]);
        self.tail = tail;
        self.tail_len = TRAILER_LEN;
        Ok(())
    }

    /// At the end of the stream: the payload's length, if the trailer confirms it.
    pub fn finish(&self) -> Result<u64, VerifyError> {
        let got = self.verifier.verified();
        let stream = self.verifier.stream;
        if self.tail_len < TRAILER_LEN || self.tail[..8] != TRAILER_MAGIC {
            return Err(VerifyError::NoTrailer {
                stream,
                got: got + self.tail_len as u64,
            });
        }
        let announced = u64::from_be_bytes(self.tail[8..].try_into().expect("8 bytes"));
        if announced != got {
            return Err(VerifyError::Count {
                stream,
                got,
                announced,
            });
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generate(seed: u64, stream: u16, chunks: &[usize]) -> Vec<u8> {
        let mut g = PayloadGenerator::new(seed, stream);
        let mut out = Vec::new();
        for &n in chunks {
            let mut buf = vec![0; n];
            g.fill(&mut buf);
            out.extend_from_slice(&buf);
        }
        out
    }

    #[test]
    fn any_chunking_gives_the_same_stream() {
        let whole = generate(7, 0, &[1000]);
        assert_eq!(generate(7, 0, &[1, 2, 3, 5, 7, 13, 969]), whole);
        assert_eq!(generate(7, 0, &[8, 0, 992]), whole);
        assert_ne!(generate(8, 0, &[1000]), whole);
        assert_ne!(generate(7, 1, &[1000]), whole);
    }

    #[test]
    fn payload_looks_random() {
        let data = generate(42, 0, &[1 << 16]);
        let mut counts = [0u32; 256];
        data.iter().for_each(|&b| counts[b as usize] += 1);
        // 256 bytes expected per value; a broken generator (zeros, a short cycle) fails this.
        assert!(counts.iter().all(|&c| (150..400).contains(&c)), "{counts:?}");
    }

    /// Chunks that start anywhere in a page, cross pages and cross the table's period give
    /// what one whole fill gives.
    #[test]
    fn chunks_across_pages_and_periods_give_the_same_stream() {
        let len = 2 * TABLE_LEN + 3 * PAGE_LEN + 5;
        let whole = generate(11, 3, &[len]);
        let odd = [
            1,
            63,
            64,
            65,
            PAGE_LEN - 1,
            PAGE_LEN + 1,
            TABLE_LEN - 7,
            TABLE_LEN + 9,
        ];
        let mut chunks = odd.to_vec();
        chunks.push(len - odd.iter().sum::<usize>());
        assert_eq!(generate(11, 3, &chunks), whole);
    }

    /// The first bytes of format 2 for seed 1, stream 0, and the first bytes of its second
    /// page, as the formula in the module's docs gives them (worked out apart from this code):
    /// a change to the format shows up here, and then needs a new header version.
    #[test]
    fn format_2_is_pinned() {
        let data = generate(1, 0, &[PAGE_LEN + 8]);
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(&data[..8]), "82cb3e017968de90");
        assert_eq!(hex(&data[PAGE_LEN..]), "59aa839f046e5ef7");
    }

    /// What verification and an honest throughput figure rely on: no 8 bytes repeat within
    /// the first MiB (a compressor finds nothing; a chunk delivered at another offset never
    /// matches), and the stream one table period on is unrelated byte by byte, not a copy.
    #[test]
    fn no_repeats_and_the_table_period_does_not_show() {
        let data = generate(42, 0, &[1 << 20]);
        let mut seen = std::collections::HashSet::with_capacity(data.len());
        for w in data.windows(8) {
            assert!(seen.insert(u64::from_le_bytes(w.try_into().unwrap())));
        }
        let (a, b) = data.split_at(TABLE_LEN);
        let equal = a.iter().zip(b).filter(|(x, y)| x == y).count();
        // By chance 1 in 256, i.e. ~4000 of 1 MiB - 64 KiB; a bare repeated table: all.
        assert!(
            equal < (b.len() / 128),
            "{equal} equal bytes at a distance of {TABLE_LEN}"
        );
    }

    #[test]
    fn verifier_accepts_the_stream_in_odd_chunks() {
        let data = generate(3, 2, &[5000]);
        let mut v = Verifier::new(3, 2, 5000);
        for chunk in data.chunks(333) {
            v.check(chunk).unwrap();
        }
        assert_eq!(v.finish(), Ok(5000));
    }

    /// Wherever the byte lies (a block's first or last, a page's edge, a chunk's short
    /// tail) and however the stream is cut, it is found, with the byte it should have been.
    #[test]
    fn a_corrupted_byte_anywhere_is_found_with_what_it_should_be() {
        let data = generate(9, 1, &[3 * PAGE_LEN]);
        for offset in [
            0,
            1,
            63,
            64,
            100,
            PAGE_LEN - 1,
            PAGE_LEN,
            PAGE_LEN + 65,
            3 * PAGE_LEN - 1,
        ] {
            for chunk in [1, 7, 64, 333, 3 * PAGE_LEN] {
                let mut bad = data.clone();
                bad[offset] ^= 0x81;
                let mut v = Verifier::new(9, 1, bad.len() as u64);
                let err = bad.chunks(chunk).try_for_each(|c| v.check(c)).unwrap_err();
                let want = VerifyError::Mismatch {
                    stream: 1,
                    offset: offset as u64,
                    expected: data[offset],
                    got: bad[offset],
                };
                assert_eq!(err, want, "offset {offset}, chunks of {chunk}");
            }
        }
    }

    #[test]
    fn corrupted_byte_is_found_at_its_offset() {
        let mut data = generate(3, 0, &[5000]);
        data[4321] ^= 0x40;
        let mut v = Verifier::new(3, 0, 5000);
        let err = data
            .chunks(1000)
            .map(|c| v.check(c))
            .find(Result::is_err)
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, VerifyError::Mismatch { offset: 4321, .. }), "{err}");
    }

    /// Pages swapped, or a period repeated (the bytes one table length back), fail where
    /// the first moved byte should be.
    #[test]
    fn reordered_or_repeated_stretches_fail() {
        let data = generate(3, 0, &[3 * TABLE_LEN]);
        let check = |received: &[u8]| {
            let mut v = Verifier::new(3, 0, received.len() as u64);
            received.chunks(1000).try_for_each(|c| v.check(c)).unwrap_err()
        };
        let mut swapped = data.clone();
        let (first, rest) = swapped.split_at_mut(PAGE_LEN);
        first.swap_with_slice(&mut rest[..PAGE_LEN]);
        assert!(matches!(check(&swapped), VerifyError::Mismatch { offset: 0, .. }));
        let mut repeated = data.clone();
        repeated.copy_within(..TABLE_LEN, TABLE_LEN);
        let err = check(&repeated);
        assert!(
            matches!(err, VerifyError::Mismatch { offset, .. } if offset < TABLE_LEN as u64 + 8),
            "{err}"
        );
    }

    #[test]
    fn truncated_and_overlong_streams_fail() {
        let data = generate(3, 0, &[5000]);
        let mut v = Verifier::new(3, 0, 5000);
        v.check(&data[..4999]).unwrap();
        assert_eq!(
            v.finish(),
            Err(VerifyError::Short {
                stream: 0,
                got: 4999,
                expected: 5000
            })
        );
        let mut v = Verifier::new(3, 0, 100);
        assert!(matches!(v.check(&data[..101]), Err(VerifyError::Long { .. })));
    }

    fn timed(seed: u64, len: usize) -> Vec<u8> {
        let mut data = generate(seed, 0, &[len]);
        data.extend_from_slice(&trailer(len as u64));
        data
    }

    #[test]
    fn a_timed_stream_is_checked_in_any_chunking_up_to_its_trailer() {
        let data = timed(5, 10_000);
        for size in [1, 3, 15, 16, 17, 333, 10_016] {
            let mut v = TimedVerifier::new(5, 0);
            for chunk in data.chunks(size) {
                v.check(chunk).unwrap();
            }
            assert_eq!(v.finish(), Ok(10_000), "chunks of {size}");
            assert_eq!(v.verified(), 10_000);
        }
        // No payload at all, only the trailer: an empty but complete stream.
        let mut v = TimedVerifier::new(5, 0);
        v.check(&trailer(0)).unwrap();
        assert_eq!(v.finish(), Ok(0));
    }

    #[test]
    fn a_timed_stream_cut_short_or_miscounted_fails() {
        // Cut anywhere: what ends the stream is payload, not a trailer.
        let data = timed(5, 10_000);
        for cut in [0, 10, 5000, 10_008, 10_015] {
            let mut v = TimedVerifier::new(5, 0);
            v.check(&data[..cut]).unwrap();
            assert!(
                matches!(v.finish(), Err(VerifyError::NoTrailer { .. })),
                "cut at {cut}: {:?}",
                v.finish()
            );
        }
        // A trailer naming more than arrived.
        let mut data = generate(5, 0, &[1000]);
        data.extend_from_slice(&trailer(2000));
        let mut v = TimedVerifier::new(5, 0);
        v.check(&data).unwrap();
        assert_eq!(
            v.finish(),
            Err(VerifyError::Count {
                stream: 0,
                got: 1000,
                announced: 2000
            })
        );
        // A corrupted payload byte is found before the end.
        let mut data = timed(5, 1000);
        data[500] ^= 1;
        let mut v = TimedVerifier::new(5, 0);
        assert!(matches!(
            v.check(&data),
            Err(VerifyError::Mismatch { offset: 500, .. })
        ));
    }
}
