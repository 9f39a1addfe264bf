//! What a test's own run left, never anyone else's: the run gets a network namespace, a
//! /run/netns and a temporary directory of its own (`unshare --net --mount`, `TMPDIR`), so
//! the namespaces, links and files counted after it are its own, whatever other lab runs on
//! the machine do meanwhile. And the kernel's capabilities asked of iproute2 in a throwaway
//! namespace, as an oracle for what a run on this kernel must do (never the lab's own
//! probe, whose answer is what is being tested).

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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
    /// What [`Sandbox::after`]'s command printed (empty without one).
    pub after: String,
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
eval "$IPL_AFTER" >"$IPL_OWN/after"
exit $rc"#;

/// Runs `ipsec-lab ARGS` in a network and mount namespace of its own (root only) and says
/// what it left there. The namespaces and files it left go with the sandbox, so a failing
/// test leaves none of them on the machine either.
pub fn run_lab_own(args: &[&str]) -> OwnRun {
    Sandbox::default().run(args)
}

/// Runs `ipsec-lab ARGS` as [`run_lab_own`] does and asserts that it left no lab namespace
/// and no lab link in its own namespace; returns its output. Not root, it runs plainly:
/// then it can make nothing to count.
pub fn run_lab_leaving_nothing(args: &[&str]) -> Output {
    if !is_root() {
        return super::run_lab(args);
    }
    let run = run_lab_own(args);
    assert_eq!(
        run.namespaces_left,
        Vec::<String>::new(),
        "{args:?}: {}",
        super::text(&run.out)
    );
    assert_eq!(
        run.links_left,
        Vec::<String>::new(),
        "{args:?}: {}",
        super::text(&run.out)
    );
    run.out
}

/// Whether this test runs as root (a sandbox needs it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A sandbox with more to it than [`run_lab_own`]'s.
#[derive(Default)]
pub struct Sandbox {
    setup: String,
    wrapper: Vec<std::ffi::OsString>,
    host_network: bool,
    current_dir: Option<std::path::PathBuf>,
    after: String,
}

/// A run started in its sandbox ([`Sandbox::spawn`]), still going.
pub struct OwnChild {
    child: Child,
    dir: tempfile::TempDir,
    /// What the run wrote on stderr so far, read as it comes by a thread of its own.
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
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

    /// The run's working directory (the test's own by default).
    pub fn current_dir(mut self, dir: &std::path::Path) -> Sandbox {
        self.current_dir = Some(dir.to_owned());
        self
    }

    /// A shell command run in the sandbox after the run; its stdout is [`OwnRun::after`]
    /// (say, what is left in a directory the setup mounted for the run alone).
    pub fn after(mut self, command: &str) -> Sandbox {
        self.after = command.to_string();
        self
    }

    pub fn run(self, args: &[&str]) -> OwnRun {
        let (mut command, dir) = self.command(args);
        let out = command.output().expect("unshare (util-linux) runs");
        collect(&dir, out)
    }

    /// Starts the run (stdin empty, stdout and stderr piped) without waiting for it.
    pub fn spawn(self, args: &[&str]) -> OwnChild {
        let (mut command, dir) = self.command(args);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut chunk) {
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        OwnChild {
            child,
            dir,
            stderr,
            reader: Some(reader),
        }
    }

    fn command(self, args: &[&str]) -> (Command, tempfile::TempDir) {
        let dir = super::private_dir("ipl-own-");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut unshare = Command::new("unshare");
        if !self.host_network {
            unshare.arg("--net");
        }
        unshare
            .args(["--mount", "--propagation", "private", "--", "sh", "-c", SANDBOX])
            .args(&self.wrapper)
            .arg(env!("CARGO_BIN_EXE_ipsec-lab"))
            .args(args)
            .env("IPL_OWN", dir.path())
            .env("IPL_SETUP", &self.setup)
            .env("IPL_AFTER", &self.after)
            .env("TMPDIR", &tmp);
        if let Some(cwd) = &self.current_dir {
            unshare.current_dir(cwd);
        }
        (unshare, dir)
    }
}

impl OwnChild {
    /// The pid of the run itself (the sandbox shell's child running ipsec-lab), once it
    /// has started; for a signal. Panics if the sandbox ends first or within 20 s.
    pub fn lab_pid(&mut self) -> u32 {
        let lab = std::fs::canonicalize(env!("CARGO_BIN_EXE_ipsec-lab")).unwrap();
        let shell = self.child.id().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(pid) = children(&shell)
                .into_iter()
                .find(|c| std::fs::read_link(format!("/proc/{c}/exe")).is_ok_and(|e| e == lab))
            {
                return pid;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the sandbox ended ({status}) before its run was seen");
            }
            assert!(
                Instant::now() < deadline,
                "the sandbox's run did not start within 20 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the sandbox (and so its run) has ended.
    pub fn ended(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// What the run has written on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits for the run and says what it left, as [`Sandbox::run`] does.
    pub fn wait(mut self) -> OwnRun {
        let mut out = self.child.wait_with_output().expect("the sandbox is waited for");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the stderr reader ends with the pipe");
        }
        out.stderr = std::mem::take(&mut *self.stderr.lock().unwrap());
        collect(&self.dir, out)
    }
}

/// The named namespaces in the /run/netns that process `pid` sees: a sandboxed run's own,
/// while it runs.
pub fn namespaces_seen_by(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/root/run/netns"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The processes whose parent is `parent` (a pid), from /proc.
fn children(parent: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
                .filter(|pid| {
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                    // The parent is the second field after the command name's ')'.
                    stat.rfind(')')
                        .and_then(|close| stat[close + 1..].split_whitespace().nth(1))
                        == Some(parent)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the sandbox in `dir` wrote after its run.
fn collect(dir: &tempfile::TempDir, out: Output) -> OwnRun {
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
        after: read("after"),
        out,
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
