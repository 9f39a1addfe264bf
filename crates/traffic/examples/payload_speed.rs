//! How fast the payload is made and checked, format 1 (xoshiro256++) against the current
//! one, in the 256 KiB chunks the sender and the receiver use: the current generator both
//! ways, copied out (`fill`, as for datagrams) and handed out in place (`next_chunk`, as the
//! TCP sender writes it). Prints GB/s; asserts nothing about time (a shared machine's
//! figures are noisy: run it twice, on a quiet machine).
//!
//! ```sh
//! cargo run --release -p traffic --example payload_speed [GiB per figure, default 4]
//! ```

use std::time::Instant;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use traffic::{PayloadGenerator, Verifier};

const CHUNK: usize = 256 * 1024;

/// Format 1's generator as it was (crates/traffic/src/payload.rs before format 2).
struct OldGenerator {
    rng: Xoshiro256PlusPlus,
    spare: [u8; 8],
    spare_len: usize,
}

impl OldGenerator {
    fn new(seed: u64, stream: u16) -> OldGenerator {
        let rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ (u64::from(stream) << 48) ^ 0x1AB5_EC00);
        OldGenerator {
            rng,
            spare: [0; 8],
            spare_len: 0,
        }
    }

    fn fill(&mut self, buf: &mut [u8]) {
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

/// Format 1's verifier as it was: the expected chunk made into scratch, then compared.
struct OldVerifier {
    generator: OldGenerator,
    scratch: Vec<u8>,
}

impl OldVerifier {
    fn check(&mut self, chunk: &[u8]) -> bool {
        self.scratch.resize(chunk.len(), 0);
        self.generator.fill(&mut self.scratch);
        self.scratch == chunk
    }
}

/// GB/s of `work` over `total` bytes, one chunk per call.
fn rate(total: u64, mut work: impl FnMut()) -> f64 {
    let chunks = total / CHUNK as u64;
    let t = Instant::now();
    for _ in 0..chunks {
        work();
    }
    (chunks * CHUNK as u64) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let gib: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("GiB per figure, a whole number"))
        .unwrap_or(4);
    let total = gib << 30;
    let (seed, stream) = (0x18ec_d910_7f28_b6c7, 0);
    let mut buf = vec![0u8; CHUNK];

    let mut old = OldGenerator::new(seed, stream);
    let old_gen = rate(total, || old.fill(&mut buf));
    let mut new = PayloadGenerator::new(seed, stream);
    let new_gen = rate(total, || new.fill(&mut buf));
    let mut new = PayloadGenerator::new(seed, stream);
    let mut sum = 0u64;
    let in_place = rate(total, || sum += u64::from(new.next_chunk(CHUNK)[CHUNK / 2]));
    std::hint::black_box(sum);

    // The verifiers check the stream the matching generator made; the chunks are made
    // beforehand (a run's receiver finds them in its read buffer), a few MiB cycled.
    let ring = 16;
    let made = |fill: &mut dyn FnMut(&mut [u8])| {
        (0..ring)
            .map(|_| {
                let mut c = vec![0u8; CHUNK];
                fill(&mut c);
                c
            })
            .collect::<Vec<_>>()
    };
    let mut g = OldGenerator::new(seed, stream);
    let old_chunks = made(&mut |c| g.fill(c));
    let mut g = PayloadGenerator::new(seed, stream);
    let new_chunks = made(&mut |c| g.fill(c));
    // Both verifiers restart at the ring's start each time round: a generator and a verifier
    // of the same stream at the same offset, so every check is a full, passing comparison.
    let mut i = 0;
    let mut old_v = OldVerifier {
        generator: OldGenerator::new(seed, stream),
        scratch: Vec::new(),
    };
    let old_verify = rate(total, || {
        if i % ring == 0 {
            old_v.generator = OldGenerator::new(seed, stream);
        }
        assert!(old_v.check(&old_chunks[i % ring]));
        i += 1;
    });
    let mut i = 0;
    let mut new_v = Verifier::new(seed, stream, u64::MAX);
    let new_verify = rate(total, || {
        if i % ring == 0 {
            new_v = Verifier::new(seed, stream, u64::MAX);
        }
        new_v.check(&new_chunks[i % ring]).expect("the stream as made");
        i += 1;
    });

    println!(
        "payload, {gib} GiB per figure in {} KiB chunks, one core:",
        CHUNK / 1024
    );
    println!(
        "  generate  format 1 (xoshiro256++) {old_gen:7.2} GB/s   current {new_gen:7.2} GB/s   {:5.1}x",
        new_gen / old_gen
    );
    println!("  in place  current (the TCP sender's path) {in_place:7.2} GB/s");
    println!(
        "  verify    format 1 (xoshiro256++) {old_verify:7.2} GB/s   current {new_verify:7.2} GB/s   {:5.1}x",
        new_verify / old_verify
    );
}
