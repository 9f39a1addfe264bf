//! `openssl speed -elapsed -evp` for the same suites, parsed from its machine-readable
//! (`-mr`) output, so the lab's numbers can be checked against the tool everyone knows.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::plan::Clock;
use crate::suite::{CryptoOp, SpeedSuite};

/// Block sizes one plain `openssl speed` run reports.
pub const OPENSSL_SIZES: [usize; 6] = [16, 64, 256, 1024, 8192, 16384];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpensslError {
    #[error("openssl is not installed (apt-get install openssl)")]
    NotInstalled,
    #[error("openssl speed has no equivalent of {suite} {direction}")]
    NoEquivalent { suite: String, direction: CryptoOp },
    #[error("`openssl {args}` failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("cannot parse `openssl {args}` output: {why}")]
    Parse { args: String, why: String },
    #[error("`openssl {args}` stopped: the run was interrupted")]
    Interrupted { args: String },
}

/// `openssl version`, or None when openssl is not installed.
pub fn version() -> Option<String> {
    let out = Command::new("openssl").arg("version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn installed() -> bool {
    version().is_some() || Path::new("/usr/bin/openssl").exists()
}

/// The algorithm arguments that make openssl time the same thing. The CBC+HMAC suites have
/// none: OpenSSL's stitched `aes-*-cbc-hmac-sha256` cipher, timed by `openssl speed` without
/// a MAC key or TLS header, gave 1.9 GB/s at 1400 bytes and 0.4 GB/s at 8192 here — it
/// does not time encrypt-then-MAC per packet, so no number is better than that one.
pub fn algorithm_args(suite: SpeedSuite, direction: CryptoOp) -> Option<Vec<String>> {
    let evp = |name: String| vec!["-evp".to_string(), name];
    match (suite, direction) {
        (SpeedSuite::AesCbc(k), CryptoOp::Encrypt) => Some(evp(format!("aes-{k}-cbc"))),
        (SpeedSuite::AesCbc(k), CryptoOp::Decrypt) => {
            let mut a = vec!["-decrypt".to_string()];
            a.extend(evp(format!("aes-{k}-cbc")));
            Some(a)
        }
        (SpeedSuite::HmacSha256, _) => Some(vec!["-hmac".into(), "sha256".into()]),
        (SpeedSuite::Aead(a), CryptoOp::Encrypt) => Some(evp(a.name().to_string())),
        // Not in the speed table (AEADs are timed one way there); a tunnel's ceiling
        // (openvpn's receiving end) times it.
        (SpeedSuite::Aead(a), CryptoOp::Decrypt) => {
            let mut v = vec!["-decrypt".to_string()];
            v.extend(evp(a.name().to_string()));
            Some(v)
        }
        _ => None,
    }
}

/// One measured size: bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpensslCell {
    pub block_bytes: usize,
    pub bytes_per_s: f64,
}

/// Runs openssl for `sizes`: one plain run covers the standard sizes, `-bytes N` each other
/// one. `seconds` is per size (openssl takes whole seconds, at least 1). [`Clock::Cpu`] is
/// openssl's default, the process's user CPU time; [`Clock::Wall`] adds `-elapsed`.
pub fn run_timed(
    suite: SpeedSuite,
    direction: CryptoOp,
    sizes: &[usize],
    seconds: f64,
    threads: usize,
    clock: Clock,
) -> Result<Vec<OpensslCell>, OpensslError> {
    let alg = algorithm_args(suite, direction).ok_or_else(|| OpensslError::NoEquivalent {
        suite: suite.name(),
        direction,
    })?;
    let secs = (seconds.round() as u64).max(1).to_string();
    let standard: Vec<usize> = sizes
        .iter()
        .copied()
        .filter(|s| OPENSSL_SIZES.contains(s))
        .collect();
    let mut runs: Vec<Option<usize>> = Vec::new();
    if standard.len() >= 2 {
        runs.push(None);
    } else {
        runs.extend(standard.iter().map(|&s| Some(s)));
    }
    runs.extend(
        sizes
            .iter()
            .filter(|s| !OPENSSL_SIZES.contains(s))
            .map(|&s| Some(s)),
    );

    let mut cells = Vec::new();
    for bytes in runs {
        let mut args: Vec<String> = vec!["speed".into(), "-mr".into()];
        if clock == Clock::Wall {
            args.push("-elapsed".into());
        }
        args.extend(["-seconds".into(), secs.clone()]);
        if threads > 1 {
            args.extend(["-multi".into(), threads.to_string()]);
        }
        if let Some(b) = bytes {
            args.extend(["-bytes".into(), b.to_string()]);
        }
        args.extend(alg.iter().cloned());
        let joined = args.join(" ");
        let out = output_unless_stopped(Command::new("openssl").args(&args))
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    OpensslError::NotInstalled
                } else {
                    OpensslError::Failed {
                        args: joined.clone(),
                        stderr: e.to_string(),
                    }
                }
            })?
            .ok_or_else(|| OpensslError::Interrupted { args: joined.clone() })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(OpensslError::Failed {
                args: joined,
                stderr: stderr.lines().next().unwrap_or("").to_string(),
            });
        }
        let parsed = parse_mr(&stdout).map_err(|why| OpensslError::Parse { args: joined, why })?;
        cells.extend(parsed.into_iter().filter(|c| sizes.contains(&c.block_bytes)));
    }
    cells.sort_by_key(|c| c.block_bytes);
    Ok(cells)
}

/// Runs `command` to its end and returns what it printed, or None once Ctrl-C or SIGTERM asked
/// the run to stop: one `openssl speed` call lasts its sizes × seconds, far past the second a
/// stop may take. It runs in a process group of its own, so that SIGKILL reaches `-multi`'s
/// workers too (and Ctrl-C at the terminal reaches it only through this).
fn output_unless_stopped(command: &mut Command) -> std::io::Result<Option<Output>> {
    let mut child: Child = command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Both pipes drained beside the wait, so a full pipe never holds the child.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if crate::stop::requested().is_some() {
            // SAFETY: signals the process group this child leads; it has not been reaped.
            unsafe { nix::libc::killpg(child.id() as nix::libc::pid_t, nix::libc::SIGKILL) };
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Some(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }))
}

/// Parses `openssl speed -mr`: `+H:16:64:...` gives the sizes, the last `+F:n:NAME:v1:v2...`
/// not prefixed by `Got:` (with `-multi` that is the sum over processes) the bytes/s.
pub fn parse_mr(text: &str) -> Result<Vec<OpensslCell>, String> {
    let strip = |l: &str| -> String {
        let l = l.trim().strip_prefix("Got: ").unwrap_or(l.trim());
        l.split(" from ").next().unwrap_or(l).to_string()
    };
    let sizes: Vec<usize> = text
        .lines()
        .map(strip)
        .find_map(|l| l.strip_prefix("+H:").map(str::to_string))
        .ok_or("no +H line")?
        .split(':')
        .map(|s| s.parse::<usize>().map_err(|_| format!("bad size {s:?}")))
        .collect::<Result<_, _>>()?;
    let f = text
        .lines()
        .rfind(|l| l.trim().starts_with("+F:"))
        .ok_or("no +F line")?;
    let fields: Vec<&str> = f.trim().split(':').collect();
    if fields.len() != 3 + sizes.len() {
        return Err(format!(
            "+F line has {} values for {} sizes",
            fields.len().saturating_sub(3),
            sizes.len()
        ));
    }
    fields[3..]
        .iter()
        .zip(&sizes)
        .map(|(v, &block_bytes)| {
            v.parse::<f64>()
                .map(|bytes_per_s| OpensslCell {
                    block_bytes,
                    bytes_per_s,
                })
                .map_err(|_| format!("bad value {v:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_multi_process_output() {
        let single = "+DT:AES-128-CBC:1:1400\n+R:779966:AES-128-CBC:1.000000\n+H:1400\n+F:25:AES-128-CBC:1091952400.00\n";
        assert_eq!(
            parse_mr(single).unwrap(),
            [OpensslCell {
                block_bytes: 1400,
                bytes_per_s: 1091952400.0
            }]
        );
        let multi = "Forked child 1\nGot: +H:16:64 from 0\nGot: +F:25:AES-128-GCM:1.00:2.00 from 0\nGot: +H:16:64 from 1\nGot: +F:25:AES-128-GCM:3.00:4.00 from 1\n+F:25:AES-128-GCM:4.00:6.00\n";
        let cells = parse_mr(multi).unwrap();
        assert_eq!(cells.len(), 2);
        assert_eq!((cells[1].block_bytes, cells[1].bytes_per_s), (64, 6.0));
        assert!(parse_mr("+H:16:64\n+F:1:X:1.0\n").is_err());
        assert!(parse_mr("garbage").is_err());
    }

    #[test]
    fn every_suite_but_cbc_hmac_has_an_openssl_equivalent() {
        for suite in SpeedSuite::all() {
            for &dir in suite.crypto_ops() {
                let has = algorithm_args(suite, dir).is_some();
                let cbc_hmac = matches!(suite, SpeedSuite::AesCbcHmacSha256(_));
                assert_eq!(has, !cbc_hmac, "{suite} {dir}");
            }
        }
    }

    #[test]
    fn real_openssl_matches_the_parser() {
        if !installed() {
            eprintln!("skipped: openssl not installed");
            return;
        }
        let cells = run_timed(SpeedSuite::HmacSha256, CryptoOp::Mac, &[64], 1.0, 1, Clock::Wall).unwrap();
        assert_eq!(cells.len(), 1);
        assert!(cells[0].bytes_per_s > 0.0);
    }
}
