//! Two matrix reports → per-cell delta and ratio, and a verdict that flags a change only when
//! it is both beyond the noise and large enough to matter:
//!
//! * beyond the noise: the confidence interval of the ratio after/before (90 % unless
//!   asked otherwise; see [`crate::significance`]) leaves out 1;
//! * beyond the threshold: the medians differ by more than `threshold` (default 5 %).
//!
//! A cell whose numbers cannot carry a verdict is inconclusive, never flagged: repeats too
//! few for an interval at the asked confidence (one or two a side at 90 %), transfers too
//! short to time steadily (under [`MIN_STABLE_SECONDS`], as the run flags them), or a
//! hypervisor that stole more than [`STEAL_LIMIT_PERCENT`] of the CPU while it ran: on a
//! shared machine such cells read 12 "regressions" one run and 12 "improvements" the next.
//! Cells whose repeats are suspiciously identical (a rate limiter, not a measurement) are
//! marked, whatever their verdict. Cells are matched by row key (backend, variant,
//! environment) and suite.
//!
//! Two reports measured under different conditions (payload, repeats, kernel, CPU, VM or
//! host) do not say whether the software got faster: [`compare`] refuses them unless asked
//! to [`CompareOptions::allow_different_conditions`], and then marks the affected cells not
//! comparable, so no difference of conditions is ever flagged as a regression.

use std::fmt::Write as _;

use model::matrix::{MatrixReport, Measurement, RowKey};
use model::report::MIN_STABLE_SECONDS;
use model::{CipherSuite, Summary};

use crate::escape;
use crate::shared::{fmt_rate, shortest_transfer_s, timed_transfer_s};
use crate::significance::{
    max_confidence, ratio_interval, repeats_needed, suspiciously_identical, RatioInterval,
};

pub const DEFAULT_THRESHOLD: f64 = 0.05;
pub const DEFAULT_CONFIDENCE: f64 = 0.90;
/// CPU steal above this share of the CPU time, during a cell's repeats, makes the cell
/// inconclusive: the hypervisor, not the software, may have set its speed.
pub const STEAL_LIMIT_PERCENT: f64 = 5.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareOptions {
    /// Smallest relative change of the median that is flagged (0.05 = 5 %).
    pub threshold: f64,
    /// Confidence of the interval that separates a change from noise (0.9 = 90 %).
    pub confidence: f64,
    /// Compare reports measured under different conditions anyway: cells whose conditions
    /// differ are shown, marked not comparable, and never flagged.
    pub allow_different_conditions: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            threshold: DEFAULT_THRESHOLD,
            confidence: DEFAULT_CONFIDENCE,
            allow_different_conditions: false,
        }
    }
}

/// One condition that differs between the two reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionChange {
    /// The environment whose rows it affects ([`model::matrix::HOST`], `vm`); None: every row.
    pub environment: Option<String>,
    /// "payload", "repeats", "kernel", "CPU", "virtualization".
    pub what: &'static str,
    pub before: String,
    pub after: String,
}

impl std::fmt::Display for ConditionChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(env) = &self.environment {
            write!(f, "{} ", escape::terminal(env))?;
        }
        // The values are the reports' own text: on the terminal, inert.
        write!(
            f,
            "{} {} before, {} after",
            self.what,
            escape::terminal(&self.before),
            escape::terminal(&self.after)
        )
    }
}

/// The reports were measured under different conditions and the caller did not allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the two reports were measured under different conditions ({}): their differences are not the software's; \
     measure both the same way, or pass --allow-different-conditions to see them side by side, marked not comparable",
    .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct DifferentConditions(pub Vec<ConditionChange>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Slower beyond the noise and the threshold.
    Regression,
    /// Faster beyond the noise and the threshold.
    Improvement,
    /// The interval includes no change (or, with too few repeats, the ranges overlap): the
    /// change is within the noise of the repeats.
    WithinSpread,
    /// Beyond the noise but smaller than the threshold.
    BelowThreshold,
    /// The numbers cannot carry a verdict, and why: too few repeats for the confidence,
    /// transfers too short to time, CPU stolen. Never flagged.
    Inconclusive(String),
    /// Missing or not run on one side.
    NotComparable(String),
}

impl Verdict {
    pub fn label(&self) -> String {
        match self {
            Verdict::Regression => "REGRESSION".into(),
            Verdict::Improvement => "improvement".into(),
            Verdict::WithinSpread => "within spread".into(),
            Verdict::BelowThreshold => "below threshold".into(),
            Verdict::Inconclusive(why) => format!("inconclusive: {why}"),
            Verdict::NotComparable(why) => format!("not comparable: {why}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CellDelta {
    pub row: RowKey,
    pub suite: CipherSuite,
    pub before: Option<Summary>,
    pub after: Option<Summary>,
    /// after − before medians, MB/s.
    pub delta_mb_s: Option<f64>,
    /// after / before medians.
    pub ratio: Option<f64>,
    /// The confidence interval of after / before; None with too few repeats for one.
    pub interval: Option<RatioInterval>,
    pub verdict: Verdict,
    /// What the reader should doubt about the cell's numbers, whatever the verdict.
    pub marks: Vec<String>,
    /// Each side's rekeys (`--rekey-every`), shown side by side and never judged: a worst
    /// case over a few rekeys has no confidence interval.
    pub rekey: [Option<model::rekey::RekeyCell>; 2],
    /// Each side's time to first packet, likewise unjudged: one start a side.
    pub first_packet: [Option<model::startup::FirstPacket>; 2],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub options: CompareOptions,
    pub cells: Vec<CellDelta>,
    /// Differences in conditions the reader must know (kernel, CPU, payload, repeats).
    pub notes: Vec<String>,
    /// `matrix --setup-rate`: each backend's rates before and after, unjudged (one
    /// measurement a side); "—" on a side that has none.
    pub setup_rates: Vec<(String, [String; 2])>,
}

impl Comparison {
    pub fn regressions(&self) -> impl Iterator<Item = &CellDelta> {
        self.cells.iter().filter(|c| c.verdict == Verdict::Regression)
    }

    pub fn improvements(&self) -> impl Iterator<Item = &CellDelta> {
        self.cells.iter().filter(|c| c.verdict == Verdict::Improvement)
    }

    pub fn inconclusive(&self) -> impl Iterator<Item = &CellDelta> {
        self.cells
            .iter()
            .filter(|c| matches!(c.verdict, Verdict::Inconclusive(_)))
    }

    /// A Markdown table, one line per cell, then the notes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let confidence = percent(self.options.confidence);
        let _ = writeln!(
            out,
            "| row | cipher | before MB/s (min–max) | after MB/s (min–max) | delta | ratio | ratio {confidence} CI | verdict |\n\
             |---|---|---:|---:|---:|---:|---:|---|"
        );
        let range = |s: &Option<Summary>| match s {
            Some(s) => format!("{} ({}–{})", fmt_rate(s.median), fmt_rate(s.min), fmt_rate(s.max)),
            None => "—".into(),
        };
        for c in &self.cells {
            let too_few = match (&c.before, &c.after) {
                (Some(b), Some(a)) => too_few_repeats(b.n, a.n, self.options.confidence).is_some(),
                _ => false,
            };
            let interval = match (&c.interval, c.ratio) {
                (Some(i), _) => format!("{:.3}–{:.3}", i.low, i.high),
                (None, Some(_)) if too_few => "too few repeats".into(),
                (None, _) => "—".into(),
            };
            let mut verdict = c.verdict.label();
            for mark in &c.marks {
                let _ = write!(verdict, "; {mark}");
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                escape::markdown(&c.row.label()),
                c.suite.short_label(),
                range(&c.before),
                range(&c.after),
                c.delta_mb_s
                    .map(|d| format!("{d:+.2}"))
                    .unwrap_or_else(|| "—".into()),
                c.ratio.map(|r| format!("{r:.3}")).unwrap_or_else(|| "—".into()),
                interval,
                escape::markdown(&verdict),
            );
        }
        let _ = writeln!(
            out,
            "\n{} regression(s), {} improvement(s), {} inconclusive; flagged only where the {confidence} \
             confidence interval of the ratio leaves out 1 and the medians differ by more than {:.1} %. \
             Inconclusive, never flagged: fewer than {} repeats a side (too few for that confidence), \
             transfers under {MIN_STABLE_SECONDS} s, CPU steal above {STEAL_LIMIT_PERCENT} %.",
            self.regressions().count(),
            self.improvements().count(),
            self.inconclusive().count(),
            self.options.threshold * 100.0,
            repeats_needed(self.options.confidence),
        );
        let rekey = |r: Option<model::rekey::RekeyCell>| r.map_or("no rekey".into(), |r| r.text());
        unjudged(
            &mut out,
            "Rekeys, side by side and not judged (the worst of a few rekeys has no confidence interval)",
            &self.cells,
            |c| c.rekey.iter().any(Option::is_some).then(|| c.rekey.map(rekey)),
        );
        let first = |f: Option<model::startup::FirstPacket>| f.map_or("—".into(), |f| f.cell_text());
        unjudged(
            &mut out,
            "Time to first packet, side by side and not judged (one start a side)",
            &self.cells,
            |c| {
                c.first_packet
                    .iter()
                    .any(Option::is_some)
                    .then(|| c.first_packet.map(first))
            },
        );
        if !self.setup_rates.is_empty() {
            let _ = writeln!(
                out,
                "\nSetup rate, side by side and not judged (one measurement a side):"
            );
            for (what, [before, after]) in &self.setup_rates {
                let _ = writeln!(
                    out,
                    "* {}: {} → {}",
                    escape::markdown(what),
                    escape::markdown(before),
                    escape::markdown(after)
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {}", escape::markdown(n));
        }
        out
    }
}

/// Under `heading`, each cell whose `sides` has a figure on either side: before → after,
/// listed and not judged.
fn unjudged(
    out: &mut String,
    heading: &str,
    cells: &[CellDelta],
    sides: impl Fn(&CellDelta) -> Option<[String; 2]>,
) {
    let listed: Vec<(&CellDelta, [String; 2])> = cells.iter().filter_map(|c| Some((c, sides(c)?))).collect();
    if listed.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}:");
    for (c, [before, after]) in listed {
        let _ = writeln!(
            out,
            "* {} {}: {before} → {after}",
            escape::markdown(&c.row.label()),
            c.suite.short_label(),
        );
    }
}

fn percent(fraction: f64) -> String {
    format!("{} %", (fraction * 1000.0).round() / 10.0)
}

/// Why `before` and `after` repeats are too few for a verdict at `confidence`; None when
/// they suffice.
fn too_few_repeats(before: usize, after: usize, confidence: f64) -> Option<String> {
    if max_confidence(before, after) >= confidence - 1e-12 {
        return None;
    }
    let needed = repeats_needed(confidence);
    let had = match before == after {
        true => format!("{before} a side"),
        false => format!("{before} before, {after} after"),
    };
    Some(format!(
        "too few repeats ({had}; {} needs {needed})",
        percent(confidence)
    ))
}

/// The verdict for one pair of measured cells, and the interval it rests on (None where
/// the repeats are too few for one at the asked confidence: then inconclusive).
pub fn judge(
    before: &Measurement,
    after: &Measurement,
    options: CompareOptions,
) -> (Verdict, Option<RatioInterval>) {
    let (b, a) = (&before.mb_per_s, &after.mb_per_s);
    if let Some(why) = too_few_repeats(before.samples.len(), after.samples.len(), options.confidence) {
        return (Verdict::Inconclusive(why), None);
    }
    let interval = ratio_interval(&before.samples, &after.samples, options.confidence);
    let (slower, faster) = match &interval {
        Some(i) => (i.high < 1.0, i.low > 1.0),
        // Repeats enough but beyond the exact distribution's reach (hundreds a side).
        None => (a.max < b.min, a.min > b.max),
    };
    let ratio = a.median / b.median;
    let verdict = if !slower && !faster {
        Verdict::WithinSpread
    } else if (ratio - 1.0).abs() <= options.threshold {
        Verdict::BelowThreshold
    } else if slower {
        Verdict::Regression
    } else {
        Verdict::Improvement
    };
    (verdict, interval)
}

/// What makes a side's numbers doubtful whatever the verdict: identical repeats.
fn marks(side: &str, m: &Measurement) -> Vec<String> {
    let mut marks = Vec::new();
    if suspiciously_identical(&m.samples) {
        marks.push(format!(
            "identical repeats {side} (a rate limiter, not a measurement?)"
        ));
    }
    marks
}

/// Why a side's numbers cannot carry a verdict, from what the run recorded: transfers too
/// short to time (measured from the payload and the fastest repeat, or flagged in the
/// cell's notes), CPU stolen by the hypervisor while the cell ran.
fn doubts(side: &str, report: &MatrixReport, key: &RowKey, m: &Measurement) -> Vec<String> {
    let mut doubts = Vec::new();
    let shortest = shortest_transfer_s(report.payload_of(&key.environment), m);
    match shortest.filter(|s| *s < MIN_STABLE_SECONDS) {
        Some(s) => doubts.push(format!("transfers too short {side} ({s:.3} s)")),
        None if m.notes.iter().any(|n| n.contains("too short")) => {
            doubts.push(format!("transfers flagged too short {side}"))
        }
        None => {}
    }
    if let Some(steal) = m.cpu_steal_percent.filter(|s| *s > STEAL_LIMIT_PERCENT) {
        doubts.push(format!("CPU steal {steal:.0} % {side}"));
    }
    doubts
}

pub fn compare(
    before: &MatrixReport,
    after: &MatrixReport,
    options: CompareOptions,
) -> Result<Comparison, DifferentConditions> {
    let changes = condition_changes(before, after);
    if !changes.is_empty() && !options.allow_different_conditions {
        return Err(DifferentConditions(changes));
    }
    let mut cells = Vec::new();
    let mut keys: Vec<(RowKey, CipherSuite)> = Vec::new();
    for report in [before, after] {
        for row in &report.rows {
            for cell in &row.cells {
                let k = (row.key.clone(), cell.suite);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    for (key, suite) in keys {
        let find = |r: &MatrixReport| r.row(&key).and_then(|row| row.cell(suite)).cloned();
        let (b, a) = (find(before), find(after));
        let bm = b.as_ref().and_then(|c| c.measurement().cloned());
        let am = a.as_ref().and_then(|c| c.measurement().cloned());
        let mut interval = None;
        let verdict = match (&b, &a, &bm, &am) {
            (None, _, _, _) => Verdict::NotComparable("absent before".into()),
            (_, None, _, _) => Verdict::NotComparable("absent after".into()),
            (_, _, None, _) => Verdict::NotComparable("not run before".into()),
            (_, _, _, None) => Verdict::NotComparable("not run after".into()),
            (_, _, Some(bs), Some(as_)) if !(is_rate(bs.mb_per_s.median) && is_rate(as_.mb_per_s.median)) => {
                Verdict::NotComparable("no rate on one side".into())
            }
            _ if [&b, &a].iter().any(|c| c.as_ref().is_some_and(searched)) => Verdict::NotComparable(
                "a --find-ndr cell: its rates come from a search, not repeats, and are not compared".into(),
            ),
            _ if !row_changes(&changes, &key.environment).is_empty() => Verdict::NotComparable(format!(
                "{} differ",
                row_changes(&changes, &key.environment).join(", ")
            )),
            (_, _, Some(bs), Some(as_)) => {
                let (verdict, i) = judge(bs, as_, options);
                interval = i;
                let mut why = doubts("before", before, &key, bs);
                why.extend(doubts("after", after, &key, as_));
                match verdict {
                    _ if why.is_empty() => verdict,
                    Verdict::Inconclusive(repeats) => {
                        Verdict::Inconclusive(format!("{repeats}; {}", why.join("; ")))
                    }
                    _ => Verdict::Inconclusive(why.join("; ")),
                }
            }
        };
        let (delta_mb_s, ratio) = match (&bm, &am) {
            (Some(b), Some(a)) if is_rate(b.mb_per_s.median) && is_rate(a.mb_per_s.median) => (
                Some(a.mb_per_s.median - b.mb_per_s.median),
                Some(a.mb_per_s.median / b.mb_per_s.median),
            ),
            _ => (None, None),
        };
        let mut cell_marks = Vec::new();
        for (side, m) in [("before", &bm), ("after", &am)] {
            if let Some(m) = m {
                cell_marks.extend(marks(side, m));
            }
        }
        cells.push(CellDelta {
            row: key,
            suite,
            before: bm.map(|m| m.mb_per_s),
            after: am.map(|m| m.mb_per_s),
            delta_mb_s,
            ratio,
            interval,
            verdict,
            marks: cell_marks,
            rekey: [b.as_ref().and_then(|c| c.rekey), a.as_ref().and_then(|c| c.rekey)],
            first_packet: [b.and_then(|c| c.first_packet), a.and_then(|c| c.first_packet)],
        });
    }
    let mut notes: Vec<String> = changes.iter().map(|c| format!("not comparable: {c}")).collect();
    notes.extend(condition_notes(before, after, options));
    Ok(Comparison {
        options,
        cells,
        notes,
        setup_rates: setup_rates(before, after),
    })
}

/// Each backend's setup rates on both sides, in the order they first appear.
fn setup_rates(before: &MatrixReport, after: &MatrixReport) -> Vec<(String, [String; 2])> {
    let mut backends = Vec::new();
    for c in before.setup_rates.iter().chain(&after.setup_rates) {
        if !backends.contains(&c.backend) {
            backends.push(c.backend);
        }
    }
    backends
        .into_iter()
        .map(|b| {
            let side = |r: &MatrixReport| {
                r.setup_rates
                    .iter()
                    .find(|c| c.backend == b)
                    .map_or("—".to_string(), |c| match c.not_run {
                        Some(_) => c.text(),
                        None => format!("{} at {} {}", c.text(), c.size, b.unit()),
                    })
            };
            (b.to_string(), [side(before), side(after)])
        })
        .collect()
}

/// A single run (`run --json`) as a matrix of one row and one cell, so that two runs compare
/// as two matrix results do: its transfers are the cell's repeats, its environment the
/// host's, its payload and repeats the conditions.
pub fn run_as_matrix(run: &model::RunReport) -> MatrixReport {
    use model::matrix::{Cell, Row, RowVariant, SideCpu, HOST};
    let plan = &run.plan;
    let workload = plan.workload();
    let suite = plan.suite();
    let samples: Vec<f64> = run.transfers.iter().map(|t| t.rates.mb_per_s).collect();
    let cpu = |f: fn(&model::Transfer) -> f64| {
        let v: Vec<f64> = run.transfers.iter().map(|t| f(&t.transfer)).collect();
        Summary::of(&v).unwrap_or(run.mb_per_s)
    };
    let measurement = Measurement {
        mb_per_s: run.mb_per_s,
        samples,
        timed_s: workload.modes.time_s,
        bytes: run.transfers.iter().map(|t| t.transfer.bytes).collect(),
        cpu: SideCpu {
            sender_percent: cpu(|t| t.sender_cpu.percent_of_core),
            receiver_percent: cpu(|t| t.receiver_cpu.percent_of_core),
        },
        tunnel_cpu: None,
        percent_of_plain: None,
        served_by: None,
        cpu_steal_percent: None,
        ceiling: None,
        percent_of_ceiling: None,
        notes: run.notes.clone(),
    };
    let variant = match plan.userspace() {
        Some(u) => RowVariant::Crypto(u.crypto),
        None => RowVariant::Default,
    };
    let suites = if suite == CipherSuite::None {
        vec![]
    } else {
        vec![suite]
    };
    let mut matrix = MatrixReport::new(suites, workload.bytes, run.transfers.len() as u32, 0);
    matrix.family = plan.link().family;
    matrix.environments.insert(HOST.into(), run.environment.clone());
    matrix.rows.push(Row {
        key: RowKey::new(plan.backend(), variant, HOST),
        cells: vec![Cell {
            rekey: run.rekey.as_ref().and_then(model::rekey::RekeyReport::worst),
            first_packet: run.first_packet,
            ..Cell::measured(suite, measurement)
        }],
        notes: vec![],
    });
    matrix
}

/// Whether a cell's figures come from a zero-loss search (`--find-ndr`).
fn searched(cell: &model::matrix::Cell) -> bool {
    cell.packets.as_ref().is_some_and(|p| !p.rates_found.is_empty())
}

/// A median that can be compared: finite and above zero.
fn is_rate(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// The names of the changes that affect rows of `environment`.
fn row_changes(changes: &[ConditionChange], environment: &str) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = changes
        .iter()
        .filter(|c| c.environment.as_deref().is_none_or(|e| e == environment))
        .map(|c| c.what)
        .collect();
    names.dedup();
    names
}

/// The conditions under which the two reports' numbers were measured, where they differ.
pub fn condition_changes(before: &MatrixReport, after: &MatrixReport) -> Vec<ConditionChange> {
    let mut changes = Vec::new();
    if before.repeat != after.repeat {
        changes.push(ConditionChange {
            environment: None,
            what: "repeats",
            before: before.repeat.to_string(),
            after: after.repeat.to_string(),
        });
    }
    // Transfers timed (`matrix --time`) or of a payload (`--bytes`): the payload only says
    // what a transfer was where none was timed.
    let length = |r: &MatrixReport| timed_transfer_s(r).map(|s| format!("each transfer timed {s} s"));
    let (timed_before, timed_after) = (length(before), length(after));
    if timed_before != timed_after {
        let sized = || "transfers of a payload".to_string();
        changes.push(ConditionChange {
            environment: None,
            what: "transfer length",
            before: timed_before.clone().unwrap_or_else(sized),
            after: timed_after.unwrap_or_else(sized),
        });
    }
    let mut environments: Vec<&String> = before.rows.iter().map(|r| &r.key.environment).collect();
    environments.sort();
    environments.dedup();
    for name in environments {
        let mut change = |what, b: String, a: String| {
            if b != a {
                changes.push(ConditionChange {
                    environment: Some(name.clone()),
                    what,
                    before: b,
                    after: a,
                });
            }
        };
        if timed_before.is_none() {
            change(
                "payload",
                before.payload_of(name).to_string(),
                after.payload_of(name).to_string(),
            );
        }
        let (Some(b), Some(a)) = (before.environments.get(name), after.environments.get(name)) else {
            continue;
        };
        change("kernel", b.kernel_release.clone(), a.kernel_release.clone());
        change("CPU", b.cpu_model.clone(), a.cpu_model.clone());
        change(
            "virtualization",
            b.virtualization.clone(),
            a.virtualization.clone(),
        );
    }
    changes
}

/// What the reader should know that does not stop the comparison.
fn condition_notes(before: &MatrixReport, after: &MatrixReport, options: CompareOptions) -> Vec<String> {
    let mut notes = Vec::new();
    if [before, after]
        .iter()
        .any(|r| r.rows.iter().any(|row| row.key.packet_size.is_some()))
    {
        notes.push(
            "UDP rows (\"UDP 64 B\", …) are compared by their delivered payload MB/s: at one packet size its \
             ratio is the packets/s ratio"
                .to_string(),
        );
    }
    let (b, a) = (before.repeat as usize, after.repeat as usize);
    if too_few_repeats(b, a, options.confidence).is_some() {
        let repeats = if b == a {
            b.to_string()
        } else {
            format!("{b} and {a}")
        };
        notes.push(format!(
            "{repeats} repeat(s) per cell reach no verdict at {} confidence: every cell is inconclusive; \
             measure with --repeat {} or more",
            percent(options.confidence),
            repeats_needed(options.confidence)
        ));
    }
    for (name, b) in &before.environments {
        let Some(a) = after.environments.get(name) else {
            continue;
        };
        if b.kernel_drivers != a.kernel_drivers {
            notes.push(format!(
                "{name}: kernel crypto drivers differ: {:?} before, {:?} after",
                b.kernel_drivers, a.kernel_drivers
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use model::matrix::{RowVariant, HOST, VM};
    use model::{Backend, CryptoChoice, KeyBits};

    /// The fixture with payloads its rates take seconds over (its own 4 MB at 1100 MB/s
    /// would make every cell inconclusive).
    fn timed() -> MatrixReport {
        let mut r = fixture::report();
        r.payload = model::ByteSize(4_000_000_000);
        r.payload_by_environment
            .insert(VM.into(), model::ByteSize(100_000_000));
        r
    }

    fn set(report: &mut MatrixReport, key: &RowKey, suite: CipherSuite, samples: &[f64]) {
        let row = report.rows.iter_mut().find(|r| &r.key == key).unwrap();
        let cell = row.cells.iter_mut().find(|c| c.suite == suite).unwrap();
        cell.outcome = fixture::measured(samples);
    }

    #[test]
    fn flags_exactly_the_regression_and_not_the_noise() {
        let before = timed();
        let mut after = before.clone();
        let auto = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST);
        let soft = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Soft), HOST);
        let s128 = CipherSuite::classic_six()[0];
        let s256 = CipherSuite::classic_six()[2];
        // 2× slower: the "small blocks got 2× slower" kind of release.
        set(&mut after, &auto, s128, &[150.0, 155.0, 160.0]);
        // Median 8 % lower but inside before's 100–110 spread: noise.
        set(&mut after, &soft, s128, &[96.0, 97.0, 101.0]);
        // Entirely below before's 302–322 but only 4 % lower: below the threshold.
        let before_auto_256 = before
            .row(&auto)
            .unwrap()
            .cell(s256)
            .unwrap()
            .measurement()
            .unwrap();
        assert_eq!(before_auto_256.mb_per_s.min, 302.0);
        set(&mut after, &auto, s256, &[298.0, 299.0, 300.0]);
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        let flagged: Vec<_> = c.regressions().map(|d| (d.row.label(), d.suite)).collect();
        assert_eq!(flagged, [("userspace [auto]".to_string(), s128)]);
        assert_eq!(c.improvements().count(), 0);
        let regression = c.regressions().next().unwrap();
        assert!((regression.ratio.unwrap() - 0.5).abs() < 1e-9);
        assert!((regression.delta_mb_s.unwrap() + 155.0).abs() < 1e-9);
        let noise = c.cells.iter().find(|d| d.row == soft && d.suite == s128).unwrap();
        assert_eq!(noise.verdict, Verdict::WithinSpread);
        let small = c.cells.iter().find(|d| d.row == auto && d.suite == s256).unwrap();
        assert_eq!(small.verdict, Verdict::BelowThreshold);
        let text = c.render();
        assert!(text.contains("| userspace [auto] | 128 | 310.0 (300.0–320.0) | 155.0 (150.0–160.0) | -155.00 | 0.500 | 0.469–0.533 | REGRESSION |"), "{text}");
        assert!(text.contains("| ratio 90 % CI |"), "{text}");
        assert!(
            text.contains("1 regression(s), 0 improvement(s), 0 inconclusive"),
            "{text}"
        );
    }

    #[test]
    fn improvements_and_not_comparable_cells_are_told_apart() {
        let before = timed();
        let mut after = before.clone();
        let ovpn = RowKey::new(Backend::Openvpn, RowVariant::Default, HOST);
        let gcm = CipherSuite::AesGcm { key: KeyBits::Aes256 };
        set(
            &mut after,
            &ovpn,
            CipherSuite::classic_six()[0],
            &[80.0, 85.0, 90.0],
        );
        set(&mut after, &ovpn, gcm, &[80.0, 85.0, 90.0]);
        after
            .rows
            .retain(|r| r.key.backend != Backend::Xfrm || r.key.environment != HOST);
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        assert_eq!(c.improvements().count(), 1);
        let gcm_cell = c.cells.iter().find(|d| d.row == ovpn && d.suite == gcm).unwrap();
        assert_eq!(gcm_cell.verdict, Verdict::NotComparable("not run before".into()));
        assert!(c
            .cells
            .iter()
            .any(|d| d.row.backend == Backend::Xfrm
                && d.verdict == Verdict::NotComparable("absent after".into())));
        assert_eq!(c.regressions().count(), 0);
    }

    #[test]
    fn judge_needs_both_noise_and_threshold() {
        let m = |v: &[f64]| match fixture::measured(v) {
            model::matrix::CellOutcome::Measured(m) => m,
            _ => unreachable!(),
        };
        let o = CompareOptions {
            threshold: 0.10,
            ..Default::default()
        };
        let verdict = |b: &[f64], a: &[f64]| judge(&m(b), &m(a), o).0;
        // Too few repeats for a 90 % interval: no verdict, whatever the ranges say.
        assert_eq!(
            verdict(&[100.0], &[85.0]),
            Verdict::Inconclusive("too few repeats (1 a side; 90 % needs 3)".into())
        );
        assert_eq!(
            verdict(&[100.0, 101.0], &[130.0, 131.0, 132.0]),
            Verdict::Inconclusive("too few repeats (2 before, 3 after; 90 % needs 3)".into())
        );
        assert_eq!(judge(&m(&[100.0, 101.0]), &m(&[130.0, 131.0]), o).1, None);
        assert_eq!(
            verdict(&[100.0, 101.0, 102.0], &[130.0, 131.0, 132.0]),
            Verdict::Improvement
        );
        assert_eq!(
            verdict(&[80.0, 100.0, 120.0], &[70.0, 85.0, 90.0]),
            Verdict::WithinSpread
        );
        // Ten repeats a side: an outlier on each makes the ranges overlap, but the interval
        // sees the bulk 10 % lower, and 12 % is beyond the threshold.
        let before = [100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.5, 99.5, 80.0];
        let after: Vec<f64> = before.iter().take(9).map(|v| v * 0.88).chain([101.0]).collect();
        let (v, interval) = judge(&m(&before), &m(&after), o);
        assert_eq!(v, Verdict::Regression);
        let interval = interval.unwrap();
        assert!(interval.high < 1.0 && interval.confidence >= 0.9, "{interval:?}");
        // The same data at a 5 % threshold: still flagged; at 20 %: below it.
        let loose = CompareOptions { threshold: 0.20, ..o };
        assert_eq!(judge(&m(&before), &m(&after), loose).0, Verdict::BelowThreshold);
        // Noise of ten repeats around the same median: not flagged.
        let noisy_after = [99.0, 103.0, 97.0, 101.5, 98.0, 102.0, 100.0, 96.0, 104.0, 100.2];
        assert_eq!(judge(&m(&before), &m(&noisy_after), o).0, Verdict::WithinSpread);
    }

    #[test]
    fn identical_repeats_are_marked_and_cpu_steal_is_inconclusive() {
        let before = timed();
        let mut after = before.clone();
        let auto = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST);
        let soft = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Soft), HOST);
        let s128 = CipherSuite::classic_six()[0];
        set(&mut after, &auto, s128, &[125.0, 125.0, 125.0]);
        let row = after.rows.iter_mut().find(|r| r.key == soft).unwrap();
        let cell = row.cells.iter_mut().find(|c| c.suite == s128).unwrap();
        if let model::matrix::CellOutcome::Measured(m) = &mut cell.outcome {
            m.cpu_steal_percent = Some(23.4);
        }
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        let cell = |key: &RowKey| c.cells.iter().find(|d| &d.row == key && d.suite == s128).unwrap();
        assert_eq!(
            cell(&auto).marks,
            ["identical repeats after (a rate limiter, not a measurement?)"]
        );
        assert!(cell(&soft).marks.is_empty());
        assert_eq!(
            cell(&soft).verdict,
            Verdict::Inconclusive("CPU steal 23 % after".into())
        );
        assert!(
            c.render().contains("| REGRESSION; identical repeats after"),
            "{}",
            c.render()
        );
        assert!(c
            .cells
            .iter()
            .filter(|d| d.row != auto && d.row != soft)
            .all(|d| d.marks.is_empty()));
    }

    #[test]
    fn payload_10mb_vs_1mb_is_refused_naming_the_conditions() {
        let before = fixture::report();
        let mut after = before.clone();
        after.environments.get_mut(HOST).unwrap().kernel_release = "6.12.0".into();
        after.payload = model::ByteSize(1_000_000);
        after.repeat = 1;
        let e = compare(&before, &after, CompareOptions::default()).unwrap_err();
        let text = e.to_string();
        for part in [
            "repeats 3 before, 1 after",
            "host payload 4.0 MB before, 1.0 MB after",
            "host kernel 6.1.0-test before, 6.12.0 after",
            "--allow-different-conditions",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }

    #[test]
    fn allowed_different_conditions_mark_every_cell_and_flag_nothing() {
        let before = fixture::report();
        let mut after = before.clone();
        after.payload = model::ByteSize(1_000_000);
        let auto = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST);
        // Half the speed: a regression under equal conditions.
        set(
            &mut after,
            &auto,
            CipherSuite::classic_six()[0],
            &[150.0, 155.0, 160.0],
        );
        let options = CompareOptions {
            allow_different_conditions: true,
            ..Default::default()
        };
        let c = compare(&before, &after, options).unwrap();
        assert_eq!(c.regressions().count(), 0);
        // The VM rows kept their own 1 MB payload: only the host rows changed conditions.
        for d in c.cells.iter().filter(|d| d.before.is_some() && d.after.is_some()) {
            let marked = matches!(&d.verdict, Verdict::NotComparable(w) if w == "payload differ");
            assert_eq!(marked, d.row.environment == HOST, "{d:?}");
        }
        let halved = c
            .cells
            .iter()
            .find(|d| d.row == auto && d.suite == CipherSuite::classic_six()[0])
            .unwrap();
        assert_eq!(halved.verdict, Verdict::NotComparable("payload differ".into()));
        assert!(c
            .render()
            .contains("not comparable: host payload 4.0 MB before, 1.0 MB after"));
    }

    #[test]
    fn a_change_in_the_vm_marks_only_the_vm_rows() {
        let before = timed();
        let mut after = before.clone();
        after.environments.get_mut(VM).unwrap().kernel_release = "6.12.0".into();
        let options = CompareOptions {
            allow_different_conditions: true,
            ..Default::default()
        };
        let c = compare(&before, &after, options).unwrap();
        for d in c.cells.iter().filter(|d| d.before.is_some() && d.after.is_some()) {
            let marked = matches!(&d.verdict, Verdict::NotComparable(w) if w == "kernel differ");
            assert_eq!(marked, d.row.environment == VM, "{d:?}");
        }
    }

    /// The three runs of one small matrix: 2 repeats, 20 MB at ~2000 MB/s.
    fn small_matrix(plain: &[f64], auto: &[f64]) -> MatrixReport {
        let mut r = timed();
        r.repeat = 2;
        let plain_key = RowKey::new(Backend::Plain, RowVariant::Default, HOST);
        r.rows.iter_mut().find(|row| row.key == plain_key).unwrap().cells[0].outcome =
            fixture::measured(plain);
        let auto_key = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST);
        set(&mut r, &auto_key, CipherSuite::classic_six()[0], auto);
        r.rows.retain(|row| row.key == plain_key || row.key == auto_key);
        for row in &mut r.rows {
            row.cells
                .retain(|c| c.suite == CipherSuite::None || c.suite == CipherSuite::classic_six()[0]);
        }
        r
    }

    #[test]
    fn two_repeats_a_side_are_inconclusive_not_a_regression() {
        // Ranges that do not overlap, 10 % apart: flagged as a regression before, though two
        // repeats reach no 90 % interval.
        let before = small_matrix(&[1900.0, 1960.0], &[400.0, 410.0]);
        let after = small_matrix(&[1700.0, 1760.0], &[360.0, 365.0]);
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        assert_eq!(c.regressions().count(), 0, "{}", c.render());
        assert_eq!(c.inconclusive().count(), 2, "{}", c.render());
        for d in &c.cells {
            assert_eq!(
                d.verdict,
                Verdict::Inconclusive("too few repeats (2 a side; 90 % needs 3)".into())
            );
        }
        let text = c.render();
        assert!(
            text.contains("| too few repeats | inconclusive: too few repeats"),
            "{text}"
        );
        assert!(
            text.contains("0 regression(s), 0 improvement(s), 2 inconclusive"),
            "{text}"
        );
        assert!(
            text.contains("note: 2 repeat(s) per cell reach no verdict at 90 % confidence"),
            "{text}"
        );
        assert!(text.contains("--repeat 3 or more"), "{text}");
    }

    #[test]
    fn a_cell_whose_transfers_were_too_short_is_inconclusive() {
        // 20 MB at ~2000 MB/s: 10 ms transfers, three repeats a side.
        let mut before = small_matrix(&[1900.0, 1960.0, 2000.0], &[400.0, 410.0, 420.0]);
        let mut after = small_matrix(&[1500.0, 1560.0, 1600.0], &[300.0, 305.0, 310.0]);
        for r in [&mut before, &mut after] {
            r.repeat = 3;
            r.payload = model::ByteSize(20_000_000);
        }
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        assert_eq!(c.regressions().count(), 0, "{}", c.render());
        let plain = &c.cells[0];
        assert_eq!(
            plain.verdict,
            Verdict::Inconclusive(
                "transfers too short before (0.010 s); transfers too short after (0.013 s)".into()
            )
        );
        // The interval is still shown: only the verdict is withheld.
        assert!(plain.interval.is_some());
        // A payload that takes long enough: the same drop is a regression.
        for r in [&mut before, &mut after] {
            r.payload = model::ByteSize(4_000_000_000);
        }
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        assert_eq!(c.regressions().count(), 2, "{}", c.render());
        // Flagged too short in the notes, though the payload says otherwise: inconclusive too.
        let auto = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST);
        let row = after.rows.iter_mut().find(|r| r.key == auto).unwrap();
        if let model::matrix::CellOutcome::Measured(m) = &mut row.cells[0].outcome {
            m.notes.push(
                "a transfer lasted 0.400 s: too short to be a stable figure; use --bytes 2GB or more".into(),
            );
        }
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        let cell = c.cells.iter().find(|d| d.row == auto).unwrap();
        assert_eq!(
            cell.verdict,
            Verdict::Inconclusive("transfers flagged too short after".into())
        );
    }

    /// A timed cell (the plain row) lasted its time, whatever the payload of the others.
    #[test]
    fn a_timed_cell_is_as_long_as_its_time_not_the_payload() {
        let mut before = small_matrix(&[1900.0, 1960.0, 2000.0], &[400.0, 410.0, 420.0]);
        let mut after = small_matrix(&[1500.0, 1560.0, 1600.0], &[300.0, 305.0, 310.0]);
        for r in [&mut before, &mut after] {
            r.repeat = 3;
            r.payload = model::ByteSize(20_000_000);
            if let model::matrix::CellOutcome::Measured(m) = &mut r.rows[0].cells[0].outcome {
                m.timed_s = Some(1.0);
            }
        }
        let c = compare(&before, &after, CompareOptions::default()).unwrap();
        assert_eq!(c.cells[0].verdict, Verdict::Regression, "{}", c.render());
    }

    #[test]
    fn udp_rows_compare_by_rate_per_size_and_searched_cells_are_not_compared() {
        let before = crate::fixture::packets();
        let mut after = crate::fixture::packets();
        // The 1400 B userspace row halves; its 64 B row (a search) changes too.
        let halve = |row: &mut model::matrix::Row| {
            if let model::matrix::CellOutcome::Measured(m) = &mut row.cells[0].outcome {
                m.samples.iter_mut().for_each(|v| *v /= 2.0);
                m.mb_per_s = Summary::of(&m.samples).unwrap();
            }
        };
        halve(&mut after.rows[3]);
        halve(&mut after.rows[1]);
        let options = CompareOptions {
            confidence: 0.5,
            ..Default::default()
        };
        let c = compare(&before, &after, options).unwrap();
        let find = |label: &str| {
            c.cells
                .iter()
                .find(|d| d.row.label() == label)
                .unwrap_or_else(|| panic!("{label}"))
        };
        let halved = find("userspace [auto] UDP 1400 B");
        assert!((halved.ratio.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(halved.verdict, Verdict::Regression, "{:?}", halved.verdict);
        assert!(
            matches!(&find("userspace [auto] UDP 64 B").verdict, Verdict::NotComparable(why) if why.contains("--find-ndr")),
            "{:?}",
            find("userspace [auto] UDP 64 B").verdict
        );
        // Rows of one packet size are matched with their own size only.
        assert_eq!(c.cells.iter().filter(|d| d.row.packet_size.is_some()).count(), 7);
        assert!(
            c.notes.iter().any(|n| n.contains("packets/s ratio")),
            "{:?}",
            c.notes
        );
    }

    /// Two rekey runs compare their throughput as any two runs, and show their rekeys side
    /// by side, unjudged.
    #[test]
    fn two_rekey_runs_show_their_rekeys_side_by_side() {
        let run = crate::svg::rekey::tests_support::run_with_rekeys("host", "h");
        let m = run_as_matrix(&run);
        let c = compare(&m, &m, CompareOptions::default()).unwrap();
        let text = c.render();
        assert!(
            text.contains(": gap 12 ms (3 away), 2 rekeys → gap 12 ms (3 away), 2 rekeys"),
            "{text}"
        );
    }

    /// Two runs' times to first packet are listed side by side, unjudged; none, no list.
    #[test]
    fn two_runs_show_their_times_to_first_packet_side_by_side() {
        let mut run = crate::svg::rekey::tests_support::run_with_rekeys("host", "h");
        let before = run_as_matrix(&run);
        assert!(!compare(&before, &before, CompareOptions::default())
            .unwrap()
            .render()
            .contains("Time to first packet"));
        run.first_packet = Some(model::startup::FirstPacket::new(
            std::time::Duration::from_millis(40),
            std::time::Duration::from_millis(2),
        ));
        let after = run_as_matrix(&run);
        let text = compare(&before, &after, CompareOptions::default())
            .unwrap()
            .render();
        assert!(
            text.contains("Time to first packet, side by side and not judged"),
            "{text}"
        );
        assert!(text.contains(": — → 42.0 ms (setup 40.0 ms)"), "{text}");
    }
}
