//! One escaping rule per sink, for text that came from elsewhere: a matrix result is a
//! colleague's file, a fleet host's report, a server's environment stored in the client's
//! report. Its notes, reasons and environment fields may hold escape sequences, newlines,
//! Markdown, spreadsheet formulas or markup; each sink gets them as plain text.
//!
//! * [`terminal`]: control characters (C0, DEL, C1: ESC and OSC sequences start with them)
//!   and the bidirectional overrides shown as visible `\u{…}` escapes, line breaks and
//!   tabs as a space: one line of inert text.
//! * [`markdown`]: [`terminal`], then Markdown's syntax escaped with a backslash (`\ | * `
//!   `< >`, a `_` that could start emphasis, a `[`/`(` that could make a link, a `#` that
//!   would start a heading), so the text neither breaks a table nor becomes a link, an
//!   image, a heading or HTML.
//! * [`csv`]: [`terminal`], then a field a spreadsheet would take for a formula (beginning
//!   with `= + - @`, a tab or CR) prefixed with `'` (OWASP's CSV injection rule; numbers
//!   stay numbers), then quoted as RFC 4180 says.
//! * [`xml`]: characters XML 1.0 forbids dropped, `& < > " '` as entities: for HTML and SVG
//!   text and attribute values. [`xml_chars`] only drops, for a writer that escapes itself
//!   (plotters' SVG backend).

/// Whether `c` is shown escaped on a terminal: a C0 or C1 control, DEL, or a bidirectional
/// embedding, override or isolate (text that reads other than it is stored).
fn unsafe_on_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// `s` as one line of inert terminal text: see the module.
pub fn terminal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if unsafe_on_terminal(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// `s` as Markdown text that renders as itself: see the module.
pub fn markdown(s: &str) -> String {
    let text: Vec<char> = terminal(s).chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, &c) in text.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| text[j]);
        let after = text.get(i + 1).copied();
        let escaped = match c {
            '\\' | '|' | '*' | '`' | '<' | '>' => true,
            // Within a word (`CONFIG_INET_ESP`) `_` cannot open or close emphasis.
            '_' => !(before.is_some_and(char::is_alphanumeric) && after.is_some_and(char::is_alphanumeric)),
            // A link or an image needs `](`, `][` or `![`: `[auto]` alone is text.
            '(' => before == Some(']'),
            '[' => matches!(before, Some(']' | '!')),
            '#' => i == 0,
            _ => false,
        };
        if escaped {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `s` as one CSV field: see the module.
pub fn csv(s: &str) -> String {
    let mut text = terminal(s);
    // A spreadsheet skips leading blanks before it looks for a formula.
    let formula = s.starts_with(['\t', '\r']) || text.trim_start().starts_with(['=', '+', '-', '@']);
    if formula && s.trim().parse::<f64>().is_err() {
        text.insert(0, '\'');
    }
    if text.contains([',', '"']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// Whether XML 1.0 allows `c` in a document.
fn xml_allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `s` without the characters XML 1.0 forbids, for a writer that escapes markup itself.
pub fn xml_chars(s: &str) -> String {
    s.chars().filter(|c| xml_allowed(*c)).collect()
}

/// `s` as XML (HTML, SVG) text or attribute value: see the module.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().filter(|c| xml_allowed(*c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_has_no_control_character_left() {
        let hostile = "a\u{1b}]8;;http://x\u{7}b\u{9b}31m\nc\r\td\u{202e}e\u{7f}";
        let out = terminal(hostile);
        assert!(!out.chars().any(unsafe_on_terminal), "{out:?}");
        assert_eq!(out, "a\\u{1b}]8;;http://x\\u{7}b\\u{9b}31m c  d\\u{202e}e\\u{7f}");
        assert_eq!(terminal("plain text · ⚠1"), "plain text · ⚠1");
    }

    #[test]
    fn markdown_escapes_what_would_become_syntax_and_leaves_plain_text() {
        assert_eq!(markdown("# head"), "\\# head");
        assert_eq!(markdown("a # b"), "a # b");
        assert_eq!(markdown("[x](javascript:alert(1))"), "[x]\\(javascript:alert(1))");
        assert_eq!(markdown("![i](http://t)"), "!\\[i]\\(http://t)");
        assert_eq!(markdown("[a][b]"), "[a]\\[b]");
        assert_eq!(markdown("a | b"), "a \\| b");
        assert_eq!(markdown("<script>"), "\\<script\\>");
        assert_eq!(markdown("*b* _i_ `c` \\"), "\\*b\\* \\_i\\_ \\`c\\` \\\\");
        assert_eq!(markdown("line\n# two"), "line # two");
        // What the reports write themselves reads as before.
        for text in [
            "userspace [auto]",
            "CONFIG_INET_ESP",
            "kernel drivers [cbc(aes)=cbc-aes-aesni]",
        ] {
            assert_eq!(markdown(text), text);
        }
    }

    #[test]
    fn csv_neutralises_formulas_but_not_numbers() {
        assert_eq!(
            csv("=HYPERLINK(\"http://x\")"),
            "\"'=HYPERLINK(\"\"http://x\"\")\""
        );
        assert_eq!(csv("=cmd|' /C calc'!A0"), "'=cmd|' /C calc'!A0");
        assert_eq!(csv("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv("+1+2"), "'+1+2");
        assert_eq!(csv("\tx"), "' x");
        assert_eq!(csv("-155.00"), "-155.00");
        assert_eq!(csv("a,b"), "\"a,b\"");
        assert_eq!(csv("line\nbreak"), "line break");
    }

    #[test]
    fn xml_escapes_markup_and_drops_what_xml_forbids() {
        assert_eq!(
            xml("<a & \"b\" 'c'>"),
            "&lt;a &amp; &quot;b&quot; &#39;c&#39;&gt;"
        );
        assert_eq!(xml("a\u{1b}[31mb\u{0}\u{fffe}c\nd"), "a[31mbc\nd");
        assert_eq!(xml_chars("<\u{1b}>"), "<>");
    }
}
