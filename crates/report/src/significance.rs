//! Whether two sets of repeats differ beyond their noise, without assuming a distribution:
//! the Hodges–Lehmann interval for the ratio after/before, from the exact null
//! distribution of the Mann–Whitney U statistic.
//!
//! Throughput repeats are few (3 to 10), skewed by the odd slow run and not normal, so a
//! t-interval would be wrong and a bootstrap of three values says little. The rank-based
//! interval is exact for any distribution of the same shape on both sides: with `m` and `n`
//! repeats, the `m·n` pairwise log-ratios sorted, the interval runs from the k-th smallest
//! to the k-th largest, k chosen from U's distribution. Few repeats cannot reach every
//! confidence (3 against 3 reaches 90 %, not 95 %): the interval says what it reached, and
//! where even the widest one falls short, there is none.

/// A confidence interval for the ratio after/before of two sets of repeats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioInterval {
    pub low: f64,
    pub high: f64,
    /// The confidence reached (at least the one asked for, never more than the repeats allow).
    pub confidence: f64,
}

impl RatioInterval {
    /// Whether the interval leaves out "no change" (a ratio of 1).
    pub fn excludes_no_change(&self) -> bool {
        self.low > 1.0 || self.high < 1.0
    }
}

/// Repeats beyond this many per side are not worth an exact distribution (and no sweep takes
/// them): the caller falls back to comparing ranges.
const MAX_REPEATS: usize = 200;

/// The interval at `confidence` (0.9 = 90 %) for the ratio of `after` to `before`; None
/// when the repeats are too few to reach it, or a value is not a positive rate.
pub fn ratio_interval(before: &[f64], after: &[f64], confidence: f64) -> Option<RatioInterval> {
    let (m, n) = (before.len(), after.len());
    if m == 0 || n == 0 || m > MAX_REPEATS || n > MAX_REPEATS {
        return None;
    }
    if before.iter().chain(after).any(|v| !(v.is_finite() && *v > 0.0)) {
        return None;
    }
    let cdf = u_cumulative(m, n);
    let alpha = 1.0 - confidence;
    // The largest k whose two tails together stay within alpha.
    let k = (1..=m * n / 2 + 1)
        .take_while(|&k| 2.0 * cdf[k - 1] <= alpha + 1e-12)
        .last()?;
    let mut log_ratios: Vec<f64> = before
        .iter()
        .flat_map(|b| after.iter().map(move |a| (a / b).ln()))
        .collect();
    log_ratios.sort_by(f64::total_cmp);
    Some(RatioInterval {
        low: log_ratios[k - 1].exp(),
        high: log_ratios[m * n - k].exp(),
        confidence: 1.0 - 2.0 * cdf[k - 1],
    })
}

/// The highest confidence `m` against `n` repeats reach: that of the widest interval, the
/// full range of the pairwise ratios, whose two tails hold 2 of the C(m+n, m) orders.
pub fn max_confidence(m: usize, n: usize) -> f64 {
    // C(m+n, m) as a product of ratios: exact enough, and no overflow at 200 a side.
    let orders: f64 = (1..=m).map(|i| (n + i) as f64 / i as f64).product();
    1.0 - 2.0 / orders
}

/// The fewest repeats a side that reach `confidence` (3 for 90 %, 4 for 95 %).
pub fn repeats_needed(confidence: f64) -> usize {
    (1..=MAX_REPEATS)
        .find(|&r| max_confidence(r, r) >= confidence - 1e-12)
        .unwrap_or(MAX_REPEATS)
}

/// P(U ≤ u) for u = 0..=m·n under the null hypothesis (both samples from one distribution),
/// U counting the pairs in which the second sample's value is the smaller.
fn u_cumulative(m: usize, n: usize) -> Vec<f64> {
    // count[j][u]: arrangements of i values of the first sample and j of the second with
    // statistic u; built up over i (the first sample's values) a row at a time. The last of
    // an arrangement is either a first-sample value (after all j of the second: adds j) or a
    // second-sample one (adds nothing).
    let mut previous: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect();
    for i in 1..=m {
        let mut current: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        current.push(vec![1.0]);
        for j in 1..=n {
            let mut counts = vec![0.0; i * j + 1];
            for (u, c) in previous[j].iter().enumerate() {
                counts[u + j] += c;
            }
            for (u, c) in current[j - 1].iter().enumerate() {
                counts[u] += c;
            }
            current.push(counts);
        }
        previous = current;
    }
    let counts = &previous[n];
    let total: f64 = counts.iter().sum();
    let mut running = 0.0;
    counts
        .iter()
        .map(|c| {
            running += c;
            running / total
        })
        .collect()
}

/// Repeats that agree to within 0.05 %: a rate limiter or a cache, not a measurement of a
/// shared, noisy machine.
pub fn suspiciously_identical(samples: &[f64]) -> bool {
    if samples.len() < 3 {
        return false;
    }
    let (min, max) = samples
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        });
    min > 0.0 && (max - min) / min < 0.0005
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u_distribution_matches_the_tables() {
        // 3 against 3: 20 arrangements, one with U = 0, one with U = 1, two with U = 2.
        let cdf = u_cumulative(3, 3);
        assert_eq!(cdf.len(), 10);
        for (u, expected) in [(0, 1.0 / 20.0), (1, 2.0 / 20.0), (2, 4.0 / 20.0), (9, 1.0)] {
            assert!((cdf[u] - expected).abs() < 1e-12, "P(U ≤ {u}) = {}", cdf[u]);
        }
        // 5 against 5: the two-sided 5 % critical value is U ≤ 2 (P = 0.0159 per tail).
        let cdf = u_cumulative(5, 5);
        assert!((cdf[2] - 4.0 / 252.0).abs() < 1e-12);
        assert!(cdf[3] > 0.025);
        // Symmetric.
        let cdf = u_cumulative(4, 7);
        assert!((cdf[27] - (1.0 - cdf[0])).abs() < 1e-12);
    }

    #[test]
    fn three_against_three_reaches_ninety_percent_as_the_full_range() {
        let before = [300.0, 310.0, 320.0];
        let after = [150.0, 155.0, 160.0];
        let ci = ratio_interval(&before, &after, 0.90).unwrap();
        assert!((ci.confidence - 0.90).abs() < 1e-12);
        assert!((ci.low - 150.0 / 320.0).abs() < 1e-12);
        assert!((ci.high - 160.0 / 300.0).abs() < 1e-12);
        assert!(ci.excludes_no_change());
        // 95 % needs more repeats.
        assert_eq!(ratio_interval(&before, &after, 0.95), None);
    }

    #[test]
    fn overlapping_repeats_include_no_change() {
        let before = [30.0, 33.0, 36.0, 31.0, 35.0];
        let after = [29.0, 30.0, 34.0, 30.5, 31.0];
        let ci = ratio_interval(&before, &after, 0.90).unwrap();
        assert!(ci.confidence >= 0.90);
        assert!(ci.low < 1.0 && ci.high > 1.0, "{ci:?}");
        assert!(!ci.excludes_no_change());
    }

    #[test]
    fn a_shift_among_ten_noisy_repeats_is_found_at_ninety_five_percent() {
        // Ranges overlap (an outlier on each side), but the bulk moved down by 10 %.
        let before = [100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.5, 99.5, 80.0];
        let after: Vec<f64> = [90.0, 91.8, 88.2, 90.9, 89.1, 92.7, 87.3, 90.4, 89.6, 101.0].to_vec();
        let ci = ratio_interval(&before, &after, 0.95).unwrap();
        assert!(ci.high < 1.0, "{ci:?}");
        assert!(ci.low > 0.85, "{ci:?}");
    }

    #[test]
    fn too_few_or_unusable_repeats_give_no_interval() {
        assert_eq!(ratio_interval(&[100.0], &[50.0], 0.9), None);
        assert_eq!(ratio_interval(&[100.0, 101.0], &[50.0, 51.0], 0.9), None);
        assert_eq!(ratio_interval(&[100.0, 0.0, 90.0], &[1.0, 2.0, 3.0], 0.9), None);
        assert_eq!(ratio_interval(&[], &[1.0], 0.9), None);
    }

    #[test]
    fn two_repeats_a_side_reach_two_thirds_three_reach_ninety_percent() {
        assert!((max_confidence(2, 2) - 2.0 / 3.0).abs() < 1e-12);
        assert!((max_confidence(3, 3) - 0.9).abs() < 1e-12);
        assert!((max_confidence(1, 1)).abs() < 1e-12);
        assert_eq!(repeats_needed(0.90), 3);
        assert_eq!(repeats_needed(0.95), 4);
        // The same bound ratio_interval meets: it has an interval exactly where it is reached.
        for (m, n) in [(2, 2), (3, 3), (2, 5), (4, 4), (1, 9)] {
            for confidence in [0.8, 0.9, 0.95] {
                let some = ratio_interval(&vec![100.0; m], &vec![90.0; n], confidence).is_some();
                assert_eq!(
                    some,
                    max_confidence(m, n) >= confidence - 1e-12,
                    "{m} {n} {confidence}"
                );
            }
        }
    }

    #[test]
    fn identical_repeats_are_suspicious_noisy_ones_are_not() {
        assert!(suspiciously_identical(&[125.0, 125.0, 125.0]));
        assert!(suspiciously_identical(&[125.0, 125.01, 125.02]));
        assert!(!suspiciously_identical(&[125.0, 126.0, 124.0]));
        assert!(!suspiciously_identical(&[125.0, 125.0]));
    }
}
