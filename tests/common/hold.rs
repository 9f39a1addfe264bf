//! Holding a live run still while a test looks at what it set up (SAs, qdiscs, links), so
//! the look never races the run. `--with-iperf3` makes a run start iperf3 right after each
//! of its own transfers, with its backend and link still up; the run finds iperf3 on PATH,
//! where a [`Hold`] puts a wrapper first. The wrapper's first client call writes the name of
//! the namespace it was started in (the run's end a) and waits until the test releases it,
//! then execs the real iperf3. Nothing times the look: the run cannot go on until released.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The wrapper; `@DIR@`: the hold's directory, `@REAL@`: the real iperf3.
/// Its wait is bounded (10 minutes) so a test that died without releasing does not leave
/// the run stuck for ever.
const WRAPPER: &str = r#"#!/bin/sh
# Written by tests/common/hold.rs: holds an ipsec-lab run at its first iperf3 client.
dir=@DIR@
case " $* " in
*" --client "*)
    if [ ! -e "$dir/released" ] && [ ! -e "$dir/held" ]; then
        ip netns identify $$ >"$dir/held.tmp"
        mv "$dir/held.tmp" "$dir/held"
        i=0
        while [ ! -e "$dir/released" ] && [ "$i" -lt 12000 ]; do
            sleep 0.05
            i=$((i + 1))
        done
    fi ;;
esac
exec @REAL@ "$@"
"#;

/// One hold: a private directory with the wrapper. Keep it until the run has ended (a
/// later iperf3 call of the run needs the wrapper); dropping it releases the run.
pub struct Hold {
    dir: tempfile::TempDir,
}

impl Hold {
    /// A hold whose wrapper execs the iperf3 found on PATH; panics if there is none (call
    /// [`iperf3_or_skip`] first).
    pub fn new() -> Hold {
        let real = find_on_path("iperf3").expect("iperf3 on PATH (apt-get install iperf3)");
        let dir = super::private_dir("ipl-hold-");
        let script = WRAPPER
            .replace("@REAL@", &quoted(&real))
            .replace("@DIR@", &quoted(dir.path()));
        let wrapper = dir.path().join("iperf3");
        std::fs::write(&wrapper, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o700)).unwrap();
        Hold { dir }
    }

    /// `ipsec-lab` with the wrapper first on PATH. The run must be given `--with-iperf3`.
    pub fn lab(&self) -> Command {
        let mut cmd = super::lab();
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", self.dir.path().display()));
        cmd
    }

    /// Waits until `run` is held and returns the namespace of its end a. Panics if the run
    /// ends first (it never reached its iperf3 run) or `limit` passes.
    pub fn wait(&self, run: &mut Child, limit: Duration) -> String {
        let held = self.dir.path().join("held");
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(ns) = std::fs::read_to_string(&held) {
                let ns = ns.trim().to_string();
                assert!(!ns.is_empty(), "the held iperf3 runs in no named namespace");
                return ns;
            }
            if let Some(status) = run.try_wait().unwrap() {
                panic!("the run ended ({status}) before its iperf3 run: nothing was held");
            }
            assert!(Instant::now() < deadline, "the run was not held within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets the run go on.
    pub fn release(&self) {
        let _ = std::fs::write(self.dir.path().join("released"), b"");
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.release();
    }
}

/// True when iperf3 is installed; otherwise skips (under CI=true: fails) saying so.
pub fn iperf3_or_skip(test: &str) -> bool {
    let found = find_on_path("iperf3").is_some();
    if !found {
        testcap::skip(
            test,
            "iperf3 is not installed (apt-get install iperf3); the test holds the run at its iperf3 run",
        );
    }
    found
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// `path` single-quoted for sh.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
