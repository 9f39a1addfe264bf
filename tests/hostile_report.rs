//! Issue 42 item 3: a report's text is data from elsewhere (a colleague's file, a fleet
//! host's report, a server's environment stored in the client's report), and it reaches the
//! operator inert. One fixture, `tests/fixtures/hostile/`: a matrix result and a `run
//! --json` report, both made by real runs, whose notes, reasons and environment fields were
//! then given ESC/OSC sequences, C1 controls, line breaks, Markdown headings, links, images
//! and table pipes, HTML, spreadsheet formulas and characters XML forbids (every hostile
//! string says PWNED). Every renderer and format reads it: `report` (Markdown on stdout,
//! -f md, csv, html, svg), `compare` (two matrices, two runs, and the refusal of different
//! conditions on stderr), `fleet report` (Markdown, csv, html); the run's own text is
//! crates/report/src/run/mod.rs's unit test over the same run report.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hostile");
/// Every hostile string carries it: what the checks look for, and proof they are not vacuous.
const MARKER: &str = "PWNED";

fn fixture(name: &str) -> String {
    format!("{FIXTURE}/{name}")
}

fn stdout(out: &Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {:?}\n{}", out.status, text(out));
    String::from_utf8(out.stdout.clone()).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"))
}

/// Terminal text: no control character but the line break, no bidirectional override.
fn assert_terminal_safe(what: &str, text: &str) {
    for (i, line) in text.lines().enumerate() {
        let bad: Vec<char> = line
            .chars()
            .filter(|c| c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'))
            .collect();
        assert!(bad.is_empty(), "{what}, line {}: {bad:?} in {line:?}", i + 1);
    }
}

/// Whether the character at byte `at` of `line` is escaped: an odd run of backslashes before it.
fn escaped(line: &str, at: usize) -> bool {
    line[..at].chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
}

/// Markdown that renders as the report wrote it: terminal-safe, no heading, quote, link,
/// image or HTML of the hostile text's making, and every table line as many cells as its
/// header.
fn assert_markdown_safe(what: &str, text: &str) {
    assert_terminal_safe(what, text);
    assert!(
        text.contains(MARKER),
        "{what}: the fixture's text is missing:\n{text}"
    );
    let mut header_cells: Option<usize> = None;
    for line in text.lines() {
        assert!(
            !(line.starts_with(['#', '>', '-', '+', '=']) && line.contains(MARKER)),
            "{what}: a line of the fixture's making: {line:?}"
        );
        for (at, c) in line.char_indices() {
            let opens_link = match c {
                '(' | '[' => line[..at].ends_with(']') && !escaped(line, at - 1),
                _ => false,
            };
            let markup = matches!(c, '<' | '>');
            assert!(
                !(opens_link || markup) || escaped(line, at),
                "{what}: unescaped {c:?} at {at} of {line:?}"
            );
        }
        if line.starts_with('|') {
            let cells = line
                .char_indices()
                .filter(|(at, c)| *c == '|' && !escaped(line, *at))
                .count();
            let expected = *header_cells.get_or_insert(cells);
            assert_eq!(cells, expected, "{what}: a table line with other cells: {line:?}");
        } else {
            header_cells = None;
        }
    }
}

/// RFC 4180 records (quoted fields may hold commas and quotes).
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let mut records = vec![vec![String::new()]];
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let record = records.last_mut().unwrap();
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                record.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => record.push(String::new()),
            ('\n', false) => records.push(vec![String::new()]),
            (c, _) => record.last_mut().unwrap().push(c),
        }
    }
    records.retain(|r| r != &[String::new()]);
    records
}

/// CSV a spreadsheet opens as text: every record as wide as the header, no field it would
/// take for a formula (numbers stay numbers), no control character.
fn assert_csv_safe(what: &str, text: &str) {
    assert_terminal_safe(what, text);
    assert!(
        text.contains(MARKER),
        "{what}: the fixture's text is missing:\n{text}"
    );
    let records = csv_records(text);
    for record in &records {
        assert_eq!(record.len(), records[0].len(), "{what}: {record:?}");
        for field in record {
            let formula = field.starts_with(['=', '+', '-', '@', '\t', '\r']);
            assert!(
                !formula || field.parse::<f64>().is_ok(),
                "{what}: a formula: {field:?}"
            );
        }
    }
}

/// XHTML or SVG that parses as XML, with no element of the fixture's making.
fn assert_xml_safe(what: &str, text: &str) {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(text, options)
        .unwrap_or_else(|e| panic!("{what}: not well-formed XML: {e}"));
    for node in doc.descendants().filter(|n| n.is_element()) {
        let name = node.tag_name().name();
        assert!(
            !matches!(name, "script" | "img" | "a" | "iframe"),
            "{what}: <{name}>"
        );
        for attribute in node.attributes() {
            assert!(
                !attribute.name().starts_with("on"),
                "{what}: <{name} {}>",
                attribute.name()
            );
        }
    }
    let all: String = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(all.contains(MARKER), "{what}: the fixture's text is missing");
    assert!(all.contains("<script>"), "{what}: the markup is shown as text");
}

#[test]
fn report_renders_the_hostile_matrix_inert_in_every_format() {
    let matrix = fixture("matrix.json");
    assert_markdown_safe(
        "report (stdout)",
        &stdout(&run_lab(&["report", &matrix]), "report"),
    );
    for (format, check) in [
        ("md", assert_markdown_safe as fn(&str, &str)),
        ("csv", assert_csv_safe),
        ("html", assert_xml_safe),
        ("svg", assert_xml_safe),
    ] {
        let out = run_lab(&["report", &matrix, "-f", format]);
        check(&format!("report -f {format}"), &stdout(&out, format));
    }
}

/// `file` with its host's kernel release another hostile one, in `dir`.
fn other_kernel(dir: &Path, file: &str, pointer: &str) -> String {
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(file)).unwrap()).unwrap();
    value.pointer_mut(pointer).unwrap()["kernel_release"] =
        format!("6.1 {MARKER}\u{1b}]0;title\u{7}\n# other").into();
    let path = dir.join(file);
    std::fs::write(&path, value.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn compare_prints_the_hostile_text_inert() {
    let dir = private_dir("ipl-hostile");
    let matrix = fixture("matrix.json");
    let out = run_lab(&["compare", &matrix, &matrix]);
    assert_markdown_safe("compare of matrices", &stdout(&out, "compare"));
    // Two runs of different hostile kernels: their notes quote both.
    let (run, other) = (
        fixture("run.json"),
        other_kernel(dir.path(), "run.json", "/environment"),
    );
    let out = run_lab(&["compare", &run, &other, "--allow-different-conditions"]);
    assert_markdown_safe("compare of runs", &stdout(&out, "compare"));
    // The refusal of different conditions quotes both kernels on stderr.
    let other = other_kernel(dir.path(), "matrix.json", "/environments/host");
    let out = run_lab(&["compare", &matrix, &other]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(MARKER), "{stderr}");
    assert_terminal_safe("compare's refusal", &stderr);
}

/// What a failed host said: the last lines are the reason the fleet's report shows.
const FAILURE: &str = "=cmd|' /C calc'!A0 PWNED\n<script>alert('PWNED')</script> | [x](javascript:alert(1))\n\u{1b}]8;;http://evil.example/PWNED\u{7}click\u{9b}2J";

/// A fleet of three hosts whose every run's report is the hostile run report, but the
/// first, which failed with a hostile reason.
fn fleet_dir(dir: &Path) -> PathBuf {
    let plan = stdout(
        &run_lab(&["fleet", "plan", "h1", "h2", "h3", "--backend", "plain", "--json"]),
        "fleet plan",
    );
    std::fs::write(dir.join("fleet-plan.json"), &plan).unwrap();
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let run = std::fs::read_to_string(fixture("run.json")).unwrap();
    let mut reports = 0;
    for round in plan["rounds"].as_array().unwrap() {
        for pair in round["pairs"].as_array().unwrap() {
            for r in pair["runs"].as_array().unwrap() {
                // The first run failed, in the host's own hostile words.
                match reports {
                    0 => std::fs::write(dir.join(r["failure"].as_str().unwrap()), FAILURE),
                    _ => std::fs::write(dir.join(r["report"].as_str().unwrap()), &run),
                }
                .unwrap();
                reports += 1;
            }
        }
    }
    assert!(reports >= 2, "{plan}");
    dir.to_path_buf()
}

#[test]
fn fleet_report_renders_the_hostile_host_inert() {
    let dir = private_dir("ipl-hostile-fleet");
    let fleet = fleet_dir(dir.path());
    let fleet = fleet.to_str().unwrap();
    // The fixture's run is no `--peer` run of the plan's measure: the differences are listed
    // (more hostile text) and nothing is flagged.
    let allow = "--allow-different-conditions";
    assert_markdown_safe(
        "fleet report (stdout)",
        &stdout(&run_lab(&["fleet", "report", fleet, allow]), "fleet report"),
    );
    for (format, check) in [
        ("md", assert_markdown_safe as fn(&str, &str)),
        ("csv", assert_csv_safe),
        ("html", assert_xml_safe),
    ] {
        let out = run_lab(&["fleet", "report", fleet, allow, "-f", format]);
        check(&format!("fleet report -f {format}"), &stdout(&out, format));
    }
}
