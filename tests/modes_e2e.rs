//! The iperf3-grade run modes end to end on the host (root): `--time` ends on time with
//! every byte verified, interval lines and `--json-stream` objects add up to the total,
//! `--omit` leaves the warm-up out, `--reverse` and `--bidir` carry verified data b→a and
//! both ways at once through plain, the userspace tunnel and OpenVPN; bad combinations are
//! refused with exit code 2 before anything is made. Payloads are small (seconds each).

mod common;

use common::*;
use serde_json::Value;

/// Runs `args` in a namespace of its own (own.rs), asserting it left nothing there; the
/// JSON report it printed.
fn run_json(args: &[&str]) -> Value {
    let out = own::run_lab_leaving_nothing(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).expect("stdout is the JSON report")
}

fn interval_bytes(report: &Value) -> u64 {
    report["modes"]["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn time_run_ends_on_time_verified_with_interval_lines_adding_up() {
    let test = "time_run_ends_on_time_verified_with_interval_lines_adding_up";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let args = [
        "run",
        "--backend",
        "plain",
        "--time",
        "2",
        "--interval",
        "0.5",
        "-P",
        "2",
        "--json",
        "-",
    ];
    let out = own::run_lab_leaving_nothing(&args);
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON report");
    let t = &report["transfers"][0];
    assert_eq!(t["verified"], true);
    let seconds = t["seconds"].as_f64().unwrap();
    // The receiver's clock, first byte to last: within a few percent of the asked 2 s.
    assert!((1.9..=2.1).contains(&seconds), "{seconds} s");
    let bytes = t["bytes"].as_u64().unwrap();
    assert!(bytes > 1_000_000, "{bytes}");
    assert_eq!(report["plan"]["modes"]["time_s"], 2.0);
    // The intervals hold every verified byte, in order, without gaps.
    let intervals = report["modes"]["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 4, "{intervals:?}");
    assert_eq!(interval_bytes(&report), bytes);
    for (k, pair) in intervals.windows(2).enumerate() {
        assert_eq!(pair[0]["end_s"], pair[1]["start_s"], "gap after interval {k}");
        // Numbers, not Options: None < Some(_) would pass a missing timestamp.
        let at = |i: &Value| {
            i["timestamp"]
                .as_f64()
                .unwrap_or_else(|| panic!("no timestamp: {i}"))
        };
        assert!(at(&pair[0]) < at(&pair[1]), "{pair:?}");
    }
    // With --json - the lines go to stderr: one per interval, the MB column adding up to
    // the total within its rounding (half the last digit: 0.05 MB, or 5 MB a GB line).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("transfer 1 ")).collect();
    assert_eq!(lines.len(), intervals.len(), "{stderr}");
    let mb: f64 = lines.iter().map(|l| mb_column(l).0).sum();
    let rounding: f64 = lines.iter().map(|l| mb_column(l).1).sum();
    let total_mb = bytes as f64 / 1e6;
    assert!(
        (mb - total_mb).abs() <= rounding + 0.001,
        "{mb} MB in the lines, {total_mb} MB verified"
    );
}

/// The byte column of an interval line (`... s   131.6 MB   263.2 MB/s`), in MB, and
/// how far its rounding may be off, in MB (kB and MB print one decimal, GB two).
fn mb_column(line: &str) -> (f64, f64) {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = fields.iter().position(|f| *f == "MB/s").expect("a rate") - 3;
    let value: f64 = fields[at].parse().unwrap_or_else(|_| panic!("{line}"));
    match fields[at + 1] {
        "kB" => (value / 1000.0, 0.00005),
        "MB" => (value, 0.05),
        "GB" => (value * 1000.0, 5.0),
        unit => panic!("{unit} in {line}"),
    }
}

#[test]
fn json_stream_objects_add_up_to_the_report_that_ends_it() {
    let test = "json_stream_objects_add_up_to_the_report_that_ends_it";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let out = own::run_lab_leaving_nothing(&[
        "run",
        "--backend",
        "plain",
        "--bytes",
        "300MB",
        "--interval",
        "0.1",
        "--json-stream",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let objects: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let (end, intervals) = objects.split_last().expect("objects");
    assert_eq!(end["event"], "end");
    assert!(!intervals.is_empty());
    let mut sum = 0;
    for i in intervals {
        assert_eq!(i["event"], "interval");
        let d = &i["data"];
        assert!(d["timestamp"].as_f64().unwrap() > 1.7e9, "{d}");
        let (start, end) = (d["start_s"].as_f64(), d["end_s"].as_f64());
        // Both present: None >= None would pass an interval without its span.
        assert!(start.zip(end).is_some_and(|(s, e)| e >= s), "{d}");
        sum += d["bytes"].as_u64().unwrap();
    }
    assert_eq!(sum, 300_000_000);
    assert_eq!(end["data"]["transfers"][0]["bytes"], 300_000_000);
    // The human table went to stderr.
    assert!(String::from_utf8_lossy(&out.stderr).contains("throughput"));
}

#[test]
fn omit_leaves_the_warm_up_out_of_the_figure() {
    let test = "omit_leaves_the_warm_up_out_of_the_figure";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let report = run_json(&[
        "run",
        "--backend",
        "plain",
        "--time",
        "2",
        "--omit",
        "0.5",
        "--interval",
        "0.5",
        "--json",
        "-",
    ]);
    let t = &report["transfers"][0];
    let counted = t["bytes"].as_u64().unwrap();
    let omitted = &report["modes"]["omitted"][0];
    assert_eq!(omitted["seconds"], 0.5);
    let left_out = omitted["bytes"].as_u64().unwrap();
    // (The warm-up may hold no bytes at all where the first connection waited for a SYN
    // retransmit: the timeline starts when the run starts the transfer.)
    // Every verified byte is in an interval; the figure counts those after the warm-up.
    assert_eq!(interval_bytes(&report), counted + left_out);
    let intervals = report["modes"]["intervals"].as_array().unwrap();
    assert_eq!(intervals[0]["omitted"], true);
    assert!(
        intervals[1..].iter().all(|i| i.get("omitted").is_none()),
        "{intervals:?}"
    );
    let omitted_in_intervals: u64 = intervals
        .iter()
        .filter(|i| i["omitted"] == true)
        .map(|i| i["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(omitted_in_intervals, left_out);
    // The figure's time runs from the warm-up's end to the last byte (where the last
    // interval ends): at least the 1.5 s the sender had left after it.
    let seconds = t["seconds"].as_f64().unwrap();
    let last_end = intervals.last().unwrap()["end_s"].as_f64().unwrap();
    assert!(
        (seconds - (last_end - 0.5)).abs() < 1e-6,
        "{seconds} s, last byte at {last_end} s"
    );
    assert!(seconds >= 1.45, "{seconds} s after a 0.5 s warm-up of 2 s");
}

/// `--reverse` on the local lab: b sends, a receives, every byte verified.
#[test]
fn reverse_local_runs_are_verified_b_to_a() {
    let test = "reverse_local_runs_are_verified_b_to_a";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    for backend in ["plain", "userspace"] {
        let report = run_json(&[
            "run",
            "--backend",
            backend,
            "--reverse",
            "--bytes",
            "10MB",
            "--interval",
            "0.1",
            "--json",
            "-",
        ]);
        assert_eq!(report["plan"]["reverse"], true, "{backend}");
        assert_eq!(report["modes"]["direction"], "b->a", "{backend}");
        assert_eq!(report["transfers"][0]["bytes"], 10_000_000, "{backend}");
        assert_eq!(report["transfers"][0]["verified"], true, "{backend}");
        if backend == "userspace" {
            // b's tunnel thread sent the payload: its packets carry the 10 MB.
            let d = &report["backend_details"]["userspace"];
            assert_eq!(d["encrypting"], "b");
            assert!(d["b"]["sent"]["bytes"].as_u64().unwrap() > 10_000_000, "{d}");
            assert!(d["a"]["sent"]["bytes"].as_u64().unwrap() < 5_000_000, "{d}");
            // Each interval carries the tunnel threads' CPU.
            let intervals = report["modes"]["intervals"].as_array().unwrap();
            let last = intervals.last().unwrap();
            assert!(last["tunnel_cpu"]["ipl-tun-b"].as_f64().is_some(), "{last}");
        }
    }
}

fn check_bidir(backend: &str) {
    let out = own::run_lab_leaving_nothing(&[
        "run",
        "--backend",
        backend,
        "--bidir",
        "--bytes",
        "10MB",
        "--json",
        "-",
    ]);
    assert!(out.status.success(), "{backend}: {}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = &report["modes"]["bidir"];
    for way in ["a_to_b", "b_to_a"] {
        assert_eq!(b[way][0]["bytes"], 10_000_000, "{backend} {way}");
        assert_eq!(b[way][0]["verified"], true, "{backend} {way}");
        assert!(b[format!("{way}_mb_per_s")]["median"].as_f64().unwrap() > 0.0);
    }
    let sum = &report["transfers"][0];
    assert_eq!(sum["bytes"], 20_000_000, "{backend}");
    let (ab, ba, total) = (
        b["a_to_b"][0]["rates"]["mb_per_s"].as_f64().unwrap(),
        b["b_to_a"][0]["rates"]["mb_per_s"].as_f64().unwrap(),
        sum["rates"]["mb_per_s"].as_f64().unwrap(),
    );
    // Both ways over the span from the first byte of either to the last of either: at
    // least as long as each way, so no more than the two rates added. (No lower bound: on
    // two busy cores the ways may run one after the other with a gap between them.)
    let seconds = sum["seconds"].as_f64().unwrap();
    for way in ["a_to_b", "b_to_a"] {
        let own = b[way][0]["seconds"].as_f64().unwrap();
        assert!(
            seconds + 1e-3 >= own,
            "{backend}: sum over {seconds} s, {way} took {own} s"
        );
    }
    assert!(total <= ab + ba + 1e-9, "{ab} + {ba} vs {total}");
    assert!(
        (total - 20.0 / seconds).abs() < 1e-6 * total,
        "{total} vs 20 MB / {seconds} s"
    );
    // The table shows each way and the sum (on stderr with --json -).
    let table = String::from_utf8_lossy(&out.stderr);
    for row in [
        format!("{backend} a->b"),
        format!("{backend} b->a"),
        format!("{backend} sum"),
    ] {
        assert!(table.contains(&row), "{table}");
    }
}

#[test]
fn bidir_is_verified_both_ways_through_plain_and_the_userspace_tunnel() {
    let test = "bidir_is_verified_both_ways_through_plain_and_the_userspace_tunnel";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    check_bidir("plain");
    check_bidir("userspace");
}

#[test]
fn bidir_is_verified_both_ways_through_openvpn() {
    let test = "bidir_is_verified_both_ways_through_openvpn";
    if !root_or_skip(test) || !openvpn_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    check_bidir("openvpn");
}

#[test]
fn bad_mode_combinations_exit_2_and_create_nothing() {
    assert_usage_errors(&[
        (&["run", "--time", "3", "--bytes", "10MB"][..], "--bytes"),
        (&["run", "--time", "0"][..], "0.5 to 86400"),
        (&["run", "--time", "soon"][..], "number of seconds"),
        (&["run", "--interval", "0"][..], "leave --interval out"),
        (&["run", "--time", "2", "--omit", "2"][..], "shorter than --time"),
        (&["run", "--bidir", "--reverse"][..], "leave out --reverse"),
        (&["run", "--time", "2", "--peer", "192.0.2.1"][..], "--peer"),
        (
            &["run", "--bidir", "--backend", "plain", "--with-iperf3"][..],
            "--with-iperf3",
        ),
        (&["run", "--json-stream", "--json", "-"][..], "--json a FILE"),
        (
            &["run", "--bidir", "--backend", "xfrm", "--mode", "transport"][..],
            "tunnel",
        ),
    ]);
}

/// Regression (issue 25, item 7): `-P 4 --time 2 --interval 1` ended with a sliver,
/// "2.00-2.01 s 24.1 MB 3615.1 MB/s", and showed no per-stream lines. The bytes in flight
/// at the deadline now end the last interval; each interval has its streams' bytes
/// beside the sum, adding up to it; every byte is in exactly one interval.
#[test]
fn timed_intervals_end_at_the_deadline_with_each_streams_share() {
    let test = "timed_intervals_end_at_the_deadline_with_each_streams_share";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let out = own::run_lab_leaving_nothing(&[
        "run",
        "--backend",
        "plain",
        "-P",
        "4",
        "--time",
        "2",
        "--interval",
        "1",
        "--json",
        "-",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let intervals = report["modes"]["intervals"].as_array().unwrap();
    let spans: Vec<(f64, f64)> = intervals
        .iter()
        .map(|i| (i["start_s"].as_f64().unwrap(), i["end_s"].as_f64().unwrap()))
        .collect();
    // Two intervals: 0-1 and 1 to the last byte (at or after the 2 s deadline).
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert_eq!(spans[0], (0.0, 1.0), "{spans:?}");
    assert_eq!(spans[1].0, 1.0, "{spans:?}");
    assert!(spans[1].1 >= 1.9, "{spans:?}");
    assert_eq!(
        interval_bytes(&report),
        report["transfers"][0]["bytes"].as_u64().unwrap()
    );
    for i in intervals {
        let streams: Vec<u64> = i["streams"]
            .as_array()
            .unwrap_or_else(|| panic!("no streams in {i}"))
            .iter()
            .map(|b| b.as_u64().unwrap())
            .collect();
        assert_eq!(streams.len(), 4, "{i}");
        assert_eq!(streams.iter().sum::<u64>(), i["bytes"].as_u64().unwrap(), "{i}");
    }
    // The lines (on stderr with --json -): each interval's sum, its four streams under it.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let sums = stderr.lines().filter(|l| l.starts_with("transfer 1 ")).count();
    let streams = stderr.lines().filter(|l| l.starts_with("  stream ")).count();
    assert_eq!((sums, streams), (2, 8), "{stderr}");
    assert!(!stderr.contains("too short"), "{stderr}");
}

/// Regression (issue 25, item 7): `--bidir` printed one way's intervals and then the
/// other's, and ended with "2.00-2.00 s ... 1577.6 MB/s". Both ways' intervals now come in
/// time order, each way's last one ending at its last byte after the deadline.
#[test]
fn bidir_intervals_come_in_time_order_without_slivers() {
    let test = "bidir_intervals_come_in_time_order_without_slivers";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let out = own::run_lab_leaving_nothing(&[
        "run",
        "--backend",
        "plain",
        "--bidir",
        "--time",
        "2",
        "--interval",
        "1",
        "--json",
        "-",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let intervals = report["modes"]["intervals"].as_array().unwrap();
    let starts: Vec<f64> = intervals.iter().map(|i| i["start_s"].as_f64().unwrap()).collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "out of time order: {starts:?}"
    );
    for way in ["a->b", "b->a"] {
        let spans: Vec<(f64, f64)> = intervals
            .iter()
            .filter(|i| i["direction"] == way)
            .map(|i| (i["start_s"].as_f64().unwrap(), i["end_s"].as_f64().unwrap()))
            .collect();
        assert_eq!(spans.len(), 2, "{way}: {spans:?}");
        assert!(spans[1].1 - spans[1].0 >= 0.9, "{way}: {spans:?}");
    }
    // The lines in the same order.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("transfer 1 ")).collect();
    let line_starts: Vec<f64> = lines
        .iter()
        .map(|l| {
            let span = l.split_whitespace().nth(3).unwrap();
            span.split('-').next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(line_starts, starts, "{stderr}");
}
