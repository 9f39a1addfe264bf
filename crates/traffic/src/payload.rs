//! The payload: a pseudo-random byte stream that both ends derive from a seed, so the
//! receiver checks every byte without anyone holding the whole payload in memory.
//!
//! Format 3 (the stream header's version 3; see [`crate::transfer`]). Per stream, a key
//! `k = splitmix(seed ^ PAYLOAD_DOMAIN, stream)`, where `splitmix(s, i)` is output `i` of
//! SplitMix64 started at state `s`. The stream is made of 512-byte blocks; byte `p` is
//!
//! ```text
//! mark(p / 512)[p mod 8]   where p mod 512 < 8
//! ring[p mod 256 KiB]      elsewhere
//! ring: 32768 little-endian words, word i = splitmix(k, i)
//! mark(block): the little-endian word splitmix(mix(k ^ MARK_DOMAIN), block)
//! ```
//!
//! Why this shape: the sender writes from a buffer that holds one lap of the ring (256 KiB)
//! with that lap's marks, rewriting only the 512 marks (4 KiB) per lap, and the receiver
//! compares what it reads against the same buffer with one `memcmp`. So neither end
//! touches a payload byte beyond what the kernel copies: the plain baseline measures the
//! link, not the generator. Formats 1 (xoshiro256++) and 2 (a table XORed with a mask per
//! page) made or checked every byte, and the plain row stopped at 0.80 to 0.87 of iperf3's
//! (issue 26); an AES-CTR keystream is no faster here and falls to 0.3 GB/s under
//! `--crypto soft`, which masks AES-NI.
//!
//! What verification relies on: the stream depends on the seed and the stream, and every
//! block's mark on its position (marks never repeat: `mix` is a bijection), so a stretch of
//! 520 bytes or more (any TCP segment of a 1500-byte path holds two marks) delivered at any
//! other place fails; a shorter one fails unless moved by a whole number of laps. No 8 bytes
//! repeat within a lap but by chance, so per-packet compressors (IPComp, OpenVPN's LZ4 and
//! LZO) and stream compressors with windows up to 256 KiB find nothing to compress.

/// Bytes of the ring, the period of the stream's body.
const RING_LEN: usize = 256 * 1024;
/// Bytes of a block, each opening with its mark.
const BLOCK_LEN: usize = 512;
/// Bytes of a mark.
const MARK_LEN: usize = 8;
/// Sets this payload's keys apart from any other use of the seed.
const PAYLOAD_DOMAIN: u64 = 0x1AB5_EC00_0000_0003;
/// Sets the marks' sequence apart from the ring's.
const MARK_DOMAIN: u64 = 0x6D61_726B_5F5F_7633;
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

/// Produces the stream for one (seed, stream index) pair. Any split of the calls yields
/// the same bytes, so sender and receiver need not agree on chunk sizes.
///
/// Two ways through it: a whole lap at a time ([`PayloadGenerator::next_chunk`], the TCP
/// sender and the stream verifier), where the lap's marks are written once into `lap`; and
/// block by block at any place ([`PayloadGenerator::seek`] and `fill`, UDP datagrams), where
/// only the marks a datagram covers are made, so hopping between laps costs nothing.
pub struct PayloadGenerator {
    /// The ring, with the marks of lap `lap_index` in place.
    lap: Box<[u8]>,
    lap_index: u64,
    mark_key: u64,
    /// Bytes of the stream handed out so far.
    pos: u64,
}

impl PayloadGenerator {
    pub fn new(seed: u64, stream: u16) -> PayloadGenerator {
        let key = splitmix(seed ^ PAYLOAD_DOMAIN, u64::from(stream));
        let mut lap = vec![0u8; RING_LEN].into_boxed_slice();
        for (i, word) in lap.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&splitmix(key, i as u64).to_le_bytes());
        }
        let mut generator = PayloadGenerator {
            lap,
            lap_index: u64::MAX,
            mark_key: mix(key ^ MARK_DOMAIN),
            pos: 0,
        };
        generator.hold_lap(0);
        generator
    }

    fn mark(&self, block: u64) -> [u8; MARK_LEN] {
        splitmix(self.mark_key, block).to_le_bytes()
    }

    /// Puts lap `index`'s marks in place (512 words, a couple of microseconds).
    fn hold_lap(&mut self, index: u64) {
        if self.lap_index == index {
            return;
        }
        let first = index * (RING_LEN / BLOCK_LEN) as u64;
        for (b, block) in self.lap.chunks_exact_mut(BLOCK_LEN).enumerate() {
            let mark = splitmix(self.mark_key, first + b as u64).to_le_bytes();
            block[..MARK_LEN].copy_from_slice(&mark);
        }
        self.lap_index = index;
    }

    /// The next bytes of the stream, at most `max` and never past the end of a lap, straight
    /// from the lap buffer: a sender writes them as they are, with no copy.
    pub fn next_chunk(&mut self, max: usize) -> &[u8] {
        let at = (self.pos % RING_LEN as u64) as usize;
        let len = max.min(RING_LEN - at);
        self.hold_lap(self.pos / RING_LEN as u64);
        self.pos += len as u64;
        &self.lap[at..at + len]
    }

    /// Writes the next `buf.len()` bytes of the stream into `buf`.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for piece in self.advance(buf.len()) {
            let out = &mut buf[piece.at..piece.at + piece.len];
            let ring = piece.ring_offset();
            out.copy_from_slice(&self.lap[ring..ring + piece.len]);
            let mark = self.mark(piece.block());
            for (k, o) in piece.mark_bytes().zip(out.iter_mut()) {
                *o = mark[k];
            }
        }
    }

    /// Moves to byte `pos` of the stream: a datagram's payload lies at a place of its own,
    /// so the receiver checks datagrams in whatever order they come.
    pub fn seek(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// Whether `chunk` is the next bytes of the stream (and moves past them), block by block.
    pub fn matches(&mut self, chunk: &[u8]) -> bool {
        self.advance(chunk.len()).all(|piece| {
            let got = &chunk[piece.at..piece.at + piece.len];
            let ring = piece.ring_offset();
            let mark = self.mark(piece.block());
            let mark_bytes = piece.mark_bytes();
            let marked = mark_bytes.len();
            mark_bytes.zip(got).all(|(k, g)| *g == mark[k])
                && got[marked..] == self.lap[ring + marked..ring + piece.len]
        })
    }

    /// Compares `chunk` with the next bytes of the stream a lap at a time: the first byte
    /// that differs (its index in `chunk`, and what it should be), if any.
    fn first_difference(&mut self, chunk: &[u8]) -> Option<(usize, u8)> {
        let mut done = 0;
        while done < chunk.len() {
            let expected = self.next_chunk(chunk.len() - done);
            let got = &chunk[done..done + expected.len()];
            // One memcmp for the whole piece; the byte itself is looked for only on failure.
            if got != expected {
                let k = (0..got.len())
                    .find(|&k| got[k] != expected[k])
                    .expect("a byte differs");
                return Some((done + k, expected[k]));
            }
            done += got.len();
        }
        None
    }

    /// The next `len` bytes as pieces of one block each, and moves past them.
    fn advance(&mut self, len: usize) -> Pieces {
        let pieces = Pieces {
            start: self.pos,
            pos: self.pos,
            end: self.pos + len as u64,
        };
        self.pos += len as u64;
        pieces
    }
}

/// A piece of the stream inside one block: where it is in the caller's buffer, its place
/// in the stream, and how long it is.
struct Piece {
    at: usize,
    pos: u64,
    len: usize,
}

impl Piece {
    fn block(&self) -> u64 {
        self.pos / BLOCK_LEN as u64
    }

    fn ring_offset(&self) -> usize {
        (self.pos % RING_LEN as u64) as usize
    }

    /// The indices into the block's mark of the piece's first bytes, if it starts in the mark.
    fn mark_bytes(&self) -> std::ops::Range<usize> {
        let in_block = (self.pos % BLOCK_LEN as u64) as usize;
        let start = in_block.min(MARK_LEN);
        start..MARK_LEN.min(in_block + self.len)
    }
}

/// The pieces of the stream from byte `start` to `end`; `pos`: where the next begins.
struct Pieces {
    start: u64,
    pos: u64,
    end: u64,
}

impl Iterator for Pieces {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.pos >= self.end {
            return None;
        }
        let in_block = self.pos % BLOCK_LEN as u64;
        let len = (BLOCK_LEN as u64 - in_block).min(self.end - self.pos) as usize;
        let piece = Piece {
            at: (self.pos - self.start) as usize,
            pos: self.pos,
            len,
        };
        self.pos += len as u64;
        Some(piece)
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

    /// Chunks that start anywhere in a block or a mark, cross blocks and cross laps give
    /// what one whole fill gives, and so does the lap-at-a-time path a sender writes from.
    #[test]
    fn chunks_across_marks_blocks_and_laps_give_the_same_stream() {
        let len = 2 * RING_LEN + 3 * BLOCK_LEN + 5;
        let whole = generate(11, 3, &[len]);
        let odd = [
            1,
            3,
            MARK_LEN,
            BLOCK_LEN - 1,
            BLOCK_LEN + 1,
            RING_LEN - 7,
            RING_LEN + 9,
        ];
        let mut chunks = odd.to_vec();
        chunks.push(len - odd.iter().sum::<usize>());
        assert_eq!(generate(11, 3, &chunks), whole);
        let mut g = PayloadGenerator::new(11, 3);
        let mut laps = Vec::new();
        for max in [5, 300_000, 100, 1 << 20, usize::MAX].into_iter().cycle() {
            if laps.len() >= len {
                break;
            }
            laps.extend_from_slice(g.next_chunk(max.min(len - laps.len())));
        }
        assert_eq!(laps, whole);
    }

    /// The first bytes of format 3 for seed 1, stream 0 (a mark, then ring word 1), and the
    /// bytes around the second mark of lap 1, as the formula in the module's docs gives them
    /// (worked out apart from this code): a change to the format shows up here, and then
    /// needs a new header version.
    #[test]
    fn format_3_is_pinned() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let data = generate(1, 0, &[RING_LEN + BLOCK_LEN + 12]);
        assert_eq!(hex(&data[..16]), "724370ea1699398dd3687ad7b4e52b49");
        assert_eq!(
            hex(&data[RING_LEN + BLOCK_LEN - 4..]),
            "479db57773e9e6f04c391eabf6effd89"
        );
    }

    /// What verification and an honest throughput figure rely on: no 8 bytes repeat within
    /// a lap (a compressor finds nothing), and a lap on, every mark differs: a stretch moved
    /// by a lap fails at its first mark.
    #[test]
    fn no_repeats_in_a_lap_and_every_mark_tells_its_place() {
        let data = generate(42, 0, &[2 * RING_LEN]);
        let mut seen = std::collections::HashSet::with_capacity(RING_LEN);
        for w in data[..RING_LEN].windows(8) {
            assert!(seen.insert(u64::from_le_bytes(w.try_into().unwrap())));
        }
        let (a, b) = data.split_at(RING_LEN);
        for (block, (x, y)) in a.chunks(BLOCK_LEN).zip(b.chunks(BLOCK_LEN)).enumerate() {
            assert_ne!(
                x[..MARK_LEN],
                y[..MARK_LEN],
                "block {block}'s mark repeats a lap on"
            );
            assert_eq!(x[MARK_LEN..], y[MARK_LEN..], "the body is the ring's");
        }
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
        let len = RING_LEN + 3 * BLOCK_LEN;
        let data = generate(9, 1, &[len]);
        for offset in [
            0,
            1,
            MARK_LEN - 1,
            MARK_LEN,
            100,
            BLOCK_LEN - 1,
            BLOCK_LEN,
            BLOCK_LEN + 65,
            RING_LEN - 1,
            RING_LEN + 3,
            len - 1,
        ] {
            for chunk in [1, 7, 64, 333, len] {
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

    /// Blocks swapped, or a lap repeated (the bytes one ring length back), fail where the
    /// first moved byte should be; so do datagrams checked at a place not their own.
    #[test]
    fn reordered_or_repeated_stretches_fail() {
        let data = generate(3, 0, &[3 * RING_LEN]);
        let check = |received: &[u8]| {
            let mut v = Verifier::new(3, 0, received.len() as u64);
            received.chunks(1000).try_for_each(|c| v.check(c)).unwrap_err()
        };
        let mut swapped = data.clone();
        let (first, rest) = swapped.split_at_mut(BLOCK_LEN);
        first.swap_with_slice(&mut rest[..BLOCK_LEN]);
        assert!(matches!(check(&swapped), VerifyError::Mismatch { offset: 0, .. }));
        let mut repeated = data.clone();
        repeated.copy_within(..RING_LEN, RING_LEN);
        let err = check(&repeated);
        assert!(
            matches!(err, VerifyError::Mismatch { offset, .. } if offset == RING_LEN as u64),
            "{err}"
        );
        let mut g = PayloadGenerator::new(3, 0);
        let datagram = &data[RING_LEN + 20..RING_LEN + 1420];
        g.seek(RING_LEN as u64 + 20);
        assert!(g.matches(datagram));
        for elsewhere in [20, 2 * RING_LEN as u64 + 20, RING_LEN as u64 + 21] {
            g.seek(elsewhere);
            assert!(!g.matches(datagram), "matched at {elsewhere}");
        }
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
