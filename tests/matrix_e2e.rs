//! `ipsec-lab matrix` end to end on the host at small size: plain, userspace [auto] and
//! [soft] (the latter in the masked child), openvpn, and the xfrm and strongswan rows that
//! cannot run on a kernel without ESP; the Markdown table checked for every row and column, the SVG and the
//! HTML page parsed, `report` re-rendering the JSON, and Ctrl-C keeping the measured cells.
//! Needs root (namespaces), TUN and openvpn; skips with the reason otherwise.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const COLUMNS: [&str; 6] = ["128", "192", "256", "128+HMAC", "192+HMAC", "256+HMAC"];

fn capable(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    if !testcap::tun(test) {
        return false;
    }
    if std::process::Command::new("openvpn")
        .arg("--version")
        .output()
        .is_err()
    {
        testcap::skip(test, "openvpn is not installed (apt-get install openvpn)");
        return false;
    }
    true
}

fn host_has_esp() -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(xfrm::probe()).is_ok_and(|c| c.esp)
}

/// The first Markdown table: header, rule, then one line per row, split into cells.
fn first_table(md: &str) -> Vec<Vec<String>> {
    md.lines()
        .skip_while(|l| !l.starts_with("| backend"))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn host_matrix_has_every_row_and_column_and_renders_every_format() {
    let test = "host_matrix_has_every_row_and_column_and_renders_every_format";
    if !capable(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = std::env::temp_dir().join(format!("ipl-matrix-e2e-{}", std::process::id()));
    let json = dir.join("m.json");
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    // In a namespace of its own: what is counted afterwards is this sweep's alone.
    let out = own::run_lab_leaving_nothing(&[
        "matrix",
        "--bytes",
        "1MB",
        "--repeat",
        "2",
        "--json",
        json.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--no-progress",
        // The ceilings have a test of their own (openvpn's take seconds a cell).
        "--no-ceiling",
    ]);
    eprintln!("host matrix took {:.1} s", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "{}", text(&out));
    let md = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!md.contains("crypto ceiling"), "--no-ceiling:\n{md}");
    let table = first_table(&md);
    let mut header = vec!["backend".to_string()];
    header.extend(COLUMNS.iter().map(|c| c.to_string()));
    assert_eq!(table[0], header, "{md}");
    let labels: Vec<&str> = table[2..].iter().map(|r| r[0].as_str()).collect();
    let esp = host_has_esp();
    let expected_xfrm = if esp { "xfrm [" } else { "xfrm" };
    assert_eq!(labels[0], "plain (line rate)", "{md}");
    assert!(labels[1].starts_with(expected_xfrm), "{md}");
    for label in ["userspace [auto]", "userspace [soft]", "openvpn", "strongswan"] {
        assert!(labels.contains(&label), "{label} missing:\n{md}");
    }
    for row in &table[2..] {
        assert_eq!(row.len(), 7, "{row:?}");
        // The kernel IPsec rows run only on a kernel with ESP.
        let measured_expected = !["xfrm", "strongswan"].contains(&row[0].as_str()) || esp;
        for cell in &row[1..] {
            if row[0] == "plain (line rate)" {
                // Timed, not 1 MB: a figure without the too-short warning.
                let v: f64 = cell.parse().unwrap_or_else(|_| panic!("plain {cell:?}:\n{md}"));
                assert!(v > 0.0, "{row:?}");
            } else if measured_expected {
                // 1 MB lasts milliseconds here: every figure carries the warning that says so
                // (it was in the JSON only).
                let (v, mark) = cell
                    .split_once(" ⚠")
                    .unwrap_or_else(|| panic!("{} {cell:?} has no warning mark:\n{md}", row[0]));
                let v: f64 = v
                    .parse()
                    .unwrap_or_else(|_| panic!("{} {cell:?} not a number:\n{md}", row[0]));
                assert!(v > 0.0, "{row:?}");
                assert!(mark.split(',').all(|n| n.parse::<usize>().is_ok()), "{cell:?}");
            } else {
                assert!(cell.starts_with("not run ["), "{row:?}");
            }
        }
    }
    if !esp {
        assert!(md.contains("no ESP support"), "{md}");
    }
    for needle in [
        "#### Warnings",
        ": too short to be a stable figure",
        "#### Conditions",
        "kernel ",
        "crypto flags [",
        "1.0 MB per transfer",
        "2 repeat(s)",
        "plain (line rate): each transfer timed (1 s), not --bytes",
    ] {
        assert!(md.contains(needle), "{needle} missing:\n{md}");
    }

    // The JSON: every measured cell verified, soft really soft, % of plain filled in.
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["interrupted"], false);
    let rows = report["rows"].as_array().unwrap();
    let soft = rows
        .iter()
        .find(|r| r["key"]["variant"]["value"] == "soft")
        .expect("soft row");
    let cell = &soft["cells"][0];
    assert_eq!(cell["status"], "measured", "{cell}");
    assert!(cell["percent_of_plain"].as_f64().unwrap() > 0.0);
    assert_eq!(cell["samples"].as_array().unwrap().len(), 2);

    // Every format written, the chart and the page well-formed.
    for ext in ["json", "md", "csv", "svg", "html"] {
        assert!(dir.join(format!("matrix.{ext}")).exists(), "matrix.{ext}");
    }
    let svg = std::fs::read_to_string(dir.join("matrix.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(svg.contains("userspace [soft]") && svg.contains("256+HMAC"));
    let warned = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some("warning"))
        .count();
    assert!(warned >= 6, "every measured bar marked: {warned}");
    let html = std::fs::read_to_string(dir.join("matrix.html")).unwrap();
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&html, opts).expect("HTML is well-formed XHTML");
    assert_eq!(doc.root_element().tag_name().name(), "html");
    assert!(doc.descendants().any(|n| n.tag_name().name() == "svg"));
    assert!(
        doc.descendants()
            .any(|n| n.attribute("class") == Some("num warned")
                && n.attribute("title").is_some_and(|t| t.contains("too short"))),
        "{html}"
    );
    let csv = std::fs::read_to_string(dir.join("matrix.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 1 + 6 * (labels.len() - 1), "{csv}");
    let plain = csv.lines().nth(1).unwrap();
    assert!(plain.starts_with("host,host,plain,"), "{csv}");
    // Timed: its notes say so, and no warning says it was too short.
    assert!(
        plain.contains("each transfer timed (1 s)") && !plain.contains("too short"),
        "{csv}"
    );

    // `report` renders the same JSON again.
    let again = run_lab(&["report", json.to_str().unwrap(), "--format", "markdown"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        std::fs::read_to_string(dir.join("matrix.md")).unwrap()
    );

    let _ = std::fs::remove_dir_all(&dir);
}

/// Each tunnel cell against its own crypto ceiling, timed right after it where it ran:
/// userspace with its implementation (soft in the child with hardware AES masked),
/// openvpn with `openssl speed`, boringtun with ring; wireguard-go has none and says why.
/// The share is the cell's median over it; JSON, Markdown, CSV and HTML all show it.
#[test]
fn every_tunnel_cell_has_its_own_ceiling_in_every_format() {
    let test = "every_tunnel_cell_has_its_own_ceiling_in_every_format";
    if !capable(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-matrix-ceiling-");
    let started = Instant::now();
    let out = own::run_lab_leaving_nothing(&[
        "matrix",
        "--backends",
        "plain,userspace,openvpn,boringtun,wireguard-go",
        "--ciphers",
        "aes-256-cbc-hmac-sha256",
        "--crypto",
        "auto,soft",
        "--bytes",
        "2MB",
        "--repeat",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
        "--no-progress",
    ]);
    eprintln!("ceiling matrix took {:.1} s", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "{}", text(&out));
    let md = String::from_utf8_lossy(&out.stdout).to_string();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("matrix.json")).unwrap()).unwrap();
    let mut timed = Vec::new();
    for row in report["rows"].as_array().unwrap() {
        let label = format!("{} {}", row["key"]["backend"], row["key"]["variant"]);
        for cell in row["cells"].as_array().unwrap() {
            if cell["status"] != "measured" {
                continue;
            }
            let c = &cell["ceiling"];
            if row["key"]["backend"] == "plain" {
                assert!(c.is_null(), "{label}: {cell}");
                continue;
            }
            assert!(c["packet_bytes"].as_u64().unwrap() > 1000, "{label}: {c}");
            let backend = row["key"]["backend"].as_str().unwrap();
            if backend == "wireguard-go" {
                assert_eq!(c["status"], "none", "{c}");
                assert!(c["reason"].as_str().unwrap().contains("Go"), "{c}");
                assert!(cell.get("percent_of_ceiling").is_none(), "{cell}");
                continue;
            }
            assert_eq!(c["status"], "measured", "{label}: {c}");
            let imp = c["implementation"].as_str().unwrap();
            let expected = match (backend, row["key"]["variant"]["value"].as_str()) {
                ("userspace", Some("soft")) => "software AES",
                ("userspace", _) => "aws-lc-rs",
                ("openvpn", _) => "OpenSSL",
                ("boringtun", _) => "ring",
                other => panic!("unexpected row {other:?}"),
            };
            assert!(imp.contains(expected), "{label}: {imp}");
            let ceiling = c["mb_per_s"].as_f64().unwrap();
            let median = cell["mb_per_s"]["median"].as_f64().unwrap();
            let share = cell["percent_of_ceiling"].as_f64().unwrap();
            assert!((share - median / ceiling * 100.0).abs() < 1e-6, "{label}: {cell}");
            timed.push(label.clone());
        }
    }
    // userspace [auto] and [soft], openvpn, boringtun (wireguard-go where installed, without).
    assert!(timed.len() >= 4, "{timed:?}");
    assert!(md.contains("#### % of the crypto ceiling"), "{md}");
    assert!(
        md.contains("| userspace [auto] | ") && md.contains(" % of "),
        "{md}"
    );
    let csv = std::fs::read_to_string(dir.path().join("matrix.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            // The packet and latency columns come after (appended, issue 26).
            .contains(",no_ceiling_reason,warnings,notes,"),
        "{csv}"
    );
    let html = std::fs::read_to_string(dir.path().join("matrix.html")).unwrap();
    assert!(html.contains(" ceiling"), "{html}");
}

#[test]
fn ctrl_c_keeps_the_cells_already_measured() {
    let test = "ctrl_c_keeps_the_cells_already_measured";
    if !capable(test) {
        return;
    }
    let _lock = lab_lock();
    let json = std::env::temp_dir().join(format!("ipl-matrix-int-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    // In a namespace of its own: what is counted afterwards is this sweep's alone.
    let mut child = own::Sandbox::default().spawn(&[
        "matrix",
        "--backends",
        "plain,openvpn",
        "--bytes",
        "20MB",
        "--repeat",
        "3",
        "--json",
        json.to_str().unwrap(),
        "--no-progress",
    ]);
    let sweep = child.lab_pid();
    // The plain baseline takes well under a second; openvpn cells take several each.
    std::thread::sleep(Duration::from_secs(4));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sweep as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let run = child.wait();
    let out = &run.out;
    assert_eq!(out.status.code(), Some(130), "{}", text(out));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["interrupted"], true);
    let cells: Vec<&serde_json::Value> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["cells"].as_array().unwrap())
        .collect();
    assert_eq!(
        cells[0]["status"], "measured",
        "the baseline was measured before Ctrl-C"
    );
    let interrupted = cells.iter().filter(|c| c["reason"] == "interrupted").count();
    assert!(interrupted >= 1, "{report}");
    assert_eq!(cells.len(), 1 + 6, "every cell is in the JSON, measured or not");
    assert_eq!(run.namespaces_left, Vec::<String>::new());
    assert_eq!(run.links_left, Vec::<String>::new());
}

/// A fresh empty working directory for a sweep: what it holds afterwards is what the sweep
/// wrote outside its --out/--json paths.
fn empty_cwd(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ipl-matrix-cwd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn matrix_out_dir_gets_everything_and_json_dash_is_stdout() {
    if !root_or_skip("matrix_out_dir_gets_everything_and_json_dash_is_stdout") {
        return;
    }
    let _lock = lab_lock();
    let sweep = [
        "matrix",
        "--backends",
        "plain",
        "--bytes",
        "2MB",
        "--repeat",
        "1",
        "--no-progress",
    ];

    // --out DIR: everything under DIR, nothing in the working directory.
    let cwd = empty_cwd("out");
    let out = lab()
        .args(sweep)
        .args(["--out", "results"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(entries(&cwd), ["results"], "{}", text(&out));
    assert_eq!(
        entries(&cwd.join("results")),
        [
            "matrix.csv",
            "matrix.html",
            "matrix.json",
            "matrix.md",
            "matrix.svg"
        ]
    );
    let _ = std::fs::remove_dir_all(&cwd);

    // --json -: the JSON on stdout, the table on stderr, no file named "-".
    let cwd = empty_cwd("dash");
    let out = lab()
        .args(sweep)
        .args(["--json", "-"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["schema_version"], 1);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("| plain (line rate)"),
        "{}",
        text(&out)
    );
    assert_eq!(entries(&cwd), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&cwd);
}

#[test]
fn soft_child_sweep_reports_each_cell_so_the_bar_keeps_counting() {
    let test = "soft_child_sweep_reports_each_cell_so_the_bar_keeps_counting";
    if !capable(test) {
        return;
    }
    let _lock = lab_lock();
    let json = std::env::temp_dir().join(format!("ipl-matrix-cells-{}.json", std::process::id()));
    // What the parent runs as its child for the soft rows.
    let out = run_lab(&[
        "matrix",
        "--backends",
        "userspace",
        "--crypto",
        "auto",
        "--ciphers",
        "aes-128-cbc,aes-256-gcm",
        "--bytes",
        "1MB",
        "--repeat",
        "1",
        "--no-baseline",
        "--no-progress",
        "--report-cells",
        "--json",
        json.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&json);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Its cell count first, then a marker per finished cell carrying what a line says.
    assert_eq!(stdout.lines().next(), Some("ipsec-lab-cells 2"), "{stdout}");
    let done: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("ipsec-lab-cell-done {"))
        .collect();
    assert_eq!(done.len(), 2, "{stdout}");
    assert!(done[0].contains(r#""label":"userspace [auto] 128""#), "{stdout}");
}
