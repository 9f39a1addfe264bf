//! One way to run this binary elsewhere and read its report back: a child process started
//! with hardware AES masked (`crypto::soft::command()`) or a virtme-ng guest
//! ([`crate::vm::vng_command`]). While it runs the child is recorded in the state file (so
//! `clean` stops it if this process is killed), a Ctrl-C is passed on to it as SIGINT, and
//! past its timeout it gets a SIGINT, then a kill. The child leads a process group of its
//! own, and every signal goes to the whole group: a VM is vng, qemu and virtiofsd, and
//! killing vng alone left qemu running, reparented to PID 1. When the child has exited,
//! whatever is left of its group is stopped before the run goes on. It writes its JSON report into a private
//! directory; its exit code is its own status, or for a guest the file the guest's script
//! writes `$?` into (vng's status only says whether the VM ran). What went wrong becomes a
//! [`ChildError`], and from there a [`LabError`] of the kind the exit code stands for.
//!
//! The child gets its validated plan as JSON in the same private directory
//! ([`write_plan`]; it reads it with `--plan-file`, [`read_plan`]), not as re-assembled
//! command-line arguments.
//!
//! Leaves out: what the child runs (its arguments, the guest's script) and what the caller
//! does with the report.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

use crate::error::{ExitKind, LabError};

/// How long a child has after its SIGINT (Ctrl-C or its timeout) before it is killed.
const GRACE: Duration = Duration::from_secs(30);
/// How long the child's output is still read after it exited: a helper it started (vng's
/// virtiofsd) may hold the pipe open.
const DRAIN: Duration = Duration::from_secs(2);
/// How often the child is checked for having exited.
const POLL: Duration = Duration::from_millis(200);
/// How often the child's process group is looked at for new members to record.
const GROUP_SCAN: Duration = Duration::from_secs(1);
/// How long what is left of the child's process group has after a SIGTERM, and then after
/// a SIGKILL, to be gone.
const GROUP_GRACE: Duration = Duration::from_secs(5);

/// What becomes of the child's output.
pub enum Output<'a> {
    /// Each line of stdout to the callback; stderr is this process's.
    Lines(&'a (dyn Fn(&str) + Sync)),
    /// Not shown while it runs (a guest's console in a sweep that has its own progress);
    /// its last lines are kept and given with the error if it gives no report.
    Hidden,
    /// A VM's console: stdout and stderr copied to this process's stderr line by line, so
    /// the user sees it and qemu never holds a file of the user's (it would truncate a
    /// redirected log).
    ToStderr,
}

/// How many of a hidden child's last lines an error quotes, and how long each may be: a
/// guest's console, enough to show a hung task or a kernel's stall report.
const KEPT_LINES: usize = 20;
const KEPT_LINE_CHARS: usize = 200;

/// What a hidden child's error says before the lines it quotes, one per line after it.
pub const LAST_LINES_FOLLOW: &str = " (the last lines it printed follow)";

/// Where the user reads a child's own messages, said after its error.
#[derive(Debug, Clone)]
pub enum Messages {
    /// They were shown as they came.
    Above,
    /// Hidden while it ran: its last lines (control characters replaced).
    Last(Vec<String>),
}

impl std::fmt::Display for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Messages::Above => f.write_str(" (its messages are above)"),
            Messages::Last(lines) if lines.is_empty() => f.write_str(" (it printed nothing)"),
            // The first line reads whole without the rest (a sweep's cells quote it alone).
            Messages::Last(lines) => {
                f.write_str(LAST_LINES_FOLLOW)?;
                lines.iter().try_for_each(|l| write!(f, "\n  | {l}"))
            }
        }
    }
}

/// The last [`KEPT_LINES`] lines of a hidden child's output, each cut to
/// [`KEPT_LINE_CHARS`], with control characters (a console's escapes) replaced; and the
/// first line that reads as a kernel's failure report, which a panic's register dump (some
/// 40 lines) would push out of the last ones.
#[derive(Default)]
struct LastLines {
    lines: std::collections::VecDeque<String>,
    alarm: Option<String>,
}

/// What a kernel's console says first when it fails.
const KERNEL_ALARMS: &[&str] = &[
    "Kernel panic",
    "BUG:",
    "Oops",
    "general protection fault",
    "soft lockup",
    "hard LOCKUP",
    "blocked for more than",
    "self-detected stall",
    "Out of memory",
];

impl LastLines {
    fn push(&mut self, line: &[u8]) {
        let line: String = String::from_utf8_lossy(line)
            .chars()
            .filter(|&c| c != '\r')
            .map(|c| if c.is_control() { '?' } else { c })
            .take(KEPT_LINE_CHARS)
            .collect();
        if line.trim().is_empty() {
            return;
        }
        if self.alarm.is_none() && KERNEL_ALARMS.iter().any(|a| line.contains(a)) {
            self.alarm = Some(line.clone());
        }
        if self.lines.len() == KEPT_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// The lines to quote: the alarm first, where the last lines no longer hold it.
    fn into_quoted(self) -> Vec<String> {
        let LastLines { lines, alarm } = self;
        match alarm {
            Some(alarm) if !lines.contains(&alarm) => {
                [alarm, "...".to_string()].into_iter().chain(lines).collect()
            }
            _ => lines.into(),
        }
    }
}

/// Where the child's exit code comes from.
#[derive(Debug, Clone, Copy)]
pub enum ExitCodeFrom {
    /// Its exit status (a local child).
    Status,
    /// A file in the private directory, written by a guest's script.
    File(&'static str),
}

/// A child to run: see the module's description.
pub struct Child<'a> {
    /// Names it in messages, e.g. "the soft-AES child sweep".
    pub name: &'a str,
    /// Program and arguments; stdin, stdout and stderr are set by [`Child::run`].
    pub command: Command,
    pub exit_code: ExitCodeFrom,
    /// The file name of its JSON report in the private directory.
    pub report: &'a str,
    pub output: Output<'a>,
    pub timeout: Option<Duration>,
}

/// How the child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(u8),
    /// No exit code: killed by a signal, or a guest whose script never wrote one; says
    /// what is known instead.
    Unknown(String),
}

impl Exit {
    /// Says that the child was stopped for running past `timeout`, where it gave no exit
    /// code.
    fn past_timeout(self, timeout: Duration) -> Exit {
        match self {
            Exit::Unknown(why) => Exit::Unknown(format!(
                "{why}; stopped after its timeout of {} s",
                timeout.as_secs()
            )),
            code => code,
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit code {code}"),
            Exit::Unknown(why) => f.write_str(why),
        }
    }
}

/// Why a child gave no usable report.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("{name} did not start: {source}")]
    NotStarted { name: String, source: io::Error },
    #[error("{name} failed with exit code {code}{messages}")]
    ExitCode {
        name: String,
        code: u8,
        messages: Messages,
    },
    #[error("{name} did not finish ({why}){messages}")]
    Unfinished {
        name: String,
        why: String,
        messages: Messages,
    },
    // `cause`, not `source`: the message says it already, and a source would say it again
    // in every `{:#}` chain ("No such file or directory (os error 2): No such file ...").
    #[error("{name} wrote no report ({exit}): {cause}{messages}")]
    NoReport {
        name: String,
        exit: Exit,
        cause: io::Error,
        messages: Messages,
    },
    #[error("{name} wrote a report that does not parse ({exit}): {cause}")]
    BadReport {
        name: String,
        exit: Exit,
        cause: serde_json::Error,
    },
}

impl ChildError {
    /// The kind the child's exit code stands for; failed where it gave none.
    pub fn kind(&self) -> ExitKind {
        match self {
            ChildError::ExitCode { code, .. }
            | ChildError::NoReport {
                exit: Exit::Code(code @ 1..),
                ..
            }
            | ChildError::BadReport {
                exit: Exit::Code(code @ 1..),
                ..
            } => ExitKind::from_code(*code),
            _ => ExitKind::Failed,
        }
    }
}

impl From<ChildError> for LabError {
    fn from(e: ChildError) -> LabError {
        LabError::new(e.kind(), e)
    }
}

/// What a child left: its exit code and report, and how long it took.
#[derive(Debug)]
pub struct Finished<T> {
    name: String,
    exit: Result<Exit, io::Error>,
    report: Result<T, ReportError>,
    messages: Messages,
    cancelled: bool,
    pub elapsed: Duration,
}

#[derive(Debug)]
enum ReportError {
    Missing(io::Error),
    Unparsable(serde_json::Error),
}

impl<T> Finished<T> {
    /// The report of a child that exited 0; else the error its exit code stands for
    /// (interrupted where a Ctrl-C ended it before it gave one).
    pub fn succeeded(self) -> Result<T, LabError> {
        match &self.exit {
            Ok(Exit::Code(0)) | Err(_) => self.report(),
            Ok(Exit::Unknown(_)) if self.cancelled => Err(LabError::interrupted()),
            Ok(Exit::Code(code)) => Err(ChildError::ExitCode {
                name: self.name,
                code: *code,
                messages: self.messages,
            }
            .into()),
            Ok(Exit::Unknown(why)) => Err(ChildError::Unfinished {
                name: self.name,
                why: why.clone(),
                messages: self.messages,
            }
            .into()),
        }
    }

    /// The report whatever the exit code (a child sweep writes what it measured also when
    /// a cell failed or it was interrupted); an error only where there is none.
    pub fn report(self) -> Result<T, LabError> {
        let exit = match self.exit {
            Ok(exit) => exit,
            Err(source) => {
                return Err(ChildError::NotStarted {
                    name: self.name,
                    source,
                }
                .into())
            }
        };
        self.report.map_err(|e| {
            let name = self.name;
            match e {
                ReportError::Missing(cause) => ChildError::NoReport {
                    name,
                    exit,
                    cause,
                    messages: self.messages,
                },
                ReportError::Unparsable(cause) => ChildError::BadReport { name, exit, cause },
            }
            .into()
        })
    }
}

/// [`Child::run`] from synchronous code, on a runtime of its own; SIGINT and SIGTERM are
/// passed on to the child.
pub fn run_blocking<T: DeserializeOwned>(
    child: Child<'_>,
    dir: &owner::PrivateDir,
) -> Result<Finished<T>, LabError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    runtime.block_on(async {
        let cancel = CancellationToken::new();
        let interrupted = crate::signal::cancel_on_signal(cancel.clone())?;
        let finished = child.run(dir, &cancel).await;
        interrupted.abort();
        Ok(finished)
    })
}

impl Child<'_> {
    /// Runs the child to its end with `dir` as its private output directory.
    pub async fn run<T: DeserializeOwned>(
        self,
        dir: &owner::PrivateDir,
        cancel: &CancellationToken,
    ) -> Finished<T> {
        let Child {
            name,
            mut command,
            exit_code,
            report,
            output,
            timeout,
        } = self;
        let (stdout, stderr) = match output {
            Output::Lines(_) => (Stdio::piped(), Stdio::inherit()),
            Output::Hidden | Output::ToStderr => (Stdio::piped(), Stdio::piped()),
        };
        command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        // SIGINT is how the child is told to stop (Ctrl-C, its timeout). An ignored signal
        // stays ignored through exec, so a caller started as a background job (which
        // ignores SIGINT) and without a handler of its own, as this module's tests run in
        // a backgrounded `make test`, gave a child that ran on for the whole grace.
        // SAFETY: between fork and exec this only calls sigaction, which is
        // async-signal-safe, and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                use nix::sys::signal::{signal, SigHandler, Signal};
                signal(Signal::SIGINT, SigHandler::SigDfl)
                    .map(drop)
                    .map_err(io::Error::from)
            });
        }
        let program = record_name(&command, name);
        let started = Instant::now();
        let last_lines = std::cell::RefCell::new(LastLines::default());
        let exit = match command.spawn() {
            Ok(child) => {
                let status = wait_recorded(child, &program, &output, &last_lines, cancel, timeout).await;
                let exit = match exit_code {
                    ExitCodeFrom::Status => exit_of_status(status),
                    ExitCodeFrom::File(file) => {
                        let runner = command.get_program().to_string_lossy();
                        exit_of_file(
                            std::fs::read_to_string(dir.join(file)).ok().as_deref(),
                            &runner,
                            status,
                        )
                    }
                };
                Ok(match timeout.filter(|t| started.elapsed() > *t) {
                    Some(t) => exit.past_timeout(t),
                    None => exit,
                })
            }
            Err(e) => Err(e),
        };
        Finished {
            name: name.to_string(),
            exit,
            report: read_report(&dir.join(report)),
            messages: match output {
                Output::Hidden => Messages::Last(last_lines.into_inner().into_quoted()),
                Output::Lines(_) | Output::ToStderr => Messages::Above,
            },
            cancelled: cancel.is_cancelled(),
            elapsed: started.elapsed(),
        }
    }
}

/// The plan file in a child's private directory.
pub const PLAN_FILE: &str = "plan.json";

/// Single-quotes `s` for a guest's shell (a VM's command, user-mode Linux's init).
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A guest's `ipsec-lab run` (a VM's or user-mode Linux's): the plan file the host wrote,
/// no progress; its `--json` is added by whoever boots it. How the report is shown
/// (`--json`, intervals) is the host's.
pub fn guest_run_args(plan_file: &Path) -> Vec<String> {
    vec![
        "run".into(),
        "--plan-file".into(),
        plan_file.display().to_string(),
        "--no-progress".into(),
    ]
}

/// Writes `plan` as JSON into `dir` (the child's private directory) and returns its path,
/// for the child's `--plan-file`.
pub fn write_plan<T: Serialize>(dir: &owner::PrivateDir, plan: &T) -> Result<PathBuf, LabError> {
    let path = dir.join(PLAN_FILE);
    let text = serde_json::to_string(plan).map_err(LabError::failed)?;
    std::fs::write(&path, text)
        .map_err(|e| LabError::failed(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// A plan written by [`write_plan`], for `--plan-file PATH`; bad input (exit 2) where the
/// file is unreadable or holds no such plan.
pub fn read_plan<T: DeserializeOwned>(path: &Path) -> Result<T, LabError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        LabError::usage(anyhow::anyhow!(
            "--plan-file {}: cannot read it: {e}",
            path.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| LabError::usage(anyhow::anyhow!("--plan-file {}: not a plan: {e}", path.display())))
}

/// The child as the state file names it: its program, and what it is for.
fn record_name(command: &Command, name: &str) -> String {
    let program = Path::new(command.get_program());
    let program = program.file_name().unwrap_or(program.as_os_str());
    format!("{} ({name})", program.to_string_lossy())
}

fn read_report<T: DeserializeOwned>(path: &Path) -> Result<T, ReportError> {
    let text = std::fs::read_to_string(path).map_err(ReportError::Missing)?;
    serde_json::from_str(&text).map_err(ReportError::Unparsable)
}

/// A local child's exit code, from its status.
fn exit_of_status(status: io::Result<ExitStatus>) -> Exit {
    match status {
        Ok(s) => match s.code() {
            Some(code) => Exit::Code(code.clamp(0, 255) as u8),
            None => Exit::Unknown(s.to_string()),
        },
        Err(e) => Exit::Unknown(format!("waiting for it failed: {e}")),
    }
}

/// A guest's exit code, from the file its script wrote (`text`), or what is known when it
/// wrote none: how `runner` (vng) ended.
fn exit_of_file(text: Option<&str>, runner: &str, status: io::Result<ExitStatus>) -> Exit {
    if let Some(code) = text.and_then(|t| t.trim().parse::<u8>().ok()) {
        return Exit::Code(code);
    }
    let runner = match status {
        Ok(s) => format!("{runner} ended with {s}"),
        Err(e) => format!("waiting for {runner} failed: {e}"),
    };
    Exit::Unknown(format!("{runner}; the guest wrote no exit code"))
}

/// Waits for `child` (recorded in the state file meanwhile, so `clean` stops it if this
/// process is killed) while its output goes where `output` says.
async fn wait_recorded(
    mut child: std::process::Child,
    program: &str,
    output: &Output<'_>,
    last_lines: &std::cell::RefCell<LastLines>,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> io::Result<ExitStatus> {
    // `process_group(0)`: the child's pid is its group's id.
    let group = child.id();
    let record = owner::Record::process(child.id(), program);
    match owner::record(record.clone()) {
        Ok(()) => {}
        // Not root: nothing to record into; the child still ends with this process's tty.
        Err(e) if e.is_permission() => tracing::debug!("{program} not recorded: {e}"),
        Err(e) => tracing::warn!("{program} not recorded: {e}"),
    }
    let reading = read_output(child.stdout.take(), child.stderr.take(), output, last_lines);
    let waiting = wait(child, cancel, timeout);
    tokio::pin!(reading, waiting);
    let mut read_all = false;
    // The processes the child starts (qemu, virtiofsd) are recorded as they appear, so a
    // `clean` after this process was killed stops them too, not only the child.
    let mut members = GroupRecords::new(group, program);
    let mut scan = tokio::time::interval(GROUP_SCAN);
    let status = loop {
        tokio::select! {
            status = &mut waiting => break status,
            () = &mut reading, if !read_all => read_all = true,
            _ = scan.tick() => members.scan(),
        }
    };
    if !read_all {
        let _ = tokio::time::timeout(DRAIN, reading).await;
    }
    stop_group(group).await;
    members.forget();
    owner::forget(&record);
    status
}

/// The members of a child's process group (its descendants), each recorded in the state
/// file with its identity while it runs.
struct GroupRecords {
    group: u32,
    program: String,
    recorded: Vec<(u32, owner::Record)>,
}

impl GroupRecords {
    fn new(group: u32, program: &str) -> GroupRecords {
        GroupRecords {
            group,
            program: program.to_string(),
            recorded: Vec::new(),
        }
    }

    /// Records the group's members not recorded yet (the child itself is already).
    fn scan(&mut self) {
        for pid in group_members(self.group) {
            if pid == self.group || self.recorded.iter().any(|(p, _)| *p == pid) {
                continue;
            }
            let record = owner::Record::process(pid, &format!("started by {}", self.program));
            // Best effort, as for the child: unrecorded, it is still stopped with the group.
            if owner::record(record.clone()).is_ok() {
                self.recorded.push((pid, record));
            }
        }
    }

    fn forget(self) {
        for (_, record) in &self.recorded {
            owner::forget(record);
        }
    }
}

/// Live (not zombie) processes of process group `group`, from /proc: its members may be
/// grandchildren, which this process cannot wait for.
fn group_members(group: u32) -> Vec<u32> {
    procstat::processes()
        .into_iter()
        .filter(|(_, stat)| stat.state != 'Z' && stat.pgrp == group)
        .map(|(pid, _)| pid)
        .collect()
}

/// Sends `signal` to every process of `group`.
fn signal_group(group: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group as i32), signal);
}

/// Ends what is left of the child's process group once the child has exited (qemu after
/// vng, a virtiofsd): SIGTERM, then SIGKILL, waiting until none is left or the grace is out.
async fn stop_group(group: u32) {
    use nix::sys::signal::Signal;
    for signal in [Signal::SIGTERM, Signal::SIGKILL] {
        if group_members(group).is_empty() {
            return;
        }
        signal_group(group, signal);
        let since = Instant::now();
        while !group_members(group).is_empty() && since.elapsed() < GROUP_GRACE {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let left = group_members(group);
    if !left.is_empty() {
        tracing::warn!("processes {left:?} of a child's group outlived SIGKILL");
    }
}

/// Waits for `child`; on Ctrl-C or past `timeout` passes its group a SIGINT (it then writes
/// what it has), and kills the group [`GRACE`] later.
async fn wait(
    mut child: std::process::Child,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> io::Result<ExitStatus> {
    let started = Instant::now();
    let mut signalled: Option<Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        let overdue = timeout.is_some_and(|t| started.elapsed() > t);
        match signalled {
            None if cancel.is_cancelled() || overdue => {
                signal_group(child.id(), nix::sys::signal::Signal::SIGINT);
                signalled = Some(Instant::now());
            }
            Some(at) if at.elapsed() > GRACE => {
                signal_group(child.id(), nix::sys::signal::Signal::SIGKILL);
            }
            _ => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Reads the child's pipes to their end, each line where `output` says.
async fn read_output(
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
    output: &Output<'_>,
    last_lines: &std::cell::RefCell<LastLines>,
) {
    fn to_stderr(line: &[u8]) {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(line);
        let _ = err.write_all(b"\n");
    }
    match output {
        Output::Lines(each) => {
            each_line(stdout.map(OwnedFd::from), |l| each(&String::from_utf8_lossy(l))).await
        }
        Output::ToStderr => {
            tokio::join!(
                each_line(stdout.map(OwnedFd::from), to_stderr),
                each_line(stderr.map(OwnedFd::from), to_stderr)
            );
        }
        Output::Hidden => {
            let keep = |l: &[u8]| last_lines.borrow_mut().push(l);
            tokio::join!(
                each_line(stdout.map(OwnedFd::from), keep),
                each_line(stderr.map(OwnedFd::from), keep)
            );
        }
    }
}

/// Calls `each` per line of `pipe` (without its newline) until the pipe closes.
async fn each_line(pipe: Option<OwnedFd>, mut each: impl FnMut(&[u8])) {
    let Some(pipe) = pipe.and_then(|p| tokio::net::unix::pipe::Receiver::from_owned_fd(p).ok()) else {
        return;
    };
    let mut reader = tokio::io::BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => each(line.strip_suffix(b"\n").unwrap_or(&line)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn exited(code: i32) -> io::Result<ExitStatus> {
        Ok(ExitStatus::from_raw(code << 8))
    }

    #[test]
    fn a_plan_file_reads_back_and_a_bad_one_is_bad_input() {
        let dir = owner::PrivateDir::new("ipl-plan-test-").unwrap();
        let path = write_plan(&dir, &vec![1u32, 2]).unwrap();
        assert_eq!(path, dir.join(PLAN_FILE));
        assert_eq!(read_plan::<Vec<u32>>(&path).unwrap(), [1, 2]);
        let e = read_plan::<String>(&path).unwrap_err();
        assert_eq!(e.kind, ExitKind::Usage);
        assert!(e.error.to_string().contains("not a plan"), "{:#}", e.error);
        let e = read_plan::<Vec<u32>>(&dir.join("missing.json")).unwrap_err();
        assert_eq!(e.kind, ExitKind::Usage);
        assert!(e.error.to_string().contains("cannot read it"), "{:#}", e.error);
    }

    #[test]
    fn a_guests_exit_code_comes_from_its_file() {
        assert_eq!(exit_of_file(Some("0\n"), "vng", exited(0)), Exit::Code(0));
        assert_eq!(exit_of_file(Some(" 3\n"), "vng", exited(0)), Exit::Code(3));
        // vng's own status says only whether the VM ran.
        assert_eq!(exit_of_file(Some("130\n"), "vng", exited(1)), Exit::Code(130));
    }

    #[test]
    fn a_guest_without_an_exit_code_says_how_vng_ended() {
        for text in [None, Some(""), Some("garbage"), Some("256")] {
            let exit = exit_of_file(text, "vng", exited(1));
            assert_eq!(
                exit.to_string(),
                "vng ended with exit status: 1; the guest wrote no exit code",
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_local_childs_exit_code_is_its_status() {
        assert_eq!(exit_of_status(exited(2)), Exit::Code(2));
        let killed = exit_of_status(Ok(ExitStatus::from_raw(9)));
        assert!(
            matches!(&killed, Exit::Unknown(why) if why.contains("signal: 9")),
            "{killed:?}"
        );
    }

    fn finished(exit: Exit, report: Result<u32, ReportError>, cancelled: bool) -> Finished<u32> {
        Finished {
            name: "the run inside the VM".into(),
            exit: Ok(exit),
            report,
            messages: Messages::Above,
            cancelled,
            elapsed: Duration::ZERO,
        }
    }

    fn missing() -> ReportError {
        ReportError::Missing(io::Error::from(io::ErrorKind::NotFound))
    }

    #[test]
    fn exit_codes_become_the_same_kind_of_error() {
        for (code, kind) in [
            (1, ExitKind::Failed),
            (2, ExitKind::Usage),
            (3, ExitKind::Capability),
            (130, ExitKind::Interrupted),
            (101, ExitKind::Failed),
        ] {
            let e = finished(Exit::Code(code), Ok(7), false).succeeded().unwrap_err();
            assert_eq!(e.kind, kind, "{code}");
            assert_eq!(
                e.to_string(),
                format!("the run inside the VM failed with exit code {code} (its messages are above)")
            );
        }
        assert_eq!(finished(Exit::Code(0), Ok(7), false).succeeded().unwrap(), 7);
    }

    #[test]
    fn a_sweeps_report_counts_whatever_its_exit_code() {
        assert_eq!(finished(Exit::Code(130), Ok(7), false).report().unwrap(), 7);
    }

    #[test]
    fn a_missing_report_names_the_child_and_how_it_ended() {
        let e = finished(Exit::Code(0), Err(missing()), false)
            .succeeded()
            .unwrap_err();
        assert_eq!(e.kind, ExitKind::Failed);
        assert!(
            e.to_string()
                .starts_with("the run inside the VM wrote no report (exit code 0): "),
            "{e}"
        );
        let e = finished(Exit::Code(3), Err(missing()), false)
            .report()
            .unwrap_err();
        assert_eq!(e.kind, ExitKind::Capability, "{e}");
        let unparsable = serde_json::from_str::<u32>("{").unwrap_err();
        let e = finished(Exit::Code(0), Err(ReportError::Unparsable(unparsable)), false)
            .report()
            .unwrap_err();
        assert!(
            e.to_string().contains("wrote a report that does not parse"),
            "{e}"
        );
    }

    #[test]
    fn a_child_ended_by_ctrl_c_without_an_exit_code_is_interrupted() {
        let e = finished(
            Exit::Unknown("vng ended with signal: 2".into()),
            Err(missing()),
            true,
        )
        .succeeded()
        .unwrap_err();
        assert_eq!(e.kind, ExitKind::Interrupted);
        let e = finished(
            Exit::Unknown("vng ended with exit status: 1".into()),
            Err(missing()),
            false,
        )
        .succeeded()
        .unwrap_err();
        assert_eq!(e.kind, ExitKind::Failed);
        assert_eq!(
            e.to_string(),
            "the run inside the VM did not finish (vng ended with exit status: 1) (its messages are above)"
        );
    }

    #[test]
    fn a_child_that_did_not_start_says_so() {
        let f = Finished::<u32> {
            name: "the soft-AES child sweep".into(),
            exit: Err(io::Error::from(io::ErrorKind::NotFound)),
            report: Err(missing()),
            messages: Messages::Above,
            cancelled: false,
            elapsed: Duration::ZERO,
        };
        let e = f.succeeded().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the soft-AES child sweep did not start: "),
            "{e}"
        );
    }

    #[test]
    fn a_missing_report_is_said_once() {
        let e = finished(Exit::Code(0), Err(missing()), false)
            .report()
            .unwrap_err();
        let chain = format!("{e:#}");
        let cause = io::Error::from(io::ErrorKind::NotFound).to_string();
        assert_eq!(chain.matches(&cause).count(), 1, "{chain}");
    }

    /// A shell that starts `sleep` in the background (which, as qemu under vng, ignores the
    /// SIGINT its group gets) and writes its pid into `pidfile`, then runs `rest`.
    fn leaves_a_grandchild(pidfile: &Path, rest: &str) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(r#"sleep 1000 & echo $! > "$0"; {rest}"#))
            .arg(pidfile);
        command
    }

    fn alive(pid: u32) -> bool {
        procstat::Stat::of_process(pid).is_some_and(|stat| stat.state != 'Z')
    }

    async fn run_child(command: Command, timeout: Option<Duration>) -> Finished<u32> {
        let dir = owner::PrivateDir::new("ipl-child-group-").unwrap();
        Child {
            name: "a test child",
            command,
            exit_code: ExitCodeFrom::Status,
            report: "out.json",
            output: Output::Hidden,
            timeout,
        }
        .run(&dir, &CancellationToken::new())
        .await
    }

    /// Issue 25: a VM sweep past its timeout lost vng, and qemu lived on, reparented to PID 1.
    #[tokio::test]
    async fn a_child_past_its_timeout_is_stopped_with_its_whole_group() {
        let pidfile = std::env::temp_dir().join(format!("ipl-child-hung-{}", std::process::id()));
        let hung = leaves_a_grandchild(&pidfile, "sleep 1000");
        let started = Instant::now();
        let finished = run_child(hung, Some(Duration::from_secs(1))).await;
        let grandchild: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        let _ = std::fs::remove_file(&pidfile);
        assert!(!alive(grandchild), "the hung child's background process lives on");
        assert!(started.elapsed() < GRACE, "{:?}", started.elapsed());
        let e = finished.succeeded().unwrap_err();
        assert!(e.to_string().contains("timeout of 1 s"), "{e}");
    }

    /// A hidden child that hangs (issue 25's guest, whose console nobody saw) says with its
    /// error what it printed last, on stdout and stderr, a console's escapes made readable.
    #[tokio::test]
    async fn a_hidden_child_that_hangs_quotes_its_last_lines() {
        let mut hung = Command::new("sh");
        hung.arg("-c").arg(
            r#"printf 'rcu: INFO: rcu_sched self-detected stall\033[0m\r\n' >&2
               for i in 1 2 3 4 5; do echo "boot line $i"; done
               exec sleep 1000"#,
        );
        let e = run_child(hung, Some(Duration::from_secs(1)))
            .await
            .succeeded()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timeout of 1 s) (the last lines it printed follow)\n  | "),
            "{e}"
        );
        // stdout and stderr are two pipes read side by side: the stall line may come before
        // or after the boot lines, which keep their own order.
        let quoted: Vec<&str> = e.split("\n  | ").skip(1).collect();
        assert_eq!(quoted.len(), 6, "{e}");
        assert!(
            quoted.contains(&"rcu: INFO: rcu_sched self-detected stall?[0m"),
            "{e}"
        );
        let boot: Vec<&str> = quoted.iter().copied().filter(|l| l.starts_with("boot")).collect();
        assert_eq!(
            boot,
            (1..=5).map(|i| format!("boot line {i}")).collect::<Vec<_>>(),
            "{e}"
        );
        let quiet = run_child(Command::new("true"), None).await;
        assert!(matches!(&quiet.messages, Messages::Last(l) if l.is_empty()));
    }

    #[test]
    fn kept_lines_are_the_last_ones_cut_and_blank_ones_dropped() {
        let mut kept = LastLines::default();
        kept.push(&[b'x'; 500]);
        kept.push(b"   ");
        kept.push(b"\xff ok");
        let lines: Vec<_> = kept.lines.iter().cloned().collect();
        assert_eq!(lines, ["x".repeat(KEPT_LINE_CHARS), "\u{fffd} ok".to_string()]);
        for i in 0..30 {
            kept.push(format!("line {i}").as_bytes());
        }
        let quoted = kept.into_quoted();
        assert_eq!(quoted.len(), KEPT_LINES);
        assert_eq!(
            (quoted[0].as_str(), quoted[KEPT_LINES - 1].as_str()),
            ("line 10", "line 29")
        );
    }

    /// A guest that panics (vng's exit 255, as a CI sweep's second kernel did once) says why:
    /// the panic's first line comes first, though its register dump filled the last lines.
    #[test]
    fn a_kernel_panic_is_quoted_though_its_dump_follows() {
        let mut kept = LastLines::default();
        kept.push(b"[    1.0] Run /init as init process");
        kept.push(b"[   32.0] Kernel panic - not syncing: sysrq triggered crash");
        kept.push(b"[   32.1] BUG: a later one, not the first");
        for i in 0..40 {
            kept.push(format!("[   32.2] R{i:02}: 0000000000000000").as_bytes());
        }
        let quoted = kept.into_quoted();
        assert_eq!(
            quoted[0],
            "[   32.0] Kernel panic - not syncing: sysrq triggered crash"
        );
        assert_eq!(quoted[1], "...");
        assert_eq!(quoted.len(), KEPT_LINES + 2);
        assert_eq!(quoted.last().unwrap(), "[   32.2] R39: 0000000000000000");
        // Where the last lines still hold it, it is not said twice.
        let mut short = LastLines::default();
        short.push(b"Kernel panic - not syncing: x");
        short.push(b"end");
        assert_eq!(short.into_quoted(), ["Kernel panic - not syncing: x", "end"]);
    }

    /// What a child leaves running when it exits (vng's virtiofsd) is stopped too.
    #[tokio::test]
    async fn what_a_child_leaves_in_its_group_is_stopped_when_it_exits() {
        let pidfile = std::env::temp_dir().join(format!("ipl-child-left-{}", std::process::id()));
        let finished = run_child(leaves_a_grandchild(&pidfile, "exit 0"), None).await;
        let grandchild: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        let _ = std::fs::remove_file(&pidfile);
        assert!(!alive(grandchild));
        assert!(matches!(finished.exit, Ok(Exit::Code(0))), "{:?}", finished.exit);
    }

    #[test]
    fn the_state_file_names_the_program_and_its_purpose() {
        let c = Command::new("/usr/local/bin/vng");
        assert_eq!(record_name(&c, "the VM sweep"), "vng (the VM sweep)");
    }

    /// The whole runner on a real process: a report written, lines counted, the exit
    /// status read.
    #[tokio::test]
    async fn a_child_reports_lines_and_its_file() {
        let dir = owner::PrivateDir::new("ipl-child-test-").unwrap();
        let mut command = Command::new("sh");
        // A failed sweep still writes what it measured: the report counts, exit 3 or not.
        command
            .arg("-c")
            .arg(r#"echo one; echo two; echo 42 > "$0"; exit 3"#)
            .arg(dir.join("out.json"));
        let seen = std::sync::Mutex::new(Vec::new());
        let count = |l: &str| seen.lock().unwrap().push(l.to_string());
        let finished: Finished<u32> = Child {
            name: "a test child",
            command,
            exit_code: ExitCodeFrom::Status,
            report: "out.json",
            output: Output::Lines(&count),
            timeout: None,
        }
        .run(&dir, &CancellationToken::new())
        .await;
        assert_eq!(*seen.lock().unwrap(), ["one", "two"]);
        assert_eq!(finished.exit.as_ref().unwrap(), &Exit::Code(3));
        assert_eq!(finished.report().unwrap(), 42);
    }

    #[tokio::test]
    async fn a_child_past_its_timeout_is_interrupted() {
        let dir = owner::PrivateDir::new("ipl-child-test-").unwrap();
        let mut command = Command::new("sleep");
        command.arg("30");
        let started = Instant::now();
        let finished: Finished<u32> = Child {
            name: "a sleeping child",
            command,
            exit_code: ExitCodeFrom::File("rc"),
            report: "out.json",
            output: Output::Hidden,
            timeout: Some(Duration::from_millis(100)),
        }
        .run(&dir, &CancellationToken::new())
        .await;
        assert!(started.elapsed() < Duration::from_secs(10));
        let e = finished.succeeded().unwrap_err();
        assert_eq!(e.kind, ExitKind::Failed);
        let e = e.to_string();
        assert!(
            e.starts_with("a sleeping child did not finish (sleep ended with signal: 2"),
            "{e}"
        );
        assert!(
            e.ends_with("; stopped after its timeout of 0 s) (it printed nothing)"),
            "{e}"
        );
    }
}
