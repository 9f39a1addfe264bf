//! The axis of a panel: linear from 0, a round maximum, 2–4 round ticks, and where a value
//! falls on a bar of [`BAR_AREA`] px.

use super::style::BAR_AREA;

/// Linear axis from 0 to `max` in `step`s: 2–4 round ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Scale {
    max: f64,
    step: f64,
}

impl Scale {
    pub(super) fn covering(top: f64) -> Scale {
        let top = if top.is_finite() && top > 0.0 { top } else { 1.0 };
        let raw = top / 3.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .map(|f| f * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * magnitude);
        Scale {
            max: step * (top / step).ceil(),
            step,
        }
    }

    pub(super) fn px(&self, v: f64) -> i32 {
        (v.clamp(0.0, self.max) / self.max * BAR_AREA as f64).round() as i32
    }

    pub(super) fn ticks(&self) -> Vec<(f64, String)> {
        let decimals = (0..4)
            .find(|d| {
                let scaled = self.step * 10f64.powi(*d);
                (scaled - scaled.round()).abs() < 1e-9
            })
            .unwrap_or(3) as usize;
        let n = (self.max / self.step).round() as usize;
        (0..=n)
            .map(|i| {
                let v = i as f64 * self.step;
                (v, format!("{v:.decimals$}"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_have_round_ticks_from_zero() {
        assert_eq!(
            Scale::covering(1200.0),
            Scale {
                max: 1500.0,
                step: 500.0
            }
        );
        assert_eq!(
            Scale::covering(505.6),
            Scale {
                max: 600.0,
                step: 200.0
            }
        );
        assert_eq!(
            Scale::covering(3.39)
                .ticks()
                .iter()
                .map(|t| t.1.as_str())
                .collect::<Vec<_>>(),
            ["0", "2", "4"]
        );
        let s = Scale::covering(0.7);
        assert_eq!(s.ticks().first().unwrap().1, "0.00");
        assert_eq!(s.px(s.max), BAR_AREA);
        assert_eq!(s.px(0.0), 0);
    }
}
