//! `/proc/PID/stat`: one line, `pid (comm) state ppid pgrp ...`, fields numbered from 1
//! as in proc(5).

use std::path::Path;

use crate::cpu::{ticks_per_s, CpuTime};

/// The fields of a stat line the lab reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Field 2, without its parentheses: the name (15 bytes at most), which may hold
    /// spaces and parentheses of its own.
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z` (a zombie, exited but not reaped), ...
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgrp: u32,
    /// Fields 14 and 15: user and system CPU time, in clock ticks ([`ticks_per_s`]).
    pub utime: u64,
    pub stime: u64,
    /// Field 22: when it started, in clock ticks since boot (with the pid, names a process
    /// across pid reuse).
    pub start_time: u64,
}

impl Stat {
    /// A stat line; None unless every field above is there and well formed. The name is
    /// what is between the first `(` and the last `)`: it may hold both, the fields after
    /// it are numbers or a state letter.
    pub fn parse(line: &str) -> Option<Stat> {
        let open = line.find('(')?;
        let close = line.rfind(')')?;
        let comm = line.get(open + 1..close)?.to_string();
        let mut fields = line.get(close + 1..)?.split_whitespace();
        let mut state = fields.next()?.chars();
        let (state, None) = (state.next()?, state.next()) else {
            return None;
        };
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        // Fields 6 to 13 skipped, then 14.
        let utime = fields.nth(8)?.parse().ok()?;
        let stime = fields.next()?.parse().ok()?;
        // Fields 16 to 21 skipped, then 22.
        let start_time = fields.nth(6)?.parse().ok()?;
        Some(Stat {
            comm,
            state,
            ppid,
            pgrp,
            utime,
            stime,
            start_time,
        })
    }

    /// A stat file (`/proc/PID/stat`, `/proc/self/task/TID/stat`); None when it is gone
    /// (the process or thread ended) or does not parse.
    pub fn read(path: &Path) -> Option<Stat> {
        Stat::parse(&std::fs::read_to_string(path).ok()?)
    }

    /// Process `pid`'s.
    pub fn of_process(pid: u32) -> Option<Stat> {
        Stat::read(Path::new(&format!("/proc/{pid}/stat")))
    }

    /// User plus system time, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime
    }

    /// User and system time in seconds (10 ms resolution where a tick is 10 ms).
    pub fn cpu(&self) -> CpuTime {
        let hz = ticks_per_s();
        CpuTime {
            user_s: self.utime as f64 / hz,
            system_s: self.stime as f64 / hz,
        }
    }
}

/// This process's threads now, by thread id; one that ends while being read is left out.
pub fn own_threads() -> Vec<(u32, Stat)> {
    list(Path::new("/proc/self/task"))
}

/// The system's processes now, by pid (those of this PID namespace's /proc); one that ends
/// while being read is left out.
pub fn processes() -> Vec<(u32, Stat)> {
    list(Path::new("/proc"))
}

/// Every numbered entry of `dir` with its stat file.
fn list(dir: &Path) -> Vec<(u32, Stat)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_str()?.parse().ok()?;
            Some((id, Stat::read(&e.path().join("stat"))?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole line as Linux 6.12 writes it (52 fields), for a process named `tmux: server`.
    const TMUX: &str = "1234 (tmux: server) S 1 1234 1234 0 -1 4194624 8421 130 0 0 1523 981 0 0 20 0 1 0 4242 12345678 1024 18446744073709551615 1 1 0 0 0 0 0 3674112 1266777851 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn a_real_line_gives_each_field() {
        assert_eq!(
            Stat::parse(TMUX),
            Some(Stat {
                comm: "tmux: server".into(),
                state: 'S',
                ppid: 1,
                pgrp: 1234,
                utime: 1523,
                stime: 981,
                start_time: 4242,
            })
        );
    }

    /// The name may hold `)` and `(`: the fields are counted from its last `)`.
    #[test]
    fn names_with_spaces_and_parentheses_do_not_shift_the_fields() {
        let line = "4242 (open vpn) x) S 17 4242 4242 0 -1 4194560 120 0 0 0 250 75 0 0 20 0 1 0 9 0 0";
        let s = Stat::parse(line).unwrap();
        assert_eq!((s.comm.as_str(), s.ppid, s.cpu_ticks()), ("open vpn) x", 17, 325));
        let line = "4242 (a) b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(Stat::parse(line).unwrap().start_time, 987654);
        let line = "77 ((sd-pam)) Z 76 76 76 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 555 0 0";
        let s = Stat::parse(line).unwrap();
        assert_eq!((s.comm.as_str(), s.state, s.pgrp), ("(sd-pam)", 'Z', 76));
        assert_eq!(
            Stat::parse("9 () R 1 9 9 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 8")
                .unwrap()
                .comm,
            ""
        );
    }

    #[test]
    fn short_or_odd_lines_are_refused() {
        assert_eq!(Stat::parse("garbage"), None);
        assert_eq!(Stat::parse(""), None);
        assert_eq!(
            Stat::parse("1 )x( S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 8"),
            None
        );
        // Ends at field 21: no start time.
        assert_eq!(Stat::parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0"), None);
        // A two-letter state, a negative ppid, a word for utime.
        assert_eq!(
            Stat::parse("1 (x) SS 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 8"),
            None
        );
        assert_eq!(
            Stat::parse("1 (x) S -1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 8"),
            None
        );
        assert_eq!(
            Stat::parse("1 (x) S 1 1 1 0 -1 0 0 0 0 0 five 6 0 0 20 0 1 0 8"),
            None
        );
    }

    #[test]
    fn ticks_become_seconds() {
        let s = Stat::parse(TMUX).unwrap();
        let hz = ticks_per_s();
        assert_eq!(
            s.cpu(),
            CpuTime {
                user_s: 1523.0 / hz,
                system_s: 981.0 / hz
            }
        );
    }

    /// This process and its threads, read from /proc (reading only).
    #[test]
    fn this_process_and_its_threads_are_found() {
        let me = std::process::id();
        let stat = Stat::of_process(me).unwrap();
        assert!(stat.start_time > 0);
        assert_eq!(stat.ppid, std::os::unix::process::parent_id());
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // The thread names itself as it starts: it is listed once it says so.
        let named = std::thread::Builder::new()
            .name("procstat (t) 1".into())
            .spawn(move || {
                started_tx.send(()).unwrap();
                rx.recv()
            })
            .unwrap();
        started_rx.recv().unwrap();
        let threads = own_threads();
        assert!(threads.iter().any(|(tid, _)| *tid == me));
        assert!(
            threads.iter().any(|(_, s)| s.comm == "procstat (t) 1"),
            "{threads:?}"
        );
        assert!(processes().iter().any(|(pid, _)| *pid == me));
        drop(tx);
        named.join().unwrap().unwrap_err();
    }
}
