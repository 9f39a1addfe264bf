//! Where results go, one rule for every command: `-` is stdout (stdin for an input), the
//! human table goes to stderr when stdout carries JSON, and every output path is checked
//! before any work starts. Also prints a run report: the table ([`report::run`] renders it)
//! and/or the JSON schema.

use std::io::Write as _;
use std::path::Path;

use model::RunReport;

use lab::{LabError, LabResult};

/// Whether `path` is the `-` that means stdout (or stdin for an input).
pub fn is_std_stream(path: &Path) -> bool {
    path == Path::new("-")
}

/// Refuses, with exit code 2, an output file that could not be written, before the work
/// that fills it: a transfer, a sweep or a VM boot is not lost to a typo. The file is opened
/// for writing without truncating it (an existing file keeps its contents until the result
/// replaces it), and removed again when this check created it.
pub fn check_writable(path: &Path, flag: &str) -> LabResult<()> {
    if is_std_stream(path) {
        return Ok(());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| {
            LabError::usage(anyhow::anyhow!(
                "{flag} {}: cannot write there: {e}",
                path.display()
            ))
        })?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Writes `text` to `path` (`-`: stdout).
pub fn write_text(path: &Path, text: &str) -> LabResult<()> {
    if is_std_stream(path) {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| LabError::failed(anyhow::anyhow!("write to stdout: {e}")));
    }
    std::fs::write(path, text).map_err(|e| LabError::failed(anyhow::anyhow!("write {}: {e}", path.display())))
}

/// The human table on stdout, or on stderr when stdout carries the JSON (`--json -`).
pub fn print_human(text: &str, json: Option<&Path>) {
    if json.is_some_and(is_std_stream) {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

/// The width of the terminal the human text goes to (stderr when stdout carries the
/// JSON); None where it is a pipe or a file, which get one line per note, for grep.
pub fn terminal_width(json: Option<&Path>) -> Option<usize> {
    let fd = if json.is_some_and(is_std_stream) { 2 } else { 1 };
    // SAFETY: isatty and TIOCGWINSZ only read the descriptor's state into `ws`.
    unsafe {
        if libc::isatty(fd) != 1 {
            return None;
        }
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) != 0 || ws.ws_col == 0 {
            return Some(80);
        }
        Some(ws.ws_col as usize)
    }
}

pub fn emit(report: &RunReport, json: Option<&Path>) -> LabResult<()> {
    print_human(&report::run::human(report, json, terminal_width(json)), json);
    if let Some(path) = json {
        write_text(path, &(to_json(report)? + "\n"))?;
    }
    Ok(())
}

/// `--json-stream`'s last object: the report.
pub fn end_of_stream(report: &RunReport) -> LabResult<()> {
    stream_event("end", report).map_err(|e| LabError::failed(anyhow::anyhow!("write to stdout: {e}")))
}

/// One `--json-stream` object, `{"event": EVENT, "data": DATA}`, on a line of its own and
/// flushed: a reader follows the run as it goes.
pub fn stream_event(event: &str, data: &impl serde::Serialize) -> std::io::Result<()> {
    let object = serde_json::json!({ "event": event, "data": data });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{object}").and_then(|()| out.flush())
}

pub fn to_json(report: &RunReport) -> LabResult<String> {
    serde_json::to_string_pretty(report).map_err(LabError::failed)
}
