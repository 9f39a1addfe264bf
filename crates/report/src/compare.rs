//! Two matrix reports → per-cell delta and ratio, and a verdict that flags a change only when
//! it is both beyond the noise and large enough to matter:
//!
//! * beyond the spread: the two cells' min–max ranges over the repeats do not overlap (after
//!   is entirely below before for a regression, entirely above for an improvement);
//! * beyond the threshold: the medians differ by more than `threshold` (default 5 %).
//!
//! With one repeat a range is a point, so only the threshold guards against noise; the
//! report says so. Cells are matched by row key (backend, variant, environment) and suite.
//!
//! Two reports measured under different conditions (payload, repeats, kernel, CPU, VM or
//! host) do not say whether the software got faster: [`compare`] refuses them unless asked
//! to [`CompareOptions::allow_different_conditions`], and then marks the affected cells not
//! comparable, so no difference of conditions is ever flagged as a regression.

use std::fmt::Write as _;

use model::matrix::{MatrixReport, RowKey};
use model::{CipherSuite, Summary};

use crate::shared::fmt_rate;

pub const DEFAULT_THRESHOLD: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareOptions {
    /// Smallest relative change of the median that is flagged (0.05 = 5 %).
    pub threshold: f64,
    /// Compare reports measured under different conditions anyway: cells whose conditions
    /// differ are shown, marked not comparable, and never flagged.
    pub allow_different_conditions: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            threshold: DEFAULT_THRESHOLD,
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
            write!(f, "{env} ")?;
        }
        write!(f, "{} {} before, {} after", self.what, self.before, self.after)
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
    /// Slower beyond the spread and the threshold.
    Regression,
    /// Faster beyond the spread and the threshold.
    Improvement,
    /// The ranges overlap: the change is within the noise of the repeats.
    WithinSpread,
    /// Beyond the spread but smaller than the threshold.
    BelowThreshold,
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
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub options: CompareOptions,
    pub cells: Vec<CellDelta>,
    /// Differences in conditions the reader must know (kernel, CPU, payload, repeats).
    pub notes: Vec<String>,
}

impl Comparison {
    pub fn regressions(&self) -> impl Iterator<Item = &CellDelta> {
        self.cells.iter().filter(|c| c.verdict == Verdict::Regression)
    }

    pub fn improvements(&self) -> impl Iterator<Item = &CellDelta> {
        self.cells.iter().filter(|c| c.verdict == Verdict::Improvement)
    }

    /// A Markdown table, one line per cell, then the notes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| row | cipher | before MB/s (min–max) | after MB/s (min–max) | delta | ratio | verdict |\n\
             |---|---|---:|---:|---:|---:|---|"
        );
        let range = |s: &Option<Summary>| match s {
            Some(s) => format!("{} ({}–{})", fmt_rate(s.median), fmt_rate(s.min), fmt_rate(s.max)),
            None => "—".into(),
        };
        for c in &self.cells {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                c.row.label(),
                c.suite.short_label(),
                range(&c.before),
                range(&c.after),
                c.delta_mb_s
                    .map(|d| format!("{d:+.2}"))
                    .unwrap_or_else(|| "—".into()),
                c.ratio.map(|r| format!("{r:.3}")).unwrap_or_else(|| "—".into()),
                c.verdict.label(),
            );
        }
        let _ = writeln!(
            out,
            "\n{} regression(s), {} improvement(s); flagged only beyond the repeats' min–max spread and a {:.1} % \
             threshold.",
            self.regressions().count(),
            self.improvements().count(),
            self.options.threshold * 100.0
        );
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }
}

/// The verdict for one pair of measured cells.
pub fn judge(before: &Summary, after: &Summary, options: CompareOptions) -> Verdict {
    let ratio = after.median / before.median;
    let slower = after.max < before.min;
    let faster = after.min > before.max;
    if !slower && !faster {
        return Verdict::WithinSpread;
    }
    if (ratio - 1.0).abs() <= options.threshold {
        return Verdict::BelowThreshold;
    }
    if slower {
        Verdict::Regression
    } else {
        Verdict::Improvement
    }
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
        let bm = b.as_ref().and_then(|c| c.measurement().map(|m| m.mb_per_s));
        let am = a.as_ref().and_then(|c| c.measurement().map(|m| m.mb_per_s));
        let verdict = match (&b, &a, bm, am) {
            (None, _, _, _) => Verdict::NotComparable("absent before".into()),
            (_, None, _, _) => Verdict::NotComparable("absent after".into()),
            (_, _, None, _) => Verdict::NotComparable("not run before".into()),
            (_, _, _, None) => Verdict::NotComparable("not run after".into()),
            (_, _, Some(bs), Some(as_)) if !(is_rate(bs.median) && is_rate(as_.median)) => {
                Verdict::NotComparable("no rate on one side".into())
            }
            _ if !row_changes(&changes, &key.environment).is_empty() => Verdict::NotComparable(format!(
                "{} differ",
                row_changes(&changes, &key.environment).join(", ")
            )),
            (_, _, Some(bs), Some(as_)) => judge(&bs, &as_, options),
        };
        let (delta_mb_s, ratio) = match (bm, am) {
            (Some(b), Some(a)) if is_rate(b.median) && is_rate(a.median) => {
                (Some(a.median - b.median), Some(a.median / b.median))
            }
            _ => (None, None),
        };
        cells.push(CellDelta {
            row: key,
            suite,
            before: bm,
            after: am,
            delta_mb_s,
            ratio,
            verdict,
        });
    }
    let mut notes: Vec<String> = changes.iter().map(|c| format!("not comparable: {c}")).collect();
    notes.extend(condition_notes(before, after));
    Ok(Comparison {
        options,
        cells,
        notes,
    })
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
        change(
            "payload",
            before.payload_of(name).to_string(),
            after.payload_of(name).to_string(),
        );
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
fn condition_notes(before: &MatrixReport, after: &MatrixReport) -> Vec<String> {
    let mut notes = Vec::new();
    if before.repeat < 2 || after.repeat < 2 {
        notes.push(
            "with a single repeat there is no spread: only the threshold separates change from noise".into(),
        );
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

    fn set(report: &mut MatrixReport, key: &RowKey, suite: CipherSuite, samples: &[f64]) {
        let row = report.rows.iter_mut().find(|r| &r.key == key).unwrap();
        let cell = row.cells.iter_mut().find(|c| c.suite == suite).unwrap();
        cell.outcome = fixture::measured(samples);
    }

    #[test]
    fn flags_exactly_the_regression_and_not_the_noise() {
        let before = fixture::report();
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
        assert!(text.contains("| userspace [auto] | 128 | 310.0 (300.0–320.0) | 155.0 (150.0–160.0) | -155.00 | 0.500 | REGRESSION |"), "{text}");
        assert!(text.contains("1 regression(s), 0 improvement(s)"));
    }

    #[test]
    fn improvements_and_not_comparable_cells_are_told_apart() {
        let before = fixture::report();
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
    fn judge_needs_both_spread_and_threshold() {
        let s = |v: &[f64]| Summary::of(v).unwrap();
        let o = CompareOptions {
            threshold: 0.10,
            ..Default::default()
        };
        assert_eq!(judge(&s(&[100.0]), &s(&[85.0]), o), Verdict::Regression);
        assert_eq!(judge(&s(&[100.0]), &s(&[95.0]), o), Verdict::BelowThreshold);
        assert_eq!(
            judge(&s(&[80.0, 100.0, 120.0]), &s(&[70.0, 85.0, 90.0]), o),
            Verdict::WithinSpread
        );
        assert_eq!(
            judge(&s(&[100.0, 101.0]), &s(&[130.0, 131.0]), o),
            Verdict::Improvement
        );
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
        let before = fixture::report();
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
}
