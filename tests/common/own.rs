//! What a test's own run left, never anyone else's: the run gets a network namespace, a
//! /run/netns and a temporary directory of its own (`unshare --net --mount`, `TMPDIR`), so
//! the namespaces, links and files counted after it are its own, whatever other lab runs on
//! the machine do meanwhile. And the kernel's capabilities asked of iproute2 in a throwaway
//! namespace, as an oracle for what a run on this kernel must do (never the lab's own
//! probe, whose answer is what is being tested).

use std::process::{Command, Output};

/// One run in its own network and mount namespace.
pub struct OwnRun {
    pub out: Output,
    /// The named namespaces the run left under its own /run/netns.
    pub namespaces_left: Vec<String>,
    /// The `ipl*` links it left in its own host namespace.
    pub links_left: Vec<String>,
    /// What it left in its own temporary directory.
    pub files_left: Vec<String>,
    /// `ip xfrm state` and `ip xfrm policy` in its own host namespace afterwards.
    pub xfrm_left: String,
}

/// The sandbox: a tmpfs on /run/netns that only this mount namespace sees, the test's
/// setup (`$IPL_SETUP`), the run, then what is left, written to `$IPL_OWN` (stdout stays
/// the run's).
const SANDBOX: &str = r#"mkdir -p /run/netns && mount -t tmpfs -o mode=0755 ipl-own /run/netns || exit 125
eval "$IPL_SETUP" || exit 125
"$0" "$@"
rc=$?
ls -A /run/netns >"$IPL_OWN/netns"
ls -A "$TMPDIR" >"$IPL_OWN/files"
ip -o link show >"$IPL_OWN/links"
{ ip xfrm state list; ip xfrm policy list; } >"$IPL_OWN/xfrm"
exit $rc"#;

/// Runs `ipsec-lab ARGS` in a network and mount namespace of its own (root only) and says
/// what it left there. The namespaces and files it left go with the sandbox, so a failing
/// test leaves none of them on the machine either.
pub fn run_lab_own(args: &[&str]) -> OwnRun {
    Sandbox::default().run(args)
}

/// A sandbox with more to it than [`run_lab_own`]'s.
#[derive(Default)]
pub struct Sandbox {
    setup: String,
    wrapper: Vec<std::ffi::OsString>,
    host_network: bool,
}

impl Sandbox {
    /// A shell command run in the sandbox before the run (say, a bind mount that hides a
    /// program from it).
    pub fn setup(mut self, command: &str) -> Sandbox {
        self.setup = command.to_string();
        self
    }

    /// A program the run is started through (say, `strace -o FILE`).
    pub fn wrapper(mut self, program: &[impl AsRef<std::ffi::OsStr>]) -> Sandbox {
        self.wrapper = program.iter().map(|a| a.as_ref().to_owned()).collect();
        self
    }

    /// The host's network namespace instead of one of its own (a run that boots a VM);
    /// then `links_left` and `xfrm_left` are the host's, not the run's own.
    pub fn host_network(mut self) -> Sandbox {
        self.host_network = true;
        self
    }

    pub fn run(self, args: &[&str]) -> OwnRun {
        let dir = super::private_dir("ipl-own-");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut unshare = Command::new("unshare");
        if !self.host_network {
            unshare.arg("--net");
        }
        let out = unshare
            .args(["--mount", "--propagation", "private", "--", "sh", "-c", SANDBOX])
            .args(&self.wrapper)
            .arg(env!("CARGO_BIN_EXE_ipsec-lab"))
            .args(args)
            .env("IPL_OWN", dir.path())
            .env("IPL_SETUP", &self.setup)
            .env("TMPDIR", &tmp)
            .output()
            .expect("unshare (util-linux) runs");
        let read = |name: &str| {
            std::fs::read_to_string(dir.path().join(name))
                .unwrap_or_else(|e| panic!("the sandbox wrote no {name} ({e}): {}", super::text(&out)))
        };
        let lines = |name: &str| read(name).lines().map(String::from).collect();
        OwnRun {
            namespaces_left: lines("netns"),
            links_left: lab_links(&read("links")),
            files_left: lines("files"),
            xfrm_left: read("xfrm"),
            out,
        }
    }
}

/// The `ipl*` link names in `ip -o link show` output.
pub fn lab_links(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n.starts_with("ipl"))
        .collect()
}

/// Whether this kernel accepts an ESP SA (`ip xfrm state add ... proto esp`), asked in a
/// namespace that goes with the command. Needs root.
pub fn kernel_takes_esp_sa() -> bool {
    let key = format!("0x{}", "00".repeat(16));
    let args = [
        "ip",
        "xfrm",
        "state",
        "add",
        "src",
        "198.18.0.1",
        "dst",
        "198.18.0.2",
        "proto",
        "esp",
        "spi",
        "0x100",
        "mode",
        "tunnel",
        "enc",
        "cbc(aes)",
        &key,
    ];
    // iproute2's words for EPROTONOSUPPORT / a missing xfrm type.
    asked(&args, &["Requested type not found", "Protocol not supported"])
}

/// Whether this kernel has the netem qdisc (`tc qdisc add ... netem`), asked in a namespace
/// that goes with the command. Needs root.
pub fn kernel_has_netem() -> bool {
    asked(
        &["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
        &["Specified qdisc kind is unknown"],
    )
}

/// Runs `cmd` in a throwaway network namespace: true if it worked, false if it failed
/// saying one of `missing`; any other failure is a broken test machine and panics.
fn asked(cmd: &[&str], missing: &[&str]) -> bool {
    let out = Command::new("unshare")
        .arg("--net")
        .args(cmd)
        .output()
        .unwrap_or_else(|e| panic!("unshare --net {cmd:?}: {e}"));
    if out.status.success() {
        return true;
    }
    let said = super::text(&out);
    assert!(
        missing.iter().any(|m| said.contains(m)),
        "unshare --net {cmd:?} failed for another reason: {said}"
    );
    false
}
