//! What the backends that start a real daemon per end (OpenVPN, charon, wireguard-go) share:
//! writing its secret configuration, stopping it so that it removes what it made, and its
//! version for the evidence.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Writes `text` to a new file (never over an old one) that only its owner can read: keys,
/// PSKs.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// How long a daemon gets after SIGTERM once the run itself was told to stop: the whole run
/// has a second to be gone, and what SIGKILL leaves (a TUN device, SAs) lives in the run's
/// namespaces, which go next. OpenVPN still starting took over 3 s to act on SIGTERM.
const GRACE_WHEN_STOPPING: Duration = Duration::from_millis(300);

/// SIGTERM first, so the daemon removes what it made (its TUN device, its SAs); SIGKILL if
/// it has not exited within `grace` (at most [`GRACE_WHEN_STOPPING`] after Ctrl-C or SIGTERM).
pub fn stop(child: &mut Child, grace: Duration) {
    if exited(child) {
        return;
    }
    let grace = if crate::signal::any_requested() {
        grace.min(GRACE_WHEN_STOPPING)
    } else {
        grace
    };
    // SAFETY: signals our own child by its pid; it has not been reaped yet.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if exited(child) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn exited(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(Some(_)))
}

/// The first line `program --version` prints; None where it cannot be run.
pub fn version_line(program: &str) -> Option<String> {
    let out = Command::new(program).arg("--version").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn a_daemon_that_ignores_sigterm_is_killed_after_the_grace() {
        let mut child = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        stop(&mut child, Duration::from_millis(300));
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(exited(&mut child));
    }

    #[test]
    fn a_daemon_that_honours_sigterm_stops_at_once() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let started = Instant::now();
        stop(&mut child, Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(version_line("sh-that-does-not-exist").is_none());
    }
}
