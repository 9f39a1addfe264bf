//! A rekey run's timeline (`run --rekey-every … --json`, then `report -f svg`): MB/s in each
//! 10 ms bucket of each transfer, linear from zero, with every rekey marked where it
//! happened and numbered as in the table under it. An emulated run's line has the emulated
//! colour and its panel says so, as the matrix chart's does.

use plotters::prelude::*;

use model::rekey::RekeyRun;
use model::RunReport;

use super::draw::{chart_error, line, section, stack, text_section, write, Layout, RenderError, Section};
use super::style::{
    Type, BODY, EMULATED_BAR, EMULATED_MARK, HEADING, HOST_BAR, MARGIN, MUTED, SMALL, WARNING,
};

const WIDTH: i32 = 900;
const PLOT_HEIGHT: i32 = 260;
/// Left of the plot: the axis's numbers.
const AXIS_ROOM: i32 = 60;
const MARK_COLOUR: RGBColor = WARNING;

fn layout() -> Layout {
    Layout {
        width: WIDTH,
        label_width: 0,
        column_width: 0,
        columns: Vec::new(),
    }
}

/// The chart of `run`'s rekeys; None where the run has none.
pub fn render(run: &RunReport) -> Option<Result<String, RenderError>> {
    let rekey = run.rekey.as_ref()?;
    Some(draw(run, rekey))
}

fn draw(run: &RunReport, rekey: &model::rekey::RekeyReport) -> Result<String, RenderError> {
    let layout = layout();
    let env = &run.environment;
    let mut head = vec![
        (
            HEADING,
            format!(
                "ipsec-lab rekey under load: {}",
                crate::run::rekey::title(run, rekey)
            ),
        ),
        (
            SMALL,
            format!(
                "MB/s delivered (verified) in each {} ms bucket, linear from 0; a red line marks each rekey, \
                 numbered as in the list under the chart. Measured on {}.",
                model::rekey::BUCKET_MS,
                env.describe()
            ),
        ),
    ];
    if env.is_emulated() {
        head.push((
            Type {
                colour: WARNING,
                ..BODY
            },
            EMULATED_MARK.to_string(),
        ));
    }
    let mut sections = vec![text_section("caption", &layout, &head)?];
    let colour = if env.is_emulated() { EMULATED_BAR } else { HOST_BAR };
    let mut number = 0;
    for r in &rekey.runs {
        sections.push(plot(r, colour, &mut number)?);
    }
    let lines: Vec<(Type, String)> = crate::run::rekey::lines(rekey)
        .into_iter()
        .map(|l| (SMALL, l))
        .chain(
            run.notes
                .iter()
                .filter(|n| crate::is_warning(n))
                .map(|n| (SMALL, format!("warning: {n}"))),
        )
        .collect();
    sections.push(text_section("rekeys", &layout, &lines)?);
    Ok(stack(sections, WIDTH, super::draw::Placement::Standalone))
}

/// One transfer's buckets as a line, its rekeys as numbered vertical marks.
fn plot(r: &RekeyRun, colour: RGBColor, number: &mut usize) -> Result<Section, RenderError> {
    let bucket_s = f64::from(r.bucket_ms) / 1e3;
    let mb_s: Vec<f64> = r.delivered.iter().map(|&b| b as f64 / 1e6 / bucket_s).collect();
    let top = mb_s.iter().copied().fold(0.0, f64::max).max(1e-3) * 1.1;
    let seconds = (r.delivered.len() as f64 * bucket_s).max(bucket_s);
    let (left, right, up, down) = (MARGIN + AXIS_ROOM, WIDTH - MARGIN, 24, PLOT_HEIGHT - 30);
    let x = |t: f64| left + ((t / seconds) * f64::from(right - left)) as i32;
    let y = |v: f64| down - ((v / top) * f64::from(down - up)) as i32;
    let first = *number;
    *number += r.rekeys.len();
    section(
        format!("transfer-{}", r.transfer),
        "timeline",
        WIDTH,
        PLOT_HEIGHT,
        WHITE,
        |area| {
            write(area, BODY, &format!("transfer {}", r.transfer), (MARGIN, 10))?;
            line(area, (left, down), (right, down), MUTED)?;
            line(area, (left, up), (left, down), MUTED)?;
            for k in 0..=4 {
                let v = top / 1.1 * f64::from(k) / 4.0;
                let align = Type {
                    align: plotters::style::text_anchor::HPos::Right,
                    ..SMALL
                };
                let digits = usize::from(top < 11.0);
                write(area, align, &format!("{v:.digits$}"), (left - 4, y(v)))?;
            }
            write(area, SMALL, "MB/s", (MARGIN, up - 10))?;
            let whole = seconds.floor() as usize;
            for s in 0..=whole {
                write(area, SMALL, &format!("{s} s"), (x(s as f64) - 6, down + 12))?;
            }
            let points: Vec<(i32, i32)> = mb_s
                .iter()
                .enumerate()
                .flat_map(|(i, &v)| {
                    [
                        (x(i as f64 * bucket_s), y(v)),
                        (x((i + 1) as f64 * bucket_s), y(v)),
                    ]
                })
                .collect();
            area.draw(&PathElement::new(points, colour.stroke_width(1)))
                .map_err(chart_error)?;
            for (i, m) in r.rekeys.iter().enumerate() {
                let at = x(m.at_s);
                line(area, (at, up), (at, down), MARK_COLOUR)?;
                let label = Type {
                    colour: MARK_COLOUR,
                    ..SMALL
                };
                write(area, label, &format!("{}", first + i + 1), (at + 3, up + 4))?;
            }
            Ok(())
        },
    )
}

#[cfg(test)]
pub(crate) mod tests_support {
    use model::rekey::{RekeyMark, RekeyOrder, RekeyReport, RekeyRun, RekeySchedule};
    use model::RunReport;

    pub(crate) fn run_with_rekeys(virtualization: &str, hostile: &str) -> RunReport {
        let plan = model::RunRequest::default().validate().unwrap();
        let mut env = model::Environment::detect();
        env.virtualization = virtualization.into();
        env.hostname = hostile.into();
        let transfer = model::Transfer {
            bytes: 3_000_000,
            seconds: 3.0,
            streams: 1,
            verified: true,
            sender_cpu: Default::default(),
            receiver_cpu: Default::default(),
            sender_threads: 1,
            receiver_threads: 1,
        };
        let mut run = RunReport::new(plan, env, vec![transfer]).unwrap();
        run.rekey = Some(RekeyReport {
            schedule: RekeySchedule {
                every_s: 1.0,
                order: RekeyOrder::MakeBeforeBreak,
                sa: Default::default(),
            },
            label: "make-before-break".into(),
            how: String::new(),
            runs: vec![RekeyRun {
                transfer: 1,
                bucket_ms: 10,
                delivered: vec![25_000; 300],
                median_bucket_bytes: 25_000.0,
                baseline_gap_ms: 3.0,
                baseline_dip: Some(1.0),
                rekeys: [1.0, 2.0]
                    .map(|at_s| RekeyMark {
                        at_s,
                        took_ms: Some(2.0),
                        gap_ms: 12.0,
                        dip: Some(0.5),
                        datagrams: None,
                    })
                    .to_vec(),
            }],
        });
        run
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::run_with_rekeys;
    use super::*;

    /// The chart parses as XML, marks each rekey with its number, says where it was
    /// measured, and a hostile host name stays text.
    #[test]
    fn each_rekey_is_marked_and_numbered_and_hostile_text_stays_text() {
        let run = run_with_rekeys("host", "<script>x</script>");
        let svg = render(&run).unwrap().unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        assert!(texts.contains(&"1") && texts.contains(&"2"), "{texts:?}");
        assert!(texts.iter().any(|t| t.contains("every 1 s")), "{texts:?}");
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(!texts.iter().any(|t| t.contains(EMULATED_MARK)));
        let emulated = render(&run_with_rekeys("vm (tcg: emulated)", "h"))
            .unwrap()
            .unwrap();
        assert!(emulated.contains(EMULATED_MARK));
        let mut plain = run;
        plain.rekey = None;
        assert!(render(&plain).is_none());
    }
}
