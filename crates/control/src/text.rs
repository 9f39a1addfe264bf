//! Text that came from the wire, made safe for a log or a terminal.
//!
//! Anything a peer sent, or that quotes what it sent (serde_json names an unknown field or
//! variant in its error), may hold newlines that forge log lines, terminal escapes or NULs.
//! [`untrusted`] is the one place that turns such text into a single printable line.

/// Longest text kept; a peer's message is at most 64 KiB, a log line need not be.
const MAX_CHARS: usize = 2000;

/// `s` as one printable line: control characters (newline, ESC, NUL, ...) and other
/// invisible ones escaped as Rust does (`\n`, `\u{1b}`), cut after [`MAX_CHARS`]. Quotes
/// are harmless on a terminal and stay as they are (`escape_debug` wrote `server\'s host`).
pub fn untrusted(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().take(MAX_CHARS) {
        match c {
            '\'' | '"' => out.push(c),
            c => out.extend(c.escape_debug()),
        }
    }
    if s.chars().nth(MAX_CHARS).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_log_lines_and_terminal_escapes_stay_on_one_printable_line() {
        let forged = "x\nipsec-lab serve: 203.0.113.9:4444: run finished\u{1b}[31m\0\r\u{202e}";
        let safe = untrusted(forged);
        assert!(!safe.chars().any(|c| c.is_control()), "{safe:?}");
        assert!(
            safe.contains(r"\n") && safe.contains(r"\u{1b}") && safe.contains(r"\0"),
            "{safe}"
        );
        assert!(
            safe.contains(r"\u{202e}"),
            "bidi overrides are escaped too: {safe}"
        );
        assert_eq!(untrusted("plain text"), "plain text");
        assert_eq!(untrusted(r#"the server's "host""#), r#"the server's "host""#);
        let long = "a".repeat(5000);
        assert_eq!(untrusted(&long).len(), MAX_CHARS + 3);
    }
}
