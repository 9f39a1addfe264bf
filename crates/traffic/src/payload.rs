//! The payload: a pseudo-random byte stream that both ends derive from a seed, so the
//! receiver checks every byte without anyone holding the whole payload in memory.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Produces the stream for one (seed, stream index) pair. Any split of `fill` calls yields
/// the same bytes, so sender and receiver need not agree on chunk sizes.
pub struct PayloadGenerator {
    rng: Xoshiro256PlusPlus,
    /// Bytes of the last word not yet handed out.
    spare: [u8; 8],
    spare_len: usize,
}

impl PayloadGenerator {
    pub fn new(seed: u64, stream: u16) -> PayloadGenerator {
        // Distinct streams get unrelated sequences; seed_from_u64 runs SplitMix64 over it.
        let rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ (u64::from(stream) << 48) ^ 0x1AB5_EC00);
        PayloadGenerator {
            rng,
            spare: [0; 8],
            spare_len: 0,
        }
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        let from_spare = self.spare_len.min(buf.len());
        let start = 8 - self.spare_len;
        buf[..from_spare].copy_from_slice(&self.spare[start..start + from_spare]);
        self.spare_len -= from_spare;
        let rest = &mut buf[from_spare..];
        let mut words = rest.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            self.spare = self.rng.next_u64().to_le_bytes();
            tail.copy_from_slice(&self.spare[..tail.len()]);
            self.spare_len = 8 - tail.len();
        }
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
    scratch: Vec<u8>,
}

impl Verifier {
    pub fn new(seed: u64, stream: u16, expected_len: u64) -> Verifier {
        Verifier {
            stream,
            expected_len,
            seen: 0,
            generator: PayloadGenerator::new(seed, stream),
            scratch: Vec::new(),
        }
    }

    pub fn check(&mut self, chunk: &[u8]) -> Result<(), VerifyError> {
        if self.seen + chunk.len() as u64 > self.expected_len {
            return Err(VerifyError::Long {
                stream: self.stream,
                expected: self.expected_len,
            });
        }
        self.scratch.resize(chunk.len(), 0);
        self.generator.fill(&mut self.scratch);
        if self.scratch != chunk {
            let at = self
                .scratch
                .iter()
                .zip(chunk)
                .position(|(e, g)| e != g)
                .expect("slices differ");
            return Err(VerifyError::Mismatch {
                stream: self.stream,
                offset: self.seen + at as u64,
                expected: self.scratch[at],
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

    #[test]
    fn verifier_accepts_the_stream_in_odd_chunks() {
        let data = generate(3, 2, &[5000]);
        let mut v = Verifier::new(3, 2, 5000);
        for chunk in data.chunks(333) {
            v.check(chunk).unwrap();
        }
        assert_eq!(v.finish(), Ok(5000));
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
