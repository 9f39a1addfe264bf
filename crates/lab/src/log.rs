//! Lines on stderr that never panic. `eprintln!` panics when stderr is gone (a `| tee`
//! ended by the same Ctrl-C, a FIFO whose reader left); for a server that is its log going
//! away, not a reason to crash, and a run still has to clean up after it.

use std::fmt;
use std::io::Write;

/// Writes one line to stderr, ignoring a closed or broken stderr.
pub fn line(args: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `eprintln!` that never panics: see [`line`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::log::line(format_args!($($arg)*))
    };
}
