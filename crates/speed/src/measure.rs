//! The timing method: warm-up, then a fixed-duration window shared by all threads, threads
//! pinned one per core (in turn when there are more threads than cores) and started and
//! stopped together, repeated; the caller takes the median.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use crypto::Implementation;
use procstat::CpuTime;

use crate::ops::{self, Op, OpError};
use crate::plan::{Clock, Mode};
use crate::suite::{CryptoOp, SpeedSuite};
use crate::SpeedError;

/// How one cell is timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Method {
    /// Timed duration of one repeat.
    pub repeat_duration: Duration,
    /// Untimed run before each repeat (caches, key schedules, CPU frequency).
    pub warmup: Duration,
    pub repeats: usize,
    /// Threads run at once, one per core, their bytes summed over one common window.
    pub threads: usize,
    pub mode: Mode,
    pub clock: Clock,
}

impl Method {
    /// Splits `seconds` per cell over `repeats`, with a warm-up of a quarter of a repeat
    /// (at most 0.1 s); packet mode, wall clock.
    pub fn new(seconds: f64, repeats: usize, threads: usize) -> Method {
        let repeat_duration = Duration::from_secs_f64(seconds / repeats as f64);
        Method {
            repeat_duration,
            warmup: (repeat_duration / 4).min(Duration::from_millis(100)),
            repeats,
            threads,
            mode: Mode::Packet,
            clock: Clock::Wall,
        }
    }
}

/// Bytes processed in a measured time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub bytes: u64,
    pub seconds: f64,
}

impl Sample {
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// Runs `op` for at least `duration`. Reads the clock once per batch, and sizes batches to
/// about 50 µs, so that reading the clock costs nothing measurable even at 16 bytes.
pub fn timed_loop(op: &mut Op, duration: Duration) -> Result<Sample, OpError> {
    let start = Instant::now();
    let mut calls = 0u64;
    let mut batch = 1u64;
    loop {
        let batch_start = Instant::now();
        for _ in 0..batch {
            op.run()?;
        }
        calls += batch;
        let now = Instant::now();
        if now.duration_since(start) >= duration {
            return Ok(Sample {
                bytes: calls * op.payload_bytes as u64,
                seconds: now.duration_since(start).as_secs_f64(),
            });
        }
        if now.duration_since(batch_start) < Duration::from_micros(50) && batch < 1 << 20 {
            batch *= 2;
        }
    }
}

/// CPUs this process may run on, in order; thread `i` is pinned to entry `i % len`.
fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn pin_current_thread(cpu: usize) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    // Pinning is for stable numbers; without it (a restricted container) the run still counts.
    if set.set(cpu).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

/// One repeat per element: the MB/s of all threads together. `batch`: packets per call, as
/// [`ops::build_batch`] takes them (1: one at a time, as `openssl speed` does); in
/// [`Mode::Stream`] one block per call of [`ops::build_stream`], whatever `batch`.
pub fn measure_cell(
    imp: &Implementation,
    suite: SpeedSuite,
    direction: CryptoOp,
    block_bytes: usize,
    batch: usize,
    method: &Method,
) -> Result<Vec<f64>, SpeedError> {
    let build = || match method.mode {
        Mode::Packet => ops::build_batch(imp, suite, direction, block_bytes, batch).map_err(OpError::from),
        Mode::Stream => ops::build_stream(imp, suite, direction, block_bytes),
    };
    measure_cell_with(&build, method).map_err(|source| match source {
        OpError::Interrupted => SpeedError::Interrupted,
        source => SpeedError::Crypto {
            implementation: imp.to_string(),
            suite: suite.name(),
            source,
        },
    })
}

/// What one thread did in a window: payload bytes, when it noticed the stop, and the CPU
/// seconds it used.
struct ThreadRun {
    bytes: u64,
    stopped: Instant,
    cpu_s: f64,
}

/// Runs `op` until `stop` is set, checking it once per batch (batches sized as in
/// [`timed_loop`], about 50 µs).
fn loop_until(op: &mut Op, stop: &AtomicBool) -> Result<ThreadRun, OpError> {
    let cpu_start = CpuTime::this_thread();
    let mut calls = 0u64;
    let mut batch = 1u64;
    loop {
        let batch_start = Instant::now();
        for _ in 0..batch {
            op.run()?;
        }
        calls += batch;
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            return Ok(ThreadRun {
                bytes: calls * op.payload_bytes as u64,
                stopped: now,
                cpu_s: CpuTime::this_thread().since(cpu_start).total_s(),
            });
        }
        if now.duration_since(batch_start) < Duration::from_micros(50) && batch < 1 << 20 {
            batch *= 2;
        }
    }
}

/// [`measure_cell`] for any operation: `build` makes each thread's own operation (its own
/// cipher state, buffers and, for the kernel, sockets). A stop request ([`crate::stop`])
/// ends the cell within [`STOP_CHECK`] with [`OpError::Interrupted`].
///
/// The threads share one wall-clock window: they are released together, stopped together
/// after `repeat_duration`, and the figure is all their bytes over that window, from the
/// release to the last thread's stop. More threads than CPUs share the CPUs, so the figure
/// stays the machine's, as openssl's `-multi` is (each thread timing its own window would
/// count a thread's bytes again while the others waited their turn). With [`Clock::Cpu`] the
/// figure is their bytes over the CPU seconds they used instead.
pub fn measure_cell_with(
    build: &(dyn Fn() -> Result<Op, OpError> + Sync),
    method: &Method,
) -> Result<Vec<f64>, OpError> {
    let cpus = allowed_cpus();
    let mut repeats = Vec::with_capacity(method.repeats);
    for _ in 0..method.repeats {
        // The threads and this one, which keeps the window.
        let barrier = Barrier::new(method.threads + 1);
        let stop = AtomicBool::new(false);
        // The barrier's release, read by the last to arrive (running, where the others may
        // wait for a CPU a while: the window is not started late).
        let released = OnceLock::new();
        let open = || {
            if barrier.wait().is_leader() {
                let _ = released.set(Instant::now());
            }
        };
        let (interrupted, results) = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..method.threads)
                .map(|i| {
                    let (open, stop) = (&open, &stop);
                    let cpu = cpus.get(i % cpus.len().max(1)).copied();
                    scope.spawn(move || {
                        if let Some(cpu) = cpu {
                            pin_current_thread(cpu);
                        }
                        let mut built = build();
                        let warm = match built.as_mut() {
                            Ok(op) => timed_loop(op, method.warmup).map(|_| ()),
                            Err(e) => Err(e.clone()),
                        };
                        // The window opens for all at once; every thread gets here, even on error.
                        open();
                        warm?;
                        loop_until(&mut built?, stop)
                    })
                })
                .collect();
            open();
            let interrupted = sleep_unless_stopped(method.repeat_duration);
            stop.store(true, Ordering::Relaxed);
            let results: Vec<Result<ThreadRun, OpError>> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect();
            (interrupted, results)
        });
        if interrupted {
            return Err(OpError::Interrupted);
        }
        let (mut bytes, mut cpu_s) = (0, 0.0);
        let start = *released.get().expect("the barrier has a leader");
        let mut end = start;
        for r in results {
            let run = r?;
            bytes += run.bytes;
            cpu_s += run.cpu_s;
            end = end.max(run.stopped);
        }
        let sample = Sample {
            bytes,
            seconds: match method.clock {
                Clock::Wall => end.duration_since(start).as_secs_f64(),
                Clock::Cpu => cpu_s,
            },
        };
        repeats.push(sample.mb_per_s());
    }
    Ok(repeats)
}

/// How often a timed window looks for a stop request.
pub const STOP_CHECK: Duration = Duration::from_millis(20);

/// Sleeps for `duration`, or less if a stop is requested (then true).
fn sleep_unless_stopped(duration: Duration) -> bool {
    let end = Instant::now() + duration;
    loop {
        if crate::stop::requested().is_some() {
            return true;
        }
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep((end - now).min(STOP_CHECK));
    }
}

/// Single-core MB/s of `imp` on `packet_bytes`-byte packets of `suite`, `batch` at a time
/// ([`ops::build_batch`]), on the calling thread, after a self-test and a short warm-up. The
/// userspace tunnel compares its tunnel thread's payload MB per CPU-second with this.
pub fn single_core_mb_per_s(
    imp: &Implementation,
    suite: SpeedSuite,
    packet_bytes: usize,
    batch: usize,
    duration: Duration,
) -> Result<f64, SpeedError> {
    crypto::self_test(imp)?;
    let direction = suite.crypto_ops()[0];
    let crypto_err = |source: OpError| SpeedError::Crypto {
        implementation: imp.to_string(),
        suite: suite.name(),
        source,
    };
    let mut op =
        ops::build_batch(imp, suite, direction, packet_bytes, batch).map_err(|e| crypto_err(e.into()))?;
    timed_loop(&mut op, (duration / 10).min(Duration::from_millis(100))).map_err(crypto_err)?;
    Ok(timed_loop(&mut op, duration).map_err(crypto_err)?.mb_per_s())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crypto::CryptoChoice;

    #[test]
    fn timed_loop_runs_for_the_duration_and_counts_payload() {
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        let mut op = ops::build(&imp, SpeedSuite::HmacSha256, CryptoOp::Mac, 64).unwrap();
        let s = timed_loop(&mut op, Duration::from_millis(20)).unwrap();
        assert!(s.seconds >= 0.02, "{s:?}");
        assert!(s.bytes > 0 && s.bytes % 64 == 0, "{s:?}");
    }

    #[test]
    fn cell_has_one_value_per_repeat_and_sums_threads() {
        let imp = Implementation::new(CryptoChoice::Rustcrypto).unwrap();
        let m = Method::new(0.03, 3, 2);
        let v = measure_cell(
            &imp,
            SpeedSuite::AesCbc(model::KeyBits::Aes128),
            CryptoOp::Encrypt,
            256,
            1,
            &m,
        )
        .unwrap();
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|&x| x > 0.0), "{v:?}");
    }

    /// CPU seconds the calling thread has used.
    fn thread_cpu_s() -> f64 {
        use nix::sys::resource::{getrusage, UsageWho};
        let u = getrusage(UsageWho::RUSAGE_THREAD).unwrap();
        let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        s(u.user_time()) + s(u.system_time())
    }

    /// Issue 43: `--multi 64` on 2 CPUs summed each thread's own window as if it had a core
    /// (4× one thread's figure). Threads beyond the CPUs now add up to no more than the CPUs'
    /// worth: below (CPUs + 1) × what one thread does per CPU-second of its own (measured
    /// here, per CPU-second so that other work on a shared machine does not move the bound).
    #[test]
    fn threads_beyond_the_cpus_add_up_to_the_machine_not_more() {
        let imp = Implementation::new(CryptoChoice::Rustcrypto).unwrap();
        let cpus = allowed_cpus().len().max(1);
        let suite = SpeedSuite::AesCbc(model::KeyBits::Aes128);
        let mut op = ops::build(&imp, suite, CryptoOp::Encrypt, 1024).unwrap();
        timed_loop(&mut op, Duration::from_millis(50)).unwrap();
        let cpu_before = thread_cpu_s();
        let one = timed_loop(&mut op, Duration::from_millis(400)).unwrap();
        let per_cpu_s = one.bytes as f64 / (thread_cpu_s() - cpu_before) / 1e6;
        for threads in [8, 32 * cpus] {
            let mut v = measure_cell(
                &imp,
                suite,
                CryptoOp::Encrypt,
                1024,
                1,
                &Method::new(0.6, 3, threads),
            )
            .unwrap();
            v.sort_by(f64::total_cmp);
            let ratio = v[1] / per_cpu_s;
            eprintln!(
                "{threads} threads on {cpus} CPUs: {:.0} MB/s; one thread {per_cpu_s:.0} MB per CPU-second; ratio {ratio:.2}",
                v[1]
            );
            assert!(
                ratio < (cpus + 1) as f64,
                "{threads} threads: {ratio:.2} × one thread on {cpus} CPUs"
            );
        }
    }

    #[test]
    fn single_core_speed_is_positive_for_tunnel_suites() {
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        for suite in ["aes-256-cbc-hmac-sha256", "aes-256-gcm"] {
            let s: SpeedSuite = suite.parse().unwrap();
            let mb = single_core_mb_per_s(&imp, s, 1400, 1, Duration::from_millis(20)).unwrap();
            assert!(mb > 0.0, "{suite}: {mb}");
        }
    }
}
