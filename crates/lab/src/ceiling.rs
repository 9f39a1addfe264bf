//! Each tunnel row against its own ceiling ([`model::ceiling`]): right after a row's
//! transfers, in the same process and kernel, the same suite's crypto timed at the row's
//! packet size, encrypt and decrypt, with what the tunnel itself used:
//!
//! * `userspace`: the `--crypto` implementation the tunnel ran (crate `crypto` through
//!   crate `speed`), one thread per tunnel thread, CBC encryption in the largest batch the
//!   tunnel's send path makes;
//! * `xfrm`, `strongswan` in user-mode Linux (`--vm uml`): the kernel's own speed test,
//!   tcrypt (`speed::tcrypt`), which pays no system call per packet, as ESP does not. About a
//!   minute: tcrypt 6.1 times every key and block size of a mode for a second each;
//! * `xfrm`, `strongswan` elsewhere or where tcrypt is missing (UML 7.x), and `wireguard`:
//!   the same kernel's crypto API through AF_ALG (in the VM where the rows ran there), after
//!   its known-answer tests, as a per-byte bound (`speed::kernel::per_byte`): the cost of
//!   each further byte between 16 and 64 KiB requests, less the null algorithm's, so
//!   AF_ALG's system calls drop out (at the packet size they read below the tunnel in UML).
//!   Never tcrypt on a real host: it writes the host's kernel log and loads modules there;
//! * `openvpn`: `openssl speed` of the OpenSSL it links (CBC+HMAC from its CBC and HMAC
//!   figures, as OpenSSL has no such combined cipher to time);
//! * `boringtun`: ring's ChaCha20-Poly1305, which boringtun's data path calls;
//! * `wireguard-go`: none, Go's crypto cannot be timed from here; said so.
//!
//! The ceiling is the slower direction: one end encrypts while the other decrypts, on
//! different cores, so the slower one bounds the tunnel.
//!
//! Leaves out: the types and the shares (`model::ceiling`), the timing loop (`speed`).

use crypto::{AeadAlgorithm, CryptoError, Implementation};
use model::backend::{CeilingSource, KernelNeed};
use model::ceiling::{Ceiling, CeilingOutcome, CryptoSpeed};
use model::{Backend, CipherSuite, RunPlan};
use speed::measure::{measure_cell, measure_cell_with, Method};
use speed::ops::{Op, OpError};
use speed::Clock;
use speed::{CryptoOp, SpeedSuite};

use model::evidence::Evidence;

/// Seconds timed per direction (three repeats after a short warm-up, the median kept):
/// a fraction of a second, so a matrix cell costs under half a second more.
pub const SECONDS_PER_DIRECTION: f64 = 0.2;
const REPEATS: usize = 3;
/// `openssl speed` times whole seconds, at least one per operation.
const OPENSSL_SECONDS: f64 = 1.0;

/// The payload bytes per packet the tunnel encrypted, and where that figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub bytes: usize,
    pub source: String,
}

/// Average bytes per packet of a counter pair, if it counted any.
fn average(bytes: u64, packets: u64) -> Option<usize> {
    (packets > 0 && bytes > 0).then(|| (bytes as f64 / packets as f64).round().max(1.0) as usize)
}

/// What the row's backend really sent per packet: its own counters where it has them (the
/// average over the run, from the encrypting end), else its inner MTU.
pub fn packet(plan: &RunPlan, evidence: &Evidence) -> Packet {
    let counted = |bytes: u64, packets: u64, what: &str| {
        average(bytes, packets).map(|size| Packet {
            bytes: size,
            source: format!("average of {what}: {bytes} bytes in {packets} packets"),
        })
    };
    let from_counters = match evidence {
        Evidence::Userspace(u) => counted(
            u.a.sent.bytes,
            u.a.sent.packets,
            "the encrypting thread's inner packets",
        ),
        Evidence::Xfrm(x) => {
            // Every SA a->b: several with --sas N or --per-cpu-sa.
            let (bytes, packets) = x
                .sas
                .iter()
                .filter(|sa| sa.direction.starts_with("a->b"))
                .fold((0, 0), |(b, p), sa| {
                    (b + sa.counters.bytes, p + sa.counters.packets)
                });
            counted(bytes, packets, "the a->b SAs' counters (IP header included)")
        }
        Evidence::Strongswan(s) => s
            .sas
            .iter()
            .find(|sa| sa.sa.direction.starts_with("a->b"))
            .and_then(|sa| {
                counted(
                    sa.sa.counters.bytes,
                    sa.sa.counters.packets,
                    "the a->b SA's counters (IP header included)",
                )
            }),
        Evidence::Openvpn(o) => Some(Packet {
            bytes: o.tun_mtu as usize,
            source: "openvpn's tun-mtu, full-sized packets".into(),
        }),
        Evidence::Wireguard(w) => Some(Packet {
            bytes: w.mtu as usize,
            source: "the WireGuard interface's MTU, full-sized packets".into(),
        }),
        // Plain has no tunnel; a two-host run's ceiling is not timed (the plan says).
        Evidence::None | Evidence::TwoHosts { .. } => None,
    };
    from_counters.unwrap_or_else(|| Packet {
        bytes: tunnel::inner_mtu(plan.link().mtu, plan.suite()) as usize,
        source: "the inner MTU, full-sized packets".into(),
    })
}

/// Whether `plan`'s row has a crypto ceiling to time (wireguard-go's crypto cannot be timed
/// from here, the plain row has none): what the progress says before timing it.
pub fn is_timed(plan: &RunPlan) -> bool {
    SpeedSuite::from_cipher_suite(&plan.suite()).is_some()
        && !matches!(
            plan.backend().describe().ceiling,
            CeilingSource::NoCrypto | CeilingSource::Untimed(_)
        )
}

/// The row's ceiling, timed now on this thread (blocking: a fraction of a second, or a few
/// seconds of `openssl speed` for openvpn).
pub fn measure(plan: &RunPlan, evidence: &Evidence) -> Ceiling {
    let packet = packet(plan, evidence);
    let none = |reason: String| Ceiling::none(packet.bytes as u32, packet.source.clone(), reason);
    let Some(suite) = SpeedSuite::from_cipher_suite(&plan.suite()) else {
        return none("the run does not encrypt".into());
    };
    let timed = match plan.backend().describe().ceiling {
        CeilingSource::NoCrypto => return none("the plain row has no crypto".into()),
        CeilingSource::LabCrypto => userspace(plan, suite, packet.bytes),
        CeilingSource::KernelCrypto => kernel(plan.backend(), suite, packet.bytes),
        CeilingSource::Openssl => openssl(suite, packet.bytes),
        CeilingSource::Ring => ring_chacha(suite, packet.bytes),
        CeilingSource::Untimed(why) => Err(why.to_string()),
    };
    match timed {
        Ok(speed) => Ceiling {
            packet_bytes: packet.bytes as u32,
            packet_source: packet.source,
            outcome: CeilingOutcome::Measured(speed),
        },
        Err(reason) => none(reason),
    }
}

/// [`measure`] off the async runtime's threads.
pub async fn measure_async(plan: &RunPlan, evidence: &Evidence) -> Ceiling {
    let (plan, evidence) = (plan.clone(), evidence.clone());
    let packet_bytes = packet(&plan, &evidence);
    tokio::task::spawn_blocking(move || measure(&plan, &evidence))
        .await
        .unwrap_or_else(|e| {
            Ceiling::none(
                packet_bytes.bytes as u32,
                packet_bytes.source,
                format!("the timing thread failed: {e}"),
            )
        })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// CPU seconds (user + system) this process has used, its ended threads included.
fn process_cpu_s() -> Option<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(u.user_time()) + secs(u.system_time()))
}

/// `time` per CPU-second of its timing threads: on a shared machine a timing thread gets
/// only a share of its core (here a 67 ms window once got 1 %), which wall time alone
/// would take for the cipher's speed. The rest of the process is idle meanwhile (the
/// tunnel stopped before). Returns the rate and the share of a core each thread had.
fn per_cpu_second(threads: u16, time: impl FnOnce() -> Result<f64, String>) -> Result<(f64, f64), String> {
    let (cpu0, t0) = (process_cpu_s(), std::time::Instant::now());
    let wall_rate = time()?;
    let wall = t0.elapsed().as_secs_f64() * f64::from(threads.max(1));
    let share = match (cpu0, process_cpu_s()) {
        (Some(a), Some(b)) if wall > 0.0 => ((b - a) / wall).clamp(1e-3, 1.0),
        _ => 1.0,
    };
    Ok((wall_rate / share, share))
}

/// Encrypt and decrypt timed with `time`, per CPU-second of the timing threads; the
/// ceiling is the slower.
fn both_ways(
    implementation: String,
    suite: SpeedSuite,
    threads: u16,
    seconds: f64,
    time: &dyn Fn(CryptoOp) -> Result<f64, String>,
) -> Result<CryptoSpeed, String> {
    let (encrypt, enc_share) = per_cpu_second(threads, || time(CryptoOp::Encrypt))?;
    let (decrypt, dec_share) = per_cpu_second(threads, || time(CryptoOp::Decrypt))?;
    let mut speed = CryptoSpeed::new(implementation, suite.name(), encrypt, decrypt)
        .ok_or_else(|| format!("timing gave no rate (encrypt {encrypt} MB/s, decrypt {decrypt} MB/s)"))?;
    speed.threads = threads;
    speed.seconds = seconds;
    speed.cpu_share = Some((enc_share + dec_share) / 2.0);
    speed.notes.push(format!(
        "per CPU-second of the timing thread{} (each had {:.0} % of a core encrypting, {:.0} % decrypting)",
        if threads > 1 { "s" } else { "" },
        enc_share * 100.0,
        dec_share * 100.0
    ));
    Ok(speed)
}

fn method(threads: u16) -> Method {
    Method::new(SECONDS_PER_DIRECTION, REPEATS, usize::from(threads.max(1)))
}

/// The implementation the userspace tunnel ran, in this process (hardware AES masked here
/// too where the run is `--crypto soft`), one timing thread per tunnel thread.
fn userspace(plan: &RunPlan, suite: SpeedSuite, size: usize) -> Result<CryptoSpeed, String> {
    let imp = Implementation::new(plan.crypto()).map_err(|e| e.to_string())?;
    crypto::self_test(&imp).map_err(|e| e.to_string())?;
    let threads = plan.tunnel_threads().max(1);
    let m = method(threads);
    // As many packets per call as the send path encrypts together at most (what matters
    // for CBC, whose batches run side by side), so the ceiling stays above the tunnel.
    let batch = tunnel::largest_batch(plan.suite(), size);
    let mut speed = both_ways(imp.info().label, suite, threads, SECONDS_PER_DIRECTION, &|dir| {
        measure_cell(&imp, suite, dir, size, batch, &m)
            .map(median)
            .map_err(|e| e.to_string())
    })?;
    if matches!(plan.suite(), CipherSuite::AesCbc { .. }) {
        speed.notes.push(format!(
            "encrypt timed {batch} packets at a time, side by side, as the tunnel's send path encrypts a batch"
        ));
    }
    Ok(speed)
}

/// How a kernel row's crypto is timed where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelMethod {
    /// tcrypt: inside the kernel, no system call per packet. Only in a kernel the lab
    /// booted for the run, which it may load modules into and write the log of.
    Tcrypt,
    /// AF_ALG, with why not tcrypt (None: no note needed).
    AfAlg(Option<&'static str>),
}

/// Whether the backend's kernel tunnel calls the kernel's crypto library directly (the
/// WireGuard module) rather than through the crypto API (ESP): its description says.
fn calls_library(backend: Backend) -> bool {
    match backend.describe().kernel {
        Some(KernelNeed::Wireguard) => true,
        // ovpn asks the crypto API for its AEAD, as ESP does.
        Some(KernelNeed::Esp | KernelNeed::Ovpn) | None => false,
    }
}

/// The method for a kernel row, from where the run is (`IPSEC_LAB_VIRT`, set by the lab in
/// its guests; absent on a real host).
fn kernel_method(backend: Backend, virtualization: Option<&str>) -> KernelMethod {
    if calls_library(backend) {
        // WireGuard calls its library directly, not through the crypto API tcrypt times.
        return KernelMethod::AfAlg(None);
    }
    match virtualization {
        Some(v) if v.starts_with("uml") => KernelMethod::Tcrypt,
        // The stock kernel in a VM: AF_ALG's system calls cost what they do natively under
        // KVM, and tcrypt's minute per suite and driver would multiply a VM sweep's time.
        Some(v) if v.starts_with("vm") => KernelMethod::AfAlg(None),
        _ => KernelMethod::AfAlg(Some(
            "timed through AF_ALG, not the kernel's own tcrypt: tcrypt is loaded only in kernels the lab \
             boots (--vm uml); nothing is loaded into this host's kernel or written to its log",
        )),
    }
}

/// The kernel's own path, timed by tcrypt where the run is in a kernel the lab booted, else
/// (or where tcrypt gives nothing) through AF_ALG.
fn kernel(backend: Backend, suite: SpeedSuite, size: usize) -> Result<CryptoSpeed, String> {
    let virt = std::env::var("IPSEC_LAB_VIRT").ok();
    let why_not = match kernel_method(backend, virt.as_deref()) {
        KernelMethod::Tcrypt => match tcrypt(suite, size) {
            Ok(speed) => return Ok(speed),
            Err(why) => Some(format!(
                "tcrypt gave no ceiling ({why}); timed through AF_ALG instead"
            )),
        },
        KernelMethod::AfAlg(note) => note.map(String::from),
    };
    let mut speed = af_alg(backend, suite).map_err(|e| match &why_not {
        Some(w) => format!("{e}; {w}"),
        None => e,
    })?;
    speed.notes.extend(why_not);
    Ok(speed)
}

/// tcrypt in this kernel: wall clock, a second per key and block size.
fn tcrypt(suite: SpeedSuite, size: usize) -> Result<CryptoSpeed, String> {
    let t = speed::tcrypt::measure(suite, size)?;
    let mut speed = CryptoSpeed::new(
        t.implementation,
        suite.name(),
        t.encrypt_mb_per_s,
        t.decrypt_mb_per_s,
    )
    .ok_or_else(|| {
        format!(
            "tcrypt gave no rate (encrypt {} MB/s, decrypt {} MB/s)",
            t.encrypt_mb_per_s, t.decrypt_mb_per_s
        )
    })?;
    speed.seconds = f64::from(speed::tcrypt::SECONDS);
    speed.notes = t.notes;
    Ok(speed)
}

/// The kernel's crypto API through AF_ALG, named by the driver that served it: the per-byte
/// bound ([`speed::kernel::per_byte`]), true at any packet size. AF_ALG's rate at the
/// packet size is none: its two system calls per request may cost more than the crypto
/// (in user-mode Linux several times more), which ESP's data path does not pay.
fn af_alg(backend: Backend, suite: SpeedSuite) -> Result<CryptoSpeed, String> {
    speed::af_alg::available().map_err(|e| format!("{e}: AF_ALG is how the kernel's crypto is timed"))?;
    let verified = speed::kernel::self_test(suite).map_err(|e| format!("{suite} through AF_ALG: {e}"))?;
    let null = speed::kernel::null_algorithm(verified.algorithm.kind).name;
    let [small, large] = speed::kernel::PER_BYTE_SIZES;
    let window = std::time::Duration::from_secs_f64(2.0 * SECONDS_PER_DIRECTION);
    let per_byte = |dir: CryptoOp| {
        speed::kernel::per_byte(suite, dir, window).map_err(|e| format!("{suite} {dir} through AF_ALG: {e}"))
    };
    let (encrypt, decrypt) = (per_byte(CryptoOp::Encrypt)?, per_byte(CryptoOp::Decrypt)?);
    let mut speed = CryptoSpeed::new(
        format!(
            "kernel {} ({}) via AF_ALG, per byte",
            verified.algorithm.name, verified.driver
        ),
        suite.name(),
        encrypt.mb_per_s,
        decrypt.mb_per_s,
    )
    .ok_or_else(|| format!("{suite} through AF_ALG gave no rate"))?;
    // Two request sizes, through the algorithm and the null one.
    speed.seconds = 4.0 * SECONDS_PER_DIRECTION;
    speed.notes.push(format!(
        "an upper bound at any packet size: what each further byte costs between AF_ALG requests of {} and {} KiB \
         (the fastest request of each; encrypt {:.2} ns per byte through the algorithm, {:.2} through {null}; \
         decrypt {:.2} and {:.2}), less the same through {null}, AF_ALG's own copies and page walks; the system \
         calls and every other cost per request drop out. The kernel's tunnel pays that per byte and a cost per \
         packet besides, so no packet goes faster",
        small / 1024,
        large / 1024,
        encrypt.algorithm_ns,
        encrypt.null_ns,
        decrypt.algorithm_ns,
        decrypt.null_ns,
    ));
    if calls_library(backend) {
        speed.notes.push(
            "WireGuard calls the kernel's ChaCha20-Poly1305 library directly; AF_ALG reaches the same \
             architecture code through the crypto API's rfc7539 template"
                .into(),
        );
    }
    Ok(speed)
}

/// `openssl speed` of the OpenSSL openvpn links, one process per operation.
fn openssl(suite: SpeedSuite, size: usize) -> Result<CryptoSpeed, String> {
    let version =
        speed::openssl::version().ok_or_else(|| speed::openssl::OpensslError::NotInstalled.to_string())?;
    // `OpenSSL 3.0.19 27 Jan 2026 (Library: OpenSSL 3.0.19 27 Jan 2026)`: the first half.
    let version = version.split(" (Library").next().unwrap_or(&version).to_string();
    // CBC pads to whole blocks, as the tunnel does.
    let size = match suite {
        SpeedSuite::AesCbc(_) | SpeedSuite::AesCbcHmacSha256(_) => size.div_ceil(16) * 16,
        SpeedSuite::Aead(_) | SpeedSuite::HmacSha256 => size,
    };
    let run = |s: SpeedSuite, dir: CryptoOp| -> Result<f64, String> {
        // Per CPU-second, as the other ceilings: openssl's own user-time clock.
        let cells = speed::openssl::run_timed(s, dir, &[size], OPENSSL_SECONDS, 1, Clock::Cpu)
            .map_err(|e| e.to_string())?;
        cells
            .first()
            .map(|c| c.bytes_per_s / 1e6)
            .ok_or_else(|| format!("openssl speed gave no {size}-byte figure for {s} {dir}"))
    };
    let mut notes = vec![format!(
        "openssl speed -seconds 1 -bytes {size}, per CPU-second of its user time (openvpn links the same libcrypto)"
    )];
    let (encrypt, decrypt) = match suite {
        SpeedSuite::AesCbcHmacSha256(bits) => {
            // Per packet the CBC pass and the HMAC pass add their times up.
            let (cbc_enc, cbc_dec) = (
                run(SpeedSuite::AesCbc(bits), CryptoOp::Encrypt)?,
                run(SpeedSuite::AesCbc(bits), CryptoOp::Decrypt)?,
            );
            let hmac = run(SpeedSuite::HmacSha256, CryptoOp::Mac)?;
            let serial = |a: f64, b: f64| 1.0 / (1.0 / a + 1.0 / b);
            notes.push(format!(
                "CBC+HMAC from aes-{bits}-cbc (encrypt {cbc_enc:.1}, decrypt {cbc_dec:.1} MB/s) and hmac sha256 ({hmac:.1} MB/s), one after the other per packet"
            ));
            (serial(cbc_enc, hmac), serial(cbc_dec, hmac))
        }
        s => (run(s, CryptoOp::Encrypt)?, run(s, CryptoOp::Decrypt)?),
    };
    let mut speed = CryptoSpeed::new(version, suite.name(), encrypt, decrypt)
        .ok_or_else(|| format!("openssl speed gave no rate (encrypt {encrypt}, decrypt {decrypt})"))?;
    speed.seconds = OPENSSL_SECONDS;
    speed.notes = notes;
    Ok(speed)
}

/// ring's ChaCha20-Poly1305, the AEAD boringtun's data path calls (empty AAD, as in
/// WireGuard's transport messages).
fn ring_chacha(suite: SpeedSuite, size: usize) -> Result<CryptoSpeed, String> {
    if suite != SpeedSuite::Aead(AeadAlgorithm::ChaCha20Poly1305) {
        return Err(format!("boringtun carries only chacha20-poly1305, not {suite}"));
    }
    let m = method(1);
    both_ways(
        "ring (boringtun's AEAD)".into(),
        suite,
        1,
        SECONDS_PER_DIRECTION,
        &|dir| {
            let build = || ring_op(dir, size);
            measure_cell_with(&build, &m)
                .map(median)
                .map_err(|e| format!("ring chacha20-poly1305 {dir}: {e}"))
        },
    )
}

fn ring_op(direction: CryptoOp, size: usize) -> Result<Op, OpError> {
    use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
    // ring says only "unspecified" when it refuses; an open of a packet it sealed that fails
    // is an authentication failure.
    let failed = |_| OpError::Crypto(CryptoError::Authentication);
    let key_bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(13).wrapping_add(0x5a)).collect();
    let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &key_bytes).map_err(failed)?);
    let nonce = |counter: u64| {
        let mut n = [0u8; NONCE_LEN];
        n[4..].copy_from_slice(&counter.to_le_bytes());
        Nonce::assume_unique_for_key(n)
    };
    let mut buf = vec![0x5cu8; size];
    let mut counter = 0u64;
    let run: Box<dyn FnMut() -> Result<(), OpError> + Send> = match direction {
        CryptoOp::Decrypt => {
            // As `speed::ops`: sealing twice under one nonce gives back the plaintext with
            // the tag of it as a ciphertext, so opens alternate between the two, each valid.
            let tag_c: [u8; 16] = key
                .seal_in_place_separate_tag(nonce(1), Aad::empty(), &mut buf)
                .map_err(failed)?
                .as_ref()
                .try_into()
                .map_err(|_| OpError::Crypto(CryptoError::Authentication))?;
            let tag_p: [u8; 16] = key
                .seal_in_place_separate_tag(nonce(1), Aad::empty(), &mut buf)
                .map_err(failed)?
                .as_ref()
                .try_into()
                .map_err(|_| OpError::Crypto(CryptoError::Authentication))?;
            let mut holds_c = false;
            Box::new(move || {
                let tag = Tag::from(if holds_c { tag_c } else { tag_p });
                key.open_in_place_separate_tag(nonce(1), Aad::empty(), tag, &mut buf, 0..)
                    .map_err(failed)?;
                holds_c = !holds_c;
                std::hint::black_box(&buf);
                Ok(())
            })
        }
        CryptoOp::Encrypt | CryptoOp::Mac => Box::new(move || {
            counter += 1;
            let tag = key
                .seal_in_place_separate_tag(nonce(counter), Aad::empty(), &mut buf)
                .map_err(failed)?;
            std::hint::black_box((&buf, tag.as_ref()[0]));
            Ok(())
        }),
    };
    Ok(Op::new(run, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::evidence::{SaEvidence, XfrmEvidence};

    fn plan(backend: Backend, cipher: &str) -> RunPlan {
        model::RunRequest {
            backend,
            cipher: Some(cipher.parse().unwrap()),
            ..Default::default()
        }
        .validate()
        .unwrap()
    }

    #[test]
    fn the_packet_size_comes_from_the_counters_of_the_encrypting_direction() {
        let p = plan(Backend::Xfrm, "aes-256-gcm");
        let sa = |direction: &str, bytes, packets| SaEvidence {
            spi: "0x1".into(),
            direction: direction.into(),
            counters: xfrm::SaCounters {
                packets,
                bytes,
                ..Default::default()
            },
            pair: None,
            cpu: None,
        };
        let x = XfrmEvidence {
            mode: "tunnel".into(),
            suite: "aes-256-gcm".into(),
            reqid: "0x1".into(),
            sas: vec![
                sa("b->a (received by a)", 83492, 1551),
                sa("a->b (sent by a)", 4254368, 2972),
            ],
            esp_overhead_bytes_per_packet: 56,
            encap: None,
            kernel_drivers: Default::default(),
            pcrypt: None,
        };
        let pk = packet(&p, &Evidence::Xfrm(x.clone()));
        assert_eq!(pk.bytes, 1431);
        assert!(
            pk.source.contains("4254368 bytes in 2972 packets"),
            "{}",
            pk.source
        );
        // Several SAs a->b (--sas N, --per-cpu-sa): all of them, not the first.
        let x = XfrmEvidence {
            sas: vec![
                sa("a->b (sent by a)", 0, 0),
                sa("b->a (received by a)", 83492, 1551),
                sa("a->b (sent by a), CPU 0's SA", 4254368, 2972),
                sa("a->b (sent by a), CPU 1's SA", 4254368, 2972),
            ],
            ..x
        };
        let pk = packet(&p, &Evidence::Xfrm(x));
        assert_eq!(pk.bytes, 1431);
        assert!(
            pk.source.contains("8508736 bytes in 5944 packets"),
            "{}",
            pk.source
        );
        // No counters: the inner MTU.
        let pk = packet(
            &plan(Backend::Userspace, "aes-256-cbc-hmac-sha256"),
            &Evidence::None,
        );
        assert_eq!(pk.bytes, 1407);
        assert_eq!(average(0, 0), None);
    }

    #[test]
    fn userspace_ceiling_is_timed_both_ways_and_is_the_slower() {
        let p = plan(Backend::Userspace, "aes-256-gcm");
        let c = measure(&p, &Evidence::None);
        let CeilingOutcome::Measured(s) = &c.outcome else {
            panic!("{c:?}");
        };
        assert!(s.encrypt_mb_per_s > 0.0 && s.decrypt_mb_per_s > 0.0, "{s:?}");
        assert_eq!(s.mb_per_s, s.encrypt_mb_per_s.min(s.decrypt_mb_per_s));
        assert_eq!(s.suite, "aes-256-gcm");
        assert_eq!(c.packet_bytes, tunnel::inner_mtu(1500, p.suite()));
    }

    #[test]
    fn boringtuns_ceiling_is_rings_and_wireguard_go_says_why_it_has_none() {
        let c = measure(&plan(Backend::Boringtun, "chacha20-poly1305"), &Evidence::None);
        assert!(c.mb_per_s().is_some_and(|v| v > 0.0), "{c:?}");
        let wg_go = plan(Backend::WireguardGo, "chacha20-poly1305");
        let c = measure(&wg_go, &Evidence::None);
        assert_eq!(c.mb_per_s(), None);
        assert!(c.reason().unwrap().contains("Go's"), "{c:?}");
        // Nothing is timed, so the run says nothing of timing it.
        assert!(!is_timed(&wg_go));
        assert!(is_timed(&plan(Backend::Boringtun, "chacha20-poly1305")));
        assert!(is_timed(&plan(Backend::Xfrm, "aes-256-gcm")));
    }

    #[test]
    fn tcrypt_times_kernel_rows_only_in_user_mode_linux_and_never_on_a_host() {
        let uml = Some("uml (user-mode Linux: native speed, 1 CPU, generic C crypto)");
        assert_eq!(kernel_method(Backend::Xfrm, uml), KernelMethod::Tcrypt);
        assert_eq!(kernel_method(Backend::Strongswan, uml), KernelMethod::Tcrypt);
        assert_eq!(kernel_method(Backend::Wireguard, uml), KernelMethod::AfAlg(None));
        let vm = Some("vm (kvm: native speed)");
        assert_eq!(kernel_method(Backend::Xfrm, vm), KernelMethod::AfAlg(None));
        for host in [None, Some("host")] {
            let KernelMethod::AfAlg(Some(note)) = kernel_method(Backend::Xfrm, host) else {
                panic!("{host:?}: a host keeps AF_ALG and says why");
            };
            assert!(
                note.contains("nothing is loaded into this host's kernel"),
                "{note}"
            );
        }
    }

    #[test]
    fn kernel_rows_without_af_alg_say_so() {
        let c = measure(&plan(Backend::Xfrm, "aes-256-gcm"), &Evidence::None);
        match speed::af_alg::available() {
            Err(_) => assert!(c.reason().unwrap().contains("AF_ALG"), "{c:?}"),
            Ok(()) => assert!(c.mb_per_s().is_some(), "{c:?}"),
        }
    }
}
