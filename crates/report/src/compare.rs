//! Two matrix reports → per-cell delta and ratio, and a verdict that flags a change only when
//! it is both beyond the noise and large enough to matter:
//!
//! * beyond the spread: the two cells' min–max ranges over the repeats do not overlap (after
//!   is entirely below before for a regression, entirely above for an improvement);
//! * beyond the threshold: the medians differ by more than `threshold` (default 5 %).
//!
//! With one repeat a range is a point, so only the threshold guards against noise; the
//! report says so. Cells are matched by row key (backend, variant, environment) and suite.

use std::fmt::Write as _;

use model::matrix::{MatrixReport, RowKey};
use model::{CipherSuite, Summary};

use crate::fmt_rate;

pub const DEFAULT_THRESHOLD: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareOptions {
    /// Smallest relative change of the median that is flagged (0.05 = 5 %).
    pub threshold: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            threshold: DEFAULT_THRESHOLD,
        }
    }
}

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

pub fn compare(before: &MatrixReport, after: &MatrixReport, options: CompareOptions) -> Comparison {
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
            (_, _, Some(bs), Some(_)) if bs.median <= 0.0 => Verdict::NotComparable("zero before".into()),
            (_, _, Some(bs), Some(as_)) => judge(&bs, &as_, options),
        };
        let (delta_mb_s, ratio) = match (bm, am) {
            (Some(b), Some(a)) if b.median > 0.0 => (Some(a.median - b.median), Some(a.median / b.median)),
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
    Comparison {
        options,
        cells,
        notes: condition_notes(before, after),
    }
}

fn condition_notes(before: &MatrixReport, after: &MatrixReport) -> Vec<String> {
    let mut notes = Vec::new();
    if before.payload != after.payload {
        notes.push(format!(
            "payload differs: {} before, {} after",
            before.payload, after.payload
        ));
    }
    if before.repeat != after.repeat {
        notes.push(format!(
            "repeats differ: {} before, {} after",
            before.repeat, after.repeat
        ));
    }
    if before.repeat < 2 || after.repeat < 2 {
        notes.push(
            "with a single repeat there is no spread: only the threshold separates change from noise".into(),
        );
    }
    for (name, b) in &before.environments {
        let Some(a) = after.environments.get(name) else {
            continue;
        };
        for (what, x, y) in [
            ("kernel", &b.kernel_release, &a.kernel_release),
            ("CPU", &b.cpu_model, &a.cpu_model),
            ("virtualization", &b.virtualization, &a.virtualization),
        ] {
            if x != y {
                notes.push(format!("{name}: {what} differs: {x} before, {y} after"));
            }
        }
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
    use model::matrix::{RowVariant, HOST};
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
        let c = compare(&before, &after, CompareOptions::default());
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
        let c = compare(&before, &after, CompareOptions::default());
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
        let o = CompareOptions { threshold: 0.10 };
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
    fn differing_conditions_are_noted() {
        let before = fixture::report();
        let mut after = before.clone();
        after.environments.get_mut(HOST).unwrap().kernel_release = "6.12.0".into();
        after.payload = model::ByteSize(8_000_000);
        let c = compare(&before, &after, CompareOptions::default());
        assert!(c
            .notes
            .iter()
            .any(|n| n.contains("kernel differs: 6.1.0-test before, 6.12.0 after")));
        assert!(c.notes.iter().any(|n| n.contains("payload differs")));
    }
}
